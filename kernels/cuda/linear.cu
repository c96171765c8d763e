// CUDA linear layer: the three GEMMs of forward/backward through cuda::gemm (bias, and a following GELU, fused in
// the forward GEMM's epilogue; a preceding GELU's gradient in the dx GEMM's), and a deterministic column sum for
// the bias gradient (16-byte loads of 8 bf16/f16 or 4 f32 columns a thread where the width and alignment allow,
// else one; the same bits either way).
#include <algorithm>

#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cuda/gemm.h"
#include "hpdt/kernels/cuda/linear.h"
#include "launch.cuh"
#include "vec.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kColsPerBlock = 32;  // one warp across 32 adjacent columns: coalesced row reads
constexpr int kRowLanes = 8;       // warps per block, each on every 8th row of the block's row range
constexpr int kMaxRowBlocks = 64;
constexpr int kFinishThreads = 256;

// partial[blockIdx.y][c] = sum of x[r, c] over the block's row range: thread (tx, ty) owns columns
// (blockIdx.x * 32 + tx) * V + 0..V-1 and sums rows r0 + ty, r0 + ty + 8, ... in order, then thread ty == 0 adds
// the 8 lane sums in order. The bits do not depend on V: V = 8 (f16/bf16) or 4 (f32) reads a row segment with one
// 16-byte load where cols % V == 0 and x is 16-byte aligned, V = 1 anything else.
template <class T, int V>
__global__ void __launch_bounds__(kColsPerBlock* kRowLanes)
    column_partials_kernel(int64_t rows, int64_t cols, int64_t rows_per_block, const T* __restrict__ x,
                               float* __restrict__ partial) {
  __shared__ float lane_sums[kRowLanes][kColsPerBlock * V];
  const int64_t col0 = (blockIdx.x * int64_t(kColsPerBlock) + threadIdx.x) * V;
  const int64_t r0 = blockIdx.y * rows_per_block;
  const int64_t r1 = std::min(rows, r0 + rows_per_block);
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.0f;
  if (col0 < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      float v[V];
      load<V>(x + r * cols + col0, v);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += v[k];
    }
#pragma unroll
  for (int k = 0; k < V; ++k) lane_sums[threadIdx.y][threadIdx.x * V + k] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && col0 < cols)
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float total = 0.0f;
#pragma unroll
      for (int i = 0; i < kRowLanes; ++i) total += lane_sums[i][threadIdx.x * V + k];
      partial[blockIdx.y * cols + col0 + k] = total;
    }
}

template <class T>
__global__ void column_finish_kernel(int64_t cols, int blocks, const float* __restrict__ partial, T* __restrict__ out) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    float total = 0.0f;
    for (int b = 0; b < blocks; ++b) total += partial[b * cols + c];
    out[c] = from_f32<T>(to_f32(out[c]) + total);
  }
}

int64_t ld(int64_t n) { return std::max<int64_t>(1, n); }  // gemm wants >= 1 even for empty matrices

}  // namespace

void column_sums_accumulate(int64_t rows, int64_t cols, const void* x, void* out, DType dtype, const Stream& stream) {
  if (rows == 0 || cols == 0) return;
  const int blocks = int(std::clamp<int64_t>((rows + 255) / 256, 1, kMaxRowBlocks));
  const int64_t rows_per_block = (rows + blocks - 1) / blocks;
  Tensor partial = Tensor::empty({blocks, cols}, DType::f32, stream.device(), AllocOptions{.stream = &stream});
  const cudaStream_t s = detail::native(stream);
  dispatch_floating(dtype, "linear_backward (bias gradient)", [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec<T>;
    const bool vec = cols % V == 0 && aligned16(x);
    const dim3 grid(unsigned((cols / (vec ? V : 1) + kColsPerBlock - 1) / kColsPerBlock), unsigned(blocks));
    if (vec)
      column_partials_kernel<T, V><<<grid, dim3(kColsPerBlock, kRowLanes), 0, s>>>(
          rows, cols, rows_per_block, static_cast<const T*>(x), partial.data<float>());
    else
      column_partials_kernel<T, 1><<<grid, dim3(kColsPerBlock, kRowLanes), 0, s>>>(
          rows, cols, rows_per_block, static_cast<const T*>(x), partial.data<float>());
    HPDT_CUDA_CHECK_LAUNCH();
    column_finish_kernel<T><<<detail::grid_for(cols, kFinishThreads), kFinishThreads, 0, s>>>(
        cols, blocks, partial.data<float>(), static_cast<T*>(out));
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

void linear_forward(int64_t rows, int64_t in, int64_t out, const void* x, const void* w, const void* b, void* y,
                    DType dtype, const Stream& stream, void* gelu_pre, GeluForm form, const void* residual) {
  // y [rows, out] = x [rows, in] * (w [out, in])^T + b + residual (then the GELU, keeping its input in gelu_pre)
  const GemmEpilogue epi{.bias = b,
                         .residual = residual,
                         .gelu = gelu_pre != nullptr,
                         .pre_activation = gelu_pre,
                         .gelu_form = form};
  gemm(false, true, rows, out, in, 1.0f, x, ld(in), w, ld(in), 0.0f, y, ld(out), dtype, dtype, epi, stream);
}

void linear_backward(int64_t rows, int64_t in, int64_t out, const void* dy, const void* x, const void* w, void* dx,
                     void* dw, void* db, DType dtype, const Stream& stream, const void* gelu_input, GeluForm form) {
  // dx [rows, in] = dy [rows, out] * w [out, in] (times gelu'(gelu_input))
  const GemmEpilogue epi{.gelu_grad_input = gelu_input, .gelu_form = form};
  if (dx) gemm(false, false, rows, in, out, 1.0f, dy, ld(out), w, ld(in), 0.0f, dx, ld(in), dtype, dtype, epi, stream);
  // dw [out, in] += (dy [rows, out])^T * x [rows, in]
  if (rows > 0)
    gemm(true, false, out, in, rows, 1.0f, dy, ld(out), x, ld(in), 1.0f, dw, ld(in), dtype, dtype, {}, stream);
  if (db) column_sums_accumulate(rows, out, dy, db, dtype, stream);
}

}  // namespace hpdt::kernels::cuda
