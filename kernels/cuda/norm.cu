// CUDA batch norm (NCHW, NHWC or [n, c]) and layer norm (last dimension); the CPU oracle is kernels/cpu/norm.cpp.
// Storage f32, f16 or bf16 with f32 math; saved and running statistics f32. Every reduction is
// deterministic: a partition that depends on the shape only (never on the device or on timing), combined in
// a fixed order, with no float atomics.
//
// Batch norm, per channel ch (its n*h*w values are n planes of h*w contiguous elements):
//   1. bn_stats_kernel: grid (splits, c); block (split, ch) runs Welford over a fixed chunk of the channel's
//      values (8 values at a time, merged with Chan's formula), then a fixed warp/block tree -> one partial
//      (count, mean, M2) per block. Skipped where the kernel that wrote x handed over partials of the same layout
//      (BatchNormFusion::stats: conv v2's forward epilogue, kernels::ChannelStats).
//   2. bn_stats_finalize: one block per channel adds its partials as shifted sums (threads over splits, then a
//      fixed tree; double), then the CPU's finalize: mean, invstd, running stats with momentum and the unbiased
//      variance.
//      SyncBN instead writes the CPU's (sum, sumsq, count) buffer, which the host all-reduces, and
//      bn_finalize_from_sums finishes exactly as kernels/cpu/norm.cpp does.
//   3. bn_apply_kernel: y = x * a + b with a = invstd * gamma, b = beta - mean * a (eval: from running stats).
//   Backward: bn_backward_reduce_kernel (per-block sum dy, sum dy * (x - mean)) -> bn_backward_finalize
//   (split order, double; dgamma/dbeta +=; the dx coefficients) -> bn_backward_apply_kernel. The reduce is
//   skipped where the kernel that wrote dy handed over the sums (ChannelGradSums: conv v2's backward-data epilogue,
//   which also applied the fused ReLU's mask; or, for the batch norm of a residual, the apply pass of the batch norm
//   that added it, bn_backward_apply_sums_kernel, which reads the residual beside its own dz: residual_sums).
//   These read vectors of V values, V the widest power of two <= 16 bytes that divides h*w (plane_vector: 8 bf16
//   values on 56x56, 4 on 14x14, 1 on 7x7), and decode a slot into (plane, vector) with a FastDiv.
// NHWC batch norm is the column statistics of the [n*h*w, c] matrix: bn_stats_nhwc_kernel, bn_apply_nhwc_kernel,
//   bn_backward_reduce_nhwc_kernel, bn_backward_apply_nhwc_kernel. A block of TX x TY threads covers TX vectors of
//   a row (coalesced along channels) and a fixed chunk of rows, each thread a fixed stride of rows (Welford in
//   steps of 4 rows); the TY partial results per channel meet in a fixed shared-memory tree, and the per-block
//   partials go through the same finalize kernels (SyncBN seam included) as NCHW's.
// Layer norm: ln_forward_kernel, one warp per row (the row re-read from L1/L2 for the three passes);
//   ln_backward_kernel, a group of threads per row, each thread owning fixed columns of the block's
//   dgamma/dbeta accumulators in shared memory (no races), partials per block summed in a fixed order by
//   ln_param_grad_finalize (32 lanes of blocks per column, then the lanes in order).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "fast_div.cuh"
#include "hpdt/core/env.h"
#include "hpdt/kernels/cuda/norm.h"
#include "launch.cuh"
#include "warp.cuh"
#include "vec.cuh"
#include "welford.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// The grids' size: 132 SMs x 8 256-thread blocks, a constant so that the partial sums' order (and so the bits) is
// a function of the shape alone. It is one wave only for kernels of up to 32 registers (8 blocks an SM): ptxas
// (sm_90, 2026-12-03) gives the bf16 NHWC kernels 78-80 (bn_stats_nhwc_kernel: 3 blocks an SM, ~2.7 waves) and
// 99-128 (bn_backward_reduce_nhwc_kernel, bn_backward_apply_sums_nhwc_kernel: 2 an SM, 4 waves); the V = 1 ones
// 30-48. Whether the partial last wave costs bandwidth is for a GPU to say (the kernels' traces).
constexpr int64_t kTargetBlocks = 132 * 8;

// ---- small helpers (private to this file) ------------------------------------------------------------

// Butterfly sum: every lane ends with the same bits (float addition is commutative).

// Fixed-tree block sum of two values; the result is valid in thread 0. Block size kThreads.
__device__ __forceinline__ void block_sum2(float& a, float& b) {
  __shared__ float sh[2][kWarps];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) sh[0][warp] = a, sh[1][warp] = b;
  __syncthreads();
  if (warp == 0) {
    a = lane < kWarps ? sh[0][lane] : 0.0f;
    b = lane < kWarps ? sh[1][lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_down_sync(0xffffffffu, a, o);
      b += __shfl_down_sync(0xffffffffu, b, o);
    }
  }
}

// ---- batch norm: Welford statistics -------------------------------------------------------------------

// (Welford and its merge: welford.cuh)

__device__ __forceinline__ Welford warp_merge_down(Welford w) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Welford other{__shfl_down_sync(0xffffffffu, w.n, o), __shfl_down_sync(0xffffffffu, w.mean, o),
                        __shfl_down_sync(0xffffffffu, w.m2, o)};
    w = merge(w, other);
  }
  return w;
}

// Element offset of vector slot `s` of channel `ch`: slot s is vector j of plane i, s = i * hwv + j. FastDiv, not
// `/`: on 7x7 and 14x14 planes in bf16 the decode runs once per 2-byte value, and a plain division made the kernels
// instruction-bound (0.3 of a device copy on the H100, against 0.7-0.9 on large planes).
__device__ __forceinline__ int64_t bn_offset(uint32_t s, const FastDiv& hwv, int c, int ch) {
  const uint32_t i = uint32_t(hwv.div(int(s))), j = s - i * uint32_t(hwv.value());
  return (int64_t(i) * c + ch) * hwv.value() + j;  // in vectors
}

// End of the chunk starting at s0 (no 32-bit overflow at the last chunk).
__device__ __forceinline__ uint32_t chunk_end(uint32_t s0, uint32_t chunk, uint32_t slots) {
  return uint32_t(min(uint64_t(slots), uint64_t(s0) + chunk));
}

// Per-channel grid: `splits` blocks per channel, each taking `chunk` consecutive vector slots.
struct ChannelSplit {
  int splits;
  uint32_t chunk;
};
ChannelSplit channel_split(int64_t c, int64_t slots, int64_t min_slots_per_block) {
  const int64_t want = std::max<int64_t>(1, (kTargetBlocks + c - 1) / c);
  const int64_t most = std::max<int64_t>(1, slots / min_slots_per_block);
  const int64_t splits = std::min(want, most);
  const int64_t chunk = std::max<int64_t>(1, (slots + splits - 1) / splits);
  return {int(std::max<int64_t>(1, (slots + chunk - 1) / chunk)), uint32_t(chunk)};
}

template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    bn_stats_kernel(const T* __restrict__ x, int c, FastDiv hwv, uint32_t slots, uint32_t chunk,
                    float* __restrict__ partial) {
  constexpr int U = 8 / V;  // slots per step: 8 values, merged into the running summary at once
  const int ch = blockIdx.y;
  const uint32_t s0 = blockIdx.x * chunk, s1 = chunk_end(s0, chunk, slots);
  Welford st{0.0f, 0.0f, 0.0f};
  for (uint32_t s = s0 + threadIdx.x; s < s1; s += kThreads * U) {
    float v[U][V];
    bool ok[U];
    float sum = 0.0f;
    int cnt = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t su = s + uint32_t(u) * kThreads;
      ok[u] = su < s1;
      if (ok[u]) {
        load<V>(x + bn_offset(su, hwv, c, ch) * V, v[u]);
        cnt += V;
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) v[u][k] = 0.0f;
      }
#pragma unroll
      for (int k = 0; k < V; ++k) sum += v[u][k];
    }
    const float nb = float(cnt);  // >= V: slot s itself is in range
    const float mb = sum / nb;
    float m2b = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = ok[u] ? v[u][k] - mb : 0.0f;
        m2b += d * d;
      }
    st = merge(st, Welford{nb, mb, m2b});
  }
  // Fixed tree: lanes (shfl_down), then the warps' summaries in warp order.
  __shared__ float sh[3][kWarps];
  st = warp_merge_down(st);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) sh[0][warp] = st.n, sh[1][warp] = st.mean, sh[2][warp] = st.m2;
  __syncthreads();
  if (warp == 0) {
    st = lane < kWarps ? Welford{sh[0][lane], sh[1][lane], sh[2][lane]} : Welford{0.0f, 0.0f, 0.0f};
    st = warp_merge_down(st);
    if (lane == 0) {
      float* p = partial + (int64_t(ch) * gridDim.x + blockIdx.x) * 3;
      p[0] = st.n, p[1] = st.mean, p[2] = st.m2;
    }
  }
}

// The CPU's batchnorm_finalize for one channel (double math, f32 results).
__device__ __forceinline__ void bn_finalize_channel(int ch, double count, double m, double var, double eps,
                                                    double momentum, float* mean, float* invstd, float* running_mean,
                                                    float* running_var) {
  mean[ch] = float(m);
  invstd[ch] = float(1.0 / sqrt(var + eps));
  running_mean[ch] = float((1 - momentum) * double(running_mean[ch]) + momentum * m);
  const double unbiased = count > 1 ? var * count / (count - 1) : var;
  running_var[ch] = float((1 - momentum) * double(running_var[ch]) + momentum * unbiased);
}

// The finalize kernels: one block per channel, of finalize_threads(splits) threads. Thread t of T takes the partials
// t, t + T, ... in order, kFinalizeBatch loads in flight before it adds them; the threads' results meet in a fixed tree
// (block_sums): the same bits every run (T depends on the shape only). Where there are many partials (conv v3's and
// GEMM v3's epilogues hand over one per 64 rows: 12,544 a channel at 56x56, batch 256), one warp a channel merging
// them by Chan's rule (two dependent double divisions a partial) took 85 us a launch on the H200 (2026-11-29), 20 us
// with the NHWC statistics' 1,056 splits. Few partials take a warp: no thread idle, and the CUDA emulator, which
// runs every thread, is not slowed 8x by 256-thread blocks over a few dozen partials.
constexpr int kFinalizeThreads = 256;  // the most
constexpr int kFinalizeBatch = 4;      // loads in flight a thread
int finalize_threads(int splits) {
  int t = 32;
  while (t < kFinalizeThreads && t * kFinalizeBatch < splits) t *= 2;
  return t;
}

// The sums of kN doubles over the block (at most kFinalizeThreads, whole warps), in thread 0: each warp's in its lane
// 0 (shfl_down tree), then warp 0 adds the warps' in order (the tree of kFinalizeThreads / 32, zeros for the warps the
// block has not). Every thread calls it, once per kernel.
template <int kN>
__device__ __forceinline__ void block_sums(double (&v)[kN]) {
  constexpr int kWarps = kFinalizeThreads / 32;
  const int warps = int(blockDim.x >> 5);
  __shared__ double sums[kN][kWarps];
#pragma unroll
  for (int i = 0; i < kN; ++i) v[i] = warp_sum_to_lane0(v[i]);
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < kN; ++i) sums[i][warp] = v[i];
  __syncthreads();
  if (warp == 0)
#pragma unroll
    for (int i = 0; i < kN; ++i) v[i] = warp_sum_to_lane0<kWarps>(lane < warps ? sums[i][lane] : 0.0);
}

