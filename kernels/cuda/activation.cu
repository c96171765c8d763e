// CUDA activations; the CPU oracle is kernels/cpu/activation.cpp. Storage f32, f16 or bf16, math in f32.
//   Pointwise ops (ReLU, add, GELU, dropout): grid-stride over 16-byte vectors (4 x f32, 8 x 16-bit) when every
//   pointer is 16-byte aligned, then a scalar tail; element by element otherwise. Outputs may alias inputs
//   (each element is read and written by one thread), so no __restrict__ on them.
//   GELU's formulas: hpdt/kernels/math/activation_math.h, the ones the CPU uses.
//   Dropout: the CPU's mask bits, philox_uniform(seed, stream_id, first + i) < p; one Philox block gives the
//   four numbers of four consecutive elements (vector path when `first` is a multiple of 4).
//   Softmax over the last dimension, forward and backward:
//     softmax_*_warp: one warp per row (rows up to kWarpRowMax values), no barriers;
//     softmax_*_block: one block per row for longer rows (fixed-order block reduction).
//   The forward is online (running max and rescaled sum in one pass), so x is read twice, not three times.
#include <cmath>

#include "hpdt/core/philox.h"
#include "hpdt/kernels/cuda/activation.h"
#include "hpdt/kernels/math/activation_math.h"
#include "launch.cuh"
#include "warp.cuh"
#include "vec.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kWarpRowMax = 1024;  // longer softmax rows get a block each

// ---- pointwise ----------------------------------------------------------------------------------------

