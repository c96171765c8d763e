// The lexer of NCCL_DEBUG output: finds NCCL records in physical lines whatever wraps them.
//
// A physical line may carry launcher text before the NCCL prefix (`[1,0]<stdout>:`, `0: `, a
// timestamp, an indent), may hold several records when processes splice each other's output, or
// hold no NCCL record at all (application output). The lexer finds every `host:pid:tid [dev] NCCL
// LEVEL ` prefix without anchoring (grammar §1.3), splits the line at each, and hands the records to
// the model builder. It is hand-written (no std::regex): linear in the line length, no recursion,
// so that arbitrary input (binary garbage, megabyte lines) cannot blow the stack or hang.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hpdt::nccl_log {

enum class Level { Info, Warn, Trace, Call, Version };
const char* level_name(Level l);

// One NCCL record after the wrapper text is stripped.
struct Record {
  size_t line_no = 0;       // 1-based physical line in its source
  int launcher_rank = -1;   // from `[1,R]<stdout>:` or `R: ` (srun --label); -1 when absent
  std::string host;
  long pid = -1, tid = -1;
  int dev = -1;             // the `[cudaDev]` field; -1 for CALL lines and bare banners
  Level level = Level::Info;
  std::string loc;          // `file:line` (WARN, TRACE), empty otherwise
  std::string msg;          // the message after `NCCL LEVEL `
  bool spliced = false;     // another writer's record started inside this one: its tail is lost
  bool cut_mid_word = false;  // spliced and the cut did not fall on a space: the last word is partial
};

// The result of lexing one physical line.
struct LexedLine {
  std::vector<Record> records;
  std::string other;        // the line's text when it holds no NCCL record (wrapper stripped), else ""
  int launcher_rank = -1;
};

// Longest physical line kept; longer ones are cut (NCCL itself never prints more than 1024 bytes).
inline constexpr size_t kMaxLineBytes = 64 * 1024;

LexedLine lex_line(std::string_view line, size_t line_no);

// Strips launcher wrappers from the start of a line and returns the rank they name (or -1).
std::string_view strip_launcher(std::string_view line, int* launcher_rank);

}  // namespace hpdt::nccl_log