// Merges the channel's partials (count, mean, M2) as shifted sums about the mean m0 of partial 0: n, sum n (m - m0),
// sum (M2 + n (m - m0)^2), in double, without a division until the end (the channel's mean m0 + S / n, M2 = Q - S^2
// / n). Local statistics: finalizes from them. SyncBN (sync_buf set): writes the CPU's seam buffer instead: sum =
// mean * count, sumsq = M2 + mean^2 * count, and the count at [2c].
__global__ void __launch_bounds__(kFinalizeThreads)
    bn_stats_finalize(const float* __restrict__ partial, int splits, int c, double count, double eps, double momentum,
                      float* sync_buf, float* mean, float* invstd, float* running_mean, float* running_var) {
  const int ch = blockIdx.x;
  const float* part = partial + int64_t(ch) * splits * 3;
  const double m0 = part[1];
  double acc[3] = {0.0, 0.0, 0.0};  // n, S, Q
  const int threads = int(blockDim.x);
  for (int s0 = int(threadIdx.x); s0 < splits; s0 += threads * kFinalizeBatch) {
    float q[kFinalizeBatch][3];
#pragma unroll
    for (int b = 0; b < kFinalizeBatch; ++b) {
      const int s = s0 + threads * b;
      if (s < splits) q[b][0] = part[3 * s], q[b][1] = part[3 * s + 1], q[b][2] = part[3 * s + 2];
    }
#pragma unroll
    for (int b = 0; b < kFinalizeBatch; ++b)
      if (s0 + threads * b < splits) {
        const double n = q[b][0], e = double(q[b][1]) - m0;  // an empty partial: n = 0, M2 = 0
        acc[0] += n;
        acc[1] = fma(n, e, acc[1]);
        acc[2] += fma(n * e, e, double(q[b][2]));
      }
  }
  block_sums(acc);
  if (threadIdx.x != 0) return;
  const double n = acc[0], d = n > 0 ? acc[1] / n : 0.0, m = m0 + d, m2 = fmax(0.0, acc[2] - acc[1] * d);
  if (sync_buf) {
    sync_buf[ch] = float(m * n);
    sync_buf[c + ch] = float(m2 + m * m * n);
    if (ch == 0) sync_buf[2 * c] = float(count);
    return;
  }
  bn_finalize_channel(ch, count, m, fmax(0.0, m2 / count), eps, momentum, mean, invstd, running_mean, running_var);
}

// After the SyncBN all-reduce: exactly the CPU's finalize from (sum, sumsq, count).
__global__ void bn_finalize_from_sums(const float* __restrict__ sync_buf, int c, double eps, double momentum,
                                      float* mean, float* invstd, float* running_mean, float* running_var) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const double count = sync_buf[2 * c];
  const double m = double(sync_buf[ch]) / count;
  const double var = fmax(0.0, double(sync_buf[c + ch]) / count - m * m);
  bn_finalize_channel(ch, count, m, var, eps, momentum, mean, invstd, running_mean, running_var);
}

// The fused epilogue of the output pass (BatchNormFusion): + residual (through its own batch norm's affine map first
// with residual_affine), then ReLU; in f32, one rounding at the store.
struct BnEpilogue {
  const void* residual;  // T*, or null
  int relu;
  const float* residual_affine;  // [2c]: the residual's batch norm's a (scale), then b (shift); or null
};

// The apply kernels take the residual as a template value R (BnResidual): its loads double the registers a thread
// holds in flight, so the R instances load half as many vectors per step (U) and the plain apply keeps its occupancy;
// its batch norm's coefficients (kNormalised) are registers too. The ReLU costs no registers and stays a runtime flag.
enum BnResidual : int { kNoResidual = 0, kResidual = 1, kNormalised = 2 };
// Loads the residual's vector at `off` (with the x loads, so that all of a thread's loads are in flight at once).
template <class T, int V, int R>
__device__ __forceinline__ void bn_epilogue_load(const BnEpilogue& e, int64_t off, float (&r)[V]) {
  if constexpr (R != kNoResidual) load<V>(static_cast<const T*>(e.residual) + off, r);
}
// v = relu(v + r) over one vector, as BatchNormFusion says (NaN gives 0, as relu_forward). A kNormalised residual
// the kernel has added itself: v = r * ra + (x * a + (b + rb)), its batch norm's a and b as ra and rb (b + rb: one
// register a channel less).
template <int V, int R>
__device__ __forceinline__ void bn_epilogue(const BnEpilogue& e, const float (&r)[V], float (&v)[V]) {
  if constexpr (R == kResidual)
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] += r[k];
  if (e.relu)
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = v[k] > 0.0f ? v[k] : 0.0f;
}

// A channel's y = x * a + b: (a, b) from its mean, scale (invstd; with scale_is_var the running variance, invstd =
// 1 / sqrt(var + eps) in f32 as the CPU computes it), gamma and beta. b and the output (bn_output) as explicit fmas:
// the backward recomputes the fused ReLU's mask from x (kReluFromInput) with these very functions, so its bits may
// not hang on where the compiler contracts a multiply-add.
template <class T>
__device__ __forceinline__ float2 bn_coefficients(const float* __restrict__ mean, const float* __restrict__ scale,
                                                  int scale_is_var, float eps, const T* __restrict__ gamma,
                                                  const T* __restrict__ beta, int ch) {
  float is = scale[ch];
  if (scale_is_var) is = 1.0f / sqrtf(is + eps);
  const float a = is * to_f32(gamma[ch]);
  return make_float2(a, __fmaf_rn(-mean[ch], a, to_f32(beta[ch])));
}
// The output pass's x * a + b (before the epilogue).
__device__ __forceinline__ float bn_output(float x, float a, float b) { return __fmaf_rn(x, a, b); }