struct Relu {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct ReluGrad {  // (y, dy)
  __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct GeluErf {
  __device__ float operator()(float x) const { return math::gelu_erf(x); }
};
struct GeluTanh {
  __device__ float operator()(float x) const { return math::gelu_tanh(x); }
};
struct GeluErfGrad {  // (x, dy)
  __device__ float operator()(float x, float dy) const { return dy * math::gelu_erf_grad(x); }
};
struct GeluTanhGrad {
  __device__ float operator()(float x, float dy) const { return dy * math::gelu_tanh_grad(x); }
};

// y = op(a) or op(a, b). V = 1: element by element.
template <class T, int V, int Arity, class Op>
__global__ void __launch_bounds__(kThreads) pointwise_kernel(const T* a, const T* b, T* y, int64_t n, Op op) {
  const int64_t packs = n / V;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t tid = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  for (int64_t i = tid; i < packs; i += stride) {
    float va[V], vb[V];
    load<V>(a + i * V, va);
    if constexpr (Arity == 2) load<V>(b + i * V, vb);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if constexpr (Arity == 2)
        va[k] = op(va[k], vb[k]);
      else
        va[k] = op(va[k]);
    }
    store<V>(y + i * V, va);
  }
  if constexpr (V > 1) {
    const int64_t i = packs * V + tid;  // the last n % V elements
    if (i < n) {
      if constexpr (Arity == 2)
        y[i] = from_f32<T>(op(to_f32(a[i]), to_f32(b[i])));
      else
        y[i] = from_f32<T>(op(to_f32(a[i])));
    }
  }
}

template <int Arity, class Op>
void pointwise(const char* name, const Tensor& a, const Tensor* b, Tensor& y, Op op, const Stream& stream) {
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_floating(y.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.data());
    const T* pb = b ? static_cast<const T*>(b->data()) : nullptr;
    T* py = static_cast<T*>(y.data());
    const bool vec = aligned16(pa) && aligned16(py) && (!pb || aligned16(pb));
    const cudaStream_t s = detail::native(stream);
    if (vec)
      pointwise_kernel<T, kVec<T>, Arity, Op>
          <<<detail::grid_for(n, kThreads, kVec<T>), kThreads, 0, s>>>(pa, pb, py, n, op);
    else
      pointwise_kernel<T, 1, Arity, Op><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(pa, pb, py, n, op);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

// ---- dropout -----------------------------------------------------------------------------------------

template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(const T* x, T* y, int64_t n, float p, float keep_scale, uint64_t seed, uint64_t sid, uint64_t first) {
  static_assert(V == 1 || V % 4 == 0, "whole Philox blocks per vector");
  const int64_t packs = n / V;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t tid = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  for (int64_t i = tid; i < packs; i += stride) {
    float v[V];
    load<V>(x + i * V, v);
    if constexpr (V == 1) {
      v[0] = philox_uniform(seed, sid, first + uint64_t(i)) < p ? 0.0f : v[0] * keep_scale;
    } else {
#pragma unroll
      for (int k = 0; k < V; k += 4) {
        const Philox4x32 r = philox_block(seed, sid, (first + uint64_t(i * V + k)) >> 2);  // a multiple of 4
#pragma unroll
        for (int l = 0; l < 4; ++l) v[k + l] = u32_to_uniform(r.v[l]) < p ? 0.0f : v[k + l] * keep_scale;
      }
    }
    store<V>(y + i * V, v);
  }
  if constexpr (V > 1) {
    const int64_t i = packs * V + tid;
    if (i < n) y[i] = from_f32<T>(philox_uniform(seed, sid, first + uint64_t(i)) < p ? 0.0f : to_f32(x[i]) * keep_scale);
  }
}

void dropout(const char* name, const Tensor& x, float p, uint64_t seed, uint64_t sid, uint64_t first, Tensor& y,
             const Stream& stream) {
  HPDT_CHECK(p >= 0.0f && p < 1.0f, "dropout: probability ", p, " is not in [0, 1)");
  const int64_t n = x.numel();
  if (n == 0) return;
  const cudaStream_t s = detail::native(stream);
  if (p == 0.0f) {  // as the CPU: a copy
    if (x.data() != y.data())
      HPDT_CUDA_CHECK(cudaMemcpyAsync(y.data(), x.data(), x.nbytes(), cudaMemcpyDeviceToDevice, s));
    return;
  }
  const float keep_scale = 1.0f / (1.0f - p);  // the CPU's T(1) / (T(1) - T(p))
  dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    T* py = static_cast<T*>(y.data());
    if (aligned16(px) && aligned16(py) && first % 4 == 0)
      dropout_kernel<T, kVec<T>>
          <<<detail::grid_for(n, kThreads, kVec<T>), kThreads, 0, s>>>(px, py, n, p, keep_scale, seed, sid, first);
    else
      dropout_kernel<T, 1><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(px, py, n, p, keep_scale, seed, sid, first);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

// ---- softmax -----------------------------------------------------------------------------------------

// Online softmax state: running maximum m and sum s of exp(x - m).
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ void online_add(MaxSum& a, float v) {
  if (v > a.m) {
    a.s = a.s * expf(a.m - v) + 1.0f;  // a.m = -inf at first: 0 * 0 + 1
    a.m = v;
  } else if (v != -INFINITY) {  // -inf adds 0 (and would give NaN while a.m is still -inf); NaN propagates
    a.s += expf(v - a.m);
  }
}
// Commutative bit for bit (the products are rounded separately), so butterfly lanes agree exactly.
// s == 0 only for a state that has seen no value above -inf: it adds nothing.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (b.s == 0.0f) return a;
  if (a.s == 0.0f) return b;
  const float m = fmaxf(a.m, b.m);
  return {m, __fmul_rn(a.s, expf(a.m - m)) + __fmul_rn(b.s, expf(b.m - m))};
}
__device__ __forceinline__ MaxSum warp_merge(MaxSum a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    a = merge(a, MaxSum{__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)});
  return a;
}

template <class T, int V>
__global__ void __launch_bounds__(kThreads) softmax_forward_warp(const T* x, T* y, int64_t rows, int d) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps
  const T* p = x + row * d;
  MaxSum st{-INFINITY, 0.0f};
  for (int j = lane * V; j < d; j += 32 * V) {
    float v[V];
    load<V>(p + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) online_add(st, v[k]);
  }
  st = warp_merge(st);
  const float inv = 1.0f / st.s;
  T* q = y + row * d;
  for (int j = lane * V; j < d; j += 32 * V) {
    float v[V];
    load<V>(p + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = expf(v[k] - st.m) * inv;
    store<V>(q + j, v);
  }
}

template <class T, int V>
__global__ void __launch_bounds__(kThreads) softmax_forward_block(const T* x, T* y, int d) {
  __shared__ float sh[2][kWarps];
  const int64_t row = blockIdx.x;
  const T* p = x + row * d;
  MaxSum st{-INFINITY, 0.0f};
  for (int j = threadIdx.x * V; j < d; j += kThreads * V) {
    float v[V];
    load<V>(p + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) online_add(st, v[k]);
  }
  st = warp_merge(st);
  if ((threadIdx.x & 31) == 0) sh[0][threadIdx.x >> 5] = st.m, sh[1][threadIdx.x >> 5] = st.s;
  __syncthreads();
  st = MaxSum{-INFINITY, 0.0f};
  for (int w = 0; w < kWarps; ++w) st = merge(st, MaxSum{sh[0][w], sh[1][w]});  // one order for every thread
  const float inv = 1.0f / st.s;
  T* q = y + row * d;
  for (int j = threadIdx.x * V; j < d; j += kThreads * V) {
    float v[V];
    load<V>(p + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = expf(v[k] - st.m) * inv;
    store<V>(q + j, v);
  }
}

// dx = y * (dy - sum(dy * y)). dx may be dy: every element is re-read by the thread that writes it.
template <class T, int V>
__global__ void __launch_bounds__(kThreads) softmax_backward_warp(const T* y, const T* dy, T* dx, int64_t rows, int d) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= rows) return;
  const T* p = y + row * d;
  const T* g = dy + row * d;
  float s = 0.0f;
  for (int j = lane * V; j < d; j += 32 * V) {
    float pv[V], gv[V];
    load<V>(p + j, pv);
    load<V>(g + j, gv);
#pragma unroll
    for (int k = 0; k < V; ++k) s += gv[k] * pv[k];
  }
  s = warp_allsum(s);
  T* q = dx + row * d;
  for (int j = lane * V; j < d; j += 32 * V) {
    float pv[V], gv[V];
    load<V>(p + j, pv);
    load<V>(g + j, gv);
#pragma unroll
    for (int k = 0; k < V; ++k) gv[k] = pv[k] * (gv[k] - s);
    store<V>(q + j, gv);
  }
}

