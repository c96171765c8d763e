// CUDA max pool and global average pool (NCHW and NHWC); the CPU oracle is kernels/cpu/pool.cpp.
// Storage f32, f16 or bf16, math in f32, argmax i32 (index into the input's h*w plane, -1 never occurs).
//   maxpool_forward_kernel: one thread per output; the CPU's scan order and tie rule (first maximum wins,
//     a NaN wins and propagates), padding = -inf.
//   maxpool_backward_gather_kernel: each input element sums, in output order, the dy of the windows that contain
//     it and whose argmax is it: deterministic, no atomics, the CPU's addition order; a thread takes 4 inputs of a
//     row (V = 4) where w allows, else one.
//   maxpool_backward_sums_kernel: the same, handing the batch norm before the pool (ResNet's stem) its backward sums
//     and the fused ReLU's mask (kernels::ChannelGradSums): a block a (split of the images, channel); NHWC:
//     maxpool_backward_sums_nhwc_kernel, a block a split of the pixels.
//   avgpool_forward_kernel: one warp per plane (fixed lane tree); avgpool_backward_kernel: a block writes a
//     contiguous run of whole planes.
// NHWC ([n, h, w, c]; argmax the same index into the h*w plane as NCHW's): the same threads with the channel
//   innermost, so that a warp reads and writes consecutive channels of a pixel: maxpool_*_nhwc_kernel (the CPU's
//   scan order, tie rule and output-order sums; a 16-byte vector of channels a thread where c allows, else one);
//   avgpool_forward_nhwc_kernel, one thread per (image, channel) adding the pixels in order (the CPU's order, so f32
//   matches it bit for bit); avgpool_backward_nhwc_kernel.
// Max pool's threads issue all their loads before using the first (for_range). HPDT_POOL_VECTOR=off: one value a
// thread everywhere (the A/B; the same bits).
// Flat indices are 32-bit when the tensor allows it (Index = uint32_t, decoded with FastDiv), else 64-bit; the window
// decode divides by FastDivs (PoolWindow).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "conv_common.cuh"  // conv_epilogue_bn_stats: HPDT_CONV_BN_STATS
#include "fast_div.cuh"
#include "hpdt/core/env.h"
#include "hpdt/kernels/cuda/pool.h"
#include "launch.cuh"
#include "vec.cuh"
#include "warp.cuh"

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

// V int32 values (argmax) at p, 4 * V-byte aligned: 16-byte loads and stores where V is a multiple of 4.
template <int V>
__device__ __forceinline__ void load_i32(const int32_t* p, int (&a)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int q = 0; q < V / 4; ++q) {
      const int4 u = reinterpret_cast<const int4*>(p)[q];
      a[4 * q] = u.x, a[4 * q + 1] = u.y, a[4 * q + 2] = u.z, a[4 * q + 3] = u.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = p[k];
  }
}
template <int V>
__device__ __forceinline__ void store_i32(int32_t* p, const int (&a)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int q = 0; q < V / 4; ++q)
      reinterpret_cast<int4*>(p)[q] = make_int4(a[4 * q], a[4 * q + 1], a[4 * q + 2], a[4 * q + 3]);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) p[k] = a[k];
  }
}

// Calls add(load(y, x)) for every (y, x) of rows [y0, y1] x columns [x0, x1] in row-major order (an empty range: none).
// Where the range fits R x C, every load is issued before the first add (the slots are registers), so a thread has
// them all in flight at once; a loop that adds each value before the next load waits a memory latency per value.
template <int R, int C, class Load, class Add>
__device__ __forceinline__ void for_range(int y0, int y1, int x0, int x1, Load&& load, Add&& add) {
  const int rows = y1 - y0 + 1, cols = x1 - x0 + 1;
  if (rows <= R && cols <= C) {
    decltype(load(0, 0)) slot[R][C]{};
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c)
        if (r < rows && c < cols) slot[r][c] = load(y0 + r, x0 + c);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c)
        if (r < rows && c < cols) add(slot[r][c]);
    return;
  }
#pragma unroll 1
  for (int y = y0; y <= y1; ++y)
#pragma unroll 1
    for (int x = x0; x <= x1; ++x) add(load(y, x));
}

