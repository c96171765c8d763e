// Welford / Chan statistics in f32, shared by batch norm's kernels (norm.cu) and the tensor-core epilogue's column
// statistics (band_epilogue.cuh, sm90a/column_stats.cuh). Private to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

namespace hpdt::kernels::cuda {

// (count, mean, M2) of some values.
struct Welford {
  float n, mean, m2;
};

// Chan et al.'s pairwise merge of two summaries, a then b (a fixed order: the same bits every run); an empty one
// leaves the other as it is.
__device__ __forceinline__ Welford merge(Welford a, Welford b) {
  if (b.n == 0.0f) return a;
  if (a.n == 0.0f) return b;
  const float n = a.n + b.n;
  const float delta = b.mean - a.mean;
  const float wb = b.n / n;
  return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.n * wb};
}

}  // namespace hpdt::kernels::cuda
