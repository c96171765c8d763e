// The model builder: records from the lexer -> processes, per-rank contexts -> communicators.
//
// Records are buffered per run and interpreted in finish(), because a splice can corrupt the host
// field of the first line a process prints (`x3006c0s25b0x3006c0s25b0n0:849778:…` in a real log);
// the canonical host of each pid is only known once all its lines are counted.
#include "hpdt/nccl_log/parser.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "hpdt/nccl_log/lexer.h"

namespace hpdt::nccl_log {

namespace {

// ---------------------------------------------------------------------------------------------
// Small text helpers (no std::regex: see lexer.h)

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }
bool isdig(char c) { return c >= '0' && c <= '9'; }
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A cursor over a message.
struct Scan {
  std::string_view s;
  size_t i = 0;
  explicit Scan(std::string_view text) : s(text) {}
  bool done() const { return i >= s.size(); }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  }
  bool lit(std::string_view p) {
    if (s.substr(i, p.size()) == p) {
      i += p.size();
      return true;
    }
    return false;
  }
  bool integer(long* v) {  // optional '-', decimal digits
    size_t j = i;
    bool neg = false;
    if (j < s.size() && s[j] == '-') {
      neg = true;
      ++j;
    }
    size_t d = j;
    long x = 0;
    while (j < s.size() && isdig(s[j])) {
      if (x < 100000000000000L) x = x * 10 + (s[j] - '0');
      ++j;
    }
    if (j == d) return false;
    *v = neg ? -x : x;
    i = j;
    return true;
  }
  bool integer(int* v) {
    long x;
    if (!integer(&x)) return false;
    *v = static_cast<int>(std::clamp(x, -2147483647L, 2147483647L));
    return true;
  }
  std::string_view word() {  // up to the next space
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    std::string_view w = s.substr(i, j - i);
    i = j;
    return w;
  }
  std::string_view rest() const { return i < s.size() ? s.substr(i) : std::string_view(); }
};

long to_long(std::string_view s, long fallback = -1) {
  Scan sc(s);
  long v;
  return sc.integer(&v) && sc.done() ? v : fallback;
}

// "key value" pairs of messages such as `comm 0x… rank 3 nranks 8 cudaDev 3 busId b1000 - Init COMPLETE`.
std::map<std::string, std::string, std::less<>> key_values(std::string_view msg) {
  std::map<std::string, std::string, std::less<>> kv;
  Scan sc(msg);
  std::string_view prev;
  while (!sc.done()) {
    sc.ws();
    std::string_view w = sc.word();
    if (!prev.empty() && !w.empty()) kv.emplace(std::string(prev), std::string(w));
    prev = w;
  }
  return kv;
}

