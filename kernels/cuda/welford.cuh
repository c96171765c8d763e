// Welford / Chan statistics in f32: batch norm's statistics kernels (norm.cu). (The tensor-core epilogues' column
// statistics, band_epilogue.cuh and sm90a/column_stats.cuh, use shifted sums instead: no division a value.) Private
// to kernels/cuda.
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
