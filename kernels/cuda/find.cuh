// What the kernels' Find modes share (GEMM v3's plans under kernels::GemmTuning::find, sm90a/gemm_wgmma.cu; the
// NHWC convolutions' v2 or v3 under kernels::ConvChoice::find, conv_nhwc.cu): timing candidates on the stream, and
// whether the stream is capturing (a capture cannot be timed: no host waits inside one).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "hpdt/core/check_cuda.h"

namespace hpdt::kernels::cuda::find {

constexpr int kRuns = 5;  // timed runs a candidate, after one warm-up run; the median counts

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

}  // namespace hpdt::kernels::cuda::find