// The maximum of output window (oy, ox) and where it is (its index in the h*w plane) for V channels side by side:
// the CPU's scan order and tie rule (first maximum wins, a NaN wins and propagates, as PyTorch), padding = -inf.
// p is the plane (or, NHWC, the image at its first channel); pixel i of it at p[i * step], its V channels
// contiguous (V > 1: NHWC, read as one vector). The window's inputs inside the plane are a rectangle, scanned in
// row-major order, as the CPU does (padding taps are skipped: -inf never wins); windows of up to 3 x 3 inputs load
// them all first.
template <int V, class Index, class T>
__device__ __forceinline__ void window_max(const T* p, Index step, const PoolWindow& g, int oy, int ox,
                                           float (&best)[V], int (&at)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) best[k] = -std::numeric_limits<float>::infinity(), at[k] = -1;
  struct Tap {
    Pack<T, V> v;
    int at;
  };
  const int y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
  for_range<3, 3>(
      max(y0, 0), min(y0 + g.k, g.h) - 1, max(x0, 0), min(x0 + g.k, g.w) - 1,
      [&](int iy, int ix) {
        return Tap{*reinterpret_cast<const Pack<T, V>*>(p + Index(iy * g.w + ix) * step), iy * g.w + ix};
      },
      [&](const Tap& t) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float v = to_f32(t.v.e[k]);
          if (at[k] < 0 || v > best[k] || v != v) best[k] = v, at[k] = t.at;
        }
      });
}

template <class Index, class T>
__global__ void __launch_bounds__(kThreads)
    maxpool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax, Index total,
                           FlatDiv<Index> ohw, const PoolWindow g) {
  for (Index o = Index(blockIdx.x) * kThreads + threadIdx.x; o < total; o += Index(gridDim.x) * kThreads) {
    const Index plane = Index(ohw.div(o));
    const int r = int(o - plane * Index(g.oh * g.ow));
    const int oy = g.ow_div.div(r), ox = r - oy * g.ow;
    float best[1];
    int at[1];
    window_max<1>(x + plane * Index(g.h * g.w), Index(1), g, oy, ox, best, at);
    y[o] = from_f32<T>(best[0]);
    argmax[o] = at[0];
  }
}

// Thread i takes the V inputs of a row at i * V (w % V == 0). It reads the outputs whose windows touch any of them
// once for all V, in output order; an output whose argmax is none of the V adds nothing, so each input sums its
// windows in output order from 0 whatever V is (the same bits). V = 4 reads ~1.1 windows an input (k3 s2) and
// decodes its place once for four, where one input a thread read ~2.25 and was instruction-bound (0.12 of a device
// copy in bf16 on the H100, 2026-11-26).
// The gradients of the V inputs of plane `plane` at row iy, columns ix .. ix + V - 1 (NCHW): each the sum, in output
// order from 0, of the dy of the windows whose argmax it is. The outputs whose windows touch any of the V are read
// once for all V; one whose argmax is none of them adds nothing, so the sums are the same bits whatever V is.
template <class Index, class T, int V>
__device__ __forceinline__ void input_grads(const T* __restrict__ dy, const int32_t* __restrict__ argmax,
                                            const PoolWindow& g, Index plane, int iy, int ix, float (&acc)[V]) {
  const int at = iy * g.w + ix;
  const WindowRange wr = windows_of(g, iy, ix), last = windows_of(g, iy, ix + V - 1);
  const Index base = plane * Index(g.oh * g.ow);
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.0f;
  struct Window {
    int argmax;
    T dy;
  };
  // k3 s2: up to 2 rows of 2 (V = 1) or 3 (V = 4) windows, all loaded first
  for_range<2, V == 1 ? 2 : 3>(
      wr.oy0, wr.oy1, wr.ox0, last.ox1,
      [&](int oy, int ox) {
        const Index o = base + Index(oy * g.ow + ox);
        return Window{argmax[o], dy[o]};
      },
      [&](const Window& win) {
        const int d = win.argmax - at;  // which of the V inputs holds this window's maximum, if any
        const float v = to_f32(win.dy);
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (d == k) acc[k] += v;
      });
}

template <class Index, class T, int V>
__global__ void __launch_bounds__(kThreads)
    maxpool_backward_gather_kernel(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx,
                                   Index vectors, FlatDiv<Index> plane_vectors, FastDiv row_vectors,
                                   const PoolWindow g) {
  for (Index i = Index(blockIdx.x) * kThreads + threadIdx.x; i < vectors; i += Index(gridDim.x) * kThreads) {
    const Index plane = Index(plane_vectors.div(i));
    const int r = int(i - plane * Index(g.h * g.w / V));
    const int iy = row_vectors.div(r), ix = (r - iy * (g.w / V)) * V;
    float acc[V];
    input_grads<Index, T, V>(dy, argmax, g, plane, iy, ix, acc);
    store<V>(dx + i * Index(V), acc);
  }
}

