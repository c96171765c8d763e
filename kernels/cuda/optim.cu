// CUDA optimizer steps, loss-scale helpers and the fused mixed-precision step; the CPU oracle is
// kernels/cpu/optim.cpp. Both call the per-element functions of hpdt/kernels/math/optim_math.h (explicit
// fma, IEEE division and sqrt), so f32 results are the same bits on both sides.
//
// Memory-bound kernels: each thread takes groups of 4 consecutive elements in a grid-stride loop, with one
// vector load per buffer when every pointer is aligned to 4 elements (checked on the host) and scalar
// loads otherwise. The group structure does not depend on the alignment, so neither do the results
// (the order of the sums of squares included).
//
// Reductions (grad_stats: sum of squares and the inf/NaN flag) are deterministic: a grid that depends on n
// only writes one double partial per block (fixed shuffle tree), and a single block adds the partials in a
// fixed order. No float atomics.
#include <type_traits>

#include "hpdt/kernels/cuda/optim.h"
#include "hpdt/kernels/math/optim_math.h"
#include "launch.cuh"
#include "warp.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kVec = 4;  // elements per group
constexpr int kMaxStatsBlocks = 1024;

struct NoCopy {};  // "no model copy" as a type, so the kernel without one has no store for it

template <class T>
struct alignas(sizeof(T) * kVec) Vec4 {
  T v[kVec];
};

template <class T>
bool aligned4(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * kVec) == 0;
}

// The group of 4 elements at i (a multiple of 4) as f32; elements at n and beyond read as 0.
template <class T>
__device__ __forceinline__ void load4(const T* __restrict__ p, int64_t i, int64_t n, bool vec, float (&out)[kVec]) {
  if (vec && i + kVec <= n) {
    const Vec4<T> w = *reinterpret_cast<const Vec4<T>*>(p + i);
#pragma unroll
    for (int k = 0; k < kVec; ++k) out[k] = to_f32(w.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) out[k] = i + k < n ? to_f32(p[i + k]) : 0.0f;
  }
}

template <class T>
__device__ __forceinline__ void store4(T* __restrict__ p, int64_t i, int64_t n, bool vec, const float (&in)[kVec]) {
  if (vec && i + kVec <= n) {
    Vec4<T> w;
#pragma unroll
    for (int k = 0; k < kVec; ++k) w.v[k] = from_f32<T>(in[k]);
    *reinterpret_cast<Vec4<T>*>(p + i) = w;
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      if (i + k < n) p[i + k] = from_f32<T>(in[k]);
  }
}

__device__ __forceinline__ int64_t first_group() { return (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kVec; }
__device__ __forceinline__ int64_t group_stride() { return int64_t(gridDim.x) * kThreads * kVec; }

// ---- the fused step (also the f32 sgd_step / adamw_step) ---------------------------------------------------

struct StepArgs {
  math::SgdScalars sgd;
  math::AdamWScalars adamw;
  float inv_scale;
  double max_norm;
};

// One pass: unscale + clip the gradient, update the f32 master weights and state, write the model copy.
// Does nothing when stats says inf/NaN (the device-side skip of GradScaler).
template <OptimizerKind K, class G, class M>
__global__ void __launch_bounds__(kThreads)
    fused_step_kernel(int64_t n, float* __restrict__ p, const G* __restrict__ g, float* __restrict__ s1,
                      float* __restrict__ s2, M* __restrict__ model, const GradStats* __restrict__ stats, StepArgs a,
                      bool vec) {
  float clip = 1.0f;
  if (stats != nullptr) {
    if (stats->nonfinite) return;  // uniform over the grid: every thread leaves
    clip = math::clip_coefficient(stats->sum_squares, a.max_norm);
  }
  const bool momentum = K == OptimizerKind::sgd && a.sgd.momentum != 0.0f;
  for (int64_t i = first_group(); i < n; i += group_stride()) {
    float pv[kVec], gv[kVec], m1[kVec] = {}, m2[kVec] = {};
    load4(p, i, n, vec, pv);
    load4(g, i, n, vec, gv);
    if (K == OptimizerKind::adamw || momentum) load4(s1, i, n, vec, m1);
    if (K == OptimizerKind::adamw) load4(s2, i, n, vec, m2);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float gk = math::unscale_clip(gv[k], a.inv_scale, clip);
      if constexpr (K == OptimizerKind::adamw)
        math::adamw_update(pv[k], m1[k], m2[k], gk, a.adamw);
      else
        math::sgd_update(pv[k], m1[k], gk, a.sgd);
    }
    store4(p, i, n, vec, pv);
    if (K == OptimizerKind::adamw || momentum) store4(s1, i, n, vec, m1);
    if (K == OptimizerKind::adamw) store4(s2, i, n, vec, m2);
    if constexpr (!std::is_same_v<M, NoCopy>) store4(model, i, n, vec, pv);
  }
}