// Numbers in a message replaced by N: the key that groups warnings of one kind.
std::string normalize(std::string_view msg) {
  std::string out;
  bool in_num = false;
  for (char c : msg) {
    if (isdig(c)) {
      if (!in_num) out += 'N';
      in_num = true;
    } else {
      in_num = false;
      out += c;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

struct RawConn {
  Connection c;
  bool send = false, receive = false;
};

// One rank of one communicator as printed by one process.
struct Ctx {
  std::string host;
  long pid = -1;
  int dev = -1;
  size_t order = 0;
  bool complete = false;
  std::string comm_ptr, comm_id;
  RankInfo info;
  int nranks = -1;
  int nnodes_printed = -1;
  std::map<int, std::vector<int>> ring_lists;  // channel -> list (rank 0 prints these)
  int ring_list_total = -1;
  std::map<int, std::pair<int, int>> ring_nbrs;  // channel -> (prev, next) of rank `nbr_rank`
  int nbr_rank = -1;
  std::map<int, std::pair<int, TreeLinks>> trees;        // channel -> (rank, links) from `Trees`
  int trees_items = -1;
  std::map<int, std::pair<int, TreeLinks>> graph_trees;  // from NCCL_GRAPH `Tree N :`
  std::vector<RawConn> conns;
  std::map<int, int> rank_votes;
  std::vector<std::vector<int>> nvls_heads;
  bool nvls_comm = false;
  std::map<std::tuple<std::string, uint64_t, int, int>, CollStat> colls;
  std::map<std::tuple<std::string, uint64_t, std::string, std::string>, TuningChoice> tuning;
  std::string last_opcount;
  std::set<std::string> inferred_versions;
};

struct Buffered {
  size_t source = 0;
  Record rec;
};

}  // namespace

struct LogParser::State {
  Log log;
  std::vector<Buffered> recs;
  std::string partial;        // an unfinished line between chunks
  size_t line_no = 0;
  bool in_source = false;
  size_t source = 0;
  int last_rec_kind = 0;      // 1 Trees, 2 ring list: what a wrapped continuation may extend
  size_t failures_dropped = 0;

  void line(std::string_view text, bool cut);
  void other_line(std::string_view text, int launcher_rank);
};

namespace {
constexpr size_t kMaxFailures = 200;

bool looks_like_failure(std::string_view t, int* result) {
  struct P { const char* text; int result; };
  static constexpr P kPatterns[] = {
      {"unhandled system error", 2},      {"ncclSystemError", 2},
      {"remote process exited or there was a network error", 6}, {"ncclRemoteError", 6},
      {"unhandled cuda error", 1},        {"ncclUnhandledCudaError", 1},
      {"internal error", 3},              {"ncclInternalError", 3},
      {"invalid usage", 5},               {"ncclInvalidUsage", 5},
      {"NCCL failure", -1},               {"NCCL error", -1},
      {"Test failure", -1},               {"Watchdog caught collective operation timeout", -1},
      {"out of memory", -1},              {"Duplicate GPU detected", 5},
      {"NCCL communicator was aborted", -1}, {"ProcessGroupNCCL", -1},
  };
  for (const auto& p : kPatterns) {
    if (contains(t, p.text)) {
      *result = p.result;
      return true;
    }
  }
  return false;
}
}  // namespace

void LogParser::State::other_line(std::string_view text, int /*launcher_rank*/) {
  std::string_view t = trim(text);
  if (t.empty()) return;
  // nccl-tests header (grammar §2): "# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807"
  if (starts_with(t, "# nccl-tests version ")) {
    Scan sc(t.substr(21));
    log.nccl_tests_version = std::string(sc.word());
    size_t lib = t.find("nccl-library=");
    if (lib != std::string_view::npos) {
      long v = to_long(Scan(t.substr(lib + 13)).word());
      if (v > 0) log.nccl_tests_library = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
    }
    return;
  }
  // "#  Rank  0 Group  0 Pid 441581 on cnode2-001 device  0 [0000:9d:00] NVIDIA H100"
  if (starts_with(t, "#") && contains(t, " Rank ") && contains(t, " on ") && contains(t, " device ")) {
    auto kv = key_values(t.substr(1));
    auto r = kv.find("Rank");
    auto h = kv.find("on");
    if (r != kv.end() && h != kv.end()) {
      long rank = to_long(r->second);
      if (rank >= 0 && rank < 1000000) {
        log.nccl_tests_nranks = std::max(log.nccl_tests_nranks, static_cast<int>(rank) + 1);
        if (std::find(log.nccl_tests_hosts.begin(), log.nccl_tests_hosts.end(), h->second) == log.nccl_tests_hosts.end())
          log.nccl_tests_hosts.push_back(h->second);
      }
    }
    return;
  }
  int result = -1;
  if (looks_like_failure(t, &result)) {
    if (log.failures.size() < kMaxFailures) {
      Failure f;
      f.source = log.sources.empty() ? "-" : log.sources.back();
      f.line_no = line_no;
      f.text = std::string(t.substr(0, 400));
      f.result = result;
      log.failures.push_back(std::move(f));
    } else {
      ++failures_dropped;
    }
  }
}

void LogParser::State::line(std::string_view text, bool cut) {
  ++line_no;
  ++log.lines;
  LexedLine lx = lex_line(text, line_no);
  if (lx.records.empty()) {
    // A wrapped continuation of a Trees line or a ring list: no prefix, only tree items or numbers.
    std::string_view t = trim(lx.other);
    if (!t.empty() && last_rec_kind != 0 && !recs.empty()) {
      bool ok = last_rec_kind == 1 ? (t.front() == '[' || t.front() == '-' || isdig(t.front()))
                                   : std::all_of(t.begin(), t.end(), [](char c) { return isdig(c) || c == ' '; });
      if (ok && t.find("NCCL") == std::string_view::npos) {
        recs.back().rec.msg += ' ';
        recs.back().rec.msg += std::string(t);
        return;
      }
    }
    last_rec_kind = 0;
    other_line(lx.other, lx.launcher_rank);
    return;
  }
  for (auto& r : lx.records) {
    ++log.nccl_records;
    if (r.spliced) ++log.spliced_records;
    if (cut && &r == &lx.records.back()) r.spliced = r.cut_mid_word = true;  // the last line of a truncated file
    recs.push_back({source, std::move(r)});
  }
  const std::string& m = recs.back().rec.msg;
  last_rec_kind = starts_with(m, "Trees") ? 1 : (starts_with(m, "Channel ") && !contains(m, "->") ? 2 : 0);
}

LogParser::LogParser() : s_(std::make_unique<State>()) {}
LogParser::~LogParser() = default;

void LogParser::add_source(const std::string& name) {
  if (s_->in_source) end_source();
  s_->log.sources.push_back(name);
  s_->source = s_->log.sources.size() - 1;
  s_->line_no = 0;
  s_->in_source = true;
  s_->last_rec_kind = 0;
}

void LogParser::add_text(std::string_view chunk) {
  if (!s_->in_source) add_source("-");
  while (!chunk.empty()) {
    size_t nl = chunk.find('\n');
    if (nl == std::string_view::npos) {
      if (s_->partial.size() < kMaxLineBytes) s_->partial.append(chunk.substr(0, kMaxLineBytes - s_->partial.size()));
      return;
    }
    if (s_->partial.empty()) {
      s_->line(chunk.substr(0, nl), false);
    } else {
      if (s_->partial.size() < kMaxLineBytes) s_->partial.append(chunk.substr(0, std::min(nl, kMaxLineBytes - s_->partial.size())));
      s_->line(s_->partial, false);
      s_->partial.clear();
    }
    chunk.remove_prefix(nl + 1);
  }
}

void LogParser::end_source() {
  if (!s_->in_source) return;
  if (!s_->partial.empty()) {
    s_->line(s_->partial, true);
    s_->partial.clear();
  }
  s_->in_source = false;
}

Log parse_text(std::string_view text, const std::string& source) {
  LogParser p;
  p.add_source(source);
  p.add_text(text);
  p.end_source();
  return p.finish();
}

}  // namespace hpdt::nccl_log

// =============================================================================================
// Interpretation (finish)

namespace hpdt::nccl_log {
namespace {

size_t common_prefix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}
size_t common_suffix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[a.size() - 1 - n] == b[b.size() - 1 - n]) ++n;
  return n;
}
// Is `odd` a splice-damaged copy of `good` (a piece added in front, cut off, or taken out of the middle)?
bool splice_related(std::string_view odd, std::string_view good) {
  size_t cp = common_prefix(odd, good), cs = common_suffix(odd, good);
  if (cs == good.size() || cs == odd.size()) return true;   // extra text in front / front cut off
  if (cp == odd.size()) return true;                        // end cut off
  return cp >= 3 && cs >= 2 && cp + cs >= odd.size();       // a middle piece taken out
}

