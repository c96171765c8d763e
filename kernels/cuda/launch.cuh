// Launch helpers shared by the CUDA kernels of kernels/cuda (private to this folder).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "hpdt/core/check_cuda.h"
#include "hpdt/core/stream.h"

namespace hpdt::kernels::cuda::detail {

inline cudaStream_t native(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

// Grid for a grid-stride loop over n items: enough blocks to fill the GPU, never more than needed.
// The cap (a few waves on an H100's 132 SMs) keeps blocks long-lived, which amortises their start-up.
inline unsigned grid_for(int64_t n, int threads, int items_per_thread = 1) {
  const int64_t per_block = int64_t(threads) * items_per_thread;
  const int64_t blocks = (n + per_block - 1) / per_block;
  return unsigned(std::clamp<int64_t>(blocks, 1, 132 * 16));
}

}  // namespace hpdt::kernels::cuda::detail
