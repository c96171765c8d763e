// CUDA ViT token embedding and class-token select; the CPU oracle is kernels/cpu/embed.cpp.
// Storage f32, f16 or bf16, math in f32.
//   tokens_forward_kernel: patches [b, d, p] (the patch conv's NCHW output) -> tokens [b, 1 + p, d] is a
//     transpose: 32x32 tiles through shared memory, so both the read (along p) and the write (along d) are
//     coalesced; token 0 is cls + pos[0], token 1 + i is x[:, i] + pos[1 + i].
//   tokens_backward_kernel: the transpose back into dpatches, fused with the sums over the batch for dpos
//     (every token) and dcls (token 0): each thread owns 4 (token, channel) pairs of its tile and adds the
//     batches of its split in order. One split: += straight into dpos/dcls from their old values, the CPU's
//     order. Several splits (to fill the GPU when tiles are few): per-split partials, then
//     tokens_param_grad_finalize adds them in split order. Deterministic either way.
//   cls_select: strided copies (cudaMemcpy2DAsync), and a memset for the zeros of the backward.
#include <algorithm>

#include "hpdt/kernels/cuda/embed.h"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kTile = 32, kRows = 8;  // 32x32 tile, 32x8 threads, 4 tile rows per thread

template <class T>
__global__ void __launch_bounds__(kTile* kRows)
    tokens_forward_kernel(const T* __restrict__ x, const T* __restrict__ cls, const T* __restrict__ pos,
                          T* __restrict__ y, int d, int p) {
  __shared__ float tile[kTile][kTile + 1];  // [channel][token], +1: no bank conflicts on the transposed read
  const int t0 = blockIdx.x * kTile, j0 = blockIdx.y * kTile;
  const int64_t b = blockIdx.z;
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int r = 0; r < kTile; r += kRows) {  // read along tokens: x[b, j, t - 1]
    const int j = j0 + ty + r, t = t0 + tx;
    float v = 0.0f;
    if (j < d && t <= p) v = t == 0 ? to_f32(cls[j]) : to_f32(x[(b * d + j) * p + (t - 1)]);
    tile[ty + r][tx] = v;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kTile; r += kRows) {  // write along channels: y[b, t, j]
    const int t = t0 + ty + r, j = j0 + tx;
    if (t <= p && j < d) y[(b * (p + 1) + t) * d + j] = from_f32<T>(tile[tx][ty + r] + to_f32(pos[int64_t(t) * d + j]));
  }
}

template <class T>
__global__ void __launch_bounds__(kTile* kRows)
    tokens_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, T* dcls, T* dpos, float* __restrict__ partial,
                           int b, int batches_per_split, int d, int p) {
  __shared__ float tile[kTile][kTile + 1];  // [token][channel]
  const int t0 = blockIdx.x * kTile, j0 = blockIdx.y * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int b0 = blockIdx.z * batches_per_split, b1 = min(b, b0 + batches_per_split);
  const bool direct = partial == nullptr;  // one split: accumulate onto dpos/dcls themselves
  const int j = j0 + tx;
  float acc[kTile / kRows];
  float acc_cls = 0.0f;  // token 0 also feeds dcls, from its own old value
#pragma unroll
  for (int r = 0; r < kTile / kRows; ++r) {
    const int t = t0 + ty + r * kRows;
    acc[r] = direct && t <= p && j < d ? to_f32(dpos[int64_t(t) * d + j]) : 0.0f;
  }
  if (direct && t0 + ty == 0 && j < d) acc_cls = to_f32(dcls[j]);
  for (int bi = b0; bi < b1; ++bi) {
#pragma unroll
    for (int r = 0; r < kTile / kRows; ++r) {  // read along channels: dy[bi, t, j]
      const int t = t0 + ty + r * kRows;
      float v = 0.0f;
      if (t <= p && j < d) v = to_f32(dy[(int64_t(bi) * (p + 1) + t) * d + j]);
      tile[ty + r * kRows][tx] = v;
      acc[r] += v;
      if (t == 0) acc_cls += v;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kTile; r += kRows) {  // write along tokens: dx[bi, jj, t - 1]
      const int jj = j0 + ty + r, t = t0 + tx;
      if (jj < d && t >= 1 && t <= p) dx[(int64_t(bi) * d + jj) * p + (t - 1)] = from_f32<T>(tile[tx][ty + r]);
    }
    __syncthreads();  // before the next batch overwrites the tile
  }
#pragma unroll
  for (int r = 0; r < kTile / kRows; ++r) {
    const int t = t0 + ty + r * kRows;
    if (t > p || j >= d) continue;
    if (direct) {
      dpos[int64_t(t) * d + j] = from_f32<T>(acc[r]);
      if (t == 0) dcls[j] = from_f32<T>(acc_cls);
    } else {
      partial[(int64_t(blockIdx.z) * (p + 1) + t) * d + j] = acc[r];
    }
  }
}

