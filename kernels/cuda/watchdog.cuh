// The limit of hpdt's device-side waits: GEMM v3's and conv v3's mbarrier waits (sm90a/wgmma.cuh: mbar_wait) and
// attention v3's turn waits (attention.cu: dq_add_in_turn). A wait that never ends (a lost arrival, a phase
// nobody completes, a turn never passed on) would hang the process, and a GPU lease with it; past kWaitTimeoutNs of
// the GPU's global timer the waiting thread executes `trap` instead, and the launch fails with
// cudaErrorLaunchFailure, which the host's next HPDT_CUDA_CHECK reports. No such wait is legitimately longer than
// microseconds (milliseconds under compute-sanitizer).
#pragma once

#include <cstdint>

namespace hpdt::kernels::cuda {

constexpr uint64_t kWaitTimeoutNs = 10'000'000'000ull;

// The GPU's global nanosecond timer.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

}  // namespace hpdt::kernels::cuda