// y = x * a + b per channel (bn_coefficients), then the fused epilogue. x, y and the residual may be the same tensor.
template <class T, int V, int R>
__global__ void __launch_bounds__(kThreads)
    bn_apply_kernel(const T* x, T* y, const float* __restrict__ mean, const float* __restrict__ scale, int scale_is_var,
                    float eps, const T* __restrict__ gamma, const T* __restrict__ beta, BnEpilogue ep, int c,
                    FastDiv hwv, uint32_t slots, uint32_t chunk) {
  constexpr int U = R != kNoResidual && V >= 4 ? 2 : 4;
  const int ch = blockIdx.y;
  const float2 ab = bn_coefficients(mean, scale, scale_is_var, eps, gamma, beta, ch);
  const float a = ab.x;
  float b = ab.y, ra = 0.0f;
  if constexpr (R == kNormalised) ra = ep.residual_affine[ch], b += ep.residual_affine[c + ch];
  const uint32_t s0 = blockIdx.x * chunk, s1 = chunk_end(s0, chunk, slots);
  for (uint32_t s = s0 + threadIdx.x; s < s1; s += kThreads * U) {
    float v[U][V], r[U][V];
    int64_t off[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {  // all loads first: U vectors (of x and the residual) in flight per thread
      const uint32_t su = s + uint32_t(u) * kThreads;
      off[u] = su < s1 ? bn_offset(su, hwv, c, ch) * V : -1;
      if (off[u] >= 0) {
        load<V>(x + off[u], v[u]);
        bn_epilogue_load<T, V, R>(ep, off[u], r[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (off[u] < 0) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        v[u][k] = bn_output(v[u][k], a, b);
        if constexpr (R == kNormalised) v[u][k] = r[u][k] * ra + v[u][k];
      }
      bn_epilogue<V, R>(ep, r[u], v[u]);
      store<V>(y + off[u], v[u]);
    }
  }
}

// ---- batch norm backward ------------------------------------------------------------------------------

// The fused ReLU's backward (BatchNormReluGrad), the reduce kernels' template mode M:
//   kReluFromOutput: g = y > 0 ? dy : 0, stored to dz, which the dx pass then reads for dy;
//   kReluFromInput (a forward without a residual): g = dy where the forward's output of x was positive, recomputed
//     with the forward's own arithmetic (bn_coefficients, bn_output); stored nowhere: the dx pass masks dy the same way
//     (its template flag X). Two passes fewer: the reduce reads neither y nor writes dz. The value is rounded to T
//     as the forward stored it (bn_relu_passed), so the two masks are one: same data, same gradients.
enum : int { kNoRelu = 0, kReluFromOutput = 1, kReluFromInput = 2 };
struct BnReluGrad {
  const void* y;        // T*: kReluFromOutput
  void* dz;             // T*
  const float* invstd;  // kReluFromInput: the saved invstd, gamma and beta (T*) of bn_coefficients
  const void* gamma;
  const void* beta;
};

// Whether the forward's ReLU passed x in a channel whose output pass ran with (a, b) = ab: whether the output it
// stored, x * a + b rounded to T, is positive. (Not x * a + b > 0: in f16 a positive value up to 2^-25 is stored as
// 0, and the mask from the output, y > 0, cut it; one such value in a channel moved its dbeta by dy there.) The
// rounding as one compare (largest_stored_as_zero: the same answer as the round trip, tests/core/test_float16.cpp).
template <class T>
__device__ __forceinline__ bool bn_relu_passed(float x, float2 ab) {
  return bn_output(x, ab.x, ab.y) > largest_stored_as_zero<T>();
}
template <class T>
__device__ __forceinline__ float2 bn_relu_coefficients(const BnReluGrad& r, const float* __restrict__ mean, int ch) {
  return bn_coefficients(mean, r.invstd, 0, 0.0f, static_cast<const T*>(r.gamma), static_cast<const T*>(r.beta), ch);
}

// As the residual in the apply kernels, the mask from the output is a template mode with half the vectors per step.
template <class T, int V, int M>
__device__ __forceinline__ void bn_relu_load(const BnReluGrad& r, int64_t off, float (&y)[V]) {
  if constexpr (M == kReluFromOutput) load<V>(static_cast<const T*>(r.y) + off, y);
}
// g through the mask: from y (and stored to dz), or from x and the channels' coefficients ab.
template <class T, int V, int M>
__device__ __forceinline__ void bn_relu_mask(const BnReluGrad& r, int64_t off, const float (&y)[V], const float (&x)[V],
                                             const float2 (&ab)[V], float (&g)[V]) {
  if constexpr (M == kReluFromOutput) {
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] = y[k] > 0.0f ? g[k] : 0.0f;
    store<V>(static_cast<T*>(r.dz) + off, g);
  } else if constexpr (M == kReluFromInput) {
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] = bn_relu_passed<T>(x[k], ab[k]) ? g[k] : 0.0f;
  }
}

// Per block: sum dy, sum dy * (x - mean) over the block's chunk of the channel; dy through the fused ReLU's
// mask first (and stored to dz) when there is one.
template <class T, int V, int M>
__global__ void __launch_bounds__(kThreads)
    bn_backward_reduce_kernel(const T* dy, const T* __restrict__ x, const float* __restrict__ mean, BnReluGrad rg,
                              int c, FastDiv hwv, uint32_t slots, uint32_t chunk, float* __restrict__ partial) {
  // values per step: 8, or 4 with the output's mask (8 when V = 8)
  constexpr int U = M == kReluFromOutput ? (V >= 4 ? 1 : 4 / V) : 8 / V;
  const int ch = blockIdx.y;
  const float m = mean[ch];
  float2 ab[V];  // the channel's, once a value (bn_relu_mask takes them a value)
  const float2 ab_ch = M == kReluFromInput ? bn_relu_coefficients<T>(rg, mean, ch) : make_float2(0.0f, 0.0f);
#pragma unroll
  for (int k = 0; k < V; ++k) ab[k] = ab_ch;
  const uint32_t s0 = blockIdx.x * chunk, s1 = chunk_end(s0, chunk, slots);
  float sdy = 0.0f, sdyx = 0.0f;
  for (uint32_t s = s0 + threadIdx.x; s < s1; s += kThreads * U) {
    float g[U][V], p[U][V], yv[U][V];
    int64_t off[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t su = s + uint32_t(u) * kThreads;
      off[u] = su < s1 ? bn_offset(su, hwv, c, ch) * V : -1;
      if (off[u] >= 0) {
        load<V>(dy + off[u], g[u]);
        load<V>(x + off[u], p[u]);
        bn_relu_load<T, V, M>(rg, off[u], yv[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (off[u] < 0) continue;
      bn_relu_mask<T, V, M>(rg, off[u], yv[u], p[u], ab, g[u]);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        sdy += g[u][k];
        sdyx += g[u][k] * (p[u][k] - m);
      }
    }
  }
  block_sum2(sdy, sdyx);
  if (threadIdx.x == 0) {
    float* q = partial + (int64_t(ch) * gridDim.x + blockIdx.x) * 2;
    q[0] = sdy, q[1] = sdyx;
  }
}

// Per channel (double; the finalize kernels' threads over the splits and fixed tree): sum_dy, sum_dy_xhat = sum dy
// (x - mean) * invstd (as the CPU);
// dgamma += sum_dy_xhat, dbeta += sum_dy (local batch); coef = (sum_dy / count, sum_dy_xhat / count) for dx.
// SyncBN (sync_buf set) also writes the seam buffer (sum_dy, sum_dy_xhat, count).
template <class T>
__global__ void __launch_bounds__(kFinalizeThreads)
    bn_backward_finalize(const float* __restrict__ partial, int splits, int c, double count,
                         const float* __restrict__ invstd, T* dgamma, T* dbeta, float* sync_buf,
                         float* __restrict__ coef) {
  const int ch = blockIdx.x;
  const float2* part = reinterpret_cast<const float2*>(partial) + int64_t(ch) * splits;
  double acc[2] = {0.0, 0.0};  // sum dy, sum dy (x - mean)
  const int threads = int(blockDim.x);
  for (int s0 = int(threadIdx.x); s0 < splits; s0 += threads * kFinalizeBatch) {
    float2 q[kFinalizeBatch];
#pragma unroll
    for (int b = 0; b < kFinalizeBatch; ++b)
      if (s0 + threads * b < splits) q[b] = part[s0 + threads * b];
#pragma unroll
    for (int b = 0; b < kFinalizeBatch; ++b)
      if (s0 + threads * b < splits) acc[0] += double(q[b].x), acc[1] += double(q[b].y);
  }
  block_sums(acc);
  if (threadIdx.x != 0) return;
  const double sdy = acc[0], sdyx = acc[1] * double(invstd[ch]);
  dgamma[ch] = from_f32<T>(to_f32(dgamma[ch]) + float(sdyx));
  dbeta[ch] = from_f32<T>(to_f32(dbeta[ch]) + float(sdy));
  if (sync_buf) {
    sync_buf[ch] = float(sdy);
    sync_buf[c + ch] = float(sdyx);
    if (ch == 0) sync_buf[2 * c] = float(count);
  }
  coef[ch] = float(sdy / count);
  coef[c + ch] = float(sdyx / count);
}

// After the SyncBN all-reduce: the dx coefficients from the global sums and count, as the CPU.
__global__ void bn_backward_coef_from_sums(const float* __restrict__ sync_buf, int c, float* __restrict__ coef) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const double count = sync_buf[2 * c];
  coef[ch] = float(double(sync_buf[ch]) / count);
  coef[c + ch] = float(double(sync_buf[c + ch]) / count);
}

// The residual's batch norm's backward sums, from the apply pass of the batch norm that added the residual
// (batchnorm_backward_train's residual_sums): its dy is the residual's gradient, so the pass that reads it anyway
// also reads the residual r and writes the partials [c][gridDim.x][2] of (sum dy, sum dy * (r - mean_r)), as
// bn_backward_reduce_kernel would over (dy, r). S, a template flag: the plain apply kernels are untouched.
struct BnResidualSums {
  const void* r;      // T*, x's shape
  const float* mean;  // the residual's batch norm's saved mean [c]
  float* partial;     // [c][splits][2]
};

// dx = gamma * invstd * (dy - mean(dy) - (x - mean) * invstd * mean(dy * xhat)). dx may be dy (or x). X: dy through
// the fused ReLU's mask from x first (kReluFromInput; beta the forward's).
template <class T, int V, bool S, bool X>
__device__ __forceinline__ void bn_backward_apply_channel(const T* dy, const T* x, const float* __restrict__ mean,
                                                          const float* __restrict__ invstd, const T* __restrict__ gamma,
                                                          const T* __restrict__ beta, const float* __restrict__ coef,
                                                          T* dx, int c, FastDiv hwv, uint32_t slots, uint32_t chunk,
                                                          const BnResidualSums& rs) {
  constexpr int U = V >= 4 ? 2 : 4;
  const int ch = blockIdx.y;
  const float is = invstd[ch], k = to_f32(gamma[ch]) * is, mdy = coef[ch], mdyx = coef[c + ch], m = mean[ch];
  const float2 ab = X ? bn_coefficients(mean, invstd, 0, 0.0f, gamma, beta, ch) : make_float2(0.0f, 0.0f);
  float sdy = 0.0f, sdyr = 0.0f, mr = 0.0f;
  if constexpr (S) mr = rs.mean[ch];
  const uint32_t s0 = blockIdx.x * chunk, s1 = chunk_end(s0, chunk, slots);
  for (uint32_t s = s0 + threadIdx.x; s < s1; s += kThreads * U) {
    float g[U][V], p[U][V], q[U][S ? V : 1];
    int64_t off[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t su = s + uint32_t(u) * kThreads;
      off[u] = su < s1 ? bn_offset(su, hwv, c, ch) * V : -1;
      if (off[u] >= 0) {
        load<V>(dy + off[u], g[u]);
        load<V>(x + off[u], p[u]);
        if constexpr (S) load<V>(static_cast<const T*>(rs.r) + off[u], q[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (off[u] < 0) continue;
      if constexpr (X)
#pragma unroll
        for (int e = 0; e < V; ++e) g[u][e] = bn_relu_passed<T>(p[u][e], ab) ? g[u][e] : 0.0f;
      if constexpr (S) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          sdy += g[u][e];
          sdyr += g[u][e] * (q[u][e] - mr);
        }
      }
#pragma unroll
      for (int e = 0; e < V; ++e) g[u][e] = k * (g[u][e] - mdy - (p[u][e] - m) * is * mdyx);
      store<V>(dx + off[u], g[u]);
    }
  }
  if constexpr (S) {
    block_sum2(sdy, sdyr);
    if (threadIdx.x == 0) {
      float* q = rs.partial + (int64_t(ch) * gridDim.x + blockIdx.x) * 2;
      q[0] = sdy, q[1] = sdyr;
    }
  }
}

template <class T, int V, bool X>
__global__ void __launch_bounds__(kThreads)
    bn_backward_apply_kernel(const T* dy, const T* x, const float* __restrict__ mean, const float* __restrict__ invstd,
                             const T* __restrict__ gamma, const T* __restrict__ beta, const float* __restrict__ coef,
                             T* dx, int c, FastDiv hwv, uint32_t slots, uint32_t chunk) {
  bn_backward_apply_channel<T, V, false, X>(dy, x, mean, invstd, gamma, beta, coef, dx, c, hwv, slots, chunk, {});
}

// bn_backward_apply_kernel that also writes the residual's batch norm's backward sums (BnResidualSums).
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    bn_backward_apply_sums_kernel(const T* dy, const T* x, const float* __restrict__ mean,
                                  const float* __restrict__ invstd, const T* __restrict__ gamma,
                                  const float* __restrict__ coef, T* dx, int c, FastDiv hwv, uint32_t slots,
                                  uint32_t chunk, BnResidualSums rs) {
  bn_backward_apply_channel<T, V, true, false>(dy, x, mean, invstd, gamma, nullptr, coef, dx, c, hwv, slots, chunk, rs);
}

// ---- batch norm, NCHW planes narrower than a vector: the apply passes over the flat tensor ---------------
// A plane (one image's channel) of 7x7 = 49 values, or of 14x14 = 196 in a 2-byte type, is no whole number of
// 16-byte vectors, so the per-channel kernels above read it 2 or 8 bytes at a time (plane_vector): on the H100
// (2026-11-26) those planes' batch norms ran at 0.28-0.47 of a device copy in bf16, against 0.7-0.9 on 56x56. The
// apply passes are elementwise, so on such planes they read the tensor as one flat array of 16-byte vectors: a
// block takes `per_block` whole planes (consecutive (image, channel) pairs) and puts each plane's coefficients in
// shared memory; a thread decodes its vector's first plane with one FastDiv and steps across plane boundaries
// value by value. Each value gets the per-channel kernels' arithmetic: the same bits.
struct FlatPlanes {
  int c;            // channels
  FastDiv hw;       // values per plane
  int64_t numel;    // n * c * hw
  int per_block;    // planes per block
  // The block's table: its planes and the V after them (its last vector may run V - 1 values past them), each
  // entry the channel (p0 + j) % c, past the last plane too (valid coefficients for values never stored).
  __host__ __device__ int entries(int v) const { return per_block + v; }
  // The launch: a block per per_block planes.
  unsigned blocks() const { return unsigned((numel / int64_t(hw.d) + per_block - 1) / per_block); }
};

// The vectors a block of FlatPlanes owns: those that start in its planes, [t0, t1); e0 its first value.
struct FlatRange {
  int64_t e0, t0, t1;
};
template <int V>
__device__ __forceinline__ FlatRange flat_range(const FlatPlanes& f) {
  const int64_t hw = f.hw.value(), e0 = int64_t(blockIdx.x) * f.per_block * hw;
  const int64_t e1 = min(e0 + int64_t(f.per_block) * hw, f.numel);
  return {e0, (e0 + V - 1) / V, (e1 + V - 1) / V};
}

// Steps v[0..V) of a vector starting `rel` values past the block's first through the planes' coefficients `tab`:
// v[e] = op(e, v[e], its plane's coefficients).
template <int V, class C, class Op>
__device__ __forceinline__ void flat_values(const FlatPlanes& f, int rel, const C* tab, float (&v)[V], Op op) {
  const int hw = f.hw.value();
  int q = f.hw.div(rel), pos = rel - q * hw;
  C k = tab[q];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    if (pos == hw) pos = 0, k = tab[++q];
    v[e] = op(e, v[e], k);
    ++pos;
  }
}

// A thread's vectors of its block, U at a time: load(u, off, n) for each of the U first (all their loads in flight
// together), then compute(u, off, n); off is the vector's first value, n its values (V, fewer at the tensor's end).
template <int V, int U, class Load, class Compute>
__device__ __forceinline__ void flat_steps(const FlatPlanes& f, const FlatRange& rg, Load load, Compute compute) {
  for (int64_t t = rg.t0 + threadIdx.x; t < rg.t1; t += kThreads * U) {
    int64_t off[U];
    int n[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t tu = t + int64_t(u) * kThreads;
      off[u] = tu < rg.t1 ? tu * V : -1;
      if (off[u] < 0) continue;
      n[u] = int(min(int64_t(V), f.numel - off[u]));
      load(u, off[u], n[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (off[u] >= 0) compute(u, off[u], n[u]);
  }
}

// The first n (<= V) values of a vector at p, the rest 0; n == V is the plain vector load: for the one vector at the
// end of a tensor whose size is no multiple of V. (Here, not in vec.cuh: the convolutions include that.)
template <int V, class T>
__device__ __forceinline__ void load_upto(const T* p, int n, float (&v)[V]) {
  if (n == V) return load<V>(p, v);
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] = k < n ? to_f32(p[k]) : 0.0f;
}
template <int V, class T>
__device__ __forceinline__ void store_upto(T* p, int n, const float (&v)[V]) {
  if (n == V) return store<V>(p, v);
#pragma unroll
  for (int k = 0; k < V; ++k)
    if (k < n) p[k] = from_f32<T>(v[k]);
}

// bn_apply_kernel on the flat tensor (ab: a block's (a, b) per plane, dynamic shared memory; kNormalised: b + rb,
// then the residual's batch norm's ra per plane).
template <class T, int R>
__global__ void __launch_bounds__(kThreads)
    bn_apply_flat_kernel(const T* x, T* y, const float* __restrict__ mean, const float* __restrict__ scale,
                         int scale_is_var, float eps, const T* __restrict__ gamma, const T* __restrict__ beta,
                         BnEpilogue ep, FlatPlanes f) {
  constexpr int V = kVec<T>, U = R != kNoResidual ? 2 : 4;
  extern __shared__ float2 ab[];
  float* ra = reinterpret_cast<float*>(ab + f.entries(V));
  const int64_t p0 = int64_t(blockIdx.x) * f.per_block;
  for (int j = threadIdx.x; j < f.entries(V); j += kThreads) {
    const int ch = int((p0 + j) % f.c);
    float2 k = bn_coefficients(mean, scale, scale_is_var, eps, gamma, beta, ch);
    if constexpr (R == kNormalised) ra[j] = ep.residual_affine[ch], k.y += ep.residual_affine[f.c + ch];
    ab[j] = k;
  }
  __syncthreads();
  const FlatRange rg = flat_range<V>(f);
  float v[U][V], r[U][V];
  flat_steps<V, U>(
      f, rg,
      [&](int u, int64_t off, int n) {  // as bn_apply_kernel: x and the residual
        load_upto<V>(x + off, n, v[u]);
        if constexpr (R != kNoResidual) load_upto<V>(static_cast<const T*>(ep.residual) + off, n, r[u]);
      },
      [&](int u, int64_t off, int n) {
        flat_values<V>(f, int(off - rg.e0), ab, v[u], [](int, float xv, float2 k) { return bn_output(xv, k.x, k.y); });
        if constexpr (R == kNormalised)
          flat_values<V>(f, int(off - rg.e0), ra, v[u], [&](int e, float yv, float k) { return r[u][e] * k + yv; });
        bn_epilogue<V, R>(ep, r[u], v[u]);
        store_upto<V>(y + off, n, v[u]);
      });
}

// bn_backward_apply_kernel's coefficients of a channel, as it computes them (b: the ReLU mask's, with X).
struct BnDxCoef {
  float k, mdy, mdyx, m, is, b;
};

// bn_backward_apply_kernel on the flat tensor.
template <class T, bool X>
__global__ void __launch_bounds__(kThreads)
    bn_backward_apply_flat_kernel(const T* dy, const T* x, const float* __restrict__ mean,
                                  const float* __restrict__ invstd, const T* __restrict__ gamma,
                                  const T* __restrict__ beta, const float* __restrict__ coef, T* dx, FlatPlanes f) {
  constexpr int V = kVec<T>, U = 2;
  extern __shared__ BnDxCoef dc[];
  const int64_t p0 = int64_t(blockIdx.x) * f.per_block;
  for (int j = threadIdx.x; j < f.entries(V); j += kThreads) {
    const int ch = int((p0 + j) % f.c);
    const float is = invstd[ch];
    // (the mask's a is k: is * gamma and gamma * is are one product)
    const float b = X ? bn_coefficients(mean, invstd, 0, 0.0f, gamma, beta, ch).y : 0.0f;
    dc[j] = {to_f32(gamma[ch]) * is, coef[ch], coef[f.c + ch], mean[ch], is, b};
  }
  __syncthreads();
  const FlatRange rg = flat_range<V>(f);
  float g[U][V], p[U][V];
  flat_steps<V, U>(
      f, rg,
      [&](int u, int64_t off, int n) {
        load_upto<V>(dy + off, n, g[u]);
        load_upto<V>(x + off, n, p[u]);
      },
      [&](int u, int64_t off, int n) {
        const float(&xu)[V] = p[u];
        flat_values<V>(f, int(off - rg.e0), dc, g[u], [&xu](int e, float d, const BnDxCoef& k) {
          if constexpr (X) d = bn_relu_passed<T>(xu[e], make_float2(k.k, k.b)) ? d : 0.0f;
          return k.k * (d - k.mdy - (xu[e] - k.m) * k.is * k.mdyx);
        });
        store_upto<V>(dx + off, n, g[u]);
      });
}

// ---- batch norm, NHWC: column statistics of the [rows, c] matrix (rows = n*h*w) --------------------------
// Block of kThreads = TX x TY threads, TX a power of two <= 32 covering a row's vectors of V channels: thread
// (tx, ty) owns vector column v = blockIdx.y * TX + tx (V channels; coalesced: a warp reads consecutive vectors
// of a row) and rows r0 + ty, r0 + ty + TY, ... of the block's fixed chunk [r0, r1) (blockIdx.x). The TY
// partial results of a channel are combined by a fixed tree over ty in shared memory.

struct NhwcCols {
  int tx_log2;  // TX = 1 << tx_log2
  int cv;       // vectors per row
  __device__ __forceinline__ int tx() const { return int(threadIdx.x) & ((1 << tx_log2) - 1); }
  __device__ __forceinline__ int ty() const { return int(threadIdx.x) >> tx_log2; }
  __device__ __forceinline__ int rows_step() const { return kThreads >> tx_log2; }
  __device__ __forceinline__ int column() const { return int(blockIdx.y << tx_log2) + tx(); }
};

template <class T, int V>
__global__ void __launch_bounds__(kThreads) bn_stats_nhwc_kernel(const T* __restrict__ x, NhwcCols g, uint32_t rows,
                                                                 uint32_t chunk, float* __restrict__ partial) {
  constexpr int U = 4;  // rows per step, their loads in flight together
  __shared__ float sh[3][kThreads * V];
  const int v = g.column(), ty = g.ty(), TY = g.rows_step();
  const uint32_t r0 = blockIdx.x * chunk, r1 = chunk_end(r0, chunk, rows);
  // A thread's rows (a few dozen: the grid fills the GPU) as sums shifted by its first row's values, d = x - pivot:
  // s1 = sum d, s2 = sum d^2, turned into (count, mean, M2) once at the end. No division in the loop: with a Welford
  // merge every 4 rows (two divisions a channel) this kernel read 1.0 TB/s on the H200 (2026-11-29: 5.3 ms of the
  // ResNet-50 step's 53 launches), a third of the apply kernels' rate. Shifting by a value of the data keeps s2 -
  // s1^2 / n from cancelling as the plain sum of squares would.
  float pivot[V], s1[V], s2[V];
#pragma unroll
  for (int k = 0; k < V; ++k) pivot[k] = 0.0f, s1[k] = 0.0f, s2[k] = 0.0f;
  int n = 0;
  if (v < g.cv && r0 + uint32_t(ty) < r1) {
    load<V>(x + (int64_t(r0 + uint32_t(ty)) * g.cv + v) * V, pivot);
    for (uint32_t r = r0 + uint32_t(ty); r < r1; r += uint32_t(TY * U)) {
      float val[U][V];
      bool ok[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint32_t ru = r + uint32_t(u * TY);
        ok[u] = ru < r1;
        if (ok[u]) load<V>(x + (int64_t(ru) * g.cv + v) * V, val[u]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (ok[u]) {
          ++n;
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float d = val[u][k] - pivot[k];
            s1[k] += d;
            s2[k] = __fmaf_rn(d, d, s2[k]);
          }
        }
    }
  }
  Welford st[V];
  const float fn = float(n);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const float shift = n > 0 ? s1[k] / fn : 0.0f;
    st[k] = n > 0 ? Welford{fn, pivot[k] + shift, fmaxf(0.0f, s2[k] - s1[k] * shift)} : Welford{0.0f, 0.0f, 0.0f};
  }
  // Fixed tree over ty: in round s, ty < s merges ty + s into itself (reads >= s, writes < s: no overlap).
  const int me = int(threadIdx.x) * V;
#pragma unroll
  for (int k = 0; k < V; ++k) sh[0][me + k] = st[k].n, sh[1][me + k] = st[k].mean, sh[2][me + k] = st[k].m2;
  for (int s = TY >> 1; s > 0; s >>= 1) {
    __syncthreads();
    if (ty < s) {
      const int other = me + (s << g.tx_log2) * V;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        st[k] = merge(st[k], Welford{sh[0][other + k], sh[1][other + k], sh[2][other + k]});
        sh[0][me + k] = st[k].n, sh[1][me + k] = st[k].mean, sh[2][me + k] = st[k].m2;
      }
    }
  }
  if (ty == 0 && v < g.cv)
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float* p = partial + ((int64_t(v) * V + k) * gridDim.x + blockIdx.x) * 3;
      p[0] = st[k].n, p[1] = st[k].mean, p[2] = st[k].m2;
    }
}

// y = x * a + b per channel (eval: invstd from the running variance, as bn_apply_kernel). x and y may be one tensor.
template <class T, int V, int R>
__global__ void __launch_bounds__(kThreads)
    bn_apply_nhwc_kernel(const T* x, T* y, const float* __restrict__ mean, const float* __restrict__ scale,
                         int scale_is_var, float eps, const T* __restrict__ gamma, const T* __restrict__ beta,
                         BnEpilogue ep, NhwcCols g, uint32_t rows, uint32_t chunk) {
  constexpr int U = R != kNoResidual && V >= 4 ? 2 : 4;
  const int v = g.column(), TY = g.rows_step();
  if (v >= g.cv) return;  // no barriers below
  float a[V], b[V], ra[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int ch = v * V + k;
    const float2 ab = bn_coefficients(mean, scale, scale_is_var, eps, gamma, beta, ch);
    a[k] = ab.x, b[k] = ab.y, ra[k] = 0.0f;
    if constexpr (R == kNormalised) ra[k] = ep.residual_affine[ch], b[k] += ep.residual_affine[g.cv * V + ch];
  }
  const uint32_t r0 = blockIdx.x * chunk, r1 = chunk_end(r0, chunk, rows);
  for (uint32_t r = r0 + uint32_t(g.ty()); r < r1; r += uint32_t(TY * U)) {
    float val[U][V], res[U][V];
    int64_t off[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {  // all loads first: U vectors (of x and the residual) in flight per thread
      const uint32_t ru = r + uint32_t(u * TY);
      off[u] = ru < r1 ? (int64_t(ru) * g.cv + v) * V : -1;
      if (off[u] >= 0) {
        load<V>(x + off[u], val[u]);
        bn_epilogue_load<T, V, R>(ep, off[u], res[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (off[u] < 0) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        val[u][k] = bn_output(val[u][k], a[k], b[k]);
        if constexpr (R == kNormalised) val[u][k] = res[u][k] * ra[k] + val[u][k];
      }
      bn_epilogue<V, R>(ep, res[u], val[u]);
      store<V>(y + off[u], val[u]);
    }
  }
}

// The block's sums (a, b) of each of its columns' V channels: the TY threads of a column combined by a fixed tree
// over ty in shared memory (sh), then thread ty = 0 writes them to partial [c][gridDim.x][2]. Every thread of the
// block calls it (barriers).
template <int V>
__device__ __forceinline__ void nhwc_block_sums2(float (&sh)[2][kThreads * V], const NhwcCols& g, float (&a)[V],
                                                 float (&b)[V], float* __restrict__ partial) {
  const int v = g.column(), ty = g.ty(), TY = g.rows_step();
  const int me = int(threadIdx.x) * V;
#pragma unroll
  for (int k = 0; k < V; ++k) sh[0][me + k] = a[k], sh[1][me + k] = b[k];
  for (int s = TY >> 1; s > 0; s >>= 1) {
    __syncthreads();
    if (ty < s) {
      const int other = me + (s << g.tx_log2) * V;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        a[k] += sh[0][other + k];
        b[k] += sh[1][other + k];
        sh[0][me + k] = a[k], sh[1][me + k] = b[k];
      }
    }
  }
  if (ty == 0 && v < g.cv)
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float* q = partial + ((int64_t(v) * V + k) * gridDim.x + blockIdx.x) * 2;
      q[0] = a[k], q[1] = b[k];
    }
}

// Per block and channel: sum dy, sum dy * (x - mean) (the tree as bn_stats_nhwc_kernel); partial [c][splits][2].
template <class T, int V, int M>
__global__ void __launch_bounds__(kThreads)
    bn_backward_reduce_nhwc_kernel(const T* dy, const T* __restrict__ x, const float* __restrict__ mean, BnReluGrad rg,
                                   NhwcCols g, uint32_t rows, uint32_t chunk, float* __restrict__ partial) {
  constexpr int U = M == kReluFromOutput && V >= 4 ? 2 : 4;
  __shared__ float sh[2][kThreads * V];
  const int v = g.column(), ty = g.ty(), TY = g.rows_step();
  const uint32_t r0 = blockIdx.x * chunk, r1 = chunk_end(r0, chunk, rows);
  float sdy[V], sdyx[V], m[V];
  float2 ab[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    sdy[k] = 0.0f, sdyx[k] = 0.0f, m[k] = v < g.cv ? mean[v * V + k] : 0.0f, ab[k] = make_float2(0.0f, 0.0f);
    if constexpr (M == kReluFromInput)
      if (v < g.cv) ab[k] = bn_relu_coefficients<T>(rg, mean, v * V + k);
  }
  if (v < g.cv)
    for (uint32_t r = r0 + uint32_t(ty); r < r1; r += uint32_t(TY * U)) {
      float gv[U][V], pv[U][V], yv[U][V];
      int64_t off[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint32_t ru = r + uint32_t(u * TY);
        off[u] = ru < r1 ? (int64_t(ru) * g.cv + v) * V : -1;
        if (off[u] >= 0) {
          load<V>(dy + off[u], gv[u]);
          load<V>(x + off[u], pv[u]);
          bn_relu_load<T, V, M>(rg, off[u], yv[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (off[u] < 0) continue;
        bn_relu_mask<T, V, M>(rg, off[u], yv[u], pv[u], ab, gv[u]);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          sdy[k] += gv[u][k];
          sdyx[k] += gv[u][k] * (pv[u][k] - m[k]);
        }
      }
    }
  nhwc_block_sums2<V>(sh, g, sdy, sdyx, partial);
}

// dx = gamma * invstd * (dy - mean(dy) - (x - mean) * invstd * mean(dy * xhat)), as bn_backward_apply_kernel; with
// S, the residual's batch norm's sums as well (BnResidualSums, the tree as bn_backward_reduce_nhwc_kernel's); X, dy
// through the fused ReLU's mask from x first (kReluFromInput; beta the forward's).
template <class T, int V, bool S, bool X>
__device__ __forceinline__ void bn_backward_apply_columns(const T* dy, const T* x, const float* __restrict__ mean,
                                                          const float* __restrict__ invstd, const T* __restrict__ gamma,
                                                          const T* __restrict__ beta, const float* __restrict__ coef,
                                                          T* dx, int c, NhwcCols g, uint32_t rows, uint32_t chunk,
                                                          const BnResidualSums& rs) {
  // With the sums, 8 channels a thread take one row a step: three loads in flight and two blocks an SM (the plain
  // kernel's), where two rows needed 138 registers (one block an SM; 36 bytes of spills capped at two).
  constexpr int U = V == 1 ? 4 : S && V == 8 ? 1 : 2;
  constexpr int SV = S ? V : 1;
  const int v = g.column(), TY = g.rows_step();
  if constexpr (!S)
    if (v >= g.cv) return;  // no barriers below
  float sdy[SV], sdyr[SV], mr[SV];
#pragma unroll
  for (int k = 0; k < SV; ++k) sdy[k] = 0.0f, sdyr[k] = 0.0f, mr[k] = S && v < g.cv ? rs.mean[v * V + k] : 0.0f;
  if (v < g.cv) {
    float is[V], kk[V], mdy[V], mdyx[V], m[V], mb[X ? V : 1];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int ch = v * V + k;
      is[k] = invstd[ch], kk[k] = to_f32(gamma[ch]) * is[k], mdy[k] = coef[ch], mdyx[k] = coef[c + ch], m[k] = mean[ch];
      // (the mask's a is kk: is * gamma and gamma * is are one product)
      if constexpr (X) mb[k] = bn_coefficients(mean, invstd, 0, 0.0f, gamma, beta, ch).y;
    }
    const uint32_t r0 = blockIdx.x * chunk, r1 = chunk_end(r0, chunk, rows);
    for (uint32_t r = r0 + uint32_t(g.ty()); r < r1; r += uint32_t(TY * U)) {
      float gv[U][V], pv[U][V], qv[U][SV];
      int64_t off[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint32_t ru = r + uint32_t(u * TY);
        off[u] = ru < r1 ? (int64_t(ru) * g.cv + v) * V : -1;
        if (off[u] >= 0) {
          load<V>(dy + off[u], gv[u]);
          load<V>(x + off[u], pv[u]);
          if constexpr (S) load<V>(static_cast<const T*>(rs.r) + off[u], qv[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (off[u] < 0) continue;
        if constexpr (X)
#pragma unroll
          for (int e = 0; e < V; ++e)
            gv[u][e] = bn_relu_passed<T>(pv[u][e], make_float2(kk[e], mb[e])) ? gv[u][e] : 0.0f;
        if constexpr (S) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            sdy[e] += gv[u][e];
            sdyr[e] += gv[u][e] * (qv[u][e] - mr[e]);
          }
        }
#pragma unroll
        for (int e = 0; e < V; ++e) gv[u][e] = kk[e] * (gv[u][e] - mdy[e] - (pv[u][e] - m[e]) * is[e] * mdyx[e]);
        store<V>(dx + off[u], gv[u]);
      }
    }
  }
  if constexpr (S) {
    __shared__ float sh[2][kThreads * V];
    nhwc_block_sums2<V>(sh, g, sdy, sdyr, rs.partial);
  }
}

template <class T, int V, bool X>
__global__ void __launch_bounds__(kThreads)
    bn_backward_apply_nhwc_kernel(const T* dy, const T* x, const float* __restrict__ mean,
                                  const float* __restrict__ invstd, const T* __restrict__ gamma,
                                  const T* __restrict__ beta, const float* __restrict__ coef, T* dx, int c, NhwcCols g,
                                  uint32_t rows, uint32_t chunk) {
  bn_backward_apply_columns<T, V, false, X>(dy, x, mean, invstd, gamma, beta, coef, dx, c, g, rows, chunk, {});
}

// bn_backward_apply_nhwc_kernel that also writes the residual's batch norm's backward sums (BnResidualSums).
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    bn_backward_apply_sums_nhwc_kernel(const T* dy, const T* x, const float* __restrict__ mean,
                                       const float* __restrict__ invstd, const T* __restrict__ gamma,
                                       const float* __restrict__ coef, T* dx, int c, NhwcCols g, uint32_t rows,
                                       uint32_t chunk, BnResidualSums rs) {
  bn_backward_apply_columns<T, V, true, false>(dy, x, mean, invstd, gamma, nullptr, coef, dx, c, g, rows, chunk, rs);
}

// ---- host side of batch norm ---------------------------------------------------------------------------

struct BnDims {
  int c;
  FastDiv hwv;     // vectors per plane
  uint32_t slots;  // vectors per channel
  int v;           // vector width (elements)
  int64_t count;   // values per channel, n * h * w
  // The apply passes on the flat tensor (planes narrower than a 16-byte vector, every pointer 16-byte aligned)
  bool flat;
  FlatPlanes planes;
};

// HPDT_BN_FLAT=off keeps the apply passes on the per-channel kernels for every plane (the A/B of the flat ones).
bool bn_flat_enabled() { return env_switch("HPDT_BN_FLAT", "on", "off"); }

// The widest vector (a power of two <= 16 bytes) that divides a plane and that every pointer is aligned to: 8
// bf16 values on 56x56 planes, 4 on 14x14 (196 = 4 * 49), 1 on 7x7.
template <class T>
int plane_vector(int64_t hw, std::initializer_list<const void*> ptrs) {
  int v = kVec<T>;
  auto fits = [&](int w) {
    if (hw % w != 0) return false;
    for (const void* p : ptrs)
      if (reinterpret_cast<uintptr_t>(p) % (uintptr_t(w) * sizeof(T)) != 0) return false;
    return true;
  };
  while (v > 1 && !fits(v)) v /= 2;
  return v;
}

// Calls f(std::integral_constant<int, V>{}) for v in {1, 2, 4, 8} (8 only for 2-byte T).
template <class T, class F>
void with_vector(int v, F&& f) {
  if constexpr (kVec<T> >= 8)
    if (v == 8) return f(std::integral_constant<int, 8>{});
  if (v == 4) return f(std::integral_constant<int, 4>{});
  if (v == 2) return f(std::integral_constant<int, 2>{});
  f(std::integral_constant<int, 1>{});
}

// Calls f(std::bool_constant<b>{}).
template <class F>
void with_flag(bool b, F&& f) {
  if (b) return f(std::true_type{});
  f(std::false_type{});
}

// Calls f(std::integral_constant<int, M>{}) for the reduce kernels' ReLU mode M (kNoRelu, kReluFromOutput,
// kReluFromInput).
template <class F>
void with_relu_mode(int mode, F&& f) {
  if (mode == kReluFromInput) return f(std::integral_constant<int, kReluFromInput>{});
  if (mode == kReluFromOutput) return f(std::integral_constant<int, kReluFromOutput>{});
  f(std::integral_constant<int, kNoRelu>{});
}

// Calls f(std::integral_constant<int, R>{}) for the apply kernels' residual (BnResidual) of `ep`.
template <class F>
void with_residual(const BnEpilogue& ep, F&& f) {
  if (ep.residual_affine) return f(std::integral_constant<int, kNormalised>{});
  if (ep.residual) return f(std::integral_constant<int, kResidual>{});
  f(std::integral_constant<int, kNoResidual>{});
}

template <class T>
BnDims bn_dims(const char* op, const Tensor& x, std::initializer_list<const void*> ptrs) {
  const int64_t n = x.size(0), c = x.size(1), hw = x.ndim() == 4 ? x.size(2) * x.size(3) : 1;
  HPDT_CHECK(c <= 65535, op, ": on CUDA at most 65535 channels, got ", c);
  HPDT_CHECK(n * hw <= (int64_t(1) << 31), op, ": on CUDA at most 2^31 values per channel, got ", n * hw);
  const int v = plane_vector<T>(hw, ptrs);
  BnDims d{int(c), FastDiv(hw / v), uint32_t(n * hw / v), v, n * hw, false, {}};
  if (v < kVec<T> && n * c > 0 && bn_flat_enabled()) {
    bool aligned = true;
    for (const void* p : ptrs) aligned = aligned && aligned16(p);
    // about 8 vectors a thread; a block's offsets (its planes and the V values past them) within 32 bits
    const int64_t per_block = std::clamp<int64_t>(int64_t(kThreads) * kVec<T> * 8 / hw, 1, 1024);
    if (aligned && (per_block + kVec<T>) * hw < (int64_t(1) << 31)) {
      d.flat = true;
      d.planes = {int(c), FastDiv(hw), n * c * hw, int(per_block)};
    }
  }
  return d;
}

void ensure_f32(Tensor& t, int64_t n, const Tensor& like, const Stream& stream) {
  if (!t.defined() || t.numel() != n || t.dtype() != DType::f32 || t.device() != like.device())
    t = Tensor::empty({n}, DType::f32, like.device(), AllocOptions{.stream = &stream});
}

unsigned channel_blocks(int c) { return unsigned((c + 127) / 128); }

// SyncBN's all-reduce of the 2c+1 floats (sum, sumsq or the backward sums, count) in dev_buf, in place. The device
// seam queues it on the stream (no wait). The host seam is a round trip: to the host, one stream synchronisation,
// the callback, back; pageable memory, so the device-to-host copy returns when done and the host-to-device copy
// once the buffer is staged. A CUDA graph cannot capture the round trip (the trainer's --cuda-graph needs the device
// seam).
void sync_sums(const AllReduceSum& sync, float* dev_buf, int c, const Stream& stream) {
  const size_t n = size_t(2 * c + 1);
  if (sync.device) {
    sync.device(dev_buf, n, stream);
    return;
  }
  const cudaStream_t s = detail::native(stream);
  std::vector<float> host(n);
  HPDT_CUDA_CHECK(cudaMemcpyAsync(host.data(), dev_buf, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  HPDT_CUDA_CHECK(cudaStreamSynchronize(s));
  sync.host(host.data(), n);
  HPDT_CUDA_CHECK(cudaMemcpyAsync(dev_buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
}

template <class T>
void bn_apply(const BnDims& d, const T* x, T* y, const float* mean, const float* scale, bool scale_is_var, float eps,
              const T* gamma, const T* beta, const BnEpilogue& ep, cudaStream_t s) {
  if (d.flat) {
    const size_t table =
        size_t(d.planes.entries(kVec<T>)) * (sizeof(float2) + (ep.residual_affine ? sizeof(float) : 0));
    with_residual(ep, [&](auto rt) {
      bn_apply_flat_kernel<T, decltype(rt)::value><<<d.planes.blocks(), kThreads, table, s>>>(
          x, y, mean, scale, scale_is_var, eps, gamma, beta, ep, d.planes);
    });
    HPDT_CUDA_CHECK_LAUNCH();
    return;
  }
  const ChannelSplit sp = channel_split(d.c, d.slots, int64_t(kThreads) * 8);
  const dim3 grid(unsigned(sp.splits), unsigned(d.c));
  with_vector<T>(d.v, [&](auto vt) {
    with_residual(ep, [&](auto rt) {
      bn_apply_kernel<T, decltype(vt)::value, decltype(rt)::value><<<grid, kThreads, 0, s>>>(
          x, y, mean, scale, scale_is_var, eps, gamma, beta, ep, d.c, d.hwv, d.slots, sp.chunk);
    });
  });
  HPDT_CUDA_CHECK_LAUNCH();
}

// The grid of the NHWC kernels: vector width V (when c % V == 0 and every pointer is 16-byte aligned), TX x TY
// threads per block, blocks of fixed row chunks (about kTargetBlocks in all, at least min_rows_per_thread rows per
// thread): a function of the shape only.
struct NhwcDims {
  NhwcCols cols;
  int c, v, splits;
  unsigned col_blocks;
  uint32_t rows, chunk;
};

NhwcDims nhwc_dims(const char* op, const Tensor& x, int vec, std::initializer_list<const void*> ptrs,
                   int64_t min_rows_per_thread) {
  const int64_t c = x.size(-1), rows = c > 0 ? x.numel() / c : 0;
  HPDT_CHECK(rows <= (int64_t(1) << 31), op, ": on CUDA at most 2^31 values per channel, got ", rows);
  bool vectorise = c % vec == 0;
  for (const void* p : ptrs) vectorise = vectorise && aligned16(p);
  NhwcDims d{};
  d.c = int(c), d.v = vectorise ? vec : 1, d.rows = uint32_t(rows);
  d.cols.cv = int(c / d.v);
  d.cols.tx_log2 = 0;
  while ((1 << d.cols.tx_log2) < std::min(d.cols.cv, 32)) ++d.cols.tx_log2;
  const int64_t tx = int64_t(1) << d.cols.tx_log2, ty = kThreads / tx;
  d.col_blocks = unsigned((d.cols.cv + tx - 1) / tx);
  HPDT_CHECK(d.col_blocks <= 65535, op, ": on CUDA at most ", 65535 * 32, " channel vectors per row, got ", d.cols.cv);
  const int64_t want = std::max<int64_t>(1, (kTargetBlocks + d.col_blocks - 1) / d.col_blocks);
  const int64_t most = std::max<int64_t>(1, rows / (ty * min_rows_per_thread));
  const int64_t chunk = std::max<int64_t>(1, (rows + std::min(want, most) - 1) / std::min(want, most));
  d.chunk = uint32_t(chunk);
  d.splits = int(std::max<int64_t>(1, (rows + chunk - 1) / chunk));
  return d;
}

template <class T>
void bn_apply_nhwc(const NhwcDims& d, const T* x, T* y, const float* mean, const float* scale, bool scale_is_var,
                   float eps, const T* gamma, const T* beta, const BnEpilogue& ep, cudaStream_t s) {
  const dim3 grid(unsigned(d.splits), d.col_blocks);
  with_residual(ep, [&](auto rt) {
    constexpr int R = decltype(rt)::value;
    if (d.v == 1)
      bn_apply_nhwc_kernel<T, 1, R>
          <<<grid, kThreads, 0, s>>>(x, y, mean, scale, scale_is_var, eps, gamma, beta, ep, d.cols, d.rows, d.chunk);
    else
      bn_apply_nhwc_kernel<T, kVec<T>, R>
          <<<grid, kThreads, 0, s>>>(x, y, mean, scale, scale_is_var, eps, gamma, beta, ep, d.cols, d.rows, d.chunk);
  });
  HPDT_CUDA_CHECK_LAUNCH();
}

// ---- layer norm --------------------------------------------------------------------------------------

// One warp per row: sum -> mean, sum (x - mean)^2 -> rstd, then y; the row stays in L1/L2 between passes.
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    ln_forward_kernel(const T* x, const T* __restrict__ gamma, const T* __restrict__ beta, float eps, T* y,
                      float* __restrict__ mean, float* __restrict__ rstd, int64_t rows, int d) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps
  const T* p = x + row * d;
  float s = 0.0f;
  for (int j = lane * V; j < d; j += 32 * V) {
    float v[V];
    load<V>(p + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) s += v[k];
  }
  const float m = warp_allsum(s) / float(d);
  float ss = 0.0f;
  for (int j = lane * V; j < d; j += 32 * V) {
    float v[V];
    load<V>(p + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) ss += (v[k] - m) * (v[k] - m);
  }
  const float rs = 1.0f / sqrtf(warp_allsum(ss) / float(d) + eps);
  T* q = y + row * d;
  for (int j = lane * V; j < d; j += 32 * V) {
    float v[V], g[V], b[V];
    load<V>(p + j, v);
    load<V>(gamma + j, g);
    load<V>(beta + j, b);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = (v[k] - m) * rs * g[k] + b[k];
    store<V>(q + j, v);
  }
  if (lane == 0) mean[row] = m, rstd[row] = rs;
}

// Backward. Block = `groups` groups of `tpr` threads (a multiple of 32); group g of block b takes rows
// r0 + g, r0 + g + groups, ... of the block's fixed range [r0, r1). Thread t of a group owns the vectors
// t, t + tpr, ... of a row, and with them the same columns of its group's dgamma/dbeta accumulators: no two
// threads touch one accumulator. kOnePack (a row has at most tpr vectors, as every ViT row does): the one
// vector's accumulators, gamma and the row values stay in registers; otherwise the accumulators live in
// shared memory, laid out [2][V][d / V] so that a warp's lanes hit consecutive words (no bank conflicts).
// At the end the groups' accumulators are summed in group order into the block's partial row;
// ln_param_grad_finalize sums the blocks in a fixed order.
template <class T, int V, bool kOnePack>
__global__ void __launch_bounds__(kThreads)
    ln_backward_kernel(const T* dy, const T* x, const T* __restrict__ gamma, const float* __restrict__ mean,
                       const float* __restrict__ rstd, const T* residual, T* dx, float* __restrict__ partial,
                       int64_t rows, int64_t rows_per_block, int d, int tpr) {
  extern __shared__ float acc[];  // [groups][2][V][packs]
  __shared__ float red[2][kWarps][2];
  const int groups = blockDim.x / tpr, g = threadIdx.x / tpr, t = threadIdx.x - g * tpr;
  const int warps_per_group = tpr >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int packs = d / V;
  float* acc_g = acc + int64_t(g) * 2 * d;  // dgamma partial at [0, d), dbeta at [d, 2d)
  float ag[V], ab[V], gm[V];                // kOnePack: the accumulators and gamma of vector t
#pragma unroll
  for (int k = 0; k < V; ++k) ag[k] = 0.0f, ab[k] = 0.0f, gm[k] = 0.0f;
  if constexpr (kOnePack) {
    if (t < packs) load<V>(gamma + t * V, gm);
  } else {
    for (int pk = t; pk < packs; pk += tpr)
#pragma unroll
      for (int k = 0; k < V; ++k) acc_g[k * packs + pk] = 0.0f, acc_g[d + k * packs + pk] = 0.0f;
  }
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_block, r1 = min(rows, r0 + rows_per_block);
  const int64_t iters = (rows_per_block + groups - 1) / groups;  // the same for every thread: syncs stay uniform
  for (int64_t it = 0; it < iters; ++it) {
    const int64_t row = r0 + it * groups + g;
    const bool valid = row < r1;
    float sg = 0.0f, sgx = 0.0f, m = 0.0f, rs = 0.0f;
    float gv[V], pv[V];  // kOnePack: the row's vector t, kept for dx
    if (valid) {
      m = mean[row], rs = rstd[row];
      const T* gr = dy + row * d;
      const T* pr = x + row * d;
      if constexpr (kOnePack) {
        if (t < packs) {
          load<V>(gr + t * V, gv);
          load<V>(pr + t * V, pv);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float xh = (pv[k] - m) * rs, gj = gv[k] * gm[k];
            sg += gj;
            sgx += gj * xh;
            ag[k] += gv[k] * xh;
            ab[k] += gv[k];
          }
        }
      } else {
        for (int pk = t; pk < packs; pk += tpr) {
          float gw[V], pw[V], gmw[V];
          load<V>(gr + pk * V, gw);
          load<V>(pr + pk * V, pw);
          load<V>(gamma + pk * V, gmw);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float xh = (pw[k] - m) * rs, gj = gw[k] * gmw[k];
            sg += gj;
            sgx += gj * xh;
            acc_g[k * packs + pk] += gw[k] * xh;
            acc_g[d + k * packs + pk] += gw[k];
          }
        }
      }
    }
    sg = warp_allsum(sg);
    sgx = warp_allsum(sgx);
    if (warps_per_group > 1) {      // uniform over the block
      const int buf = int(it & 1);  // double buffer: one barrier per row
      if (lane == 0) red[buf][warp][0] = sg, red[buf][warp][1] = sgx;
      __syncthreads();
      sg = 0.0f, sgx = 0.0f;
      for (int w = 0; w < warps_per_group; ++w) {  // the same order in every thread of the group
        sg += red[buf][g * warps_per_group + w][0];
        sgx += red[buf][g * warps_per_group + w][1];
      }
    }
    if (valid) {
      sg /= float(d);
      sgx /= float(d);
      T* qr = dx + row * d;
      const T* rr = residual ? residual + row * d : nullptr;  // dx += the skip connection's gradient
      if constexpr (kOnePack) {
        if (t < packs) {
#pragma unroll
          for (int k = 0; k < V; ++k) gv[k] = rs * (gv[k] * gm[k] - sg - (pv[k] - m) * rs * sgx);
          if (rr) {
            float rv[V];
            load<V>(rr + t * V, rv);
#pragma unroll
            for (int k = 0; k < V; ++k) gv[k] += rv[k];
          }
          store<V>(qr + t * V, gv);
        }
      } else {
        const T* gr = dy + row * d;
        const T* pr = x + row * d;
        for (int pk = t; pk < packs; pk += tpr) {
          float gw[V], pw[V], gmw[V];
          load<V>(gr + pk * V, gw);
          load<V>(pr + pk * V, pw);
          load<V>(gamma + pk * V, gmw);
#pragma unroll
          for (int k = 0; k < V; ++k) gw[k] = rs * (gw[k] * gmw[k] - sg - (pw[k] - m) * rs * sgx);
          if (rr) {
            float rv[V];
            load<V>(rr + pk * V, rv);
#pragma unroll
            for (int k = 0; k < V; ++k) gw[k] += rv[k];
          }
          store<V>(qr + pk * V, gw);
        }
      }
    }
  }
  if constexpr (kOnePack) {  // the register accumulators to shared memory, same layout
    if (t < packs)
#pragma unroll
      for (int k = 0; k < V; ++k) acc_g[k * packs + t] = ag[k], acc_g[d + k * packs + t] = ab[k];
  }
  __syncthreads();
  float* out = partial + int64_t(blockIdx.x) * 2 * d;
  for (int j = threadIdx.x; j < 2 * d; j += blockDim.x) {  // j = half * d + column
    const int half = j >= d ? 1 : 0, col = j - half * d;
    const int at = half * d + (col % V) * packs + col / V;
    float s = 0.0f;
    for (int gg = 0; gg < groups; ++gg) s += acc[int64_t(gg) * 2 * d + at];
    out[j] = s;
  }
}

// dgamma/dbeta += the column sums of the blocks' partial rows. Block of 32 x 32 threads on 32 columns: thread
// (tx, ty) sums partial rows ty, ty + 32, ... of its column in order, then thread ty == 0 adds the 32 lane sums in
// order (fixed order: deterministic). One thread per column walking all ~1,000 partial rows was latency-bound:
// 768 threads on 6 SMs for ViT-B, each a chain of ~1,000 loads.
constexpr int kFinishCols = 32, kFinishLanes = 32;
template <class T>
__global__ void __launch_bounds__(kFinishCols* kFinishLanes)
    ln_param_grad_finalize(const float* __restrict__ partial, int blocks, int d, T* dgamma, T* dbeta) {
  __shared__ float lane_sums[2][kFinishLanes][kFinishCols];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int j = blockIdx.x * kFinishCols + tx;
  float sg = 0.0f, sb = 0.0f;
  if (j < d)
    for (int b = ty; b < blocks; b += kFinishLanes) {
      sg += partial[int64_t(b) * 2 * d + j];
      sb += partial[int64_t(b) * 2 * d + d + j];
    }
  lane_sums[0][ty][tx] = sg;
  lane_sums[1][ty][tx] = sb;
  __syncthreads();
  if (ty != 0 || j >= d) return;
  sg = 0.0f, sb = 0.0f;
#pragma unroll
  for (int i = 0; i < kFinishLanes; ++i) sg += lane_sums[0][i][tx], sb += lane_sums[1][i][tx];
  dgamma[j] = from_f32<T>(to_f32(dgamma[j]) + sg);
  dbeta[j] = from_f32<T>(to_f32(dbeta[j]) + sb);
}

}  // namespace

// ---- entry points ------------------------------------------------------------------------------------

namespace {
const void* residual_data(const BatchNormFusion& f) { return f.residual.defined() ? f.residual.data() : nullptr; }

// The residual's batch norm's per-channel a and b (bn_coefficients, as the apply kernels compute their own), into
// out [2c].
template <class T>
__global__ void bn_affine_kernel(const float* __restrict__ mean, const float* __restrict__ scale, int scale_is_var,
                                 float eps, const T* __restrict__ gamma, const T* __restrict__ beta, int c,
                                 float* __restrict__ out) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const float2 ab = bn_coefficients(mean, scale, scale_is_var, eps, gamma, beta, ch);
  out[ch] = ab.x;
  out[c + ch] = ab.y;
}

// HPDT_BN_RESIDUAL=separate: the residual's batch norm (BatchNormFusion::residual_bn) as a pass of its own that
// writes its output, which the output pass then adds as a plain residual (apply; the A/B of applying it on the fly).
bool bn_residual_fused() { return env_switch("HPDT_BN_RESIDUAL", "fused", "separate"); }

// The output pass's epilogue for `f`; a residual batch norm (applied on the fly) gets its coefficients computed into
// `scratch` [2c] (f32). scale_is_var: eval (the statistics are the running ones).
template <class T>
BnEpilogue prepare_epilogue(const BatchNormFusion& f, bool scale_is_var, Tensor& scratch, const Stream& stream) {
  BnEpilogue ep{residual_data(f), f.relu, nullptr};
  const ResidualBatchNorm* rb = f.residual_bn;
  if (!rb) return ep;
  const int64_t c = rb->gamma.numel();
  scratch = Tensor::empty({2 * c}, DType::f32, f.residual.device(), AllocOptions{.stream = &stream});
  bn_affine_kernel<T><<<channel_blocks(int(c)), 128, 0, detail::native(stream)>>>(
      rb->mean.data<float>(), rb->scale.data<float>(), scale_is_var, rb->eps, static_cast<const T*>(rb->gamma.data()),
      static_cast<const T*>(rb->beta.data()), int(c), scratch.data<float>());
  HPDT_CUDA_CHECK_LAUNCH();
  ep.residual_affine = scratch.data<float>();
  return ep;
}

// The output pass of both forwards: y = x * a + b per channel from the statistics mean and scale (invstd, or with
// scale_is_var the running variance), then the fused epilogue.
void apply(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
           const Tensor& scale, bool scale_is_var, float eps, Tensor& y, const Stream& stream, Layout layout,
           const BatchNormFusion& fusion) {
  if ((layout == Layout::nhwc ? x.size(-1) : x.size(1)) == 0) return;
  if (fusion.residual_bn && !bn_residual_fused()) {  // the residual's batch norm as a pass of its own, then added
    const ResidualBatchNorm& rb = *fusion.residual_bn;
    Tensor normalised = Tensor::empty(fusion.residual.shape(), fusion.residual.dtype(), fusion.residual.device(),
                                      AllocOptions{.stream = &stream});
    apply(op, fusion.residual, rb.gamma, rb.beta, rb.mean, rb.scale, scale_is_var, rb.eps, normalised, stream, layout,
          {});
    BatchNormFusion plain = fusion;
    plain.residual = normalised, plain.residual_bn = nullptr;
    return apply(op, x, gamma, beta, mean, scale, scale_is_var, eps, y, stream, layout, plain);
  }
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    Tensor scratch;
    const BnEpilogue ep = prepare_epilogue<T>(fusion, scale_is_var, scratch, stream);
    const T* xp = static_cast<const T*>(x.data());
    T* yp = static_cast<T*>(y.data());
    const T* gp = static_cast<const T*>(gamma.data());
    const T* bp = static_cast<const T*>(beta.data());
    const float* mp = mean.data<float>();
    const float* sp = scale.data<float>();
    // NHWC: at least 8 rows a thread in eval, 4 in training (the grids these passes had before the split)
    if (layout == Layout::nhwc)
      bn_apply_nhwc<T>(nhwc_dims(op, x, kVec<T>, {xp, yp, ep.residual}, scale_is_var ? 8 : 4), xp, yp, mp, sp,
                       scale_is_var, eps, gp, bp, ep, detail::native(stream));
    else
      bn_apply<T>(bn_dims<T>(op, x, {xp, yp, ep.residual}), xp, yp, mp, sp, scale_is_var, eps, gp, bp, ep,
                  detail::native(stream));
  });
}

// The statistics of both training forwards (batchnorm_statistics, batchnorm_forward_train), op naming the caller.
void statistics(const char* op, const Tensor& x, Tensor& running_mean, Tensor& running_var, float eps, float momentum,
                BatchNormSaved& saved, const AllReduceSum& sync, const Stream& stream, Layout layout,
                const ChannelStats* stats) {
  const cudaStream_t s = detail::native(stream);
  const bool nhwc = layout == Layout::nhwc;
  const int64_t c = nhwc ? x.size(-1) : x.size(1);
  ensure_f32(saved.mean, c, x, stream);
  ensure_f32(saved.invstd, c, x, stream);
  if (c == 0) return;
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const AllocOptions opts{.stream = &stream};
    const T* xp = static_cast<const T*>(x.data());
    // 1. per-block Welford partials [c][splits][3], or the ones the kernel that wrote x computed (stats)
    const ChannelStats* given = stats && stats->describe(x, c) ? stats : nullptr;
    Tensor partial;
    int splits = 0;
    int64_t count = 0;
    BnDims d{};
    NhwcDims nd{};
    if (nhwc) {
      nd = nhwc_dims(op, x, kVec<T>, {x.data()}, 4);
      splits = nd.splits, count = nd.rows;
    } else {
      d = bn_dims<T>(op, x, {x.data()});
      count = d.count;
    }
    if (given) {
      partial = given->partial, splits = int(given->splits);
    } else if (nhwc) {
      partial = Tensor::empty({c * splits * 3}, DType::f32, x.device(), opts);
      const dim3 grid(unsigned(splits), nd.col_blocks);
      if (nd.v == 1)
        bn_stats_nhwc_kernel<T, 1><<<grid, kThreads, 0, s>>>(xp, nd.cols, nd.rows, nd.chunk, partial.data<float>());
      else
        bn_stats_nhwc_kernel<T, kVec<T>>
            <<<grid, kThreads, 0, s>>>(xp, nd.cols, nd.rows, nd.chunk, partial.data<float>());
      HPDT_CUDA_CHECK_LAUNCH();
    } else {
      const ChannelSplit sp = channel_split(d.c, d.slots, int64_t(kThreads) * 4);
      splits = sp.splits;
      partial = Tensor::empty({c * splits * 3}, DType::f32, x.device(), opts);
      const dim3 grid(unsigned(splits), unsigned(d.c));
      with_vector<T>(d.v, [&](auto vt) {
        constexpr int V = decltype(vt)::value;
        bn_stats_kernel<T, V><<<grid, kThreads, 0, s>>>(xp, d.c, d.hwv, d.slots, sp.chunk, partial.data<float>());
      });
      HPDT_CUDA_CHECK_LAUNCH();
    }
    // 2. statistics (through the SyncBN seam when set)
    float* mean = saved.mean.data<float>();
    float* invstd = saved.invstd.data<float>();
    float* rm = running_mean.data<float>();
    float* rv = running_var.data<float>();
    Tensor buf;
    if (sync) buf = Tensor::empty({2 * c + 1}, DType::f32, x.device(), opts);
    bn_stats_finalize<<<unsigned(c), finalize_threads(splits), 0, s>>>(
        partial.data<float>(), splits, int(c), double(count), eps, momentum, sync ? buf.data<float>() : nullptr, mean,
        invstd, rm, rv);
    HPDT_CUDA_CHECK_LAUNCH();
    if (sync) {
      sync_sums(sync, buf.data<float>(), int(c), stream);
      bn_finalize_from_sums<<<channel_blocks(int(c)), 128, 0, s>>>(buf.data<float>(), int(c), eps, momentum, mean,
                                                                   invstd, rm, rv);
      HPDT_CUDA_CHECK_LAUNCH();
    }
  });
}
}  // namespace

