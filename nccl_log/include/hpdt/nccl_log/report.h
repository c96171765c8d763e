// Writers for a parsed Log: a text report for a terminal, JSON (schema in docs/nccl-log.md) and
// Graphviz DOT (rings and trees per channel, ranks grouped by host).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpdt/nccl_log/diagnose.h"
#include "hpdt/nccl_log/model.h"

namespace hpdt::nccl_log {

std::string text_report(const Log& log, const std::vector<Diagnosis>& diagnoses);
nlohmann::json json_report(const Log& log, const std::vector<Diagnosis>& diagnoses);
// The JSON as text, indented; bytes that are not UTF-8 (logs hold anything) become U+FFFD.
std::string json_text(const nlohmann::json& j);
// max_channels: how many channels to draw per communicator (rings and trees of the first ones).
std::string dot_report(const Log& log, int max_channels = 2);

// The rank -> host map of a communicator (from its ranks' own lines).
std::string host_of(const Communicator& c, int rank);

}  // namespace hpdt::nccl_log