template <OptimizerKind K, class G, class M>
void launch_fused(int64_t n, float* p, const G* g, float* s1, float* s2, M* model, const GradStats* stats,
                  const StepArgs& a, cudaStream_t s) {
  bool vec = aligned4<float>(p) && aligned4<G>(g);
  if (K == OptimizerKind::adamw || a.sgd.momentum != 0.0f) vec = vec && aligned4<float>(s1);
  if (K == OptimizerKind::adamw) vec = vec && aligned4<float>(s2);
  if constexpr (!std::is_same_v<M, NoCopy>) vec = vec && aligned4<M>(model);
  fused_step_kernel<K, G, M>
      <<<detail::grid_for(n, kThreads, kVec), kThreads, 0, s>>>(n, p, g, s1, s2, model, stats, a, vec);
  HPDT_CUDA_CHECK_LAUNCH();
}

template <class G, class M>
void launch_fused_kind(OptimizerKind kind, int64_t n, float* p, const G* g, float* s1, float* s2, M* model,
                       const GradStats* stats, const StepArgs& a, cudaStream_t s) {
  if (kind == OptimizerKind::adamw)
    launch_fused<OptimizerKind::adamw>(n, p, g, s1, s2, model, stats, a, s);
  else
    launch_fused<OptimizerKind::sgd>(n, p, g, s1, s2, model, stats, a, s);
}

// ---- sgd_step / adamw_step with f16/bf16 parameters and state (f32 goes through the fused kernel) --------

template <class T>
__global__ void __launch_bounds__(kThreads)
    sgd_narrow_kernel(int64_t n, T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, math::SgdScalars c) {
  const bool momentum = c.momentum != 0.0f;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    float pv = to_f32(p[i]), bv = momentum ? to_f32(buf[i]) : 0.0f;
    math::sgd_update(pv, bv, to_f32(g[i]), c);
    p[i] = from_f32<T>(pv);
    if (momentum) buf[i] = from_f32<T>(bv);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    adamw_narrow_kernel(int64_t n, T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                        math::AdamWScalars c) {
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    float pv = to_f32(p[i]), mv = to_f32(m[i]), vv = to_f32(v[i]);
    math::adamw_update(pv, mv, vv, to_f32(g[i]), c);
    p[i] = from_f32<T>(pv);
    m[i] = from_f32<T>(mv);
    v[i] = from_f32<T>(vv);
  }
}

// ---- scale ---------------------------------------------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kThreads) scale_kernel(int64_t n, T* __restrict__ x, float s, bool vec) {
  for (int64_t i = first_group(); i < n; i += group_stride()) {
    float v[kVec];
    load4(x, i, n, vec, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = math::optim_mul(v[k], s);
    store4(x, i, n, vec, v);
  }
}

// ---- grad_stats: inf/NaN flag and sum of squares in one read --------------------------------------------

template <class G>
__global__ void __launch_bounds__(kThreads)
    grad_stats_partials(const G* __restrict__ g, int64_t n, float inv_scale, bool vec, double* __restrict__ partial_sum,
                        int* __restrict__ partial_flag) {
  double acc = 0.0;
  int bad = 0;
  for (int64_t i = first_group(); i < n; i += group_stride()) {
    float x[kVec];
    load4(g, i, n, vec, x);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      if (i + k < n) {
        const float u = math::optim_mul(x[k], inv_scale);
        acc = math::add_square(acc, u);
        bad |= int(math::optim_nonfinite(u));
      }
    }
  }
  bad = __syncthreads_or(bad);
  acc = block_sum<kThreads>(acc);
  if (threadIdx.x == 0) {
    partial_sum[blockIdx.x] = acc;
    partial_flag[blockIdx.x] = bad;
  }
}

__global__ void __launch_bounds__(kThreads)
    grad_stats_final(const double* __restrict__ partial_sum, const int* __restrict__ partial_flag, int blocks,
                     GradStats* __restrict__ stats, bool accumulate) {
  double acc = 0.0;
  int bad = 0;
  for (int j = threadIdx.x; j < blocks; j += kThreads) {
    acc += partial_sum[j];
    bad |= partial_flag[j];
  }
  bad = __syncthreads_or(bad);
  acc = block_sum<kThreads>(acc);
  if (threadIdx.x == 0) {
    const double before = accumulate ? stats->sum_squares : 0.0;
    const int flag_before = accumulate ? stats->nonfinite : 0;
    stats->sum_squares = before + acc;
    stats->nonfinite = flag_before | (bad != 0 ? 1 : 0);
    stats->reserved = 0;
  }
}

GradStats* stats_ptr(const Tensor& stats) { return static_cast<GradStats*>(stats.data()); }

}  // namespace

