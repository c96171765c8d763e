// CUDA max pool and global average pool (NCHW and NHWC); the CPU oracle is kernels/cpu/pool.cpp.
// Storage f32, f16 or bf16, math in f32, argmax i32 (index into the input's h*w plane, -1 never occurs).
//   maxpool_forward_kernel: one thread per output; the CPU's scan order and tie rule (first maximum wins,
//     a NaN wins and propagates), padding = -inf.
//   maxpool_backward_gather_kernel: one thread per input element sums, in output order, the dy of the
//     windows that contain it and whose argmax is it: deterministic, no atomics, the CPU's addition order.
//   avgpool_forward_kernel: one warp per plane (fixed lane tree); avgpool_backward_kernel: a block writes a
//     contiguous run of whole planes.
// NHWC ([n, h, w, c]; argmax the same index into the h*w plane as NCHW's): the same threads with the channel
//   innermost, so that a warp reads and writes consecutive channels of a pixel: maxpool_*_nhwc_kernel (the CPU's
//   scan order, tie rule and output-order sums); avgpool_forward_nhwc_kernel, one thread per (image, channel)
//   adding the pixels in order (the CPU's order, so f32 matches it bit for bit); avgpool_backward_nhwc_kernel.
// Flat indices are 32-bit when the tensor allows it (Index = uint32_t, decoded with FastDiv), else 64-bit; the window
// decode divides by FastDivs (PoolWindow).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "fast_div.cuh"
#include "hpdt/kernels/cuda/pool.h"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// Division of a flat index: FastDiv (one mul.hi) when every index is below 2^31, plain 64-bit division otherwise.
// The window decode runs once per value, and with `/` it made max pool instruction-bound (backward at 0.12 of a
// device copy on the H100 in bf16).
struct Div64 {
  int64_t d = 1;
  Div64() = default;
  explicit Div64(int64_t divisor) : d(divisor) {}
  __device__ __forceinline__ int64_t div(int64_t n) const { return n / d; }
};
template <class Index>
using FlatDiv = std::conditional_t<std::is_same_v<Index, int64_t>, Div64, FastDiv>;

// The window geometry, with divisions by w, ow and stride as FastDivs (all operands are below 2^31).
struct PoolWindow {
  int h, w, oh, ow, k, stride, pad;
  FastDiv w_div, ow_div, stride_div;
};
PoolWindow pool_window(int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t k, int64_t stride, int64_t pad) {
  return {int(h), int(w), int(oh), int(ow), int(k), int(stride), int(pad), FastDiv(w), FastDiv(ow), FastDiv(stride)};
}

// The output windows that contain input (iy, ix): oy * stride - pad <= iy <= oy * stride - pad + k - 1.
struct WindowRange {
  int oy0, oy1, ox0, ox1;
};
__device__ __forceinline__ WindowRange windows_of(const PoolWindow& g, int iy, int ix) {
  const int ay = iy + g.pad - g.k + 1, ax = ix + g.pad - g.k + 1;
  return {ay <= 0 ? 0 : g.stride_div.div(ay + g.stride - 1), min(g.oh - 1, g.stride_div.div(iy + g.pad)),
          ax <= 0 ? 0 : g.stride_div.div(ax + g.stride - 1), min(g.ow - 1, g.stride_div.div(ix + g.pad))};
}

// The maximum of output window (oy, ox) and where it is (its index in the h*w plane): the CPU's scan order and
// tie rule (first maximum wins, a NaN wins and propagates, as PyTorch), padding = -inf. p is the plane (or, NHWC,
// the image at its channel); pixel i of it at p[i * step].
template <class Index, class T>
__device__ __forceinline__ void window_max(const T* p, Index step, const PoolWindow& g, int oy, int ox, float& best,
                                           int& at) {
  best = -std::numeric_limits<float>::infinity();
  at = -1;
  for (int ky = 0; ky < g.k; ++ky) {
    const int iy = oy * g.stride - g.pad + ky;
    if (iy < 0 || iy >= g.h) continue;
    for (int kx = 0; kx < g.k; ++kx) {
      const int ix = ox * g.stride - g.pad + kx;
      if (ix < 0 || ix >= g.w) continue;
      const float v = to_f32(p[Index(iy * g.w + ix) * step]);
      if (at < 0 || v > best || v != v) {
        best = v;
        at = iy * g.w + ix;
      }
    }
  }
}