// The batch norm's side of V input gradients acc at dx + off (both sums kernels): each as stored (rounded to T)
// through the fused ReLU's mask (y > 0; y null: no ReLU), stored as dz, and added in order to its channel's sums,
// sum[k] += dz, sum_x[k] += dz (x - m[k]), with k = 0 for all V (S = 1: NCHW's V values of one channel) or k = e
// (S = V: NHWC's V channels).
template <class T, int V, int S>
__device__ __forceinline__ void store_dz_and_add(T* __restrict__ dx, const T* __restrict__ x, const T* __restrict__ y,
                                                 uint32_t off, float (&acc)[V], const float (&m)[S], float (&sum)[S],
                                                 float (&sum_x)[S]) {
  static_assert(S == 1 || S == V, "one channel for the V values, or one each");
  float xv[V], yv[V];
  load<V>(x + off, xv);
  if (y) load<V>(y + off, yv);
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const int k = S == 1 ? 0 : e;
    const float v = (!y || yv[e] > 0.0f) ? to_f32(from_f32<T>(acc[e])) : 0.0f;
    acc[e] = v;
    sum[k] += v;
    sum_x[k] += v * (xv[e] - m[k]);
  }
  store<V>(dx + off, acc);
}

// The same with the batch norm whose output is the pool's input (ChannelGradSums, NCHW): each gradient as stored
// (rounded to T) through the batch norm's fused ReLU mask (y > 0; y null: no ReLU), stored as dz, and added to
// channel ch's sums, sum dz and sum dz (x - mean). Block (s, ch) takes the planes of channel ch of images
// s * per_split .. (s + 1) * per_split - 1, thread t their vectors t, t + 256, .. in order; a fixed tree over the
// block, into partial[(ch * gridDim.x + s) * 2 + {0, 1}]. The same bits every run. Every index is below 2^31.
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    maxpool_backward_sums_kernel(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx,
                                 const T* __restrict__ x, const T* __restrict__ y, const float* __restrict__ mean,
                                 float* __restrict__ partial, int n, int c, int per_split, FastDiv plane_vectors,
                                 FastDiv row_vectors, const PoolWindow g) {
  using Index = uint32_t;
  const int ch = int(blockIdx.y), s = int(blockIdx.x);
  const int img0 = s * per_split, images = min(n - img0, per_split);
  const int vectors = images * int(plane_vectors.value());
  const float m[1] = {mean[ch]};
  float sum[1] = {0.0f}, sum_x[1] = {0.0f};
  for (int j = int(threadIdx.x); j < vectors; j += kThreads) {
    const int k = plane_vectors.div(j), r = j - k * int(plane_vectors.value());
    const Index plane = Index(img0 + k) * Index(c) + Index(ch);
    const int iy = row_vectors.div(r), ix = (r - iy * (g.w / V)) * V;
    float acc[V];
    input_grads<Index, T, V>(dy, argmax, g, plane, iy, ix, acc);
    store_dz_and_add<T, V, 1>(dx, x, y, plane * Index(g.h * g.w) + Index(iy * g.w + ix), acc, m, sum, sum_x);
  }
  const float total = block_sum<kThreads>(sum[0]);
  __syncthreads();  // block_sum's shared sums are read by warp 0 before the second call writes them
  const float total_x = block_sum<kThreads>(sum_x[0]);
  if (threadIdx.x == 0) {
    float* out = partial + (int64_t(ch) * gridDim.x + s) * 2;
    out[0] = total, out[1] = total_x;
  }
}

// NHWC: output o = (pixel, channel), channel innermost.
// Thread j takes V channels of an output pixel, at j * V (c % V == 0; V = 16 bytes of T where the pointers allow).
template <class Index, class T, int V>
__global__ void __launch_bounds__(kThreads)
    maxpool_forward_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax, Index vectors,
                                int c, FlatDiv<Index> c_vectors, FlatDiv<Index> ohw, const PoolWindow g) {
  for (Index j = Index(blockIdx.x) * kThreads + threadIdx.x; j < vectors; j += Index(gridDim.x) * kThreads) {
    const Index pix = Index(c_vectors.div(j));
    const int ch = int(j - pix * Index(c / V)) * V;
    const Index img = Index(ohw.div(pix));
    const int r = int(pix - img * Index(g.oh * g.ow));
    const int oy = g.ow_div.div(r), ox = r - oy * g.ow;
    float best[V];
    int at[V];
    window_max<V>(x + img * Index(g.h * g.w) * Index(c) + ch, Index(c), g, oy, ox, best, at);
    store<V>(y + j * Index(V), best);
    store_i32<V>(argmax + j * Index(V), at);
  }
}

