// Launch helpers shared by the CUDA kernels of kernels/cuda (private to this folder).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "hpdt/core/check_cuda.h"
#include "hpdt/core/stream.h"
#include "split_k.cuh"

namespace hpdt::kernels::cuda::detail {

inline cudaStream_t native(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

// Grid for a grid-stride loop over n items: enough blocks to fill the GPU, never more than needed.
// The cap (a few waves on an H100's 132 SMs) keeps blocks long-lived, which amortises their start-up.
inline unsigned grid_for(int64_t n, int threads, int items_per_thread = 1) {
  const int64_t per_block = int64_t(threads) * items_per_thread;
  const int64_t blocks = (n + per_block - 1) / per_block;
  return unsigned(std::clamp<int64_t>(blocks, 1, 132 * 16));
}

// The device's SM count (cached per device).
inline int sm_count(int device) {
  static std::atomic<int> cache[64] = {};
  int n = cache[device & 63].load(std::memory_order_relaxed);
  if (n == 0) {
    HPDT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    cache[device & 63].store(n, std::memory_order_relaxed);
  }
  return n;
}

// How many blocks of Kernel one SM runs at once with `threads` threads and `smem` bytes of dynamic shared memory,
// from the CUDA occupancy calculator (registers, shared memory, threads). Cached per kernel: every call site
// launches a given kernel with one block size and one shared-memory size.
template <auto Kernel>
int blocks_per_sm(int threads, int smem) {
  static std::atomic<int> cache{0};
  int n = cache.load(std::memory_order_relaxed);
  if (n == 0) {
    HPDT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, threads, size_t(smem)));
    n = std::max(n, 1);
    cache.store(n, std::memory_order_relaxed);
  }
  return n;
}

// Dynamic shared memory above the default 48 KiB needs an opt-in per kernel and device
// (cudaFuncAttributeMaxDynamicSharedMemorySize): set once per device, raised when a larger size is asked for.
// The kernel is a template argument, not a function-pointer parameter, so that every kernel has its own record
// (with a parameter, kernels of one signature shared one, and the second launched without its limit raised).
template <auto Kernel>
void allow_dynamic_smem(int bytes) {
  if (bytes <= 48 * 1024) return;
  static std::atomic<int> allowed[64] = {};
  int device = 0;
  HPDT_CUDA_CHECK(cudaGetDevice(&device));
  std::atomic<int>& a = allowed[device & 63];
  int now = a.load(std::memory_order_acquire);
  if (now >= bytes) return;
  HPDT_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  while (now < bytes && !a.compare_exchange_weak(now, bytes, std::memory_order_acq_rel)) {
  }
}

}  // namespace hpdt::kernels::cuda::detail