// dpos[t, j] += the splits' sums in split order; dcls[j] += the same for token 0.
template <class T>
__global__ void tokens_param_grad_finalize(const float* __restrict__ partial, int splits, int64_t n, int d, T* dcls,
                                           T* dpos) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < splits; ++k) s += partial[k * n + i];
    dpos[i] = from_f32<T>(to_f32(dpos[i]) + s);
    if (i < d) dcls[i] = from_f32<T>(to_f32(dcls[i]) + s);
  }
}

}  // namespace

void tokens_forward(const Tensor& patches, const Tensor& cls, const Tensor& pos, Tensor& y, const Stream& stream) {
  const int64_t b = patches.size(0), d = patches.size(1), p = patches.size(2) * patches.size(3);
  if (b == 0 || d == 0) return;
  HPDT_CHECK(b <= 65535 && d < (int64_t(1) << 30) && p < (int64_t(1) << 30), "tokens_forward: batch ", b,
             " (at most 65535 on CUDA) or sizes too large");
  const dim3 grid(unsigned((p + 1 + kTile - 1) / kTile), unsigned((d + kTile - 1) / kTile), unsigned(b));
  dispatch_floating(y.dtype(), "tokens_forward", [&](auto tag) {
    using T = decltype(tag);
    tokens_forward_kernel<T><<<grid, dim3(kTile, kRows), 0, detail::native(stream)>>>(
        static_cast<const T*>(patches.data()), static_cast<const T*>(cls.data()), static_cast<const T*>(pos.data()),
        static_cast<T*>(y.data()), int(d), int(p));
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

void tokens_backward(const Tensor& dy, Tensor& dpatches, Tensor& dcls, Tensor& dpos, const Stream& stream) {
  const int64_t b = dpatches.size(0), d = dpatches.size(1), p = dpatches.size(2) * dpatches.size(3);
  if (d == 0) return;
  HPDT_CHECK(b < (int64_t(1) << 31) && d < (int64_t(1) << 30) && p < (int64_t(1) << 30),
             "tokens_backward: sizes too large for CUDA");
  const int64_t tiles = ((p + 1 + kTile - 1) / kTile) * ((d + kTile - 1) / kTile);
  // Enough blocks for a few per SM (H100: 132), at least 8 batches per split; a function of the shape only.
  const int64_t want = std::max<int64_t>(1, (132 * 4 + tiles - 1) / tiles);
  const int64_t splits = std::clamp<int64_t>(std::min(want, b / 8), 1, 65535);
  const int64_t per_split = std::max<int64_t>(1, (b + splits - 1) / splits);
  const cudaStream_t s = detail::native(stream);
  const dim3 grid(unsigned((p + 1 + kTile - 1) / kTile), unsigned((d + kTile - 1) / kTile), unsigned(splits));
  dispatch_floating(dy.dtype(), "tokens_backward", [&](auto tag) {
    using T = decltype(tag);
    Tensor partial;
    if (splits > 1)
      partial = Tensor::empty({splits * (p + 1) * d}, DType::f32, dy.device(), AllocOptions{.stream = &stream});
    tokens_backward_kernel<T><<<grid, dim3(kTile, kRows), 0, s>>>(
        static_cast<const T*>(dy.data()), static_cast<T*>(dpatches.data()), static_cast<T*>(dcls.data()),
        static_cast<T*>(dpos.data()), splits > 1 ? partial.data<float>() : nullptr, int(b), int(per_split), int(d),
        int(p));
    HPDT_CUDA_CHECK_LAUNCH();
    if (splits > 1) {
      const int64_t n = (p + 1) * d;
      tokens_param_grad_finalize<T><<<detail::grid_for(n, 256), 256, 0, s>>>(
          partial.data<float>(), int(splits), n, int(d), static_cast<T*>(dcls.data()), static_cast<T*>(dpos.data()));
      HPDT_CUDA_CHECK_LAUNCH();
    }
  });
}

void cls_select_forward(const Tensor& x, Tensor& y, const Stream& stream) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  HPDT_CHECK(t >= 1, "cls_select_forward: x ", x.shape().str(), " has no tokens");
  if (b == 0 || d == 0) return;
  const size_t es = dtype_size(x.dtype());
  HPDT_CUDA_CHECK(cudaMemcpy2DAsync(y.data(), size_t(d) * es, x.data(), size_t(t * d) * es, size_t(d) * es, size_t(b),
                                    cudaMemcpyDeviceToDevice, detail::native(stream)));
}

void cls_select_backward(const Tensor& dy, Tensor& dx, const Stream& stream) {
  const int64_t b = dx.size(0), t = dx.size(1), d = dx.size(2);
  if (dx.numel() == 0) return;
  const size_t es = dtype_size(dx.dtype());
  const cudaStream_t s = detail::native(stream);
  HPDT_CUDA_CHECK(cudaMemsetAsync(dx.data(), 0, dx.nbytes(), s));  // all-zero bits are +0 in f32, f16 and bf16
  HPDT_CUDA_CHECK(cudaMemcpy2DAsync(dx.data(), size_t(t * d) * es, dy.data(), size_t(d) * es, size_t(d) * es, size_t(b),
                                    cudaMemcpyDeviceToDevice, s));
}

}  // namespace hpdt::kernels::cuda