// The gradients of channels ch .. ch + V - 1 of input pixel `at` (= iy * w + ix) of image img (NHWC): each channel
// the sum, in output order, of the dy of the windows whose argmax it is.
template <class Index, class T, int V>
__device__ __forceinline__ void input_grads_nhwc(const T* __restrict__ dy, const int32_t* __restrict__ argmax,
                                                 const PoolWindow& g, int c, Index img, int at, int iy, int ix, int ch,
                                                 float (&acc)[V]) {
  const WindowRange wr = windows_of(g, iy, ix);
  const Index base = img * Index(g.oh * g.ow);
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.0f;
  struct Window {
    int argmax[V];
    Pack<T, V> dy;
  };
  for_range<2, 2>(  // k3 s2: up to 2 x 2 windows, all loaded first
      wr.oy0, wr.oy1, wr.ox0, wr.ox1,
      [&](int oy, int ox) {
        const Index o = (base + Index(oy * g.ow + ox)) * Index(c) + ch;
        Window win;
        load_i32<V>(argmax + o, win.argmax);
        win.dy = *reinterpret_cast<const Pack<T, V>*>(dy + o);
        return win;
      },
      [&](const Window& win) {
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (win.argmax[k] == at) acc[k] += to_f32(win.dy.e[k]);
      });
}

// Thread i takes V channels of an input pixel, at i * V; each channel sums its windows in output order.
template <class Index, class T, int V>
__global__ void __launch_bounds__(kThreads)
    maxpool_backward_nhwc_kernel(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx,
                                 Index vectors, int c, FlatDiv<Index> c_vectors, FlatDiv<Index> hw,
                                 const PoolWindow g) {
  for (Index i = Index(blockIdx.x) * kThreads + threadIdx.x; i < vectors; i += Index(gridDim.x) * kThreads) {
    const Index pix = Index(c_vectors.div(i));
    const int ch = int(i - pix * Index(c / V)) * V;
    const Index img = Index(hw.div(pix));
    const int at = int(pix - img * Index(g.h * g.w));
    const int iy = g.w_div.div(at), ix = at - iy * g.w;
    float acc[V];
    input_grads_nhwc<Index, T, V>(dy, argmax, g, c, img, at, iy, ix, ch, acc);
    store<V>(dx + i * Index(V), acc);
  }
}

