// The timing every GPU op benchmark shares (bench_*_cuda.cpp): one stream, each row's calls timed on the GPU alone,
// and the x_* counters' back-to-back times.
//
// A row times one call an iteration, between two events. Issued as they come, the events also count the launch gap:
// the start event is reached at once, and the GPU then waits while the host issues the call (a few microseconds for
// one of our kernels, more for cuDNN's legacy API or a call of several kernels). In a training step the host runs
// ahead of the GPU and that gap is hidden, so a row counted it where a step does not, and more for the side with more
// host work a call. On the H200 (2026-11-27, 2026-11-29) the rows, timed so, put v2's convolutions at >= 0.7x cuDNN
// in 29 of 36 cases, the counters that time both sides back to back in 19; GEMM v3 at >= 0.7x cuBLAS on 11 of
// ViT-B/16's 12 shapes, back to back on 4 (results/gpu/README.md, "How the per-op rows are timed"). So since
// 2026-11-30 each iteration first queues kernels::cuda::spin(), which holds the stream, then the start event, the
// call and the stop event: the host has issued the whole call before the GPU reaches the start event, and the time
// between the events is the GPU's alone. Where the GPU reached the start event before the host had queued the stop
// event (the spin was too short for the host's work, or the call waited for the host), the iteration counts in the
// row's `launch_gaps` counter and the next spin is twice as long (up to 10 ms). A row first calibrates the spin on
// untimed calls, so its count is of the timed iterations whose host part outgrew it (or that waited for the host).
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>

#include "hpdt/core/device.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/stream.h"
#include "hpdt/kernels/cuda/spin.h"

namespace hpdt::bench {

// The benchmarks' one stream (never destroyed: it outlives CUDA's own teardown).
inline Stream& bench_stream() {
  static Stream* s = new Stream(Stream::create_cuda(0));
  return *s;
}

// True (and the row marked skipped, with the reason) where no GPU is usable.
inline bool skip_without_gpu(benchmark::State& state) {
  if (cuda_available()) return false;
  state.SkipWithError(("no GPU: " + cuda_unavailable_reason()).c_str());
  return true;
}

// Seconds a call of `run`: `reps` calls back to back between two events, after one warm-up call (the x_* counters,
// which set two ways of doing one thing against each other in the same row).
template <class Run>
double seconds_back_to_back(Run&& run, int reps) {
  const Stream& s = bench_stream();
  run();
  Event start(Device::cuda(0)), stop(Device::cuda(0));
  start.record(s);
  for (int i = 0; i < reps; ++i) run();
  stop.record(s);
  stop.synchronize();
  return double(start.elapsed_ms(stop)) / 1e3 / reps;
}

// One call at a time on the GPU alone (the comment at the top).
class CallTimer {
 public:
  template <class Run>
  double seconds(Run&& run) {
    const Stream& s = bench_stream();
    kernels::cuda::spin(spin_s_, s);
    start_.record(s);
    run();
    stop_.record(s);
    const bool gap = start_.query();  // the GPU got to the start before the host had queued the stop
    stop_.synchronize();
    if (gap) {
      ++launch_gaps_;
      spin_s_ = std::min(2 * spin_s_, kMaxSpin);
    }
    return double(start_.elapsed_ms(stop_)) / 1e3;
  }
  int launch_gaps() const { return launch_gaps_; }
  // Untimed calls until one has no gap (or the spin is at its cap), then the count from zero: the row's iterations
  // start with a spin long enough for the host's part of the call.
  template <class Run>
  void calibrate(Run&& run) {
    for (int gaps = launch_gaps_;; gaps = launch_gaps_) {
      seconds(run);
      if (launch_gaps_ == gaps || spin_s_ >= kMaxSpin) break;
    }
    launch_gaps_ = 0;
  }

 private:
  static constexpr double kMaxSpin = 10e-3;
  double spin_s_ = 50e-6;
  int launch_gaps_ = 0;
  Event start_{Device::cuda(0)}, stop_{Device::cuda(0)};
};

// The row's loop: each iteration one call of `run` on the GPU alone (CallTimer, calibrated first), its manual time;
// the row's launch_gaps counter. `run` has been called once before (the warm-up: allocations, plans, Find). Returns
// the mean seconds a call.
template <class Run>
double time_row(benchmark::State& state, Run&& run) {
  CallTimer timer;
  timer.calibrate(run);
  double total = 0;
  for (auto _ : state) {
    const double sec = timer.seconds(run);
    state.SetIterationTime(sec);
    total += sec;
  }
  state.counters["launch_gaps"] = timer.launch_gaps();
  return state.iterations() > 0 ? total / double(state.iterations()) : 0.0;
}

// main() of a benchmark whose rows register_all() registers.
inline int run_benchmarks(int argc, char** argv, void (*register_all)()) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace hpdt::bench
