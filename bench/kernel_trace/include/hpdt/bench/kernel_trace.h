// A trace of the work a process runs on its GPU, kernel by kernel, and its per-kernel summary: where a
// training step's time goes (hpdt-bench-train-step --kernel-trace; the PyTorch peer writes the same layout,
// scripts/gpu/kernel_breakdown.py puts them side by side).
//
// The trace is CUPTI's activity API (the timestamps the GPU itself records at each kernel's start and end, the
// same source Nsight Systems and torch.profiler read): every kernel, memcpy and memset the process runs between
// KernelTrace's construction and stop(), with no replay and no serialisation, so the kernels run as they do
// untraced (Nsight Compute, by contrast, replays each kernel alone). CUPTI is loaded at run time (dlopen), so
// that programs which never trace run where there is no libcupti.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hpdt::bench {

// One activity of the GPU: a kernel (its demangled name), a memory copy ("[memcpy HtoD]", "[memcpy DtoD]", ..)
// or a memory set ("[memset]"), from start_ns to end_ns (the GPU's timestamps, nanoseconds), on any stream.
struct GpuActivity {
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;
};

// Records the GPU activities of the whole process (every device, every stream) from construction until stop().
// CUPTI is the process's: one trace at a time (a second one is an error). The library is, in order:
// $HPDT_CUPTI_LIBRARY (a path; when set, nothing else is tried), libcupti.so.<major> of the CUPTI the program
// was compiled with (the loader's search path: LD_LIBRARY_PATH, ...), then the same name under
// $CUDA_HOME/extras/CUPTI/lib64, /usr/local/cuda/extras/CUPTI/lib64 and /usr/local/cuda/lib64.
// Every failure (no CUPTI in the build, the library not found or too old, a CUPTI call failing) throws
// hpdt::Error naming what failed; the destructor of a trace not stopped disables the recording silently.
class KernelTrace {
 public:
  KernelTrace();
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // Stops recording and returns the activities in order of their start. Synchronise the GPU first: work
  // still running has no end time yet, and CUPTI delivers only what has completed. Throws when CUPTI
  // dropped records (a trace with holes would understate the time).
  std::vector<GpuActivity> stop();

  // The file the library was loaded from (for the record that writes the summary).
  const std::string& library() const { return library_; }

 private:
  void finish();
  bool running_ = false;
  std::string library_;
};

// Per-kernel totals of a trace: one entry per distinct name.
struct KernelTotal {
  std::string name;
  int64_t count = 0;
  double total_ms = 0;
};
struct KernelSummary {
  std::vector<KernelTotal> kernels;  // by total time, the largest first (equal times: by name)
  int64_t activities = 0;
  double sum_ms = 0;   // the activities' durations added up (more than busy_ms where streams overlap)
  double busy_ms = 0;  // the union of their intervals: the time the GPU had something to run
  double span_ms = 0;  // the first start to the last end
};

// Throws hpdt::Error on an activity that ends before it starts (a trace from a GPU that gave no times).
KernelSummary summarize(const std::vector<GpuActivity>& activities);

// The summary per step (each time divided by `steps` >= 1), as the JSON the breakdown script reads:
// {"steps", "activities", "sum_ms_per_step", "busy_ms_per_step", "span_ms_per_step",
//  "kernels": [{"name", "count_per_step", "ms_per_step"}, ...]} (count_per_step may be fractional).
nlohmann::json summary_json(const KernelSummary& summary, int64_t steps);

// The readable form of a C++ symbol (itself when it is not a mangled name).
std::string demangle(const char* symbol);

}  // namespace hpdt::bench