void add_unique(std::vector<std::string>& v, std::string s) {
  if (!s.empty() && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(std::move(s));
}

// `a[x]` or `a` -> rank a, id x
bool parse_endpoint(Scan& sc, int* rank, std::string* id) {
  if (!sc.integer(rank)) return false;
  if (sc.lit("[")) {
    size_t j = sc.s.find(']', sc.i);
    if (j == std::string_view::npos) return false;
    *id = std::string(sc.s.substr(sc.i, j - sc.i));
    sc.i = j + 1;
  }
  return true;
}

// Tree item body (after "[c] "): 2.4 `up->r->d/d/d`, 2.8+ `d/d/d->r->up`, 2.5–2.7 `d/d/d->r->up|up->r->d/d/d`.
bool parse_tree_item(std::string_view item, int* rank, TreeLinks* links, int* layout) {
  size_t bar = item.find('|');
  std::string_view first = bar == std::string_view::npos ? item : item.substr(0, bar);
  size_t a1 = first.find("->");
  if (a1 == std::string_view::npos) return false;
  size_t a2 = first.find("->", a1 + 2);
  if (a2 == std::string_view::npos) return false;
  std::string_view left = first.substr(0, a1), mid = first.substr(a1 + 2, a2 - a1 - 2), right = first.substr(a2 + 2);
  long r = to_long(trim(mid), -2);
  if (r < 0) return false;
  auto downs = [](std::string_view s, std::vector<int>* out) {
    size_t start = 0;
    int n = 0;
    while (start <= s.size() && n < 3) {
      size_t sl = s.find('/', start);
      std::string_view part = s.substr(start, sl == std::string_view::npos ? std::string_view::npos : sl - start);
      long v = to_long(trim(part), -2);
      if (v == -2) return false;
      if (v >= 0) out->push_back(static_cast<int>(v));
      ++n;
      if (sl == std::string_view::npos) break;
      start = sl + 1;
    }
    return n > 0;
  };
  TreeLinks t;
  if (left.find('/') != std::string_view::npos) {  // children first: 2.5+ layouts
    long up = to_long(trim(right), -2);
    if (up == -2 || !downs(left, &t.children)) return false;
    t.parent = static_cast<int>(up);
    *layout = bar == std::string_view::npos ? 8 : 5;
  } else {  // 2.4: up -> rank -> downs
    long up = to_long(trim(left), -2);
    if (up == -2 || !downs(right, &t.children)) return false;
    t.parent = static_cast<int>(up);
    *layout = 4;
  }
  *rank = static_cast<int>(r);
  *links = std::move(t);
  return true;
}

std::string algo_name(std::string_view s) {
  static const char* kAlgos[] = {"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
  long v = to_long(s, -1);
  if (v >= 0 && v < 7) return kAlgos[v];
  return std::string(s);
}
std::string proto_name(std::string_view s) {
  static const char* kProtos[] = {"LL", "LL128", "Simple"};
  long v = to_long(s, -1);
  if (v >= 0 && v < 3) return kProtos[v];
  return std::string(s);
}

struct RawWarn {
  std::string host;
  long pid;
  int dev;
  std::string loc, msg;
};

struct Builder {
  Log& log;
  std::vector<Ctx> ctxs;
  std::map<std::tuple<std::string, long, int>, size_t> current;
  std::map<std::tuple<std::string, long, std::string>, size_t> by_ptr;
  std::map<std::pair<std::string, long>, size_t> procs;
  std::vector<RawWarn> warns;
  std::map<std::string, int> plugin_probe;  // highest ncclNetPlugin_vN probed, by host
  int max_net_plugin_probe = -1;

  explicit Builder(Log& l) : log(l) {}

  Process& proc(const Record& r) {
    auto key = std::make_pair(r.host, r.pid);
    auto it = procs.find(key);
    if (it == procs.end()) {
      Process p;
      p.host = r.host;
      p.pid = r.pid;
      log.processes.push_back(p);
      it = procs.emplace(key, log.processes.size() - 1).first;
    }
    return log.processes[it->second];
  }

  size_t new_ctx(const Record& r) {
    Ctx c;
    c.host = r.host;
    c.pid = r.pid;
    c.dev = r.dev;
    c.order = ctxs.size();
    c.info.host = r.host;
    c.info.pid = r.pid;
    c.info.cuda_dev = r.dev;
    c.info.launcher_rank = r.launcher_rank;
    ctxs.push_back(std::move(c));
    return ctxs.size() - 1;
  }

  // The context a comm-specific record belongs to (see the file comment of parser.h).
  Ctx& ctx_for(const Record& r, const std::string& ptr, bool init_kind) {
    auto key = std::make_tuple(r.host, r.pid, r.dev);
    auto cur = current.find(key);
    if (!ptr.empty()) {
      auto p = by_ptr.find(std::make_tuple(r.host, r.pid, ptr));
      if (p != by_ptr.end()) {
        current[key] = p->second;
        return ctxs[p->second];
      }
      size_t idx;
      if (cur != current.end() && ctxs[cur->second].comm_ptr.empty() && !ctxs[cur->second].complete) {
        idx = cur->second;
      } else {
        idx = new_ctx(r);
        current[key] = idx;
      }
      ctxs[idx].comm_ptr = ptr;
      ctxs[idx].info.comm_ptr = ptr;
      by_ptr[std::make_tuple(r.host, r.pid, ptr)] = idx;
      return ctxs[idx];
    }
    if (cur != current.end() && !(init_kind && ctxs[cur->second].complete)) return ctxs[cur->second];
    size_t idx = new_ctx(r);
    current[key] = idx;
    return ctxs[idx];
  }

  void network(const Record& r, std::string_view m);
  void info(const Record& r);
  void finish_comms();
  void group_warnings();
};

void Builder::network(const Record& r, std::string_view m) {
  NetInfo& n = log.network[r.host];
  auto items = [](std::string_view list, std::vector<std::string>& out) {  // " [0]eth0:1.2.3.4<0> [1]…"
    Scan sc(list);
    while (!sc.done()) {
      sc.ws();
      std::string_view w = sc.word();
      if (w.empty()) break;
      if (w.front() == '[') {
        size_t close = w.find(']');
        if (close != std::string_view::npos) w.remove_prefix(close + 1);
      }
      if (w == ";" || starts_with(w, "OOB") || w == "[RO];" || w == "[RO]") break;
      if (!w.empty() && w.back() == ';') w.remove_suffix(1);
      if (!w.empty()) add_unique(out, std::string(w));
    }
  };
  if (starts_with(m, "Bootstrap : Using") || starts_with(m, "Bootstrap: Using")) {
    items(m.substr(m.find("Using") + 5), n.bootstrap_ifs);
  } else if (starts_with(m, "NET/IB : No device found")) {
    n.ib_no_device = true;
  } else if (starts_with(m, "NET/IB : Using ") || starts_with(m, "NET/IB : Using[")) {
    items(m.substr(15), n.ib_devices);
    if (n.selected.empty()) n.selected = "IB";
  } else if (starts_with(m, "NET/Socket : Using ")) {
    items(m.substr(19), n.socket_ifs);
    if (n.selected.empty()) n.selected = "Socket";  // ≤2.5 print no `Using network`
  } else if (starts_with(m, "Using network ")) {
    n.selected = std::string(trim(m.substr(14)));
  } else if (starts_with(m, "Using internal Network ")) {
    n.selected = std::string(trim(m.substr(23)));
  } else if (starts_with(m, "NET/OFI Selected Provider is ")) {
    add_unique(n.plugins, "aws-ofi-nccl provider " + std::string(Scan(m.substr(29)).word()));
  } else if (starts_with(m, "NET/OFI ")) {
    add_unique(n.plugins, "aws-ofi-nccl");
  } else if (starts_with(m, "NET/Plugin: Loaded ") || starts_with(m, "NET/Plugin : Loaded ")) {
    add_unique(n.plugins, std::string(trim(m.substr(m.find("Loaded ") + 7))));
  } else if (starts_with(m, "Initialized NET plugin ")) {
    add_unique(n.plugins, "net plugin " + std::string(trim(m.substr(23))));
  } else if (starts_with(m, "Using tuner plugin")) {
    add_unique(n.plugins, std::string(trim(m)));
  } else if (starts_with(m, "P2P plugin ")) {
    add_unique(n.plugins, std::string(trim(m)));
  } else if (contains(m, "Failed to open libibverbs")) {
    n.ibverbs_missing = true;
  } else if (starts_with(m, "GPU Direct RDMA Enabled for GPU")) {
    ++n.gdr_enabled_lines;
  } else if (starts_with(m, "GPU Direct RDMA Disabled for GPU")) {
    ++n.gdr_disabled_lines;
    if (n.gdr_disabled_example.empty()) n.gdr_disabled_example = std::string(m);
  } else if (starts_with(m, "NET/IB : GPU Direct RDMA Enabled for HCA")) {
    n.gdr_module = true;
  } else if (starts_with(m, "NET/Plugin: Failed to find ncclNetPlugin_v") || starts_with(m, "NET/Plugin : Failed to find ncclNetPlugin_v")) {
    long v = to_long(Scan(m.substr(m.find("_v") + 2)).word().substr(0, 2), -1);
    if (v < 0) {
      std::string_view w = m.substr(m.find("_v") + 2);
      size_t d = 0;
      while (d < w.size() && isdig(w[d])) ++d;
      v = to_long(w.substr(0, d), -1);
    }
    max_net_plugin_probe = std::max(max_net_plugin_probe, static_cast<int>(v));
  }
}

void Builder::info(const Record& r) {
  std::string_view m = r.msg;
  Process& p = proc(r);
  if (r.dev >= 0) p.devs.insert(r.dev);

  if (starts_with(m, "NCCL version ")) {
    add_unique(p.versions, std::string(Scan(m.substr(13)).word()));
    return;
  }
  if (starts_with(m, "cudaDriverVersion ")) {
    p.cuda_driver = static_cast<int>(to_long(trim(m.substr(18))));
    return;
  }
  size_t env = m.find(" set by environment to ");
  if (env != std::string_view::npos && starts_with(m, "NCCL_")) {
    std::string_view v = trim(m.substr(env + 23));
    if (!v.empty() && v.back() == '.') v.remove_suffix(1);
    p.env[std::string(m.substr(0, env))] = std::string(v);
    return;
  }
  network(r, m);

  // Error propagation trace: `file:line -> N` (2.30: `file:line (func) -> N`), maybe followed by text.
  {
    Scan sc(m);
    std::string_view w = sc.word();
    size_t colon = w.rfind(':');
    if (colon != std::string_view::npos && colon > 0 && to_long(w.substr(colon + 1)) >= 0) {
      sc.ws();
      if (sc.s.substr(sc.i, 1) == "(") {
        sc.word();
        sc.ws();
      }
      int code;
      if (sc.lit("-> ") && sc.integer(&code)) {
        ++log.error_traces[code];
        return;
      }
    }
  }

  // Lines that carry a comm pointer: Init START/COMPLETE, nRanks, Abort/Destroy, NVLS comm, COLL.
  size_t cpos = m.find("comm 0x");
  bool is_coll = false;
  std::string_view op;
  {
    size_t colon = m.find(": opCount ");
    if (colon != std::string_view::npos && colon < 40) {
      is_coll = true;
      op = m.substr(0, colon);
    }
  }
  if (cpos != std::string_view::npos && !is_coll && !starts_with(m, "NVLS comm")) {
    std::string_view tail = m.substr(cpos);
    if (r.cut_mid_word) {  // the last word is partial: drop it
      size_t sp = tail.rfind(' ');
      tail = sp == std::string_view::npos ? std::string_view() : tail.substr(0, sp);
    }
    auto kv = key_values(tail);
    std::string ptr = kv.count("comm") ? kv.find("comm")->second : "";
    bool init_line = contains(m, "Init START") || contains(m, "Init COMPLETE") || contains(m, " nNodes ") ||
                     (r.spliced && cpos == 0 && kv.count("rank"));
    if (ptr.empty() || (!init_line && !contains(m, "Abort") && !contains(m, "Destroy"))) return;
    Ctx& c = ctx_for(r, ptr, false);
    auto num = [&](const char* k, int* dst) {
      auto it = kv.find(k);
      if (it != kv.end()) {
        long v = to_long(it->second, -1);
        if (v >= 0) *dst = static_cast<int>(std::min(v, 1L << 30));
      }
    };
    num("rank", &c.info.rank);
    num("nranks", &c.nranks);
    num("nRanks", &c.nranks);
    num("cudaDev", &c.info.cuda_dev);
    num("nvmlDev", &c.info.nvml_dev);
    num("nNodes", &c.nnodes_printed);
    num("localRanks", &c.info.local_ranks);
    num("localRank", &c.info.local_rank);
    if (kv.count("busId")) c.info.bus_id = kv.find("busId")->second;
    if (kv.count("commId")) c.comm_id = kv.find("commId")->second;
    if (contains(m, "Init START")) c.info.init_start = true;
    if (contains(m, "Init COMPLETE")) {
      c.info.init_complete = true;
      c.complete = true;
    }
    if (contains(m, "Abort COMPLETE")) c.info.aborted = true;
    if (contains(m, "Destroy COMPLETE")) c.info.destroyed = true;
    return;
  }
  if (is_coll) {
    auto kv = key_values(m.substr(op.size() + 1));
    std::string ptr = kv.count("comm") ? kv.find("comm")->second : "";
    Ctx& c = ctx_for(r, ptr, false);
    CollStat s;
    s.op = std::string(op);
    long count = kv.count("count") ? to_long(kv.find("count")->second, 0) : 0;
    s.count = count > 0 ? static_cast<uint64_t>(count) : 0;
    s.datatype = kv.count("datatype") ? static_cast<int>(to_long(kv.find("datatype")->second, -1)) : -1;
    s.redop = kv.count("op") ? static_cast<int>(to_long(kv.find("op")->second, -1)) : -1;
    s.bytes = s.count * static_cast<uint64_t>(datatype_size(s.datatype));
    auto& agg = c.colls[std::make_tuple(s.op, s.count, s.datatype, s.redop)];
    if (agg.calls == 0) agg = s;
    ++agg.calls;
    if (kv.count("opCount")) c.last_opcount = kv.find("opCount")->second;
    size_t nr = m.find("[nranks=");
    if (nr != std::string_view::npos && c.nranks < 0) {
      long v = to_long(Scan(m.substr(nr + 8)).word().substr(0, m.substr(nr + 8).find(']')), -1);
      if (v > 0) c.nranks = static_cast<int>(std::min(v, 1L << 30));
    }
    return;
  }
  if (starts_with(m, "NVLS comm ")) {
    ctx_for(r, "", false).nvls_comm = true;
    return;
  }
  if (starts_with(m, "NVLS Head ")) {
    Scan sc(m.substr(10));
    sc.ws();
    int h;
    if (!sc.integer(&h) || !sc.lit(":")) return;
    std::vector<int> members;
    while (!sc.done()) {
      sc.ws();
      int v;
      if (!sc.integer(&v)) break;
      members.push_back(v);
    }
    Ctx& c = ctx_for(r, "", true);
    if (c.nvls_heads.size() <= static_cast<size_t>(h) && h < 4096) c.nvls_heads.resize(static_cast<size_t>(h) + 1);
    if (h >= 0 && h < 4096) c.nvls_heads[static_cast<size_t>(h)] = members;
    return;
  }
  if (starts_with(m, "Init timings")) {
    size_t colon = m.find(':');
    if (colon == std::string_view::npos) return;
    auto kv = key_values(m.substr(colon + 1));
    Ctx& c = ctx_for(r, "", false);
    c.inferred_versions.insert(m[12] == ':' ? "2.22.x (`Init timings:` without an API name)" : ">=2.23.4 (`Init timings - API:`)");
    if (kv.count("rank") && c.info.rank < 0) c.info.rank = static_cast<int>(to_long(kv.find("rank")->second, -1));
    if (kv.count("nranks") && c.nranks < 0) c.nranks = static_cast<int>(to_long(kv.find("nranks")->second, -1));
    if (kv.count("total")) c.info.init_timing.total = std::strtod(kv.find("total")->second.c_str(), nullptr);
    size_t open = m.find('(');
    if (open != std::string_view::npos) {
      std::string_view parts = m.substr(open + 1);
      size_t start = 0;
      while (start < parts.size()) {
        size_t end = parts.find_first_of(",)", start);
        std::string_view item = trim(parts.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
        size_t sp = item.find(' ');
        if (sp != std::string_view::npos)
          c.info.init_timing.parts[std::string(item.substr(0, sp))] = std::strtod(std::string(item.substr(sp + 1)).c_str(), nullptr);
        if (end == std::string_view::npos || parts[end] == ')') break;
        start = end + 1;
      }
    }
    return;
  }
  if (starts_with(m, "threadThresholds ")) {
    ctx_for(r, "", true).info.thread_thresholds = std::string(trim(m.substr(17)));
    return;
  }
  if (contains(m, " coll channels, ")) {
    Ctx& c = ctx_for(r, "", true);
    Scan sc(m);
    while (!sc.done()) {
      sc.ws();
      int v;
      if (!sc.integer(&v)) {
        sc.word();
        continue;
      }
      sc.ws();
      std::string_view what = sc.rest();
      if (starts_with(what, "coll channels")) c.info.coll_channels = v;
      else if (starts_with(what, "collnet channels")) c.info.collnet_channels = v;
      else if (starts_with(what, "nvls channels")) c.info.nvls_channels = v;
      else if (starts_with(what, "p2p channels per peer")) c.info.p2p_per_peer = v;
      else if (starts_with(what, "p2p channels")) c.info.p2p_channels = v;
    }
    return;
  }
  // Tuning choice: `40 Bytes -> Algo 1 proto 0 time 8.6` or `AllReduce: 8589934592 Bytes -> Algo RING proto SIMPLE …`
  {
    size_t b = m.find(" Bytes -> Algo ");
    if (b != std::string_view::npos) {
      std::string_view head = m.substr(0, b);
      std::string top;
      size_t colon = head.find(": ");
      if (colon != std::string_view::npos) {
        top = std::string(head.substr(0, colon));
        head = head.substr(colon + 2);
      }
      long bytes = to_long(trim(head), -1);
      Scan sc(m.substr(b + 15));
      std::string algo = algo_name(sc.word());
      sc.ws();
      std::string proto;
      if (sc.lit("proto ")) proto = proto_name(sc.word());
      Ctx& c = ctx_for(r, "", false);
      auto& t = c.tuning[std::make_tuple(top, static_cast<uint64_t>(std::max(bytes, 0L)), algo, proto)];
      t.op = top;
      t.bytes = static_cast<uint64_t>(std::max(bytes, 0L));
      t.algo = algo;
      t.proto = proto;
      ++t.calls;
      return;
    }
  }
  if (starts_with(m, "Trees")) {
    Ctx& c = ctx_for(r, "", true);
    std::string_view rest = m.substr(5);
    size_t pos = 0;
    int items = 0;
    while (true) {
      size_t open = rest.find('[', pos);
      if (open == std::string_view::npos) break;
      size_t close = rest.find(']', open);
      if (close == std::string_view::npos) break;
      long ch = to_long(rest.substr(open + 1, close - open - 1), -1);
      size_t next = rest.find(" [", close);
      if (ch >= 0 && ch < 4096) {
        items = std::max(items, static_cast<int>(ch) + 1);
        std::string_view body = trim(rest.substr(close + 1, next == std::string_view::npos ? std::string_view::npos : next - close - 1));
        int rank, layout;
        TreeLinks t;
        bool last = next == std::string_view::npos;
        if (!(last && r.spliced) && parse_tree_item(body, &rank, &t, &layout)) {
          c.trees[static_cast<int>(ch)] = {rank, t};
          ++c.rank_votes[rank];
          if (layout == 5) c.inferred_versions.insert("2.5-2.7 (dual-tree Trees lines)");
          if (layout == 4) c.inferred_versions.insert("2.4.x (2.4 Trees layout)");
        }
      }
      if (next == std::string_view::npos) break;
      pos = next + 1;
    }
    c.trees_items = std::max(c.trees_items, items);
    return;
  }
  if (starts_with(m, "Tree ")) {  // NCCL_GRAPH: `Tree N : up -> r -> d/d/d`
    Scan sc(m.substr(5));
    int ch, up, rank;
    if (!sc.integer(&ch) || !sc.lit(" : ") || !sc.integer(&up) || !sc.lit(" -> ") || !sc.integer(&rank) || !sc.lit(" -> ")) return;
    TreeLinks t;
    t.parent = up;
    std::string_view d = sc.rest();
    size_t start = 0;
    for (int k = 0; k < 3 && start <= d.size(); ++k) {
      size_t sl = d.find('/', start);
      long v = to_long(trim(d.substr(start, sl == std::string_view::npos ? std::string_view::npos : sl - start)), -2);
      if (v >= 0) t.children.push_back(static_cast<int>(v));
      if (sl == std::string_view::npos) break;
      start = sl + 1;
    }
    Ctx& c = ctx_for(r, "", true);
    if (ch >= 0 && ch < 4096) c.graph_trees[ch] = {rank, t};
    ++c.rank_votes[rank];
    return;
  }
  // Ring list (rank 0), ring neighbours (GRAPH) and connections share the `Ring NN`/`Channel NN` label.
  bool ring_label = starts_with(m, "Ring ");
  bool chan_label = starts_with(m, "Channel ");
  if (!ring_label && !chan_label) return;
  Scan sc(m.substr(ring_label ? 5 : 8));
  int ch;
  if (!sc.integer(&ch) || ch < 0 || ch >= 4096) return;
  int total = -1;
  if (sc.lit("/")) sc.integer(&total);
  if (!sc.lit(" :")) return;
  std::string_view after = sc.rest();
  if (!contains(after, "->")) {  // ring list: numbers only
    if (!chan_label) return;
    std::vector<int> order;
    Scan ns(after);
    while (true) {
      ns.ws();
      int v;
      if (!ns.integer(&v)) break;
      order.push_back(v);
    }
    ns.ws();
    if (order.empty() || !(ns.done() || ns.rest() == "...")) return;
    if (r.spliced) return;
    Ctx& c = ctx_for(r, "", true);
    c.ring_lists[ch] = order;
    if (total > 0) c.ring_list_total = std::max(c.ring_list_total, total);
    ++c.rank_votes[0];
    return;
  }
  sc.ws();
  int a, b;
  std::string aid, bid;
  if (!parse_endpoint(sc, &a, &aid)) return;
  if (!sc.lit(" -> ")) return;
  if (!parse_endpoint(sc, &b, &bid)) return;
  if (sc.lit(" -> ")) {  // GRAPH neighbours `Ring NN : prev -> rank -> next`
    int n;
    if (!ring_label || !aid.empty() || !bid.empty() || !sc.integer(&n)) return;
    Ctx& c = ctx_for(r, "", true);
    c.ring_nbrs[ch] = {a, n};
    c.nbr_rank = b;
    ++c.rank_votes[b];
    return;
  }
  sc.ws();
  bool send = false, receive = false;
  if (sc.lit("[send]")) send = true;
  else if (sc.lit("[receive]")) receive = true;
  sc.ws();
  if (!sc.lit("via ") || r.spliced) return;
  RawConn rc;
  rc.c.channel = ch;
  rc.c.conn_index = (chan_label && total >= 0) ? total : -1;
  rc.c.src = a;
  rc.c.dst = b;
  rc.c.via = std::string(trim(sc.rest()));
  rc.send = send;
  if (contains(rc.c.via, "CUMEM")) ctx_for(r, "", true).inferred_versions.insert(">=2.18.3 (P2P/CUMEM)");
  rc.receive = receive;
  Ctx& c = ctx_for(r, "", true);
  if (receive) ++c.rank_votes[b];
  else ++c.rank_votes[a];
  c.conns.push_back(std::move(rc));
}

void classify(Connection& c) {
  std::string_view v = c.via;
  if (starts_with(v, "P2P")) c.kind = "P2P";
  else if (starts_with(v, "SHM") || starts_with(v, "direct shared memory")) c.kind = "SHM";
  else if (starts_with(v, "NET/")) {
    c.kind = "NET";
    std::string_view rest = v.substr(4);
    // netName may contain '/'? Never in practice; it may contain spaces ("AWS Libfabric").
    size_t sl = rest.find('/');
    c.net = std::string(rest.substr(0, sl));
    c.gdrdma = contains(v, "/GDRDMA");
  } else if (starts_with(v, "COLLNET")) c.kind = "COLLNET";
}

// A ring from per-rank successor links; closes a single missing link. Empty when impossible.
std::vector<int> ring_from_next(const std::map<int, int>& next, int nranks) {
  // at most one hop may be missing, so a map this small cannot close a ring (and big nranks cost nothing)
  if (nranks <= 0 || static_cast<int>(next.size()) < nranks - 1) return {};
  std::vector<int> order{0};
  std::set<int> seen{0};
  int cur = 0;
  while (static_cast<int>(order.size()) < nranks) {
    auto it = next.find(cur);
    if (it == next.end()) {
      // a hop is missing: follow it only when exactly one unvisited rank has no known predecessor
      std::set<int> has_prev;
      for (auto [from, to] : next) has_prev.insert(to);
      std::vector<int> left;
      for (int r = 0; r < nranks; ++r)
        if (!seen.count(r) && !has_prev.count(r)) left.push_back(r);
      if (left.size() != 1) return {};
      cur = left[0];
    } else {
      cur = it->second;
    }
    if (cur < 0 || cur >= nranks || seen.count(cur)) return {};
    seen.insert(cur);
    order.push_back(cur);
  }
  auto last = next.find(order.back());
  if (last != next.end() && last->second != 0) return {};
  return order;
}

void Builder::finish_comms() {
  // Ranks of contexts that did not print an Init line: the most common rank in their own lines.
  for (Ctx& c : ctxs) {
    if (c.info.rank >= 0 || c.rank_votes.empty()) continue;
    int best = -1, votes = 0;
    for (auto [rk, v] : c.rank_votes)
      if (v > votes) best = rk, votes = v;
    c.info.rank = best;
  }
  // Group contexts into communicators (see docs/nccl-log.md, "Communicators").
  std::map<std::string, std::vector<size_t>> groups;
  std::vector<std::string> group_order;
  std::map<std::tuple<std::string, long, int, int>, int> ordinal;  // (host,pid,dev,nranks) -> count so far
  for (size_t i = 0; i < ctxs.size(); ++i) {
    const Ctx& c = ctxs[i];
    bool empty = c.info.rank < 0 && c.nranks < 0 && c.conns.empty() && c.colls.empty() && c.tuning.empty() &&
                 c.trees.empty() && c.ring_lists.empty() && !c.info.init_complete;
    if (empty && c.comm_id.empty()) continue;
    std::string key;
    if (!c.comm_id.empty()) {
      key = "id:" + c.comm_id;
    } else {
      int k = ordinal[std::make_tuple(c.host, c.pid, c.dev, c.nranks)]++;
      key = (c.nranks >= 0 ? "n:" + std::to_string(c.nranks) : std::string("?")) + "#" + std::to_string(k);
    }
    if (!groups.count(key)) group_order.push_back(key);
    groups[key].push_back(i);
  }
  auto nranks_of = [&](const std::vector<size_t>& g) {
    int n = -1;
    for (size_t i : g) n = std::max(n, ctxs[i].nranks);
    return n;
  };
  auto merge = [&](const std::string& from, const std::string& to) {
    auto& dst = groups[to];
    for (size_t i : groups[from]) dst.push_back(i);
    std::sort(dst.begin(), dst.end());
    groups.erase(from);
    group_order.erase(std::find(group_order.begin(), group_order.end(), from));
  };
  // contexts without commId join the only commId group of the same size
  for (std::string key : std::vector<std::string>(group_order)) {
    if (key.rfind("n:", 0) != 0) continue;
    int n = nranks_of(groups[key]);
    std::string target;
    int matches = 0;
    for (const auto& k2 : group_order)
      if (k2.rfind("id:", 0) == 0 && nranks_of(groups[k2]) == n) target = k2, ++matches;
    if (matches == 1) merge(key, target);
  }
  // contexts of unknown size join the only sized communicator, or form one together
  std::vector<std::string> unknown, known;
  for (const auto& k : group_order) (k[0] == '?' ? unknown : known).push_back(k);
  if (known.size() == 1) {
    for (const auto& k : unknown) merge(k, known[0]);
  } else if (known.empty() && unknown.size() > 1) {
    for (size_t u = 1; u < unknown.size(); ++u) merge(unknown[u], unknown[0]);
  }

  int anon = 0;
  for (const auto& key : group_order) {
    const auto& members = groups[key];
    Communicator comm;
    if (key.rfind("id:", 0) == 0) {
      comm.id = key.substr(3);
      comm.id_from_log = true;
    } else {
      comm.id = "comm-" + std::to_string(anon++);
    }
    std::map<std::tuple<int, int, int, int>, RawConn> conns;
    std::map<int, int> nexts_all;
    bool nexts_consistent = true;
    std::map<int, std::map<int, int>> nexts;  // channel -> rank -> next
    std::set<std::string> inferred;
    for (size_t i : members) {
      Ctx& c = ctxs[i];
      comm.nranks = std::max(comm.nranks, c.nranks);
      comm.nnodes_printed = std::max(comm.nnodes_printed, c.nnodes_printed);
      add_unique(comm.hosts, c.host);
      if (c.info.rank >= 0) {
        auto [it, fresh] = comm.ranks.emplace(c.info.rank, c.info);
        if (!fresh) {  // the same rank again (a second run in one file): keep the first, add facts
          RankInfo& ri = it->second;
          ri.init_complete |= c.info.init_complete;
          ri.aborted |= c.info.aborted;
          if (ri.init_timing.total < 0) ri.init_timing = c.info.init_timing;
          if (ri.coll_channels < 0) ri.coll_channels = c.info.coll_channels;
        }
      } else {
        ++comm.unknown_rank_contexts;
      }
      comm.aborted |= c.info.aborted;
      for (auto& [ch, order] : c.ring_lists) comm.rings[ch] = order;
      if (c.ring_list_total > 0) {
        comm.channels = std::max(comm.channels, c.ring_list_total);
        comm.channels_source = "channel list";
      }
      for (auto& [ch, pn] : c.ring_nbrs) {
        int rk = c.nbr_rank;
        nexts[ch][rk] = pn.second;
        nexts[ch][pn.first] = rk;
        for (auto [from, to] : std::vector<std::pair<int, int>>{{rk, pn.second}, {pn.first, rk}}) {
          auto it = nexts_all.find(from);
          if (it != nexts_all.end() && it->second != to) nexts_consistent = false;
          nexts_all[from] = to;
        }
      }
      for (auto& [ch, rt] : c.trees) comm.trees[ch][rt.first] = rt.second;
      for (auto& [ch, rt] : c.graph_trees)
        if (!comm.trees[ch].count(rt.first)) comm.trees[ch][rt.first] = rt.second;
      for (auto& rc : c.conns) {
        auto key2 = std::make_tuple(rc.c.channel, rc.c.conn_index, rc.c.src, rc.c.dst);
        auto [it, fresh] = conns.emplace(key2, rc);
        it->second.c.send_seen |= rc.send;
        it->second.c.receive_seen |= rc.receive;
        (void)fresh;
      }
      if (!c.nvls_heads.empty() && comm.nvls_heads.size() < c.nvls_heads.size()) comm.nvls_heads = c.nvls_heads;
      comm.nvls_comm |= c.nvls_comm;
      for (auto& coll_kv : c.colls) {  // (no structured binding: clang 14 cannot capture one)
        const CollStat& s = coll_kv.second;
        auto it = std::find_if(comm.colls.begin(), comm.colls.end(), [&](const CollStat& x) {
          return x.op == s.op && x.count == s.count && x.datatype == s.datatype && x.redop == s.redop;
        });
        if (it == comm.colls.end()) {
          comm.colls.push_back(s);
          it = comm.colls.end() - 1;
        } else {
          it->calls += s.calls;
        }
        if (c.info.rank >= 0) it->ranks.insert(c.info.rank);
      }
      if (!c.last_opcount.empty()) {
        std::string who = c.comm_ptr.empty() ? c.host + ":" + std::to_string(c.pid) : c.comm_ptr;
        comm.collectives_last_opcount[who] = static_cast<int>(std::strtol(c.last_opcount.c_str(), nullptr, 16));
      }
      for (auto& tuning_kv : c.tuning) {
        const TuningChoice& t = tuning_kv.second;
        auto it = std::find_if(comm.tuning.begin(), comm.tuning.end(), [&](const TuningChoice& x) {
          return x.op == t.op && x.bytes == t.bytes && x.algo == t.algo && x.proto == t.proto;
        });
        if (it == comm.tuning.end()) comm.tuning.push_back(t);
        else it->calls += t.calls;
      }
      for (const auto& v : c.inferred_versions) inferred.insert(v);
    }
    // versions: banners printed by the member processes, else the bare banners of the input
    for (size_t i : members) {
      auto it = procs.find(std::make_pair(ctxs[i].host, ctxs[i].pid));
      if (it != procs.end())
        for (const auto& v : log.processes[it->second].versions) add_unique(comm.versions, v);
    }
    if (comm.versions.empty())
      for (const auto& v : log.bare_banners) add_unique(comm.versions, v);
    if (comm.versions.empty()) {
      for (size_t i : members) {
        const Ctx& c = ctxs[i];
        if (c.info.nvml_dev >= 0 && !c.info.bus_id.empty() && !c.comm_id.empty()) inferred.insert(">=2.18.3 (nvmlDev, busId and commId in Init lines)");
        if (c.info.nvml_dev >= 0 && c.info.bus_id.empty() && c.info.init_complete) inferred.insert("2.4.x (Init COMPLETE with nvmlDev, no busId)");
        if (c.nnodes_printed >= 0) inferred.insert(">=2.20.3 (nRanks/nNodes line)");
      }
      if (max_net_plugin_probe >= 0) {
        static const std::map<int, const char*> kProbe = {{4, "2.12.x"}, {5, "2.13-2.18"}, {6, "2.13-2.18"}, {7, "2.19.x"},
                                                         {8, "2.20-2.23"}, {9, "2.24-2.25"}, {10, "2.26-2.27"}};
        auto it = kProbe.find(max_net_plugin_probe);
        if (it != kProbe.end())
          inferred = {std::string(it->second) + " (highest ncclNetPlugin_v" + std::to_string(max_net_plugin_probe) + " symbol probed)"};
      }
      std::string all;
      for (const auto& v : inferred) {
        if (!all.empty()) all += "; ";
        all += v;
      }
      comm.version_inferred = all;
    }
    // channels: the printed total, else counts (grammar §15.5)
    if (comm.channels < 0 && !comm.rings.empty()) {
      comm.channels = static_cast<int>(comm.rings.rbegin()->first) + 1;
      comm.channels_source = "channel list";
    }
    if (comm.channels < 0) {
      for (size_t i : members) comm.channels = std::max(comm.channels, ctxs[i].info.coll_channels);
      if (comm.channels >= 0) comm.channels_source = "coll channels";
    }
    if (comm.channels < 0) {
      for (size_t i : members) comm.channels = std::max(comm.channels, ctxs[i].trees_items);
      if (comm.channels > 0) comm.channels_source = "trees";
      else comm.channels = -1;
    }
    if (comm.channels < 0 && !nexts.empty()) {
      comm.channels = nexts.rbegin()->first + 1;
      comm.channels_source = "ring lines";
    }
    if (comm.channels < 0 && !conns.empty()) {
      int mx = -1;
      for (auto& [k, rc] : conns) mx = std::max(mx, rc.c.channel);
      comm.channels = mx + 1;
      comm.channels_source = "connections";
    }
    // rings rebuilt from GRAPH neighbour lines where rank 0's list is missing
    if (comm.nranks > 0) {
      for (auto& [ch, nx] : nexts) {
        if (comm.rings.count(ch)) continue;
        std::vector<int> order = ring_from_next(nx, comm.nranks);
        if (order.empty() && nexts_consistent) {
          std::map<int, int> merged = nexts_all;
          for (auto [from, to] : nx) merged[from] = to;
          order = ring_from_next(merged, comm.nranks);
        }
        if (!order.empty()) {
          comm.rings[ch] = order;
          comm.ring_inferred[ch] = true;
        }
      }
    }
    for (auto& [k, rc] : conns) {
      classify(rc.c);
      comm.connections.push_back(rc.c);
    }
    comm.nnodes = comm.nnodes_printed > 0 ? comm.nnodes_printed : static_cast<int>(comm.hosts.size());
    std::sort(comm.colls.begin(), comm.colls.end(), [](const CollStat& a, const CollStat& b) { return a.calls > b.calls; });
    log.comms.push_back(std::move(comm));
  }
}

void Builder::group_warnings() {
  std::map<std::tuple<std::string, long, int>, int> rank_of;
  for (const Ctx& c : ctxs)
    if (c.info.rank >= 0) rank_of.emplace(std::make_tuple(c.host, c.pid, c.dev), c.info.rank);
  std::map<std::string, size_t> index;
  for (const RawWarn& w : warns) {
    std::string key = normalize(w.msg);
    auto it = index.find(key);
    if (it == index.end()) {
      WarningGroup g;
      g.key = key;
      g.example = w.msg;
      g.location = w.loc;
      log.warnings.push_back(g);
      it = index.emplace(key, log.warnings.size() - 1).first;
    }
    WarningGroup& g = log.warnings[it->second];
    ++g.count;
    std::string where = w.host + "[" + std::to_string(w.dev) + "]";
    auto r = rank_of.find(std::make_tuple(w.host, w.pid, w.dev));
    if (r != rank_of.end()) where = "rank " + std::to_string(r->second) + " (" + where + ")";
    auto wi = std::find(g.where.begin(), g.where.end(), where);
    if (wi != g.where.end()) {
      ++g.where_count[static_cast<size_t>(wi - g.where.begin())];
    } else if (g.where.size() < 4096) {
      g.where.push_back(where);
      g.where_count.push_back(1);
    }
  }
}

}  // namespace

Log LogParser::finish() {
  end_source();
  State& st = *s_;
  Log& log = st.log;
  // 1. canonical host per pid (undo splice damage)
  std::map<long, std::map<std::string, size_t>> hosts_of_pid;
  for (const auto& b : st.recs)
    if (b.rec.pid >= 0) ++hosts_of_pid[b.rec.pid][b.rec.host];
  std::map<std::pair<long, std::string>, std::string> alias;
  for (auto& [pid, hosts] : hosts_of_pid) {
    if (hosts.size() < 2) continue;
    for (auto& [odd, n_odd] : hosts) {
      for (auto& [good, n_good] : hosts) {
        if (odd == good || n_good <= n_odd || n_odd > std::max<size_t>(3, n_good / 10)) continue;
        if (splice_related(odd, good)) {
          alias[{pid, odd}] = good;
          break;
        }
      }
    }
  }
  // a rare host that is junk + a frequent host (the splice landed in front of the hostname)
  std::map<std::string, size_t> host_count;
  for (const auto& b : st.recs)
    if (!b.rec.host.empty()) ++host_count[b.rec.host];
  std::map<std::string, std::string> global_alias;
  for (auto& [odd, n_odd] : host_count) {
    if (n_odd > 3) continue;
    for (auto& [good, n_good] : host_count)
      if (good.size() < odd.size() && n_good >= 10 * n_odd && odd.compare(odd.size() - good.size(), good.size(), good) == 0) {
        global_alias[odd] = good;
        break;
      }
  }
  Builder b(log);
  for (auto& buf : st.recs) {
    if (auto g = global_alias.find(buf.rec.host); g != global_alias.end()) buf.rec.host = g->second;
    Record& r = buf.rec;
    auto a = alias.find({r.pid, r.host});
    if (a != alias.end()) r.host = a->second;
    switch (r.level) {
      case Level::Version: {
        std::string v(Scan(std::string_view(r.msg).substr(13)).word());
        if (!v.empty()) b.log.bare_banners.push_back(v);
        break;
      }
      case Level::Call:
        ++b.proc(r).records;
        break;
      case Level::Warn: {
        ++b.proc(r).records;
        ++log.warn_count;
        b.warns.push_back({r.host, r.pid, r.dev, r.loc, r.msg});
        b.network(r, r.msg);
        int result = -1;
        if (looks_like_failure(r.msg, &result) && log.failures.size() < kMaxFailures) {
          Failure f;
          f.source = log.sources.empty() ? "-" : log.sources[buf.source];
          f.line_no = r.line_no;
          f.text = r.host + ":" + std::to_string(r.pid) + " [" + std::to_string(r.dev) + "] " + r.msg.substr(0, 400);
          f.result = result;
          log.failures.push_back(std::move(f));
        }
        break;
      }
      case Level::Info:
      case Level::Trace:
        ++b.proc(r).records;
        b.info(r);
        break;
    }
  }
  // keep bare banners unique but in order
  std::vector<std::string> uniq;
  for (const auto& v : log.bare_banners) add_unique(uniq, v);
  log.bare_banners = uniq;
  b.finish_comms();
  b.group_warnings();
  st.recs.clear();
  return std::move(log);
}

}  // namespace hpdt::nccl_log
