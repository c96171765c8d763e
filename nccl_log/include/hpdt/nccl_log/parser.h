// Builds the model (model.h) from NCCL_DEBUG text. Feed any number of sources (per-rank
// NCCL_DEBUG_FILE files or one combined stdout), in chunks of any size; then finish().
//
//   hpdt::nccl_log::LogParser p;
//   p.add_source("rank0.log");  p.add_text(chunk);  ...  p.end_source();
//   hpdt::nccl_log::Log log = p.finish();
//
// Nothing here throws on odd input: unknown lines are kept as application output, cut lines are
// flagged, and the model says what it could not tell (-1 / empty). Memory is bounded by the model,
// not by the input (warnings keep one example per kind, failures are capped).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "hpdt/nccl_log/model.h"

namespace hpdt::nccl_log {

class LogParser {
 public:
  LogParser();
  ~LogParser();
  LogParser(const LogParser&) = delete;
  LogParser& operator=(const LogParser&) = delete;

  void add_source(const std::string& name);  // starts a new source; ends the previous one
  void add_text(std::string_view chunk);     // any split; lines may span chunks
  void end_source();                         // a last line without '\n' is taken as cut short
  Log finish();                              // the model; the parser is spent afterwards

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Convenience: one in-memory text as one source.
Log parse_text(std::string_view text, const std::string& source = "-");

}  // namespace hpdt::nccl_log
