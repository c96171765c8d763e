// CUDA NCHW <-> NHWC transposes; the CPU oracle is kernels/cpu/layout.cpp. Per image a [rows, cols] ->
// [cols, rows] transpose (NCHW -> NHWC: rows = c, cols = h * w; back: rows = h * w, cols = c) through a 32 x 33
// shared-memory tile, so that both the reads and the writes of a warp are contiguous. With at most kNarrow
// channels (a model's 1- or 3-channel images) a tile would hold that many rows of 32 and leave most threads idle
// (the 3 x 224^2 batch of 256 ran ~400,000 blocks of 96 elements), so one thread per pixel moves the pixel's
// channels instead (a warp's reads and its writes each cover a contiguous run). The element is moved as its bits
// (uint16_t or uint32_t): f16, bf16 and f32 alike.
#include <cstdint>

#include "hpdt/kernels/cuda/layout.h"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kTile = 32, kRows = 8;  // a 32 x 32 tile per block of 32 x 8 threads
constexpr int kNarrow = 8;            // channel counts moved a pixel per thread

// One thread per (image, pixel): the pixel's `c` channels between [c, pixels] (planar) and [pixels, c] (interleaved).
template <class E, bool kToInterleaved>
__global__ void __launch_bounds__(256)
    narrow_transpose_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t pixels, int c) {
  const int64_t total = n * pixels;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t img = i / pixels, p = i - img * pixels, base = img * pixels * c;
    for (int ch = 0; ch < c; ++ch) {
      if constexpr (kToInterleaved) y[base + p * c + ch] = x[base + ch * pixels + p];
      else y[base + ch * pixels + p] = x[base + p * c + ch];
    }
  }
}

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
  const cudaStream_t st = detail::native(stream);
  const size_t es = dtype_size(x.dtype());
  if (es != 2 && es != 4)
    HPDT_FAIL(op, ": dtype ", dtype_name(x.dtype()), " is not supported on CUDA (2- or 4-byte elements)");
  if (rows <= kNarrow || cols <= kNarrow) {  // few channels: rows (to NHWC) or cols (back to NCHW)
    const bool to_interleaved = rows <= kNarrow;
    const int64_t pixels = to_interleaved ? cols : rows, c = to_interleaved ? rows : cols;
    const unsigned blocks = detail::grid_for(n * pixels, 256);
    auto run = [&](auto tag) {
      using E = decltype(tag);
      const E* xp = static_cast<const E*>(x.data());
      E* yp = static_cast<E*>(y.data());
      if (to_interleaved) narrow_transpose_kernel<E, true><<<blocks, 256, 0, st>>>(xp, yp, n, pixels, int(c));
      else narrow_transpose_kernel<E, false><<<blocks, 256, 0, st>>>(xp, yp, n, pixels, int(c));
    };
    if (es == 2) run(uint16_t{});
    else run(uint32_t{});
    HPDT_CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile), unsigned(n));
  if (es == 2)
    transpose_kernel<uint16_t><<<grid, kTile * kRows, 0, st>>>(static_cast<const uint16_t*>(x.data()),
                                                               static_cast<uint16_t*>(y.data()), int(rows), int(cols));
  else
    transpose_kernel<uint32_t><<<grid, kTile * kRows, 0, st>>>(static_cast<const uint32_t*>(x.data()),
                                                               static_cast<uint32_t*>(y.data()), int(rows), int(cols));
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
