#include "hpdt/core/log.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <set>
#include <string>

#include "hpdt/core/error.h"

namespace hpdt {

namespace {

int rank_from_env() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "PALS_RANKID"}) {
    if (const char* v = std::getenv(var); v && *v) {
      char* end = nullptr;
      const long r = std::strtol(v, &end, 10);
      if (end && *end == '\0' && r >= 0) return int(r);
    }
  }
  return -1;
}

struct LogState {
  std::atomic<int> level{int(LogLevel::info)};
  std::atomic<int> rank{-1};
  std::mutex mu;
  bool all_ranks = true;
  std::set<int> ranks;

  LogState() {
    rank = rank_from_env();
    // A bad variable must not kill the program from a static initialiser: fall back and say so.
    if (const char* v = std::getenv("HPDT_LOG_LEVEL"); v && *v) {
      try {
        level = int(parse_log_level(v));
      } catch (const Error& e) {
        std::fprintf(stderr, "[hpdt] ignoring HPDT_LOG_LEVEL: %s\n", e.message().c_str());
      }
    }
    if (const char* v = std::getenv("HPDT_LOG_RANKS"); v && *v) {
      try {
        parse_ranks(v);
      } catch (const Error& e) {
        std::fprintf(stderr, "[hpdt] ignoring HPDT_LOG_RANKS: %s\n", e.message().c_str());
      }
    }
  }

  void parse_ranks(std::string_view spec) {
    if (spec == "all") {
      std::lock_guard lk(mu);
      all_ranks = true;
      ranks.clear();
      return;
    }
    std::set<int> out;
    size_t pos = 0;
    while (pos <= spec.size()) {
      const size_t comma = spec.find(',', pos);
      const std::string_view item = spec.substr(pos, comma == std::string_view::npos ? spec.npos : comma - pos);
      int r = 0;
      bool ok = !item.empty();
      for (char c : item) {
        if (c < '0' || c > '9') ok = false;
        else r = r * 10 + (c - '0');
      }
      if (!ok) HPDT_FAIL("log ranks must be 'all' or a comma-separated list of ranks such as '0,3', got '", spec, "'");
      out.insert(r);
      if (comma == std::string_view::npos) break;
      pos = comma + 1;
    }
    std::lock_guard lk(mu);
    all_ranks = false;
    ranks = std::move(out);
  }
};

LogState& state() {
  static LogState s;
  return s;
}

}  // namespace

LogLevel parse_log_level(std::string_view name) {
  for (int i = 0; i <= int(LogLevel::off); ++i)
    if (log_level_name(LogLevel(i)) == name) return LogLevel(i);
  if (name == "warning") return LogLevel::warn;
  HPDT_FAIL("unknown log level '", name, "' (expected trace, debug, info, warn, error or off)");
}

std::string_view log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::trace: return "trace";
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warn";
    case LogLevel::error: return "error";
    case LogLevel::off: return "off";
  }
  return "?";
}

void set_log_level(LogLevel level) { state().level = int(level); }
LogLevel log_level() { return LogLevel(state().level.load()); }
void set_log_ranks(std::string_view spec) { state().parse_ranks(spec); }
void set_process_rank(int rank) { state().rank = rank; }
int process_rank() { return state().rank.load(); }

bool log_enabled(LogLevel level) {
  LogState& s = state();
  if (int(level) < s.level.load() || level == LogLevel::off) return false;
  if (level >= LogLevel::warn) return true;
  std::lock_guard lk(s.mu);
  return s.all_ranks || s.ranks.count(std::max(s.rank.load(), 0)) > 0;
}

LogLine::LogLine(LogLevel level, const char*, int) : level_(level) {}

LogLine::~LogLine() {
  static const char kLetters[] = "TDIWE";
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char prefix[64];
  const int rank = process_rank();
  if (rank >= 0)
    std::snprintf(prefix, sizeof prefix, "[hpdt r%d %c %02d:%02d:%02d.%03d] ", rank, kLetters[int(level_)], tm.tm_hour,
                  tm.tm_min, tm.tm_sec, ms);
  else
    std::snprintf(prefix, sizeof prefix, "[hpdt %c %02d:%02d:%02d.%03d] ", kLetters[int(level_)], tm.tm_hour, tm.tm_min,
                  tm.tm_sec, ms);
  std::string line = prefix + os_.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write: lines from threads do not interleave
}

}  // namespace hpdt
