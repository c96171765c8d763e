// What the kernels' Find modes share (GEMM v3's and conv v3's plans under kernels::GemmTuning::find,
// sm90a/gemm_wgmma.cu and sm90a/conv_wgmma.cu; the NHWC convolutions' v2 or v3 under kernels::ConvChoice::find,
// conv_nhwc.cu): timing candidates on the stream, whether the stream is capturing (a capture cannot be timed: no host
// waits inside one), and the process's choices with their reports.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "hpdt/core/check_cuda.h"

namespace hpdt::kernels::cuda::find {

// Timed runs a candidate, after one warm-up run; the median counts. On the CUDA emulator (tests/cuda_emu) the times
// mean nothing and each run costs seconds: one timed run there still takes every path (warm-up, events, the choice).
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
constexpr int kRuns = 1;
#else
constexpr int kRuns = 5;
#endif

// Whether `s` is capturing into a CUDA graph (or its capture was invalidated).
inline bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  HPDT_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  return st != cudaStreamCaptureStatusNone;
}

// The median time (ms) of run(i) for each candidate i < n, queued on `s`: one warm-up run (the kernel's first
// launch: its shared-memory limit, a nested Find), then kRuns runs between events. Synchronises the stream.
inline std::vector<double> time_each(int n, cudaStream_t s, const std::function<void(int)>& run) {
  struct Events {  // released also on an exception
    cudaEvent_t e[kRuns + 1] = {};
    Events() {
      for (cudaEvent_t& x : e) HPDT_CUDA_CHECK(cudaEventCreate(&x));
    }
    ~Events() {
      for (cudaEvent_t x : e)
        if (x) cudaEventDestroy(x);
    }
    Events(const Events&) = delete;
    Events& operator=(const Events&) = delete;
  } ev;
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    run(i);
    for (int r = 0; r < kRuns; ++r) {
      HPDT_CUDA_CHECK(cudaEventRecord(ev.e[r], s));
      run(i);
    }
    HPDT_CUDA_CHECK(cudaEventRecord(ev.e[kRuns], s));
    HPDT_CUDA_CHECK(cudaEventSynchronize(ev.e[kRuns]));
    std::vector<double> runs(kRuns);
    for (int r = 0; r < kRuns; ++r) {
      float t = 0;
      HPDT_CUDA_CHECK(cudaEventElapsedTime(&t, ev.e[r], ev.e[r + 1]));
      runs[size_t(r)] = double(t);
    }
    std::nth_element(runs.begin(), runs.begin() + kRuns / 2, runs.end());
    ms.push_back(runs[kRuns / 2]);
  }
  return ms;
}

// The choices of one Find, per key (a call's shape, as far as speed goes), and their reports (what the user sees:
// the call, the choice, each candidate's time) in the order they were found. Thread-safe; one static per Find,
// never destroyed (a kernel may run from another static's destructor).
template <class Key, class Choice, class Report>
class Choices {
 public:
  bool lookup(const Key& k, Choice& out) const {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto it = by_key_.find(k);
    if (it == by_key_.end()) return false;
    out = it->second.first;
    return true;
  }
  // Keeps the first choice made for `k` (two threads may time the same key) and returns it.
  Choice add(const Key& k, const Choice& c, Report r) {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto [it, added] = by_key_.emplace(k, std::make_pair(c, std::move(r)));
    if (added) order_.push_back(k);
    return it->second.first;
  }
  std::vector<Report> reports() const {
    const std::lock_guard<std::mutex> lock(mu_);
    std::vector<Report> out;
    for (const Key& k : order_) out.push_back(by_key_.at(k).second);
    return out;
  }
  void clear() {
    const std::lock_guard<std::mutex> lock(mu_);
    by_key_.clear();
    order_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::map<Key, std::pair<Choice, Report>> by_key_;
  std::vector<Key> order_;
};

}  // namespace hpdt::kernels::cuda::find