template <class T, int V>
__global__ void __launch_bounds__(kThreads) softmax_backward_block(const T* y, const T* dy, T* dx, int d) {
  __shared__ float sh[kWarps];
  const int64_t row = blockIdx.x;
  const T* p = y + row * d;
  const T* g = dy + row * d;
  float s = 0.0f;
  for (int j = threadIdx.x * V; j < d; j += kThreads * V) {
    float pv[V], gv[V];
    load<V>(p + j, pv);
    load<V>(g + j, gv);
#pragma unroll
    for (int k = 0; k < V; ++k) s += gv[k] * pv[k];
  }
  s = warp_allsum(s);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = s;
  __syncthreads();
  s = 0.0f;
  for (int w = 0; w < kWarps; ++w) s += sh[w];
  T* q = dx + row * d;
  for (int j = threadIdx.x * V; j < d; j += kThreads * V) {
    float pv[V], gv[V];
    load<V>(p + j, pv);
    load<V>(g + j, gv);
#pragma unroll
    for (int k = 0; k < V; ++k) gv[k] = pv[k] * (gv[k] - s);
    store<V>(q + j, gv);
  }
}

// Rows launch: a warp per row up to kWarpRowMax values, else a block per row; vectors when d and every
// pointer allow.
template <class T, class WarpKernel, class BlockKernel, class... Args>
void launch_rows(int64_t rows, int64_t d, WarpKernel warp_kernel, BlockKernel block_kernel, cudaStream_t s,
                 Args... args) {
  if (d <= kWarpRowMax) {
    warp_kernel<<<unsigned((rows + kWarps - 1) / kWarps), kThreads, 0, s>>>(args..., rows, int(d));
  } else {
    HPDT_CHECK(rows < (int64_t(1) << 31), "softmax: at most 2^31 - 1 long rows on CUDA, got ", rows);
    block_kernel<<<unsigned(rows), kThreads, 0, s>>>(args..., int(d));
  }
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- entry points ------------------------------------------------------------------------------------

void relu_forward(const Tensor& x, Tensor& y, const Stream& stream) {
  pointwise<1>("relu_forward", x, nullptr, y, Relu{}, stream);
}
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& stream) {
  pointwise<2>("relu_backward", y, &dy, dx, ReluGrad{}, stream);
}
void add(const Tensor& a, const Tensor& b, Tensor& y, const Stream& stream) {
  pointwise<2>("add", a, &b, y, Add{}, stream);
}
void gelu_forward(const Tensor& x, GeluForm form, Tensor& y, const Stream& stream) {
  if (form == GeluForm::erf)
    pointwise<1>("gelu_forward", x, nullptr, y, GeluErf{}, stream);
  else
    pointwise<1>("gelu_forward", x, nullptr, y, GeluTanh{}, stream);
}
void gelu_backward(const Tensor& x, const Tensor& dy, GeluForm form, Tensor& dx, const Stream& stream) {
  if (form == GeluForm::erf)
    pointwise<2>("gelu_backward", x, &dy, dx, GeluErfGrad{}, stream);
  else
    pointwise<2>("gelu_backward", x, &dy, dx, GeluTanhGrad{}, stream);
}