// The same with the batch norm's sums (maxpool_backward_sums_kernel's, NHWC). Block s takes input pixels
// s * per_split .. (s + 1) * per_split - 1 (of all images); thread t the channel vector cv = t % cv_count (V channels
// at cv * V) of its pixels t / cv_count, + rows, .. in order (rows = 256 / cv_count; the threads past rows *
// cv_count idle). Then, for each channel, its rows' sums added in row order through shared memory, into
// partial[(channel * gridDim.x + s) * 2 + {0, 1}]. The same bits every run; every index below 2^31.
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    maxpool_backward_sums_nhwc_kernel(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx,
                                      const T* __restrict__ x, const T* __restrict__ y, const float* __restrict__ mean,
                                      float* __restrict__ partial, int pixels, int c, int per_split, FastDiv hw,
                                      const PoolWindow g) {
  using Index = uint32_t;
  __shared__ float sums[2][kThreads][V];
  const int cv_count = c / V, rows = kThreads / cv_count;
  const int t = int(threadIdx.x), cv = t % cv_count, row = t / cv_count, ch = cv * V;
  const int s = int(blockIdx.x), p0 = s * per_split, p1 = min(pixels, p0 + per_split);
  float sum[V], sum_x[V], m[V];
#pragma unroll
  for (int e = 0; e < V; ++e) sum[e] = 0.0f, sum_x[e] = 0.0f, m[e] = mean[ch + e];
  if (row < rows)
    for (int pix = p0 + row; pix < p1; pix += rows) {
      const int img = hw.div(pix), at = pix - img * g.h * g.w;
      const int iy = g.w_div.div(at), ix = at - iy * g.w;
      float acc[V];
      input_grads_nhwc<Index, T, V>(dy, argmax, g, c, Index(img), at, iy, ix, ch, acc);
      store_dz_and_add<T, V, V>(dx, x, y, Index(pix) * Index(c) + Index(ch), acc, m, sum, sum_x);
    }
#pragma unroll
  for (int e = 0; e < V; ++e) sums[0][t][e] = sum[e], sums[1][t][e] = sum_x[e];
  __syncthreads();
  if (t < cv_count) {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float a = 0.0f, b = 0.0f;
      for (int r = 0; r < rows; ++r) a += sums[0][r * cv_count + t][e], b += sums[1][r * cv_count + t][e];
      float* out = partial + (int64_t(ch + e) * gridDim.x + s) * 2;
      out[0] = a, out[1] = b;
    }
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
// HPDT_POOL_INDEX=64 takes 64-bit ones at any size: the path of tensors past 2^31 values, which no test could hold
// otherwise (MaxPoolWideIndicesGiveTheSameBits); 32, the default, takes them only where needed.
bool index32(int64_t n) {
  return env_switch("HPDT_POOL_INDEX", "32", "64") && n < (int64_t(1) << 31) - int64_t(kThreads) * 132 * 16;
}

// HPDT_POOL_VECTOR=off: one value a thread in every max-pool kernel (the A/B for the vector kernels).
bool pool_vectors_enabled() { return env_switch("HPDT_POOL_VECTOR", "on", "off"); }

// Values a max-pool thread takes: V_wide (as vectors of V_wide * sizeof(T) bytes, argmax of 4 * V_wide) when the
// switch is on, the values it steps over (a row's w for NCHW, the channels for NHWC) are a multiple of it and every
// pointer is 16-byte aligned; else 1.
int pool_vector_width(int v_wide, int64_t run, std::initializer_list<const void*> pointers) {
  if (!pool_vectors_enabled() || v_wide <= 1 || run % v_wide != 0) return 1;
  for (const void* p : pointers)
    if (!aligned16(p)) return 1;
  return v_wide;
}

// Calls f(std::integral_constant<int, V>) for V = v, which is Wide or 1.
template <int Wide, class F>
void with_width(int v, F&& f) {
  if (v == Wide)
    f(std::integral_constant<int, Wide>{});
  else
    f(std::integral_constant<int, 1>{});
}

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
    // NHWC: kVec<T> channels a thread; NCHW: one output a thread (its window's columns are `stride` apart).
    const int v = nhwc ? pool_vector_width(kVec<T>, c, {x.data(), y.data(), argmax.data()}) : 1;
    auto launch = [&](auto index) {
      using Index = decltype(index);
      using Div = FlatDiv<Index>;
      if (nhwc)
        with_width<kVec<T>>(v, [&](auto vt) {
          constexpr int V = decltype(vt)::value;
          maxpool_forward_nhwc_kernel<Index, T, V><<<detail::grid_for(total / V, kThreads), kThreads, 0, s>>>(
              static_cast<const T*>(x.data()), static_cast<T*>(y.data()), argmax.data<int32_t>(), Index(total / V),
              int(c), Div(c / V), Div(oh * ow), g);
        });
      else
        maxpool_forward_kernel<Index, T><<<detail::grid_for(total, kThreads), kThreads, 0, s>>>(
            static_cast<const T*>(x.data()), static_cast<T*>(y.data()), argmax.data<int32_t>(), Index(total),
            Div(oh * ow), g);
      HPDT_CUDA_CHECK_LAUNCH();
    };
    if (index32(total) && index32(x.numel()))
      launch(uint32_t{});
    else
      launch(int64_t{});
  });
}