template <class Index, class T>
__global__ void __launch_bounds__(kThreads)
    maxpool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax, Index total,
                           FlatDiv<Index> ohw, const PoolWindow g) {
  for (Index o = Index(blockIdx.x) * kThreads + threadIdx.x; o < total; o += Index(gridDim.x) * kThreads) {
    const Index plane = Index(ohw.div(o));
    const int r = int(o - plane * Index(g.oh * g.ow));
    const int oy = g.ow_div.div(r), ox = r - oy * g.ow;
    float best;
    int at;
    window_max(x + plane * Index(g.h * g.w), Index(1), g, oy, ox, best, at);
    y[o] = from_f32<T>(best);
    argmax[o] = at;
  }
}

template <class Index, class T>
__global__ void __launch_bounds__(kThreads)
    maxpool_backward_gather_kernel(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx,
                                   Index total, FlatDiv<Index> hw, const PoolWindow g) {
  for (Index i = Index(blockIdx.x) * kThreads + threadIdx.x; i < total; i += Index(gridDim.x) * kThreads) {
    const Index plane = Index(hw.div(i));
    const int at = int(i - plane * Index(g.h * g.w));
    const int iy = g.w_div.div(at), ix = at - iy * g.w;
    const WindowRange wr = windows_of(g, iy, ix);
    const Index base = plane * Index(g.oh * g.ow);
    float acc = 0.0f;
    // Not unrolled: the trip counts are ceil(k / stride) (2 for ResNet's k3 s2), and ptxas spills when it
    // unrolls these by 4.
#pragma unroll 1
    for (int oy = wr.oy0; oy <= wr.oy1; ++oy)
#pragma unroll 1
      for (int ox = wr.ox0; ox <= wr.ox1; ++ox) {
        const Index o = base + Index(oy * g.ow + ox);
        if (argmax[o] == at) acc += to_f32(dy[o]);
      }
    dx[i] = from_f32<T>(acc);
  }
}

// NHWC: output o = (pixel, channel), channel innermost.
template <class Index, class T>
__global__ void __launch_bounds__(kThreads)
    maxpool_forward_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax, Index total,
                                int c, FlatDiv<Index> c_div, FlatDiv<Index> ohw, const PoolWindow g) {
  for (Index o = Index(blockIdx.x) * kThreads + threadIdx.x; o < total; o += Index(gridDim.x) * kThreads) {
    const Index pix = Index(c_div.div(o));
    const int ch = int(o - pix * Index(c));
    const Index img = Index(ohw.div(pix));
    const int r = int(pix - img * Index(g.oh * g.ow));
    const int oy = g.ow_div.div(r), ox = r - oy * g.ow;
    float best;
    int at;
    window_max(x + img * Index(g.h * g.w) * Index(c) + ch, Index(c), g, oy, ox, best, at);
    y[o] = from_f32<T>(best);
    argmax[o] = at;
  }
}

template <class Index, class T>
__global__ void __launch_bounds__(kThreads)
    maxpool_backward_nhwc_kernel(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx,
                                 Index total, int c, FlatDiv<Index> c_div, FlatDiv<Index> hw, const PoolWindow g) {
  for (Index i = Index(blockIdx.x) * kThreads + threadIdx.x; i < total; i += Index(gridDim.x) * kThreads) {
    const Index pix = Index(c_div.div(i));
    const int ch = int(i - pix * Index(c));
    const Index img = Index(hw.div(pix));
    const int at = int(pix - img * Index(g.h * g.w));
    const int iy = g.w_div.div(at), ix = at - iy * g.w;
    const WindowRange wr = windows_of(g, iy, ix);
    const Index base = img * Index(g.oh * g.ow);
    float acc = 0.0f;
#pragma unroll 1
    for (int oy = wr.oy0; oy <= wr.oy1; ++oy)
#pragma unroll 1
      for (int ox = wr.ox0; ox <= wr.ox1; ++ox) {
        const Index o = (base + Index(oy * g.ow + ox)) * Index(c) + ch;
        if (argmax[o] == at) acc += to_f32(dy[o]);
      }
    dx[i] = from_f32<T>(acc);
  }
}