void batchnorm_statistics(const Tensor& x, Tensor& running_mean, Tensor& running_var, float eps, float momentum,
                          BatchNormSaved& saved, const AllReduceSum& sync, const Stream& stream, Layout layout,
                          const ChannelStats* stats) {
  statistics("batchnorm_statistics", x, running_mean, running_var, eps, momentum, saved, sync, stream, layout, stats);
}

void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                             Tensor& running_var, float eps, float momentum, BatchNormSaved& saved, Tensor& y,
                             const AllReduceSum& sync, const Stream& stream, Layout layout,
                             const BatchNormFusion& fusion) {
  const char* op = "batchnorm_forward_train";
  statistics(op, x, running_mean, running_var, eps, momentum, saved, sync, stream, layout, fusion.stats);
  apply(op, x, gamma, beta, saved.mean, saved.invstd, false, eps, y, stream, layout, fusion);
}

void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, float eps, Tensor& y, const Stream& stream, Layout layout,
                            const BatchNormFusion& fusion) {
  apply("batchnorm_forward_eval", x, gamma, beta, running_mean, running_var, true, eps, y, stream, layout, fusion);
}

void batchnorm_backward_train(const Tensor& dy, const Tensor& x, const Tensor& gamma, const BatchNormSaved& saved,
                              Tensor& dx, Tensor& dgamma, Tensor& dbeta, const AllReduceSum& sync, const Stream& stream,
                              Layout layout, const BatchNormReluGrad* relu, const ChannelGradSums* sums,
                              ChannelGradSums* residual_sums) {
  const char* op = "batchnorm_backward_train";
  const cudaStream_t s = detail::native(stream);
  // The residual's batch norm's sums from the apply pass (not on the flat kernels, nor with HPDT_BN_RESIDUAL=separate)
  if (residual_sums) residual_sums->clear_results();
  const bool want_residual_sums = residual_sums && bn_residual_fused();
  const void* rp = want_residual_sums ? residual_sums->x.data() : nullptr;
  const bool nhwc = layout == Layout::nhwc;
  const int64_t c = nhwc ? x.size(-1) : x.size(1);
  if (c == 0) return;
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const AllocOptions opts{.stream = &stream};
    const T* dyp = static_cast<const T*>(dy.data());
    const T* xp = static_cast<const T*>(x.data());
    const float* mean = saved.mean.data<float>();
    const float* invstd = saved.invstd.data<float>();
    // With a fused ReLU the reduce pass writes dz = dy masked by y > 0, and the dx pass reads dz for dy; with the
    // mask from x (kReluFromInput) both passes mask dy themselves and write nothing but dx.
    const bool from_input = relu && relu->mask_from_input();
    const int relu_mode = !relu ? kNoRelu : from_input ? kReluFromInput : kReluFromOutput;
    const T* bp = from_input ? static_cast<const T*>(relu->beta.data()) : nullptr;
    const BnReluGrad rg{relu_mode == kReluFromOutput ? relu->y.data() : nullptr,
                        relu_mode == kReluFromOutput ? relu->dz.data() : nullptr, invstd, gamma.data(), bp};
    const void* yp = rg.y;
    const void* dzp = rg.dz;
    // 1. per-block sums [c][splits][2], or the ones the kernel that wrote dy computed (`sums`: dy is then dz already)
    const bool given = sums && sums->describe(dy, c) && sums->y.defined() == (relu != nullptr);
    Tensor partial;
    int splits = 0;
    int64_t count = 0;
    BnDims d{};
    NhwcDims nd{};
    if (nhwc) {
      nd = nhwc_dims(op, x, kVec<T>, {dy.data(), x.data(), dx.data(), yp, dzp, rp}, 4);
      splits = nd.splits, count = nd.rows;
    } else {
      d = bn_dims<T>(op, x, {dy.data(), x.data(), dx.data(), yp, dzp, rp});
      count = d.count;
    }
    if (given) {
      partial = sums->partial, splits = int(sums->splits);
      if (relu_mode == kReluFromOutput && dzp != dy.data())
        HPDT_CUDA_CHECK(cudaMemcpyAsync(const_cast<void*>(dzp), dy.data(), dy.nbytes(), cudaMemcpyDeviceToDevice, s));
    } else if (nhwc) {
      partial = Tensor::empty({c * splits * 2}, DType::f32, x.device(), opts);
      const dim3 grid(unsigned(splits), nd.col_blocks);
      with_relu_mode(relu_mode, [&](auto mt) {
        constexpr int M = decltype(mt)::value;
        if (nd.v == 1)
          bn_backward_reduce_nhwc_kernel<T, 1, M>
              <<<grid, kThreads, 0, s>>>(dyp, xp, mean, rg, nd.cols, nd.rows, nd.chunk, partial.data<float>());
        else
          bn_backward_reduce_nhwc_kernel<T, kVec<T>, M>
              <<<grid, kThreads, 0, s>>>(dyp, xp, mean, rg, nd.cols, nd.rows, nd.chunk, partial.data<float>());
      });
      HPDT_CUDA_CHECK_LAUNCH();
    } else {
      const ChannelSplit sp = channel_split(d.c, d.slots, int64_t(kThreads) * 4);
      splits = sp.splits;
      partial = Tensor::empty({c * splits * 2}, DType::f32, x.device(), opts);
      const dim3 grid(unsigned(splits), unsigned(d.c));
      with_vector<T>(d.v, [&](auto vt) {
        with_relu_mode(relu_mode, [&](auto mt) {
          bn_backward_reduce_kernel<T, decltype(vt)::value, decltype(mt)::value>
              <<<grid, kThreads, 0, s>>>(dyp, xp, mean, rg, d.c, d.hwv, d.slots, sp.chunk, partial.data<float>());
        });
      });
      HPDT_CUDA_CHECK_LAUNCH();
    }
    // 2. dgamma, dbeta and the dx coefficients (through the SyncBN seam when set)
    Tensor coef = Tensor::empty({2 * c}, DType::f32, x.device(), opts);
    Tensor buf;
    if (sync) buf = Tensor::empty({2 * c + 1}, DType::f32, x.device(), opts);
    bn_backward_finalize<T><<<unsigned(c), finalize_threads(splits), 0, s>>>(
        partial.data<float>(), splits, int(c), double(count), invstd, static_cast<T*>(dgamma.data()),
        static_cast<T*>(dbeta.data()), sync ? buf.data<float>() : nullptr, coef.data<float>());
    HPDT_CUDA_CHECK_LAUNCH();
    if (sync) {
      sync_sums(sync, buf.data<float>(), int(c), stream);
      bn_backward_coef_from_sums<<<channel_blocks(int(c)), 128, 0, s>>>(buf.data<float>(), int(c), coef.data<float>());
      HPDT_CUDA_CHECK_LAUNCH();
    }
    // 3. dx
    const T* gp = static_cast<const T*>(gamma.data());
    T* dxp = static_cast<T*>(dx.data());
    if (relu_mode == kReluFromOutput) dyp = static_cast<const T*>(dzp);
    // The residual's batch norm's partials describe its dy, this one's dz (what residual_grad hands on)
    auto residual_partials = [&](int apply_splits) {
      return BnResidualSums{rp, residual_sums->mean.data<float>(),
                            residual_sums->start(c, apply_splits, dyp, count, stream)};
    };
    if (nhwc) {
      const NhwcDims ad = nhwc_dims(op, x, kVec<T>, {dy.data(), x.data(), dx.data(), yp, dzp, rp}, 8);
      const dim3 agrid(unsigned(ad.splits), ad.col_blocks);
      auto launch = [&](auto vt) {  // V: 1, or kVec<T> (nhwc_dims)
        constexpr int V = decltype(vt)::value;
        if (want_residual_sums)
          bn_backward_apply_sums_nhwc_kernel<T, V>
              <<<agrid, kThreads, 0, s>>>(dyp, xp, mean, invstd, gp, coef.data<float>(), dxp, int(c), ad.cols, ad.rows,
                                          ad.chunk, residual_partials(ad.splits));
        else
          with_flag(from_input, [&](auto xt) {
            bn_backward_apply_nhwc_kernel<T, V, decltype(xt)::value><<<agrid, kThreads, 0, s>>>(
                dyp, xp, mean, invstd, gp, bp, coef.data<float>(), dxp, int(c), ad.cols, ad.rows, ad.chunk);
          });
      };
      if (ad.v == 1)
        launch(std::integral_constant<int, 1>{});
      else
        launch(std::integral_constant<int, kVec<T>>{});
    } else if (d.flat) {
      with_flag(from_input, [&](auto xt) {
        bn_backward_apply_flat_kernel<T, decltype(xt)::value>
            <<<d.planes.blocks(), kThreads, size_t(d.planes.entries(kVec<T>)) * sizeof(BnDxCoef), s>>>(
                dyp, xp, mean, invstd, gp, bp, coef.data<float>(), dxp, d.planes);
      });
    } else {
      const ChannelSplit ap = channel_split(d.c, d.slots, int64_t(kThreads) * 8);
      const dim3 agrid(unsigned(ap.splits), unsigned(d.c));
      with_vector<T>(d.v, [&](auto vt) {
        constexpr int V = decltype(vt)::value;
        if (want_residual_sums)
          bn_backward_apply_sums_kernel<T, V><<<agrid, kThreads, 0, s>>>(dyp, xp, mean, invstd, gp, coef.data<float>(),
                                                                         dxp, d.c, d.hwv, d.slots, ap.chunk,
                                                                         residual_partials(ap.splits));
        else
          with_flag(from_input, [&](auto xt) {
            bn_backward_apply_kernel<T, V, decltype(xt)::value><<<agrid, kThreads, 0, s>>>(
                dyp, xp, mean, invstd, gp, bp, coef.data<float>(), dxp, d.c, d.hwv, d.slots, ap.chunk);
          });
      });
    }
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, LayerNormSaved& saved,
                       Tensor& y, const Stream& stream) {
  const int64_t d = x.size(-1), rows = d > 0 ? x.numel() / d : 0;
  ensure_f32(saved.mean, rows, x, stream);
  ensure_f32(saved.rstd, rows, x, stream);
  if (rows == 0 || d == 0) return;
  HPDT_CHECK(d < (int64_t(1) << 31), "layernorm_forward: on CUDA rows of at most 2^31 values, got ", d);
  dispatch_floating(x.dtype(), "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    const bool vec = d % kVec<T> == 0 && aligned16(x.data()) && aligned16(y.data()) && aligned16(gamma.data()) &&
                     aligned16(beta.data());
    const unsigned blocks = unsigned((rows + kWarps - 1) / kWarps);
    auto launch = [&](auto kernel) {
      kernel<<<blocks, kThreads, 0, detail::native(stream)>>>(
          static_cast<const T*>(x.data()), static_cast<const T*>(gamma.data()), static_cast<const T*>(beta.data()), eps,
          static_cast<T*>(y.data()), saved.mean.data<float>(), saved.rstd.data<float>(), rows, int(d));
      HPDT_CUDA_CHECK_LAUNCH();
    };
    if (vec)
      launch(ln_forward_kernel<T, kVec<T>>);
    else
      launch(ln_forward_kernel<T, 1>);
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const LayerNormSaved& saved, Tensor& dx,
                        Tensor& dgamma, Tensor& dbeta, const Stream& stream, const Tensor* residual) {
  const int64_t d = x.size(-1), rows = d > 0 ? x.numel() / d : 0;
  if (d == 0) return;
  const char* op = "layernorm_backward";
  check_dtype(op, "saved mean", saved.mean, DType::f32);
  check_dtype(op, "saved rstd", saved.rstd, DType::f32);
  const cudaStream_t s = detail::native(stream);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = d % kVec<T> == 0 && aligned16(dy.data()) && aligned16(x.data()) && aligned16(dx.data()) &&
                     aligned16(gamma.data()) && (!residual || aligned16(residual->data()));
    const int v = vec ? kVec<T> : 1;
    const int64_t packs = d / v;
    // Threads per row: the row's vectors, rounded up to whole warps, at most a block; several rows per block
    // when rows are short.
    const int tpr = int(std::min<int64_t>(kThreads, (packs + 31) / 32 * 32));
    const int groups = kThreads / tpr;
    const size_t smem = size_t(groups) * 2 * size_t(d) * sizeof(float);
    constexpr size_t kMaxSmem = 227 * 1024;  // H100's per-block opt-in limit
    HPDT_CHECK(smem <= kMaxSmem, op, ": on CUDA rows of at most ", kMaxSmem / 8,
               " values (the dgamma/dbeta accumulators live in shared memory), got ", d);
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((rows + groups - 1) / groups, kTargetBlocks));
    const int64_t rows_per_block = rows > 0 ? (rows + blocks - 1) / blocks : 1;
    Tensor partial = Tensor::empty({blocks * 2 * d}, DType::f32, x.device(), AllocOptions{.stream = &stream});
    auto launch = [&](auto kernel) {
      if (smem > 48 * 1024)
        HPDT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      kernel<<<unsigned(blocks), groups * tpr, smem, s>>>(
          static_cast<const T*>(dy.data()), static_cast<const T*>(x.data()), static_cast<const T*>(gamma.data()),
          saved.mean.data<float>(), saved.rstd.data<float>(),
          residual ? static_cast<const T*>(residual->data()) : nullptr, static_cast<T*>(dx.data()),
          partial.data<float>(), rows, rows_per_block, int(d), tpr);
      HPDT_CUDA_CHECK_LAUNCH();
    };
    const bool one_pack = packs <= tpr;
    if (vec) {
      if (one_pack)
        launch(ln_backward_kernel<T, kVec<T>, true>);
      else
        launch(ln_backward_kernel<T, kVec<T>, false>);
    } else {
      if (one_pack)
        launch(ln_backward_kernel<T, 1, true>);
      else
        launch(ln_backward_kernel<T, 1, false>);
    }
    ln_param_grad_finalize<T><<<unsigned((d + kFinishCols - 1) / kFinishCols), dim3(kFinishCols, kFinishLanes), 0, s>>>(
        partial.data<float>(), int(blocks), int(d), static_cast<T*>(dgamma.data()), static_cast<T*>(dbeta.data()));
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace hpdt::kernels::cuda
