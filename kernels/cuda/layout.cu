// CUDA NCHW <-> NHWC transposes; the CPU oracle is kernels/cpu/layout.cpp. Per image a [rows, cols] ->
// [cols, rows] transpose (NCHW -> NHWC: rows = c, cols = h * w; back: rows = h * w, cols = c) through a 32 x 33
// shared-memory tile, so that both the reads and the writes of a warp are contiguous. The element is moved as
// its bits (uint16_t or uint32_t): f16, bf16 and f32 alike.
#include <cstdint>

#include "hpdt/kernels/cuda/layout.h"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kTile = 32, kRows = 8;  // a 32 x 32 tile per block of 32 x 8 threads

// blockIdx.z: image; blockIdx.y / x: tile row / column.
template <class E>
__global__ void __launch_bounds__(kTile* kRows)
    transpose_kernel(const E* __restrict__ x, E* __restrict__ y, int rows, int cols) {
  __shared__ E tile[kTile][kTile + 1];  // +1: the column reads hit 32 different banks (4-byte E)
  const int64_t img = int64_t(blockIdx.z) * rows * cols;
  const int r0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  for (int i = ty; i < kTile; i += kRows) {
    const int r = r0 + i, c = c0 + tx;
    if (r < rows && c < cols) tile[i][tx] = x[img + int64_t(r) * cols + c];
  }
  __syncthreads();
  for (int i = ty; i < kTile; i += kRows) {
    const int c = c0 + i, r = r0 + tx;
    if (r < rows && c < cols) y[img + int64_t(c) * rows + r] = tile[tx][i];
  }
}

void transpose(const char* op, const Tensor& x, Tensor& y, int64_t n, int64_t rows, int64_t cols,
               const Stream& stream) {
  if (n == 0 || rows == 0 || cols == 0) return;
  HPDT_CHECK(n <= 65535 && rows * cols < (int64_t(1) << 31), op, ": ", x.str(),
             " is too large for the CUDA transpose (at most 65535 images of 2^31 elements)");
  const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile), unsigned(n));
  const cudaStream_t st = detail::native(stream);
  const size_t es = dtype_size(x.dtype());
  if (es == 2)
    transpose_kernel<uint16_t><<<grid, kTile * kRows, 0, st>>>(static_cast<const uint16_t*>(x.data()),
                                                               static_cast<uint16_t*>(y.data()), int(rows), int(cols));
  else if (es == 4)
    transpose_kernel<uint32_t><<<grid, kTile * kRows, 0, st>>>(static_cast<const uint32_t*>(x.data()),
                                                               static_cast<uint32_t*>(y.data()), int(rows), int(cols));
  else
    HPDT_FAIL(op, ": dtype ", dtype_name(x.dtype()), " is not supported on CUDA (2- or 4-byte elements)");
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void nchw_to_nhwc(const Tensor& x, Tensor& y, const Stream& stream) {
  transpose("nchw_to_nhwc", x, y, x.size(0), x.size(1), x.size(2) * x.size(3), stream);
}

void nhwc_to_nchw(const Tensor& x, Tensor& y, const Stream& stream) {
  transpose("nhwc_to_nchw", x, y, x.size(0), x.size(1) * x.size(2), x.size(3), stream);
}

}  // namespace hpdt::kernels::cuda
