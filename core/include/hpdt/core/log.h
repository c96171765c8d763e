// Rank-aware logging to stderr: "[hpdt r3 W 12:04:05.123] message".
//
// Level from HPDT_LOG_LEVEL (trace|debug|info|warn|error|off, default info) or set_log_level();
// which ranks print from HPDT_LOG_RANKS ("all" (default), or a comma list such as "0" or "0,3").
// Errors and warnings are always printed by every rank.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace hpdt {

enum class LogLevel { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 5 };

LogLevel parse_log_level(std::string_view name);  // throws hpdt::Error on an unknown name
std::string_view log_level_name(LogLevel level);
void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_ranks(std::string_view spec);  // "all" or "0,3"; throws on bad input
bool log_enabled(LogLevel level);

// The process's rank in the job, used by logging and by hpdt::Error. Before anyone sets it, it is
// read from the launcher's environment (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID);
// -1 when none is set.
void set_process_rank(int rank);
int process_rank();

class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  template <class T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

}  // namespace hpdt

// HPDT_LOG(info) << "text " << value;  -- arguments are not evaluated when the level is off.
#define HPDT_LOG(level)                                                                            \
  if (!::hpdt::log_enabled(::hpdt::LogLevel::level)) {                                             \
  } else                                                                                           \
    ::hpdt::LogLine(::hpdt::LogLevel::level, __FILE__, __LINE__)