void softmax_forward(const Tensor& x, Tensor& y, const Stream& stream) {
  const int64_t d = x.size(-1), rows = d > 0 ? x.numel() / d : 0;
  if (rows == 0) return;
  HPDT_CHECK(d < (int64_t(1) << 31), "softmax_forward: rows of at most 2^31 - 1 values on CUDA, got ", d);
  dispatch_floating(x.dtype(), "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    T* py = static_cast<T*>(y.data());
    const cudaStream_t s = detail::native(stream);
    if (d % kVec<T> == 0 && aligned16(px) && aligned16(py))
      launch_rows<T>(rows, d, softmax_forward_warp<T, kVec<T>>, softmax_forward_block<T, kVec<T>>, s, px, py);
    else
      launch_rows<T>(rows, d, softmax_forward_warp<T, 1>, softmax_forward_block<T, 1>, s, px, py);
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& stream) {
  const int64_t d = y.size(-1), rows = d > 0 ? y.numel() / d : 0;
  if (rows == 0) return;
  HPDT_CHECK(d < (int64_t(1) << 31), "softmax_backward: rows of at most 2^31 - 1 values on CUDA, got ", d);
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* py = static_cast<const T*>(y.data());
    const T* pg = static_cast<const T*>(dy.data());
    T* pd = static_cast<T*>(dx.data());
    const cudaStream_t s = detail::native(stream);
    if (d % kVec<T> == 0 && aligned16(py) && aligned16(pg) && aligned16(pd))
      launch_rows<T>(rows, d, softmax_backward_warp<T, kVec<T>>, softmax_backward_block<T, kVec<T>>, s, py, pg, pd);
    else
      launch_rows<T>(rows, d, softmax_backward_warp<T, 1>, softmax_backward_block<T, 1>, s, py, pg, pd);
  });
}

void dropout_forward(const Tensor& x, float p, uint64_t seed, uint64_t stream_id, Tensor& y, const Stream& stream,
                     uint64_t first) {
  dropout("dropout_forward", x, p, seed, stream_id, first, y, stream);
}
void dropout_backward(const Tensor& dy, float p, uint64_t seed, uint64_t stream_id, Tensor& dx, const Stream& stream,
                      uint64_t first) {
  dropout("dropout_backward", dy, p, seed, stream_id, first, dx, stream);  // the same mask and scale
}

}  // namespace hpdt::kernels::cuda