// NHWC: y[img][ch] = (sum over the pixels in order) / hw, one thread per (image, channel).
template <class T>
__global__ void __launch_bounds__(kThreads)
    avgpool_forward_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outputs, int c, int hw) {
  for (int64_t o = int64_t(blockIdx.x) * kThreads + threadIdx.x; o < outputs; o += int64_t(gridDim.x) * kThreads) {
    const int64_t img = o / c;
    const T* p = x + img * int64_t(hw) * c + (o - img * c);
    float s = 0.0f;
    for (int j = 0; j < hw; ++j) s += to_f32(p[int64_t(j) * c]);
    y[o] = from_f32<T>(s / float(hw));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    avgpool_backward_nhwc_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t total, int c, int64_t img_size,
                                 int hw) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < total; i += int64_t(gridDim.x) * kThreads) {
    const int64_t img = i / img_size;
    dx[i] = from_f32<T>(to_f32(dy[img * c + i % c]) / float(hw));
  }
}

// One warp per plane: lanes stride over the plane, then a fixed shfl_down tree; y = sum / hw.
template <class T>
__global__ void __launch_bounds__(kThreads)
    avgpool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int hw) {
  const int lane = threadIdx.x & 31;
  const int64_t plane = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (plane >= planes) return;  // whole warps
  const T* p = x + plane * hw;
  float s = 0.0f;
  for (int j = lane; j < hw; j += 32) s += to_f32(p[j]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if (lane == 0) y[plane] = from_f32<T>(s / float(hw));
}

// Block b writes planes [b * per_block, ...): dx = dy[plane] / hw, 32-bit offsets inside the block's run.
template <class T>
__global__ void __launch_bounds__(kThreads)
    avgpool_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t planes, int hw, int per_block) {
  const int64_t p0 = int64_t(blockIdx.x) * per_block;
  const int64_t np = min(int64_t(per_block), planes - p0);
  const uint32_t n = uint32_t(np * hw);
  T* q = dx + p0 * hw;
  for (uint32_t e = threadIdx.x; e < n; e += kThreads) {
    const uint32_t pl = e / uint32_t(hw);
    q[e] = from_f32<T>(to_f32(dy[p0 + pl]) / float(hw));
  }
}

// 32-bit flat indices (and FastDiv) when every index, and every index a grid-stride loop steps to, is below 2^31.
bool fits_i31(int64_t n) { return n < (int64_t(1) << 31) - int64_t(kThreads) * 132 * 16; }

}  // namespace

void maxpool2d_forward(const Tensor& x, int64_t k, int64_t stride, int64_t pad, Tensor& y, Tensor& argmax,
                       const Stream& stream, Layout layout) {
  const bool nhwc = layout == Layout::nhwc;
  const int64_t h = nhwc ? x.size(1) : x.size(2), w = nhwc ? x.size(2) : x.size(3);
  const int64_t oh = nhwc ? y.size(1) : y.size(2), ow = nhwc ? y.size(2) : y.size(3), c = nhwc ? x.size(3) : 1;
  HPDT_CHECK(h * w < (int64_t(1) << 31) && oh * ow < (int64_t(1) << 31) && k < (1 << 15), "maxpool2d_forward: plane ",
             h, "x", w, " or window ", k, " too large for CUDA");
  const int64_t total = y.numel();
  if (total == 0) return;
  const cudaStream_t s = detail::native(stream);
  dispatch_floating(x.dtype(), "maxpool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    const PoolWindow g = pool_window(h, w, oh, ow, k, stride, pad);
    auto launch = [&](auto index) {
      using Index = decltype(index);
      using Div = FlatDiv<Index>;
      if (nhwc)
        maxpool_forward_nhwc_kernel<Index, T><<<detail::grid_for(total, kThreads), kThreads, 0, s>>>(
            static_cast<const T*>(x.data()), static_cast<T*>(y.data()), argmax.data<int32_t>(), Index(total), int(c),
            Div(c), Div(oh * ow), g);
      else
        maxpool_forward_kernel<Index, T><<<detail::grid_for(total, kThreads), kThreads, 0, s>>>(
            static_cast<const T*>(x.data()), static_cast<T*>(y.data()), argmax.data<int32_t>(), Index(total),
            Div(oh * ow), g);
      HPDT_CUDA_CHECK_LAUNCH();
    };
    if (fits_i31(total) && fits_i31(x.numel()))
      launch(uint32_t{});
    else
      launch(int64_t{});
  });
}

