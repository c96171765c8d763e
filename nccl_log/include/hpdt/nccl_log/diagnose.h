// Diagnoses: each a rule over the parsed Log that says what looks wrong, in plain language, with the
// usual next step. docs/nccl-log.md lists the rules; tests/nccl_log/test_diagnose.cpp has one test each.
#pragma once

#include <string>
#include <vector>

#include "hpdt/nccl_log/model.h"

namespace hpdt::nccl_log {

struct Diagnosis {
  std::string rule;       // stable id, e.g. "version-mismatch"
  std::string severity;   // "error", "warning", "info"
  std::string comm;       // communicator id, or "" for the whole input
  std::string summary;    // one line: what was seen
  std::string detail;     // why it matters / what it means
  std::string next_step;  // what people usually do next
  std::vector<std::string> evidence;  // log lines or facts that triggered it (a few)
};

std::vector<Diagnosis> diagnose(const Log& log);

// The ids of all rules, in the order they run.
const std::vector<std::string>& diagnosis_rules();

}  // namespace hpdt::nccl_log
