// NcclDebugCapture: lets an application (hpdt-train, hpdt-allreduce-perf, ...) record NCCL's debug
// output of every rank into one directory and print the hpdt-nccl-log report at the end.
//
//   // every rank, BEFORE the first NCCL call (ncclGetUniqueId / ncclCommInitRank):
//   hpdt::nccl_log::NcclDebugCapture nccl_debug(opts.nccl_debug_dir);   // "" = off
//   ... train / benchmark; destroy the NCCL communicators (that flushes and closes the files) ...
//   MPI_Barrier(MPI_COMM_WORLD);
//   if (rank == 0 && nccl_debug.enabled()) std::cout << nccl_debug.report();
//
// The constructor sets (in this process's environment, which NCCL reads at its first call):
//   NCCL_DEBUG=INFO                      unless already INFO or TRACE
//   NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH,TUNING,COLL   unless already set
//   NCCL_DEBUG_FILE=DIR/nccl.%h.%p.log   always (NCCL expands %h to the host, %p to the pid)
// and creates DIR. report() parses every file in DIR and writes DIR/nccl-report.txt and
// DIR/nccl-report.json (atomically) next to them; it needs no MPI and no GPU.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hpdt::nccl_log {

// The variables a capture into `dir` sets, in order (name, value), given the current environment.
// `hpdt-nccl-log env DIR` prints them as shell exports for job scripts that launch other programs.
std::vector<std::pair<std::string, std::string>> nccl_debug_env(const std::string& dir);

class NcclDebugCapture {
 public:
  NcclDebugCapture() = default;  // disabled
  // Enables the capture into `dir` ("" leaves NCCL's settings alone and disables it). Throws
  // hpdt::Error when the directory cannot be created.
  explicit NcclDebugCapture(const std::string& dir);

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  // What the constructor set, as NAME=value strings (for logs and job-script output).
  const std::vector<std::string>& settings() const { return settings_; }

  // Parses every file in dir(), writes dir()/nccl-report.txt and dir()/nccl-report.json, and returns the
  // text report. When the directory holds no NCCL output (NCCL unused, e.g. on the CPU backend) the
  // returned text says so and nothing is written. Call on one rank, after the communicators are gone.
  std::string report() const;

 private:
  std::string dir_;
  std::vector<std::string> settings_;
};

}  // namespace hpdt::nccl_log