void grad_stats(const Tensor& grads, float inv_scale, Tensor& stats, bool accumulate, const Stream& stream) {
  const int64_t n = grads.numel();
  const cudaStream_t s = detail::native(stream);
  const int blocks = int(
      std::clamp<int64_t>((n + int64_t(kThreads) * kVec * 8 - 1) / (int64_t(kThreads) * kVec * 8), 1, kMaxStatsBlocks));
  // Scratch from the caching allocator: `blocks` doubles then `blocks` ints (i32 units).
  Tensor scratch = Tensor::empty({int64_t(blocks) * 3}, DType::i32, grads.device(), AllocOptions{.stream = &stream});
  double* partial_sum = static_cast<double*>(scratch.data());
  int* partial_flag = static_cast<int*>(scratch.data()) + 2 * blocks;
  dispatch_floating(grads.dtype(), "grad_stats", [&](auto tag) {
    using G = decltype(tag);
    const G* g = static_cast<const G*>(grads.data());
    grad_stats_partials<G><<<blocks, kThreads, 0, s>>>(g, n, inv_scale, aligned4<G>(g), partial_sum, partial_flag);
    HPDT_CUDA_CHECK_LAUNCH();
  });
  grad_stats_final<<<1, kThreads, 0, s>>>(partial_sum, partial_flag, blocks, stats_ptr(stats), accumulate);
  HPDT_CUDA_CHECK_LAUNCH();
}

void scale(Tensor& x, float f, const Stream& stream) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_floating(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(x.data());
    scale_kernel<T>
        <<<detail::grid_for(n, kThreads, kVec), kThreads, 0, detail::native(stream)>>>(n, p, f, aligned4<T>(p));
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

void sgd_step(Tensor& p, const Tensor& g, Tensor& buf, const SgdOptions& o, bool first_step, const Stream& stream) {
  const int64_t n = p.numel();
  if (n == 0) return;
  const cudaStream_t s = detail::native(stream);
  StepArgs a{};
  a.sgd = math::sgd_scalars(o, first_step);
  a.inv_scale = 1.0f;
  if (p.dtype() == DType::f32) {
    launch_fused<OptimizerKind::sgd, float, NoCopy>(n, p.data<float>(), g.data<float>(), buf.data<float>(), nullptr,
                                                    nullptr, nullptr, a, s);
    return;
  }
  dispatch_floating(p.dtype(), "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      sgd_narrow_kernel<T><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(
          n, static_cast<T*>(p.data()), static_cast<const T*>(g.data()), static_cast<T*>(buf.data()), a.sgd);
      HPDT_CUDA_CHECK_LAUNCH();
    }
  });
}

void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWOptions& o, int64_t step,
                const Stream& stream) {
  const int64_t n = p.numel();
  if (n == 0) return;
  const cudaStream_t s = detail::native(stream);
  StepArgs a{};
  a.adamw = math::adamw_scalars(o, step);
  a.inv_scale = 1.0f;
  if (p.dtype() == DType::f32) {
    launch_fused<OptimizerKind::adamw, float, NoCopy>(n, p.data<float>(), g.data<float>(), m.data<float>(),
                                                      v.data<float>(), nullptr, nullptr, a, s);
    return;
  }
  dispatch_floating(p.dtype(), "adamw_step", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      adamw_narrow_kernel<T><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(
          n, static_cast<T*>(p.data()), static_cast<const T*>(g.data()), static_cast<T*>(m.data()),
          static_cast<T*>(v.data()), a.adamw);
      HPDT_CUDA_CHECK_LAUNCH();
    }
  });
}

void fused_step(const FusedStepBuffers& b, const FusedStepOptions& o, const Stream& stream) {
  const int64_t n = b.params.numel();
  if (n == 0) return;
  const cudaStream_t s = detail::native(stream);
  StepArgs a{};
  if (o.kind == OptimizerKind::adamw)
    a.adamw = math::adamw_scalars(o.adamw, o.step);
  else
    a.sgd = math::sgd_scalars(o.sgd, o.first_step);
  a.inv_scale = o.inv_scale;
  a.max_norm = o.max_norm;
  float* p = b.params.data<float>();
  float* s1 = b.state1.defined() ? b.state1.data<float>() : nullptr;
  float* s2 = b.state2.defined() ? b.state2.data<float>() : nullptr;
  const GradStats* stats = b.stats.defined() ? stats_ptr(b.stats) : nullptr;
  dispatch_floating(b.grads.dtype(), "fused_step (grads)", [&](auto gtag) {
    using G = decltype(gtag);
    const G* g = static_cast<const G*>(b.grads.data());
    if (!b.model_copy.defined()) return launch_fused_kind<G, NoCopy>(o.kind, n, p, g, s1, s2, nullptr, stats, a, s);
    switch (b.model_copy.dtype()) {
      case DType::f16:
        return launch_fused_kind<G, f16_t>(o.kind, n, p, g, s1, s2, static_cast<f16_t*>(b.model_copy.data()), stats, a,
                                           s);
      case DType::bf16:
        return launch_fused_kind<G, bf16_t>(o.kind, n, p, g, s1, s2, static_cast<bf16_t*>(b.model_copy.data()), stats,
                                            a, s);
      default:
        HPDT_FAIL("fused_step: the model copy is f16 or bf16 on CUDA, got ", b.model_copy.str());
    }
  });
}

}  // namespace hpdt::kernels::cuda