void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, int64_t k, int64_t stride, int64_t pad, Tensor& dx,
                        const Stream& stream, Layout layout) {
  const bool nhwc = layout == Layout::nhwc;
  const int64_t h = nhwc ? dx.size(1) : dx.size(2), w = nhwc ? dx.size(2) : dx.size(3);
  const int64_t oh = nhwc ? dy.size(1) : dy.size(2), ow = nhwc ? dy.size(2) : dy.size(3), c = nhwc ? dx.size(3) : 1;
  HPDT_CHECK(h * w < (int64_t(1) << 31) && oh * ow < (int64_t(1) << 31) && k < (1 << 15), "maxpool2d_backward: plane ",
             h, "x", w, " or window ", k, " too large for CUDA");
  const int64_t total = dx.numel();
  if (total == 0) return;
  const cudaStream_t s = detail::native(stream);
  dispatch_floating(dx.dtype(), "maxpool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const PoolWindow g = pool_window(h, w, oh, ow, k, stride, pad);
    auto launch = [&](auto index) {
      using Index = decltype(index);
      using Div = FlatDiv<Index>;
      if (nhwc)
        maxpool_backward_nhwc_kernel<Index, T><<<detail::grid_for(total, kThreads), kThreads, 0, s>>>(
            static_cast<const T*>(dy.data()), argmax.data<int32_t>(), static_cast<T*>(dx.data()), Index(total), int(c),
            Div(c), Div(h * w), g);
      else
        maxpool_backward_gather_kernel<Index, T><<<detail::grid_for(total, kThreads), kThreads, 0, s>>>(
            static_cast<const T*>(dy.data()), argmax.data<int32_t>(), static_cast<T*>(dx.data()), Index(total),
            Div(h * w), g);
      HPDT_CUDA_CHECK_LAUNCH();
    };
    if (fits_i31(total) && fits_i31(dy.numel()))
      launch(uint32_t{});
    else
      launch(int64_t{});
  });
}

void global_avgpool_forward(const Tensor& x, Tensor& y, const Stream& stream, Layout layout) {
  const bool nhwc = layout == Layout::nhwc;
  const int64_t c = nhwc ? x.size(3) : x.size(1), planes = x.size(0) * c;
  const int64_t hw = nhwc ? x.size(1) * x.size(2) : x.size(2) * x.size(3);
  if (planes == 0) return;
  HPDT_CHECK(hw < (int64_t(1) << 31) && c < (int64_t(1) << 31), "global_avgpool_forward: plane of ", hw, " values or ",
             c, " channels too large for CUDA");
  constexpr int kWarps = kThreads / 32;
  dispatch_floating(x.dtype(), "global_avgpool_forward", [&](auto tag) {
    using T = decltype(tag);
    if (nhwc) {
      avgpool_forward_nhwc_kernel<T><<<detail::grid_for(planes, kThreads), kThreads, 0, detail::native(stream)>>>(
          static_cast<const T*>(x.data()), static_cast<T*>(y.data()), planes, int(c), int(hw));
      HPDT_CUDA_CHECK_LAUNCH();
      return;
    }
    avgpool_forward_kernel<T><<<unsigned((planes + kWarps - 1) / kWarps), kThreads, 0, detail::native(stream)>>>(
        static_cast<const T*>(x.data()), static_cast<T*>(y.data()), planes, int(hw));
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx, const Stream& stream, Layout layout) {
  const bool nhwc = layout == Layout::nhwc;
  const int64_t c = nhwc ? dx.size(3) : dx.size(1), planes = dx.size(0) * c;
  const int64_t hw = nhwc ? dx.size(1) * dx.size(2) : dx.size(2) * dx.size(3);
  if (planes == 0 || hw == 0) return;
  HPDT_CHECK(hw < (int64_t(1) << 31) && c < (int64_t(1) << 31), "global_avgpool_backward: plane of ", hw, " values or ",
             c, " channels too large for CUDA");
  if (nhwc) {
    const int64_t total = dx.numel();
    dispatch_floating(dx.dtype(), "global_avgpool_backward", [&](auto tag) {
      using T = decltype(tag);
      avgpool_backward_nhwc_kernel<T><<<detail::grid_for(total, kThreads), kThreads, 0, detail::native(stream)>>>(
          static_cast<const T*>(dy.data()), static_cast<T*>(dx.data()), total, int(c), hw * c, int(hw));
      HPDT_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  // About 8 elements per thread per block, whole planes only.
  const int per_block = int(std::max<int64_t>(1, int64_t(kThreads) * 8 / hw));
  const int64_t blocks = (planes + per_block - 1) / per_block;
  dispatch_floating(dx.dtype(), "global_avgpool_backward", [&](auto tag) {
    using T = decltype(tag);
    avgpool_backward_kernel<T><<<unsigned(blocks), kThreads, 0, detail::native(stream)>>>(
        static_cast<const T*>(dy.data()), static_cast<T*>(dx.data()), planes, int(hw), per_block);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace hpdt::kernels::cuda
