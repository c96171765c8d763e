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

}  // namespace hpdt::kernels::cuda
