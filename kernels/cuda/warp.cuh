// Warp-level reductions shared by the kernels (private to kernels/cuda).
#pragma once

#include <cuda_runtime.h>

namespace hpdt::kernels::cuda {

// The sum of v over the warp, in every lane: a fixed xor tree, so the same bits every run and in every lane.
__device__ __forceinline__ float warp_allsum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum of v over lanes 0 .. kLanes - 1 of the warp (kLanes a power of two, <= 32), in lane 0: a fixed shfl_down
// tree, so the same bits every run. Every lane of the warp calls it.
template <int kLanes = 32, class V>
__device__ __forceinline__ V warp_sum_to_lane0(V v) {
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "a power of two of lanes");
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// The sum of v over a block of kThreads threads (a power-of-two number of warps), in thread 0: each warp's sum in its
// lane 0, then warp 0 adds the warps' sums by the same tree. The same bits every run. Every thread of the block calls
// it (it holds a __syncthreads()), once per kernel: a second call would overwrite the warps' sums in flight.
template <int kThreads, class V>
__device__ __forceinline__ V block_sum(V v) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kThreads % 32 == 0 && kWarps <= 32 && (kWarps & (kWarps - 1)) == 0, "a power of two of warps");
  __shared__ V warp_sums[kWarps];
  v = warp_sum_to_lane0(v);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  v = threadIdx.x < kWarps ? warp_sums[threadIdx.x] : V(0);
  if (threadIdx.x < 32) v = warp_sum_to_lane0<kWarps>(v);
  return v;
}

}  // namespace hpdt::kernels::cuda