void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, int64_t k, int64_t stride, int64_t pad, Tensor& dx,
                        const Stream& stream, Layout layout, ChannelGradSums* bn_grad) {
  const bool nhwc = layout == Layout::nhwc;
  const int64_t h = nhwc ? dx.size(1) : dx.size(2), w = nhwc ? dx.size(2) : dx.size(3);
  const int64_t oh = nhwc ? dy.size(1) : dy.size(2), ow = nhwc ? dy.size(2) : dy.size(3), c = nhwc ? dx.size(3) : 1;
  HPDT_CHECK(h * w < (int64_t(1) << 31) && oh * ow < (int64_t(1) << 31) && k < (1 << 15), "maxpool2d_backward: plane ",
             h, "x", w, " or window ", k, " too large for CUDA");
  const int64_t total = dx.numel();
  if (bn_grad) bn_grad->clear_results();  // set below where computed
  if (total == 0) return;
  // The batch norm's sums: where HPDT_CONV_BN_STATS allows it, every index fits 32 bits, and NCHW's channels fit a
  // grid's y dimension, NHWC's channel vectors a block (checked below)
  ChannelGradSums* sums = bn_grad && conv_detail::conv_epilogue_bn_stats() && index32(total) && index32(dy.numel()) &&
                                  (nhwc || dx.size(1) <= 65535)
                              ? bn_grad
                              : nullptr;
  const cudaStream_t s = detail::native(stream);
  dispatch_floating(dx.dtype(), "maxpool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const PoolWindow g = pool_window(h, w, oh, ow, k, stride, pad);
    // NHWC: kVec<T> channels a thread; NCHW: 4 inputs of a row (8 or 16 bytes of dx, and of x and y with the sums;
    // see the kernels).
    const void* x_bn = sums ? sums->x.data() : nullptr;
    const void* y_bn = sums && sums->y.defined() ? sums->y.data() : nullptr;
    const int v = nhwc ? pool_vector_width(kVec<T>, c, {dy.data(), argmax.data(), dx.data(), x_bn, y_bn})
                       : pool_vector_width(4, w, {dx.data(), x_bn, y_bn});
    if (nhwc && c / v > kThreads) sums = nullptr;  // a block holds one pixel's channel vectors at least
    auto launch = [&](auto index) {
      using Index = decltype(index);
      using Div = FlatDiv<Index>;
      if (nhwc)
        with_width<kVec<T>>(v, [&](auto vt) {
          constexpr int V = decltype(vt)::value;
          maxpool_backward_nhwc_kernel<Index, T, V><<<detail::grid_for(total / V, kThreads), kThreads, 0, s>>>(
              static_cast<const T*>(dy.data()), argmax.data<int32_t>(), static_cast<T*>(dx.data()), Index(total / V),
              int(c), Div(c / V), Div(h * w), g);
        });
      else
        with_width<4>(v, [&](auto vt) {
          constexpr int V = decltype(vt)::value;
          maxpool_backward_gather_kernel<Index, T, V><<<detail::grid_for(total / V, kThreads), kThreads, 0, s>>>(
              static_cast<const T*>(dy.data()), argmax.data<int32_t>(), static_cast<T*>(dx.data()), Index(total / V),
              Div(h * w / V), FastDiv(w / V), g);
        });
      HPDT_CUDA_CHECK_LAUNCH();
    };
    if (sums && nhwc) {
      // NHWC with the batch norm's sums: a block a split of the pixels, ~2048 blocks
      const int pixels = int(total / c), per_split = std::max(1, (pixels + 2047) / 2048);
      const int splits = (pixels + per_split - 1) / per_split;
      float* partial = sums->start(c, splits, dx.data(), pixels, stream);
      with_width<kVec<T>>(v, [&](auto vt) {
        constexpr int V = decltype(vt)::value;
        maxpool_backward_sums_nhwc_kernel<T, V><<<unsigned(splits), kThreads, 0, s>>>(
            static_cast<const T*>(dy.data()), argmax.data<int32_t>(), static_cast<T*>(dx.data()),
            static_cast<const T*>(x_bn), static_cast<const T*>(y_bn), sums->mean.data<float>(), partial, pixels, int(c),
            per_split, FastDiv(h * w), g);
      });
      HPDT_CUDA_CHECK_LAUNCH();
    } else if (sums) {
      // NCHW with the batch norm's sums: a block a (split of the images, channel), 32-bit indices
      const int n = int(dx.size(0)), channels = int(dx.size(1));
      // ~2048 blocks: splits of the images a channel (ResNet-50's stem pool: 32 splits of 8 images)
      const int want = std::clamp((2048 + channels - 1) / channels, 1, n);
      const int per_split = (n + want - 1) / want, splits = (n + per_split - 1) / per_split;
      float* partial = sums->start(channels, splits, dx.data(), int64_t(n) * h * w, stream);
      with_width<4>(v, [&](auto vt) {
        constexpr int V = decltype(vt)::value;
        maxpool_backward_sums_kernel<T, V><<<dim3(unsigned(splits), unsigned(channels)), kThreads, 0, s>>>(
            static_cast<const T*>(dy.data()), argmax.data<int32_t>(), static_cast<T*>(dx.data()),
            static_cast<const T*>(x_bn), static_cast<const T*>(y_bn), sums->mean.data<float>(), partial, n, channels,
            per_split, FastDiv(h * w / V), FastDiv(w / V), g);
      });
      HPDT_CUDA_CHECK_LAUNCH();
    } else if (index32(total) && index32(dy.numel())) {
      launch(uint32_t{});
    } else {
      launch(int64_t{});
    }
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
