// Reading logs: files (plain or .gz, detected by the gzip magic bytes, not the name) and stdin ("-").
#pragma once

#include <string>
#include <vector>

#include "hpdt/nccl_log/model.h"
#include "hpdt/nccl_log/parser.h"

namespace hpdt::nccl_log {

// Feeds one file (or "-" for stdin) to the parser as one source. Throws hpdt::Error naming the path
// when it cannot be read (missing, a directory, no permission, a corrupt .gz).
void read_source(LogParser& parser, const std::string& path);

// Every regular file directly in `dir` (sorted by name), e.g. an NCCL_DEBUG_FILE directory, except
// what the report itself writes there (nccl-report.txt/.json, *.dot, *.png), so a second run reads
// the logs only.
std::vector<std::string> log_files_in(const std::string& dir);

// read_source for each path (a directory expands to its files); then parser.finish().
Log read_logs(const std::vector<std::string>& paths);

}  // namespace hpdt::nccl_log
