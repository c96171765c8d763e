// CUDA conv2d, NHWC ("channels last"), groups = 1, as implicit GEMM on the [pixels, channels] matrices NHWC
// activations are: no im2col buffer, the loaders read x (or dy) straight into shared memory, padding reading as
// zero. The CPU oracle is kernels/cpu/conv_nhwc.cpp (itself checked against the NCHW oracle); cuDNN with NHWC
// descriptors (conv_vendor.cu) is the peer. The NCHW twin is conv.cu; what both use is in conv_common.cuh.
//
// The three GEMMs (pixels P = n * oh * ow, taps = kh * kw, k = tap * C + c: tap-major, channel-minor, so that 8
// consecutive k of a layer with C % 8 == 0 are 16 contiguous bytes of one input pixel):
//   forward          y[P][co]    = sum_k x(P, k) * w'[co][k]      M = pixels, N = co, K = taps * ci
//   backward-data    dx[P'][ci]  = sum_k dy(P', k) * w''[ci][k]   per stride phase (as conv.cu): M = the phase's dx
//                                                                  pixels, N = ci, K = the phase's taps * co
//   backward-filter  dw[co][k]   = sum_P dy[P][co] * x(P, k)      M = co, N = taps * ci, K = pixels
// w' and w'' are the weights repacked tap-major (conv_common.cuh: forward_weights, repack_phase_weights).
//
// Variants (ConvVariant):
//   v1 SIMT (f32, f16, bf16). Forward / backward-data: 128 pixels x 64|128 channels, k step 8, 8 x 8 outputs per
//      thread from f32 shared memory, register-staged double buffering. A thread's outputs in one pixel row are
//      4 + 4 consecutive channels, so a warp's stores are contiguous: they go to global memory without staging.
//      Backward-filter: 64|128 co x 128 columns, 8 pixels per step.
//   v2 tensor cores (f16, bf16): mma.sync m16n8k16 with f32 accumulators, ldmatrix fragments, warps of 64 x 32.
//      Forward / backward-data: 128 pixels x 64|128 channels x 32 k. The activation tile [pixel][k] is filled by
//      16-byte cp.async (C % 8 == 0 and an aligned tensor: the 8 channels of one tap of one pixel, a 4-stage
//      pipeline) or gathered element by element through registers (any C, 2 stages); the weights [co][k] always by
//      cp.async. Both tiles are k-contiguous: plain ldmatrix. Backward-filter: 64|128 co x 128 columns x 32 pixels,
//      dy [pixel][co] and x [pixel][column] tiles by cp.async (co % 8 == 0, ci % 8 == 0; 4 stages when both) or
//      gathered; both tiles are pixel-major, so both fragments are ldmatrix.trans.
//      A strided convolution of fewer than 16 channels (ResNet's stem) runs its forward, backward-filter and (without
//      a residual) backward-data as a stride-1 one of 16 or more channels on a space-to-depth rearrangement
//      (space_to_depth.cuh): 16-byte loads.
// The forward's epilogue (bias, scale/shift, residual, ReLU) runs on the f32 accumulators before the one rounding
// to T. Backward-filter splits the pixel reduction over blockIdx.z into f32 partials summed in a fixed order
// (deterministic, no atomics); dbias is a fixed-order column sum.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "conv_common.cuh"
#include "conv_v3.cuh"
#include "space_to_depth.cuh"
#include "find.cuh"
#include "hpdt/core/log.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/cuda/conv.h"
#include "hpdt/kernels/cuda/gemm.h"
#include "launch.cuh"

#ifndef HPDT_HAVE_GEMM_WGMMA
#define HPDT_HAVE_GEMM_WGMMA 0
#endif

namespace hpdt::kernels::cuda {

namespace {

using namespace conv_detail;

constexpr int kPixTile = 128;  // forward / backward-data: pixels per block tile
constexpr int kColTile = 128;  // backward-filter: columns (taps * ci) per block tile

enum Load { kVec = 0, kGather = 1 };  // how an activation tile is filled: 16-byte cp.async, or element gathers

// ---- forward / backward-data implicit GEMM -----------------------------------------------------------------

// Out[pixel][m] = sum_k Src(pixel, k) * A[m][k], through the epilogue into dst.
//   A: weights repacked tap-major, a[m * lda + k], k = tap * C + c, zero for k in [K, lda); lda % 8 == 0.
//   Src(pixel (img, py, px), k) = src[img][py * sy + oy0 + tsign * jr][px * sx + ox0 + tsign * jc][c] for
//     k = (jr * KWp + jc) * C + c, zero outside the source plane.
//   dst[img][py * dys + dy0][px * dxs + dx0][m] = epilogue(Out[pixel][m]).
// Forward: src = x, C = ci, (s*, o*0) = (stride, -pad), tsign = +1, dst = y. Backward-data: one launch per stride
// phase (conv_common.cuh: DataPhase), src = dy, C = co, (s*, o*0) = (1, q*0), tsign = -1, dst = the phase's dx
// pixels (a strided sub-grid of dx).
struct NhwcGemm {
  const void* a = nullptr;
  int lda = 0, M = 0;
  const void* src = nullptr;
  int C = 0, Hs = 0, Ws = 0;
  FastDiv pix_hw, pix_w;  // pixel grid Hp x Wp: m -> (img, py, px)
  int npix = 0;           // n * Hp * Wp
  int sy = 1, sx = 1, oy0 = 0, ox0 = 0, tsign = 1;
  FastDiv div_c, div_kw;  // k -> (tap, c), tap -> (jr, jc)
  int K = 0;              // taps * C
  void* dst = nullptr;
  int dst_h = 0, dst_w = 0, dys = 1, dy0 = 0, dxs = 1, dx0 = 0;
  const void* bias = nullptr;
  const void* scale = nullptr;
  const void* shift = nullptr;
  const void* residual = nullptr;
  int relu = 0;
  // v2's epilogue writes 4 channels of a pixel at a time (8-byte stores, residual and per-channel loads) where the
  // host found M % 4 == 0 and every pointer 8-byte aligned (out4_ok).
  int out4 = 0;
  // v2 prefetches its epilogue's inputs (the residual; batch norm's y and x with bn.partial) into L2 before its k loop
  // (prefetch.cuh; HPDT_EPILOGUE_PREFETCH=off: not). Set by launch_nhwc_tc.
  int prefetch = 0;
  // Batch norm's statistics of dst, by v2's forward epilogue (a plain one: no bias, scale, shift, residual or ReLU):
  // partials [M][2 gridDim.x][3], (count, mean, M2) of channel m's stored values in half p of pixel tile blockIdx.x
  // (64 pixels) at split 2 blockIdx.x + p (stage_stats_nhwc).
  float* stats = nullptr;
  // Batch norm's backward sums, by v2's backward-data epilogue: dst gets dz, and the partials of channel m's stored
  // values in half p of pixel tile blockIdx.x of this phase go to split bn.split0 + 2 blockIdx.x + p
  // (stage_bn_grad_nhwc).
  BnGradEpilogue bn;
};

// Whether v2's epilogue may write groups of 4 channels with one 8-byte store: M % 4 == 0 (a group is real as a
// whole, and every output row starts at a multiple of 4 elements), dst, residual, bias, scale and shift 8-byte
// aligned. Every ResNet convolution qualifies.
bool out4_ok(const NhwcGemm& p) {
  return conv_v2_vector_epilogue() && p.M % 4 == 0 && aligned8(p.dst) && aligned8(p.residual) && aligned8(p.bias) &&
         aligned8(p.scale) && aligned8(p.shift);
}

// The block's pixel table, built once: for each of its kPixTile pixels {source offset of tap (0, 0) channel 0
// (outside the tensor when that tap is padding), tap-(0, 0) row, column, real pixel?}, and the element offset of
// its output row. 32-bit: check_index_range keeps every tensor under 2^31 elements.
__device__ __forceinline__ void pixel_table(const NhwcGemm& p, int m0, int4* tab, int* dst_tab, int threads) {
  for (int i = threadIdx.x; i < kPixTile; i += threads) {
    const int m = m0 + i;
    int4 e = make_int4(0, 0, 0, 0);
    int d = 0;
    if (m < p.npix) {
      const int img = p.pix_hw.div(m), rem = m - img * p.pix_hw.value();
      const int py = p.pix_w.div(rem), px = rem - py * p.pix_w.value();
      const int by = py * p.sy + p.oy0, bx = px * p.sx + p.ox0;
      e = make_int4(((img * p.Hs + by) * p.Ws + bx) * p.C, by, bx, 1);
      d = ((img * p.dst_h + py * p.dys + p.dy0) * p.dst_w + px * p.dxs + p.dx0) * p.M;
    }
    tab[i] = e;
    dst_tab[i] = d;
  }
}

// v2's epilogue inputs for the tile's 128 pixel rows (dst_tab: their offsets) x channels n0 .. n0 + BN - 1 (the
// residual; batch norm's y and x with bn.partial), prefetched into L2 before the k loop (prefetch.cuh): `threads`
// (128 or 256) threads, each the lines of one pixel row (or half of them).
template <class T, int BN>
__device__ __forceinline__ void prefetch_epilogue_inputs(const NhwcGemm& p, int m0, int n0, const int* dst_tab,
                                                         int threads) {
  const int per_row = threads / kPixTile, t = int(threadIdx.x), r = t / per_row;
  if (m0 + r >= p.npix || n0 >= p.M) return;
  prefetch_epilogue_inputs_at<T>(p.bn, p.residual, int64_t(dst_tab[r]) + n0,
                                 uint32_t(min(BN, p.M - n0)) * uint32_t(sizeof(T)), t % per_row, per_row);
}

// Column k of the gather: the offset from a pixel's tap-(0, 0) base and the tap's row/column shift.
struct TapColumn {
  int delta = 0, dy = 0, dx = 0;
  bool ok = false;
};
__device__ __forceinline__ TapColumn tap_column(const NhwcGemm& p, int k) {
  TapColumn t;
  t.ok = k < p.K;
  if (t.ok) {
    const int tap = p.div_c.div(k), c = k - tap * p.C;
    const int jr = p.div_kw.div(tap), jc = tap - jr * p.div_kw.value();
    t.dy = p.tsign * jr;
    t.dx = p.tsign * jc;
    t.delta = (t.dy * p.Ws + t.dx) * p.C + c;
  }
  return t;
}
__device__ __forceinline__ bool inside(const NhwcGemm& p, int4 e, const TapColumn& t) {
  return e.w && t.ok && unsigned(e.y + t.dy) < unsigned(p.Hs) && unsigned(e.z + t.dx) < unsigned(p.Ws);
}

// One output element through the epilogue: relu?((v + bias) * scale + shift + residual), rounded once.
template <class T>
__device__ __forceinline__ void store_nhwc(const NhwcGemm& p, int i, int ch, float v) {
  if (p.bias) v += to_f32(static_cast<const T*>(p.bias)[ch]);
  if (p.scale) v *= to_f32(static_cast<const T*>(p.scale)[ch]);
  if (p.shift) v += to_f32(static_cast<const T*>(p.shift)[ch]);
  if (p.residual) v += to_f32(static_cast<const T*>(p.residual)[i]);
  if (p.relu) v = v > 0.0f ? v : 0.0f;
  static_cast<T*>(p.dst)[i] = from_f32<T>(v);
}

// Channels ch .. ch + 3 of output element offset i (the first's) through the same epilogue (v2 with out4): 8-byte
// loads and store; the same operations in the same order as store_nhwc, so the same bits.
template <class T>
__device__ __forceinline__ void store_nhwc4(const NhwcGemm& p, int i, int ch, float4 acc) {
  float v[4] = {acc.x, acc.y, acc.z, acc.w}, b[4] = {}, sc[4] = {}, sh[4] = {}, r[4] = {};
  if (p.bias) load<4>(static_cast<const T*>(p.bias) + ch, b);
  if (p.scale) load<4>(static_cast<const T*>(p.scale) + ch, sc);
  if (p.shift) load<4>(static_cast<const T*>(p.shift) + ch, sh);
  if (p.residual) load<4>(static_cast<const T*>(p.residual) + i, r);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (p.bias) v[e] += b[e];
    if (p.scale) v[e] *= sc[e];
    if (p.shift) v[e] += sh[e];
    if (p.residual) v[e] += r[e];
    if (p.relu) v[e] = v[e] > 0.0f ? v[e] : 0.0f;
  }
  store<4>(static_cast<T*>(p.dst) + i, v);
}

// v2's epilogue, p.stats: the batch-norm partial of each channel column of the 64 staged pixel rows (pixels
// pix0 ..): thread t < BN takes column t, two passes over the values as stored (rounded to T), the sum, then the
// squared deviations from the mean, rows in order (consecutive threads read consecutive words: conflict-free).
template <class T, int BN, int kPitchS>
__device__ __forceinline__ void stage_stats_nhwc(const NhwcGemm& p, const float* st, int pix0, int n0, int split) {
  const int col = threadIdx.x, ch = n0 + col;
  if (col >= BN || ch >= p.M) return;
  const int real = max(0, min(64, p.npix - pix0));
  float sum = 0.0f;
  for (int r = 0; r < real; ++r) sum += to_f32(from_f32<T>(st[r * kPitchS + col]));
  const float mean = real > 0 ? sum / float(real) : 0.0f;
  float m2 = 0.0f;
  for (int r = 0; r < real; ++r) {
    const float d = to_f32(from_f32<T>(st[r * kPitchS + col])) - mean;
    m2 += d * d;
  }
  float* out = p.stats + (int64_t(ch) * (2 * gridDim.x) + split) * 3;
  out[0] = float(real), out[1] = mean, out[2] = m2;
}

// v2's backward-data epilogue with p.bn.partial, in place of the stores: thread t < BN takes channel column t of the
// 64 staged pixel rows (pixels pix0 ..; dst_tab: their dx offsets) through the residual and the fused ReLU's mask,
// stores it and sums it for batch norm's backward, rows in order (a warp's stores and reads of y and x: 32
// consecutive channels of a pixel). The inputs of 8 rows at a time are loaded before any of their stores
// (bn_grad_elements), so a thread waits once per 8 rows instead of twice a row (one element at a time, x loaded after
// the store, which the compiler must assume aliases it: 128 round trips a pass, ~80 us at DRAM latency).
template <class T, int BN, int kPitchS>
__device__ __forceinline__ void stage_bn_grad_nhwc(const NhwcGemm& p, const float* st, const int* dst_tab, int row0,
                                                   int pix0, int n0, int split) {
  const int col = threadIdx.x, ch = n0 + col;
  if (col >= BN || ch >= p.M) return;
  const int real = max(0, min(64, p.npix - pix0));
  const float mean = p.bn.mean[ch];
  float sum = 0.0f, sum_x = 0.0f;
  constexpr int kRows = 8;
  for (int r0 = 0; r0 < real; r0 += kRows)
    bn_grad_elements<T, kRows>(
        p.bn, p.residual, p.dst, [&](int j) { return r0 + j < real; },
        [&](int j) { return int64_t(dst_tab[row0 + r0 + j] + ch); }, [&](int j) { return st[(r0 + j) * kPitchS + col]; },
        mean, sum, sum_x);
  float* out = p.bn.partial + (int64_t(ch) * p.bn.splits + split) * 2;
  out[0] = sum, out[1] = sum_x;
}

// v1: SIMT. Block tile 128 pixels x BN channels, 2 * BN threads as 16 rows x BN / 8 columns, each 8 x 8 outputs:
// pixels {tm*4 + i, 64 + tm*4 + i}, channels {tn*4 + j, BN/2 + tn*4 + j} (conflict-free float4 reads).
template <class T, int BN>
__global__ void __launch_bounds__(2 * BN, 2) conv_nhwc_simt(const NhwcGemm p) {
  constexpr int kThreads = 2 * BN;
  constexpr int kTN = BN / 8;
  constexpr int kARowStep = kThreads / kSimtBK;               // pixel rows per pass of the x loader: 16 or 32
  constexpr int kAPerThread = kPixTile * kSimtBK / kThreads;  // 8 or 4
  constexpr int kPA = kPixTile + 4, kPB = BN + 4;             // f32 pitches: 16-byte rows, conflict-free stores
  __shared__ __align__(16) float As[2 * kSimtBK * kPA];       // [stage][k][pixel]
  __shared__ __align__(16) float Bs[2 * kSimtBK * kPB];       // [stage][k][channel]
  __shared__ int4 tab[kPixTile];
  __shared__ int dst_tab[kPixTile];

  const T* __restrict__ a = static_cast<const T*>(p.a);
  const T* __restrict__ src = static_cast<const T*>(p.src);
  const int tid = threadIdx.x, tm = tid / kTN, tn = tid % kTN;
  const int m0 = blockIdx.x * kPixTile, n0 = blockIdx.y * BN;
  const int KT = (p.K + kSimtBK - 1) / kSimtBK;
  pixel_table(p, m0, tab, dst_tab, kThreads);
  __syncthreads();

  // x loader: k column tid % 8 (8 threads read 8 consecutive channels of a pixel), pixel rows tid / 8 + j * step.
  // Weights: channel row tid / 2, four consecutive k.
  const int ak = tid & 7, arow0 = tid >> 3;
  const int b_row = tid >> 1, b_k = (tid & 1) * 4;
  float areg[kAPerThread], breg[4];
  auto fetch = [&](int kt) {
    const TapColumn t = tap_column(p, kt * kSimtBK + ak);
#pragma unroll
    for (int j = 0; j < kAPerThread; ++j) {
      const int4 e = tab[arow0 + j * kARowStep];
      areg[j] = inside(p, e, t) ? to_f32(src[e.x + t.delta]) : 0.0f;
    }
    const int gn = n0 + b_row;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int k = kt * kSimtBK + b_k + e;
      breg[e] = (gn < p.M && k < p.K) ? to_f32(a[int64_t(gn) * p.lda + k]) : 0.0f;
    }
  };
  auto stash = [&](int stage) {
#pragma unroll
    for (int j = 0; j < kAPerThread; ++j) As[(stage * kSimtBK + ak) * kPA + arow0 + j * kARowStep] = areg[j];
#pragma unroll
    for (int e = 0; e < 4; ++e) Bs[(stage * kSimtBK + b_k + e) * kPB + b_row] = breg[e];
  };

  float acc[8][8] = {};
  simt_k_loop<kPA, kPB, kPixTile / 2, BN / 2>(0, KT, As, Bs, tm, tn, acc, fetch, stash);

  // Epilogue: straight to memory (the kTN threads of a pixel row write 4 * kTN consecutive channels).
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = (i < 4 ? 0 : kPixTile / 2) + tm * 4 + (i & 3);
    if (m0 + row >= p.npix) continue;
    const int base = dst_tab[row];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int ch = n0 + (j < 4 ? 0 : BN / 2) + tn * 4 + (j & 3);
      if (ch < p.M) store_nhwc<T>(p, base + ch, ch, acc[i][j]);
    }
  }
}

// v2: tensor cores. Block tile 128 pixels x BN channels x 32 k, warps 2 x BN / 32 of 64 x 32 (4 x 4 mma tiles).
template <int LOAD>
constexpr int kNhwcStages = LOAD == kVec ? 4 : 2;
template <int BN>
constexpr int kNhwcStagePitch = BN + 8;  // f32 epilogue staging: float2 writes without bank conflicts
template <int BN, int LOAD>
constexpr int kNhwcSmemBytes = std::max(kNhwcStages<LOAD>*(kPixTile + BN) * kPitchK * 2, 64 * kNhwcStagePitch<BN> * 4);

template <class T, int BN, int LOAD>
__global__ void __launch_bounds__(2 * BN) conv_nhwc_tc(const NhwcGemm p) {
  constexpr int kThreads = 2 * BN;
  constexpr int kWarpsN = BN / 32;
  constexpr int kAStage = kPixTile * kPitchK;  // 16-bit elements
  constexpr int kBStage = BN * kPitchK;
  constexpr int kStages = kNhwcStages<LOAD>;
  constexpr int kChunkRowStep = kThreads / 4;                  // vec: pixel rows per pass (4 chunks of 8 per row)
  constexpr int kChunksPerThread = kPixTile / kChunkRowStep;   // 2 or 4
  constexpr int kGatherRowStep = kThreads / kTcBK;             // gather: pixel rows per pass
  constexpr int kGatherPerThread = kPixTile / kGatherRowStep;  // 16 or 32
  constexpr int kPitchS = kNhwcStagePitch<BN>;
  extern __shared__ __align__(16) unsigned char smem[];  // kNhwcSmemBytes<BN, LOAD>
  __shared__ int4 tab[kPixTile];
  __shared__ int dst_tab[kPixTile];
  uint16_t* As = reinterpret_cast<uint16_t*>(smem);  // [kStages][128 pixels][kPitchK]
  uint16_t* Bs = As + kStages * kAStage;             // [kStages][BN channels][kPitchK]

  const uint16_t* __restrict__ a = static_cast<const uint16_t*>(p.a);
  const uint16_t* __restrict__ src = static_cast<const uint16_t*>(p.src);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int m0 = blockIdx.x * kPixTile, n0 = blockIdx.y * BN;
  const int KT = (p.K + kTcBK - 1) / kTcBK;
  pixel_table(p, m0, tab, dst_tab, kThreads);
  __syncthreads();
  if (p.prefetch && (p.residual || p.bn.partial)) prefetch_epilogue_inputs<T, BN>(p, m0, n0, dst_tab, kThreads);

  auto load_b = [&](int kt, int stage) {  // weights: BN rows x 4 chunks of 8 k
#pragma unroll
    for (int i = 0; i < BN * 4 / kThreads; ++i) {
      const KChunk ch = k_chunk(tid + i * kThreads);
      const int gn = n0 + ch.row, gk = kt * kTcBK + ch.q * 8;
      const bool ok = gn < p.M && gk < p.lda;
      cp_async16(Bs + stage * kBStage + ch.row * kPitchK + ch.q * 8, ok ? a + int64_t(gn) * p.lda + gk : a, ok);
    }
  };
  // Activations. Vec: chunk q (k 8q .. 8q + 7: one tap, 8 channels) of pixel rows vrow0 + i * step, in k_chunk's
  // lane order. Gather: k column tid % 32 of pixel rows tid / 32 + j * step; one (tap, channel) decode per stage
  // either way.
  const int q = k_chunk(tid).q, vrow0 = k_chunk(tid).row;
  const int gk = tid & 31, grow0 = tid >> 5;
  uint16_t areg[LOAD == kVec ? 1 : kGatherPerThread];
  auto fetch_a = [&](int kt, int stage) {
    if constexpr (LOAD == kVec) {
      const TapColumn t = tap_column(p, kt * kTcBK + q * 8);
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int row = vrow0 + i * kChunkRowStep;
        const int4 e = tab[row];
        const bool ok = inside(p, e, t);
        cp_async16(As + stage * kAStage + row * kPitchK + q * 8, ok ? src + e.x + t.delta : src, ok);
      }
    } else {
      (void)stage;
      const TapColumn t = tap_column(p, kt * kTcBK + gk);
#pragma unroll
      for (int j = 0; j < kGatherPerThread; ++j) {
        const int4 e = tab[grow0 + j * kGatherRowStep];
        areg[j] = inside(p, e, t) ? __ldg(src + e.x + t.delta) : uint16_t(0);
      }
    }
  };
  auto stash_a = [&](int stage) {
    if constexpr (LOAD == kGather) {
#pragma unroll
      for (int j = 0; j < kGatherPerThread; ++j)
        As[stage * kAStage + (grow0 + j * kGatherRowStep) * kPitchK + gk] = areg[j];
    } else {
      (void)stage;
    }
  };

  float acc[4][4][4] = {};
  auto compute = [&](int stage) {
    warp_tile_mma<T, true, true>(acc, As + stage * kAStage, kPitchK, wm * 64, Bs + stage * kBStage, kPitchK, wn * 32,
                                 lane);
  };

  pipelined_k_loop<kStages>(
      0, KT,
      [&](int kt, int stage) {
        load_b(kt, stage);
        fetch_a(kt, stage);
      },
      stash_a, compute);

  // Epilogue: one warp row (64 pixels) at a time through shared memory, then rows of channels, coalesced: with out4,
  // thread t writes channels 4 (t % (BN / 4)) .. + 3 of pixel rows t / (BN / 4), + 8, ... (8-byte stores; a warp
  // reads whole staged rows, conflict-free); else channel t % BN of rows t / BN, + 2, ...
  float* st = reinterpret_cast<float*>(smem);
  const int gq = lane >> 2, tq = lane & 3;  // the fragments' row and column pair
  const int col = tid % BN, ch = n0 + col;
  constexpr int kGroups = BN / 4, kRows4 = kThreads / kGroups;  // 8 rows per pass of the block
  const int col4 = 4 * (tid % kGroups), ch4 = n0 + col4;
#pragma unroll
  for (int pass = 0; pass < kPixTile / 64; ++pass) {
    __syncthreads();
    if (wm == pass) stage_warp_tile(st, kPitchS, acc, wn, gq, tq);
    __syncthreads();
    if (p.bn.partial) {
      stage_bn_grad_nhwc<T, BN, kPitchS>(p, st, dst_tab, pass * 64, m0 + pass * 64, n0,
                                         p.bn.split0 + 2 * blockIdx.x + pass);
    } else if (p.out4) {
      if (ch4 < p.M)
        for (int r = tid / kGroups; r < 64; r += kRows4) {
          const int row = pass * 64 + r;
          if (m0 + row < p.npix)
            store_nhwc4<T>(p, dst_tab[row] + ch4, ch4, *reinterpret_cast<const float4*>(st + r * kPitchS + col4));
        }
    } else if (ch < p.M) {
      for (int r = tid / BN; r < 64; r += kThreads / BN) {
        const int row = pass * 64 + r;
        if (m0 + row < p.npix) store_nhwc<T>(p, dst_tab[row] + ch, ch, st[r * kPitchS + col]);
      }
    }
    if (p.stats) stage_stats_nhwc<T, BN, kPitchS>(p, st, m0 + pass * 64, n0, 2 * blockIdx.x + pass);
  }
}

// ---- backward-filter --------------------------------------------------------------------------------------

// dW[co][column] (+)= sum over pixels P of dy[P][co] * x(P, column), column = tap * CI + ci (tap-major: 8
// consecutive columns are 8 consecutive channels of one tap), the pixel reduction split over blockIdx.z into
// chunks of tiles_per_split k tiles.
struct NhwcWgrad {
  const void* dy = nullptr;
  const void* x = nullptr;
  int CO = 0, CI = 0, H = 0, W = 0, KW = 0, stride = 1, pad = 0, taps = 0;
  int K = 0;     // taps * ci: N of the GEMM
  int npix = 0;  // n * oh * ow: the reduction
  FastDiv div_ohw, div_ow, div_ci, div_kw;
  int tiles_per_split = 0;
  void* dw = nullptr;   // ws == nullptr: dw += sum (one split)
  float* ws = nullptr;  // else partials [splits][CO][K] in dw's layout
};

// Column table of a block, built once: {offset from a pixel's tap-(0, 0) base, r, c, column < K}.
__device__ __forceinline__ void wgrad_columns(const NhwcWgrad& p, int n0, int4* tab, int threads) {
  for (int i = threadIdx.x; i < kColTile; i += threads) {
    const int k = n0 + i;
    int4 e = make_int4(0, 0, 0, 0);
    if (k < p.K) {
      const int tap = p.div_ci.div(k), ci = k - tap * p.CI;
      const int r = p.div_kw.div(tap), c = tap - r * p.KW;
      e = make_int4((r * p.W + c) * p.CI + ci, r, c, 1);
    }
    tab[i] = e;
  }
}

// Pixel P of the reduction: x offset of its tap-(0, 0) base (channel 0) and that tap's input coordinates.
struct WgradPixel {
  int base = 0, by = 0, bx = 0;
  bool ok = false;
};
__device__ __forceinline__ WgradPixel wgrad_pixel(const NhwcWgrad& p, int P) {
  WgradPixel w;
  w.ok = P < p.npix;
  if (w.ok) {
    const int img = p.div_ohw.div(P), rem = P - img * p.div_ohw.value();
    const int oy = p.div_ow.div(rem), ox = rem - oy * p.div_ow.value();
    w.by = oy * p.stride - p.pad;
    w.bx = ox * p.stride - p.pad;
    w.base = ((img * p.H + w.by) * p.W + w.bx) * p.CI;
  }
  return w;
}
__device__ __forceinline__ bool in_x(const NhwcWgrad& p, const WgradPixel& w, int4 e) {
  return w.ok && e.w && unsigned(w.by + e.y) < unsigned(p.H) && unsigned(w.bx + e.z) < unsigned(p.W);
}

// The index of tap-major column k in dw's row [ci][kh][kw].
__device__ __forceinline__ int dw_column(const NhwcWgrad& p, int k) {
  const int tap = p.div_ci.div(k);
  return (k - tap * p.CI) * p.taps + tap;
}
// dw[co][dw column] (+)= v, or the split's partial (in dw's layout, so that wgrad_reduce adds like with like).
template <class T>
__device__ __forceinline__ void wgrad_out(const NhwcWgrad& p, int co, int column, float v) {
  const int64_t i = int64_t(co) * p.K + column;
  if (p.ws)
    p.ws[int64_t(blockIdx.z) * p.CO * p.K + i] = v;
  else
    static_cast<T*>(p.dw)[i] = from_f32<T>(to_f32(static_cast<const T*>(p.dw)[i]) + v);
}

// v1: SIMT backward-filter, BM co x 128 columns, 8 pixels per stage, 8 x 8 outputs per thread (co rows
// {tm*4 + i, BM/2 + tm*4 + i}, columns {tn*4 + j, 64 + tn*4 + j}).
template <class T, int BM>
__global__ void __launch_bounds__(2 * BM, 2) conv_nhwc_wgrad_simt(const NhwcWgrad p) {
  constexpr int kThreads = 2 * BM;
  constexpr int kAPerThread = BM * kSimtBK / kThreads;        // 4
  constexpr int kBPerThread = kColTile * kSimtBK / kThreads;  // 8 or 4
  constexpr int kBStep = kThreads / kColTile;                 // 1 or 2
  constexpr int kPA = BM + 4, kPB = kColTile + 4;
  __shared__ __align__(16) float As[2 * kSimtBK * kPA];  // [stage][pixel][co]
  __shared__ __align__(16) float Bs[2 * kSimtBK * kPB];  // [stage][pixel][column]
  __shared__ int4 tab[kColTile];

  const T* __restrict__ dy = static_cast<const T*>(p.dy);
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const int tid = threadIdx.x, tm = tid / 16, tn = tid % 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * kColTile;
  const int KT = (p.npix + kSimtBK - 1) / kSimtBK;
  const int kt0 = blockIdx.z * p.tiles_per_split, kt1 = min(KT, kt0 + p.tiles_per_split);
  wgrad_columns(p, n0, tab, kThreads);
  __syncthreads();

  // dy loader: channel tid % BM (a warp reads consecutive channels of a pixel), pixels tid / BM + 2i.
  // x loader: column tid % 128 (consecutive channels of a tap), pixels tid / 128 + kBStep * i.
  const int a_co = tid % BM, a_p0 = tid / BM;
  const int b_col = tid % kColTile, b_p0 = tid / kColTile;
  const int4 col_entry = tab[b_col];
  float areg[kAPerThread], breg[kBPerThread];
  auto fetch = [&](int kt) {
    const int co = m0 + a_co;
#pragma unroll
    for (int i = 0; i < kAPerThread; ++i) {
      const int P = kt * kSimtBK + a_p0 + 2 * i;
      areg[i] = (P < p.npix && co < p.CO) ? to_f32(dy[int64_t(P) * p.CO + co]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kBPerThread; ++i) {
      const WgradPixel w = wgrad_pixel(p, kt * kSimtBK + b_p0 + kBStep * i);
      breg[i] = in_x(p, w, col_entry) ? to_f32(x[w.base + col_entry.x]) : 0.0f;
    }
  };
  auto stash = [&](int stage) {
#pragma unroll
    for (int i = 0; i < kAPerThread; ++i) As[(stage * kSimtBK + a_p0 + 2 * i) * kPA + a_co] = areg[i];
#pragma unroll
    for (int i = 0; i < kBPerThread; ++i) Bs[(stage * kSimtBK + b_p0 + kBStep * i) * kPB + b_col] = breg[i];
  };

  float acc[8][8] = {};
  simt_k_loop<kPA, kPB, BM / 2, 64>(kt0, kt1, As, Bs, tm, tn, acc, fetch, stash);

#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int k = n0 + (j < 4 ? 0 : 64) + tn * 4 + (j & 3);
    if (k >= p.K) continue;
    const int column = dw_column(p, k);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int co = m0 + (i < 4 ? 0 : BM / 2) + tm * 4 + (i & 3);
      if (co < p.CO) wgrad_out<T>(p, co, column, acc[i][j]);
    }
  }
}

// v2: tensor-core backward-filter, BM co x 128 columns x 32 pixels, warps (BM / 64) x 4 of 64 x 32. Both tiles are
// pixel-major ([pixel][co], [pixel][column]), filled by 16-byte cp.async (DY_LOAD / X_LOAD == kVec: co % 8 == 0,
// resp. ci % 8 == 0) or element gathers; the A and B fragments are ldmatrix.trans of them.
template <int BM>
constexpr int kWgradPitchA = BM + 8;  // [pixel][co] rows: 144 / 272 bytes, ldmatrix conflict-free
constexpr int kWgradPitchB = kColTile + 8;
template <int DY_LOAD, int X_LOAD>
constexpr int kNhwcWgradStages = DY_LOAD == kVec&& X_LOAD == kVec ? 4 : 2;
template <int BM, int DY_LOAD, int X_LOAD>
constexpr int kNhwcWgradSmemBytes =
    std::max(kNhwcWgradStages<DY_LOAD, X_LOAD>* kTcBK*(kWgradPitchA<BM> + kWgradPitchB) * 2, 64 * (kColTile + 8) * 4);

template <class T, int BM, int DY_LOAD, int X_LOAD>
__global__ void __launch_bounds__(2 * BM) conv_nhwc_wgrad_tc(const NhwcWgrad p) {
  constexpr int kThreads = 2 * BM;
  constexpr int kPA = kWgradPitchA<BM>, kPB = kWgradPitchB;
  constexpr int kAStage = kTcBK * kPA, kBStage = kTcBK * kPB;
  constexpr int kStages = kNhwcWgradStages<DY_LOAD, X_LOAD>;
  constexpr int kAChunks = kTcBK * BM / 8 / kThreads;        // 2
  constexpr int kBChunks = kTcBK * kColTile / 8 / kThreads;  // 4 or 2
  constexpr int kAPerThread = kTcBK * BM / kThreads;         // 16
  constexpr int kBPerThread = kTcBK * kColTile / kThreads;   // 32 or 16
  constexpr int kBStep = kThreads / kColTile;                // 1 or 2
  constexpr int kStagePitch = kColTile + 8;
  extern __shared__ __align__(16) unsigned char smem[];  // kNhwcWgradSmemBytes<BM, DY_LOAD, X_LOAD>
  __shared__ int4 tab[kColTile];
  uint16_t* As = reinterpret_cast<uint16_t*>(smem);  // [kStages][32 pixels][kPA]
  uint16_t* Bs = As + kStages * kAStage;             // [kStages][32 pixels][kPB]

  const uint16_t* __restrict__ dy = static_cast<const uint16_t*>(p.dy);
  const uint16_t* __restrict__ x = static_cast<const uint16_t*>(p.x);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / 4, wn = warp % 4;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * kColTile;
  const int KT = (p.npix + kTcBK - 1) / kTcBK;
  const int kt0 = blockIdx.z * p.tiles_per_split, kt1 = min(KT, kt0 + p.tiles_per_split);
  wgrad_columns(p, n0, tab, kThreads);
  __syncthreads();

  const int a_co = tid % BM, a_p0 = tid / BM;               // dy gather: channel, pixels a_p0 + 2i
  const int b_col = tid % kColTile, b_p0 = tid / kColTile;  // x gather: column, pixels b_p0 + kBStep * i
  const int4 col_entry = tab[b_col];
  uint16_t areg[DY_LOAD == kVec ? 1 : kAPerThread], breg[X_LOAD == kVec ? 1 : kBPerThread];

  auto fetch = [&](int kt, int stage) {
    const int P0 = kt * kTcBK;
    if constexpr (DY_LOAD == kVec) {
      // dy rows are contiguous channels: chunk c of the tile is pixel c / (BM / 8), channels 8 (c % (BM / 8)) + 0..7.
#pragma unroll
      for (int i = 0; i < kAChunks; ++i) {
        const int c = tid + i * kThreads, row = c / (BM / 8), qc = c % (BM / 8);
        const int P = P0 + row, co = m0 + qc * 8;
        const bool ok = P < p.npix && co < p.CO;
        cp_async16(As + stage * kAStage + row * kPA + qc * 8, ok ? dy + int64_t(P) * p.CO + co : dy, ok);
      }
    } else {
      const int co = m0 + a_co;
#pragma unroll
      for (int i = 0; i < kAPerThread; ++i) {
        const int P = P0 + a_p0 + 2 * i;
        areg[i] = (P < p.npix && co < p.CO) ? __ldg(dy + int64_t(P) * p.CO + co) : uint16_t(0);
      }
    }
    if constexpr (X_LOAD == kVec) {
      // 16 chunks of 8 columns per pixel: 8 channels of one tap (ci % 8 == 0).
#pragma unroll
      for (int i = 0; i < kBChunks; ++i) {
        const int c = tid + i * kThreads, row = c >> 4, qc = c & 15;
        const WgradPixel w = wgrad_pixel(p, P0 + row);
        const int4 e = tab[qc * 8];
        const bool ok = in_x(p, w, e);
        cp_async16(Bs + stage * kBStage + row * kPB + qc * 8, ok ? x + w.base + e.x : x, ok);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kBPerThread; ++i) {
        const WgradPixel w = wgrad_pixel(p, P0 + b_p0 + kBStep * i);
        breg[i] = in_x(p, w, col_entry) ? __ldg(x + w.base + col_entry.x) : uint16_t(0);
      }
    }
  };
  auto stash = [&](int stage) {
    if constexpr (DY_LOAD == kGather) {
#pragma unroll
      for (int i = 0; i < kAPerThread; ++i) As[stage * kAStage + (a_p0 + 2 * i) * kPA + a_co] = areg[i];
    }
    if constexpr (X_LOAD == kGather) {
#pragma unroll
      for (int i = 0; i < kBPerThread; ++i) Bs[stage * kBStage + (b_p0 + kBStep * i) * kPB + b_col] = breg[i];
    }
    (void)stage;
  };

  float acc[4][4][4] = {};
  auto compute = [&](int stage) {
    // A (co x pixels) from [pixel][co] and B from [pixel][column]: both mn-major, transposed on load
    warp_tile_mma<T, false, false>(acc, As + stage * kAStage, kPA, wm * 64, Bs + stage * kBStage, kPB, wn * 32, lane);
  };

  pipelined_k_loop<kStages>(kt0, kt1, fetch, stash, compute);

  // Epilogue: one warp row (64 co) at a time through shared memory, then rows of columns.
  const int k = n0 + b_col;
  const int column = k < p.K ? dw_column(p, k) : 0;
  float* st = reinterpret_cast<float*>(smem);
  const int gq = lane >> 2, tq = lane & 3;  // the fragments' row and column pair
#pragma unroll
  for (int pass = 0; pass < BM / 64; ++pass) {
    __syncthreads();
    if (wm == pass) stage_warp_tile(st, kStagePitch, acc, wn, gq, tq);
    __syncthreads();
    if (k < p.K)
      for (int r = b_p0; r < 64; r += kBStep) {
        const int co = m0 + pass * 64 + r;
        if (co < p.CO) wgrad_out<T>(p, co, column, st[r * kStagePitch + b_col]);
      }
  }
}

// ---- dbias, cuDNN's filter layout ----------------------------------------------------------------------------

// partial[co][s] = sum of dy[P][co] over the s-th chunk of pixels. Block: 32 channels x 8 lanes of rows; lane
// ty adds rows begin + ty, + 8, ... in order, then lane 0 adds the 8 lanes in order.
template <class T>
__global__ void __launch_bounds__(256)
    bias_grad_nhwc_partial(const T* __restrict__ dy, int CO, int npix, int chunk, float* __restrict__ partial) {
  __shared__ float sums[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int co = blockIdx.x * 32 + tx, s = blockIdx.y;
  const int begin = s * chunk, end = min(npix, begin + chunk);
  float acc = 0.0f;
  if (co < CO)
    for (int P = begin + ty; P < end; P += 8) acc += to_f32(dy[int64_t(P) * CO + co]);
  sums[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && co < CO) {
    float t = 0.0f;
    for (int r = 0; r < 8; ++r) t += sums[r][tx];
    partial[int64_t(co) * gridDim.y + s] = t;
  }
}

// dw [co][ci][taps] = w_krsc [co][taps][ci].
template <class T>
__global__ void filter_from_krsc(const T* __restrict__ wk, T* __restrict__ dw, int ci, int taps, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / (int64_t(ci) * taps);
    const int rem = int(i - o * ci * taps), c = rem / taps, tap = rem - c * taps;
    dw[i] = wk[(o * taps + tap) * ci + c];
  }
}

// ---- host side -------------------------------------------------------------------------------------------

template <class T, int BN, int LOAD>
void launch_nhwc_tc(NhwcGemm p, dim3 grid, cudaStream_t st) {
  p.prefetch = epilogue_prefetch() ? 1 : 0;
  detail::allow_dynamic_smem<conv_nhwc_tc<T, BN, LOAD>>(kNhwcSmemBytes<BN, LOAD>);
  conv_nhwc_tc<T, BN, LOAD><<<grid, 2 * BN, kNhwcSmemBytes<BN, LOAD>, st>>>(p);
}

// vec: the activation tile by 16-byte cp.async (C % 8 == 0 and an aligned source).
template <class T>
void launch_nhwc_gemm(const NhwcGemm& p, bool tc, bool vec, cudaStream_t st) {
  if (p.npix == 0 || p.M == 0) return;
  const bool small = p.M <= 64;
  const dim3 grid(unsigned((p.npix + kPixTile - 1) / kPixTile),
                  unsigned((p.M + (small ? 63 : 127)) / (small ? 64 : 128)));
  if constexpr (std::is_same_v<T, float>) {
    (void)tc, (void)vec;
    if (small)
      conv_nhwc_simt<T, 64><<<grid, 128, 0, st>>>(p);
    else
      conv_nhwc_simt<T, 128><<<grid, 256, 0, st>>>(p);
  } else if (!tc) {
    if (small)
      conv_nhwc_simt<T, 64><<<grid, 128, 0, st>>>(p);
    else
      conv_nhwc_simt<T, 128><<<grid, 256, 0, st>>>(p);
  } else if (small) {
    if (vec)
      launch_nhwc_tc<T, 64, kVec>(p, grid, st);
    else
      launch_nhwc_tc<T, 64, kGather>(p, grid, st);
  } else {
    if (vec)
      launch_nhwc_tc<T, 128, kVec>(p, grid, st);
    else
      launch_nhwc_tc<T, 128, kGather>(p, grid, st);
  }
  HPDT_CUDA_CHECK_LAUNCH();
}

void set_epilogue(NhwcGemm& p, const Conv2dEpilogue& e) {
  p.bias = e.bias ? e.bias->data() : nullptr;
  p.scale = e.scale ? e.scale->data() : nullptr;
  p.shift = e.shift ? e.shift->data() : nullptr;
  p.residual = e.residual ? e.residual->data() : nullptr;
  p.relu = e.relu ? 1 : 0;
}

template <class T>
void run_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& e, Tensor& y, bool tc,
                 const Stream& stream) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  int64_t lda = 0;
  Tensor packed, xs;  // (released after the launch: the stream-ordered allocator reuses them after it)
  NhwcGemm p;
  bool vec = s.c_in % 8 == 0 && aligned16(x.data());                 // 16-byte loads of 8 channels
  if (space_to_depth_applies(s, tc && !std::is_same_v<T, float>)) {  // (space_to_depth.cuh)
    const SpaceToDepth d = space_to_depth<T>(s, x, w, Layout::nhwc, packed, xs, stream);
    lda = int64_t(d.cs) * d.th * d.tw;
    p.a = packed.data();
    p.src = xs.data(), p.C = d.cs, p.Hs = d.hs, p.Ws = d.ws;
    p.sy = p.sx = 1, p.oy0 = p.ox0 = 0;
    p.div_c = FastDiv(d.cs), p.div_kw = FastDiv(d.tw), p.K = int(lda);
    vec = true;
  } else {
    p.a = forward_weights(s, w, tc, true, packed, &lda, stream);
    p.src = x.data(), p.C = int(s.c_in), p.Hs = int(s.h), p.Ws = int(s.w);
    p.sy = p.sx = int(s.stride), p.oy0 = p.ox0 = int(-s.pad);
    p.div_c = FastDiv(s.c_in), p.div_kw = FastDiv(s.kw), p.K = int(s.c_in * s.kh * s.kw);
  }
  p.lda = int(lda), p.M = int(s.c_out), p.tsign = 1;
  p.pix_hw = FastDiv(oh * ow), p.pix_w = FastDiv(ow), p.npix = int(s.n * oh * ow);
  p.dst = y.data(), p.dst_h = int(oh), p.dst_w = int(ow);
  set_epilogue(p, e);
  p.out4 = out4_ok(p) ? 1 : 0;
  if (epilogue_computes_stats(e, tc && !std::is_same_v<T, float>))  // a partial per channel and half pixel tile
    p.stats = e.stats->start(p.M, 2 * ((int64_t(p.npix) + kPixTile - 1) / kPixTile), y.data(), p.npix, stream);
  launch_nhwc_gemm<T>(p, tc, vec, detail::native(stream));
}

// Backward-data by stride phases (conv_common.cuh: DataPhase): each phase is a dense stride-1 implicit GEMM over
// its own taps from dy, writing its strided sub-grid of dx; the pixels of phases without taps are zeroed by one
// memset of dx. With `v3` a phase runs on conv v3 where it takes it. Batch norm's backward sums (bn) come from every
// phase's epilogue, v2's or conv v3's, each phase's partials after the previous phases' (where every dx pixel is in
// a phase with taps).
// Returns whether a phase ran on conv v3.
template <class T>
bool run_backward_data(const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx, bool tc, bool v3,
                       const Tensor* residual, ChannelGradSums* bn, const Stream& stream) {
  bool ran_v3 = false;
  if (space_to_depth_backward_data_applies(s, tc && !std::is_same_v<T, float>, residual, bn)) {
    // (space_to_depth.cuh) one phase of 16 or more rows of its tiles real instead of s^2 phases of C
    space_to_depth_backward_data<T>(s, w, dx, Layout::nhwc, stream,
                                    [&](const Conv2dShape& rs, const Tensor& wr, Tensor& dxs) {
                                      ran_v3 = run_backward_data<T>(rs, dy, wr, dxs, tc, v3, nullptr, nullptr, stream);
                                    });
    return ran_v3;
  }
  const cudaStream_t st = detail::native(stream);
  int64_t total = 0;
  const std::vector<DataPhase> phases = data_phases(s, &total);
  Tensor packed = device_buffer(total, w.dtype(), w.device(), stream);
  const T* pk = static_cast<const T*>(packed.data());
  const bool vec = s.c_out % 8 == 0 && aligned16(dy.data());
  // phase f's implicit GEMM as v2 runs it
  const auto gemm_of = [&](const DataPhase& f) {
    NhwcGemm p;
    p.a = pk + f.offset, p.lda = int(f.lda), p.M = int(s.c_in);
    p.src = dy.data(), p.C = int(s.c_out), p.Hs = int(s.out_h()), p.Ws = int(s.out_w());
    p.pix_hw = FastDiv(f.hp * f.wp), p.pix_w = FastDiv(f.wp), p.npix = int(s.n * f.hp * f.wp);
    p.sy = p.sx = 1, p.oy0 = int(f.qy0), p.ox0 = int(f.qx0), p.tsign = -1;
    p.div_c = FastDiv(s.c_out), p.div_kw = FastDiv(f.kwp), p.K = int(f.khp * f.kwp * s.c_out);
    p.dst = dx.data(), p.dst_h = int(s.h), p.dst_w = int(s.w);
    p.dys = p.dxs = int(s.stride), p.dy0 = int(f.iy0), p.dx0 = int(f.ix0);
    p.residual = residual ? residual->data() : nullptr;
    return p;
  };
  // Batch norm's sums wanted: conv v3's epilogue reduces pairs of channels (an even count, dx, x and y 4-byte
  // aligned), else v2 runs every phase
  const bool sums = epilogue_computes_grad_sums(bn, tc && !std::is_same_v<T, float>, phases);
  const bool v3_sums_ok = !sums || (s.c_in % 2 == 0 && aligned4(dx.data()) && aligned4(bn->x.data()) &&
                                    (!bn->y.defined() || aligned4(bn->y.data())));
  // ... and as conv v3 would (conv_v3.cuh), where v3 is chosen and takes it
  const auto v3_of = [&](const DataPhase& f, ConvV3& c) {
#if HPDT_HAVE_GEMM_WGMMA
    if (!v3 || !v3_sums_ok) return false;
    const NhwcGemm p = gemm_of(f);
    c.w = p.a, c.ldw = p.lda, c.M = p.M;
    c.src = p.src, c.C = p.C, c.hs = p.Hs, c.ws = p.Ws;
    c.n = int(s.n), c.hp = int(f.hp), c.wp = int(f.wp);
    c.oy0 = p.oy0, c.ox0 = p.ox0, c.tsign = -1, c.kh = int(f.khp), c.kw = int(f.kwp);
    c.dst = p.dst, c.dst_h = p.dst_h, c.dst_w = p.dst_w, c.dys = p.dys, c.dy0 = p.dy0, c.dxs = p.dxs, c.dx0 = p.dx0;
    c.residual = p.residual;
    return conv_v3_can_take(c, dy.dtype(), stream);
#else
    (void)f, (void)c;
    return false;
#endif
  };
  // the sums' partials: per channel, 2 per v2 pixel tile or conv v3 pixel box of each phase
  if (sums) {
    int64_t splits = 0;
    for (const DataPhase& f : phases) {
      ConvV3 c;
      splits += v3_of(f, c) ? conv_v3_row_groups(c) : 2 * ((s.n * f.hp * f.wp + kPixTile - 1) / kPixTile);
    }
    bn->start(s.c_in, splits, dx.data(), s.n * s.h * s.w, stream);
  }
  // dx pixels no tap reaches (3 of 4 phases of a 1x1 stride-2 convolution) are zeros: one memset of dx, then
  // only the phases with taps. A K = 0 GEMM per empty phase wrote them as a strided sub-grid instead, slowly
  // (ResNet-50's 1x1 s2 1024->2048 backward-data at batch 256 took 0.67 ms on the H100, its one real GEMM
  // about 0.3 ms of it).
  // With a residual those pixels are the residual's: one copy instead.
  if (std::any_of(phases.begin(), phases.end(), [](const DataPhase& f) { return f.khp * f.kwp == 0; }))
    clear_or_copy(dx, residual, st);
  int bn_split = 0;
  for (const DataPhase& f : phases) {
    repack_phase_weights(s, f, w, packed, st);
    if (f.khp * f.kwp == 0) continue;
    ConvV3 c;
    if (v3_of(f, c)) {  // the same implicit GEMM on wgmma + TMA
      if (bn && bn->partial.defined()) {
        c.grad_sums = bn, c.sums_split0 = bn_split;
        bn_split += int(conv_v3_row_groups(c));
      }
      conv_v3_launch(c, dy.dtype(), stream);
      ran_v3 = true;
      continue;
    }
    NhwcGemm p = gemm_of(f);
    p.out4 = out4_ok(p) ? 1 : 0;
    if (bn && bn->partial.defined()) {
      p.bn = bn_grad_epilogue(*bn, bn_split);
      bn_split += 2 * ((p.npix + kPixTile - 1) / kPixTile);
    }
    launch_nhwc_gemm<T>(p, tc, vec, st);
  }
  return ran_v3;
}

template <class T, int BM, int DY_LOAD, int X_LOAD>
void launch_wgrad_tc(const NhwcWgrad& p, const WgradGrid& g, Tensor& dw, const Stream& stream) {
  launch_wgrad<conv_nhwc_wgrad_tc<T, BM, DY_LOAD, X_LOAD>>(p, g, 2 * BM, kNhwcWgradSmemBytes<BM, DY_LOAD, X_LOAD>, dw,
                                                           stream);
}

template <class T, int BM>
void launch_wgrad_tc_modes(const NhwcWgrad& p, const WgradGrid& g, bool vec_dy, bool vec_x, Tensor& dw,
                           const Stream& stream) {
  if (vec_dy && vec_x)
    launch_wgrad_tc<T, BM, kVec, kVec>(p, g, dw, stream);
  else if (vec_dy)
    launch_wgrad_tc<T, BM, kVec, kGather>(p, g, dw, stream);
  else
    launch_wgrad_tc<T, BM, kGather, kGather>(p, g, dw, stream);
}

template <class T>
void run_backward_filter(const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw, bool tc,
                         const Stream& stream) {
  const int64_t oh = s.out_h(), ow = s.out_w(), taps = s.kh * s.kw, K = s.c_in * taps, npix = s.n * oh * ow;
  if (s.c_out == 0 || K == 0 || npix == 0) return;
  if (space_to_depth_applies(s, tc && !std::is_same_v<T, float>)) {
    // (space_to_depth.cuh) its x columns are 16-byte loads of 8 channels where x's 3 channels were gathered one by one
    return space_to_depth_backward_filter<T>(s, x, dw, Layout::nhwc, stream,
                                             [&](const Conv2dShape& rs, const Tensor& xs, Tensor& dws) {
                                               run_backward_filter<T>(rs, xs, dy, dws, tc, stream);
                                             });
  }
  NhwcWgrad p;
  p.dy = dy.data(), p.x = x.data();
  p.CO = int(s.c_out), p.CI = int(s.c_in), p.H = int(s.h), p.W = int(s.w), p.KW = int(s.kw);
  p.stride = int(s.stride), p.pad = int(s.pad), p.taps = int(taps), p.K = int(K), p.npix = int(npix);
  p.div_ohw = FastDiv(oh * ow), p.div_ow = FastDiv(ow), p.div_ci = FastDiv(s.c_in), p.div_kw = FastDiv(s.kw);
  p.dw = dw.data();
  const bool small = s.c_out <= 64;
  const int64_t bm = small ? 64 : 128, bk = tc ? kTcBK : kSimtBK;
  tc = tc && !std::is_same_v<T, float>;
  const WgradGrid g{(K + kColTile - 1) / kColTile, (s.c_out + bm - 1) / bm, (npix + bk - 1) / bk,
                    2.0 * double(bm * kColTile * bk), tc};
  if (!tc) {
    if (small)
      launch_wgrad<conv_nhwc_wgrad_simt<T, 64>>(p, g, 128, 0, dw, stream);
    else
      launch_wgrad<conv_nhwc_wgrad_simt<T, 128>>(p, g, 256, 0, dw, stream);
    return;
  }
  if constexpr (!std::is_same_v<T, float>) {
    const bool vec_dy = s.c_out % 8 == 0 && aligned16(dy.data());
    const bool vec_x = vec_dy && s.c_in % 8 == 0 && aligned16(x.data());
    if (small)
      launch_wgrad_tc_modes<T, 64>(p, g, vec_dy, vec_x, dw, stream);
    else
      launch_wgrad_tc_modes<T, 128>(p, g, vec_dy, vec_x, dw, stream);
  }
}

// A 1x1 stride-1 unpadded NHWC convolution is a plain GEMM of the [pixels, channels] matrices; with
// `v3` (kernels::conv_choice() v3, hpdt-train --conv v3, or Find's choice) and ConvVariant::automatic it runs on
// GEMM v3 (wgmma + TMA)
// wherever v3 takes the call (16-bit, 16-byte aligned rows, a Hopper GPU), and on the conv kernels otherwise
// (whatever kernels::gemm_choice() says: that is for the GEMMs of the linear layers).
// The GEMM (trans_a, trans_b, A, lda, B, ldb) as cuda::gemm takes it; true when v3 takes it.
bool one_by_one_on_gemm_v3(bool v3, const Conv2dShape& s, ConvVariant variant, bool trans_a, bool trans_b,
                           const void* a, int64_t lda, const void* b, int64_t ldb, DType dt, const Stream& stream) {
  return v3 && variant == ConvVariant::automatic && s.kh == 1 && s.kw == 1 &&
         s.stride == 1 && s.pad == 0 && dt != DType::f32 && s.n * s.h * s.w > 0 && s.c_in > 0 && s.c_out > 0 &&
         gemm_resolve(GemmVariant::v3_wgmma, trans_a, trans_b, lda, ldb, a, b, dt, stream) == GemmVariant::v3_wgmma;
}

// With `v3` and ConvVariant::automatic, the other convolutions' implicit GEMMs (the forward
// without scale, shift or ReLU in its epilogue; every phase of a backward-data; the backward-filter) run on the
// wgmma + TMA convolution (conv_v3.cuh) wherever it takes them (16-bit, the reduced channels % 64 == 0, stride
// <= 8, a Hopper GPU and an sm_90 build), and on the conv kernels otherwise.
bool conv_v3_chosen(bool v3, ConvVariant variant, DType dt) {
  return HPDT_HAVE_GEMM_WGMMA && v3 && variant == ConvVariant::automatic && dt != DType::f32;
}

// The forward on conv v3, when chosen and it takes the convolution; false otherwise (nothing ran).
bool forward_on_conv_v3(bool v3, const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& e,
                        Tensor& y, ConvVariant variant, const Stream& stream) {
#if HPDT_HAVE_GEMM_WGMMA
  if (!conv_v3_chosen(v3, variant, x.dtype()) || e.scale || e.shift || e.relu) return false;
  ConvV3 c;
  c.ldw = s.c_in * s.kh * s.kw, c.M = int(s.c_out);  // the repacked weights' row (checked again below)
  c.src = x.data(), c.C = int(s.c_in), c.hs = int(s.h), c.ws = int(s.w);
  c.n = int(s.n), c.hp = int(s.out_h()), c.wp = int(s.out_w()), c.stride = int(s.stride);
  c.oy0 = c.ox0 = int(-s.pad), c.tsign = 1, c.kh = int(s.kh), c.kw = int(s.kw);
  c.dst = y.data(), c.dst_h = c.hp, c.dst_w = c.wp;
  c.bias = e.bias ? e.bias->data() : nullptr, c.residual = e.residual ? e.residual->data() : nullptr;
  // (the epilogue reduces pairs of channels: an even count, y 4-byte aligned; else the batch norm's own pass)
  if (epilogue_computes_stats(e, true) && s.c_out % 2 == 0 && aligned4(y.data())) c.stats = e.stats;
  if (!conv_v3_can_take(c, x.dtype(), stream)) return false;
  Tensor packed;
  int64_t lda = 0;
  c.w = forward_weights(s, w, true, true, packed, &lda, stream);  // 16-byte aligned rows of K (% 64) values
  c.ldw = lda;
  conv_v3_launch(c, x.dtype(), stream);
  return true;
#else
  (void)v3, (void)s, (void)x, (void)w, (void)e, (void)y, (void)variant, (void)stream;
  return false;
#endif
}

// The backward-filter on conv v3 (dw += the sums), when chosen and it takes the convolution (ci % 64 == 0,
// co % 8 == 0); false otherwise (nothing ran).
bool backward_filter_on_conv_v3(bool v3, const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                                ConvVariant variant, const Stream& stream) {
#if HPDT_HAVE_GEMM_WGMMA
  if (!conv_v3_chosen(v3, variant, x.dtype())) return false;
  ConvV3Wgrad c;
  c.x = x.data(), c.dy = dy.data(), c.dw = dw.data();
  c.n = int(s.n), c.h = int(s.h), c.w = int(s.w), c.ci = int(s.c_in), c.co = int(s.c_out);
  c.kh = int(s.kh), c.kw = int(s.kw), c.stride = int(s.stride), c.pad = int(s.pad), c.oh = int(s.out_h());
  c.ow = int(s.out_w());
  if (!conv_v3_wgrad_can_take(c, x.dtype(), stream)) return false;
  conv_v3_wgrad_launch(c, x.dtype(), stream);
  return true;
#else
  (void)v3, (void)s, (void)x, (void)dy, (void)dw, (void)variant, (void)stream;
  return false;
#endif
}

// The three directions on v2 or (`v3`) v3 where it takes them; the entry points below choose. Each returns whether
// a v3 kernel (GEMM v3 or conv v3) ran.
bool forward_with(bool v3, const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& e, Tensor& y,
                  const Stream& stream, ConvVariant variant, bool tc) {
  if (e.stats) e.stats->clear_results();  // v2, conv v3 and GEMM v3 set them (Find's trials run here too)
  // y [P, co] = x [P, ci] w[co, ci]^T (+ bias in the GEMM's epilogue; the rest of a fused epilogue: conv kernels)
  const int64_t P = s.n * s.h * s.w;
  if (!e.scale && !e.shift && !e.residual && !e.relu &&
      one_by_one_on_gemm_v3(v3, s, variant, false, true, x.data(), s.c_in, w.data(), s.c_in, x.dtype(), stream)) {
    GemmEpilogue ge;
    ge.bias = e.bias ? e.bias->data() : nullptr;
    if (epilogue_computes_stats(e, true)) ge.column_stats = e.stats;  // y's channels are the GEMM's columns
    gemm(false, true, P, s.c_out, s.c_in, 1.0f, x.data(), s.c_in, w.data(), s.c_in, 0.0f, y.data(), s.c_out,
         x.dtype(), y.dtype(), ge, stream, GemmVariant::v3_wgmma);
    return true;
  }
  if (forward_on_conv_v3(v3, s, x, w, e, y, variant, stream)) return true;
  dispatch_floating(x.dtype(), "conv2d_forward", [&](auto tag) {
    using T = decltype(tag);
    run_forward<T>(s, x, w, e, y, tc, stream);
  });
  return false;
}

bool backward_data_with(bool v3, const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx,
                        const Stream& stream, ConvVariant variant, const Tensor* residual, bool tc,
                        ChannelGradSums* bn) {
  if (bn) bn->clear_results();  // v2, conv v3 and GEMM v3 set them (Find's trials run here too)
  // dx [P, ci] = dy [P, co] w [co, ci] (with a residual: the conv kernels, whose epilogue adds it)
  const int64_t P = s.n * s.h * s.w;
  if (!residual &&
      one_by_one_on_gemm_v3(v3, s, variant, false, false, dy.data(), s.c_out, w.data(), s.c_in, dy.dtype(), stream)) {
    GemmEpilogue ge;
    if (bn && conv_epilogue_bn_stats()) ge.column_grad_sums = bn;  // dx's channels are the GEMM's columns
    gemm(false, false, P, s.c_in, s.c_out, 1.0f, dy.data(), s.c_out, w.data(), s.c_in, 0.0f, dx.data(), s.c_in,
         dy.dtype(), dx.dtype(), ge, stream, GemmVariant::v3_wgmma);
    return true;
  }
  bool ran_v3 = false;
  dispatch_floating(dy.dtype(), "conv2d_backward_data", [&](auto tag) {
    using T = decltype(tag);
    ran_v3 = run_backward_data<T>(s, dy, w, dx, tc, conv_v3_chosen(v3, variant, dy.dtype()), residual, bn, stream);
  });
  return ran_v3;
}

// dw += the sums (dbias: the entry point's)
bool backward_filter_with(bool v3, const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                          const Stream& stream, ConvVariant variant, bool tc) {
  // dw [co, ci] += dy [P, co]^T x [P, ci] (split-K over the pixels inside the GEMM)
  const int64_t P = s.n * s.h * s.w;
  if (one_by_one_on_gemm_v3(v3, s, variant, true, false, dy.data(), s.c_out, x.data(), s.c_in, x.dtype(), stream)) {
    gemm(true, false, s.c_out, s.c_in, P, 1.0f, dy.data(), s.c_out, x.data(), s.c_in, 1.0f, dw.data(), s.c_in,
         x.dtype(), dw.dtype(), {}, stream, GemmVariant::v3_wgmma);
    return true;
  }
  if (backward_filter_on_conv_v3(v3, s, x, dy, dw, variant, stream)) return true;
  dispatch_floating(x.dtype(), "conv2d_backward_filter", [&](auto tag) {
    using T = decltype(tag);
    run_backward_filter<T>(s, x, dy, dw, tc, stream);
  });
  return false;
}

// ---- Find (kernels::ConvChoice::find) ----------------------------------------------------------------------------

// A convolution, as far as its speed goes: direction, shape, dtypes, the epilogue's work, device.
struct FindKey {
  int device, direction;  // 0 forward, 1 backward-data, 2 backward-filter
  int64_t n, h, w, c_in, c_out, kh, kw, stride, pad;
  DType in, out;
  int epilogue;  // bits: bias, scale, shift, residual, relu, batch norm's statistics asked for
  auto operator<=>(const FindKey&) const = default;
};

// The process's choices (true: v3), all devices.
find::Choices<FindKey, bool, ConvFound>& found_choices() {
  static auto* c = new find::Choices<FindKey, bool, ConvFound>;  // never destroyed
  return *c;
}

const char* direction_name(int d) { return d == 0 ? "fwd" : d == 1 ? "bwd_data" : "bwd_filter"; }

std::string describe(const FindKey& k) {
  std::string s = std::string(direction_name(k.direction)) + " " + std::to_string(k.kh) + "x" + std::to_string(k.kw) +
                  (k.stride > 1 ? "s" + std::to_string(k.stride) : "") + " " + std::to_string(k.c_in) + "->" +
                  std::to_string(k.c_out) + " " + std::to_string(k.n) + "x" + std::to_string(k.h) + "x" +
                  std::to_string(k.w) + (k.pad ? " pad " + std::to_string(k.pad) : "") + " " +
                  std::string(dtype_name(k.in)) + (k.out != k.in ? "->" + std::string(dtype_name(k.out)) : "");
  static const char* kParts[] = {" bias", " scale", " shift", " residual", " relu", " bn-stats"};
  for (int b = 0; b < 6; ++b)
    if (k.epilogue >> b & 1) s += kParts[b];
  return s;
}

// v3 or not for this convolution under Find: the cached choice, else (outside a CUDA-graph capture) the faster of
// v2 and v3, run(v3, scratch) timed on a scratch output like `out` (the call's own output is not touched), cached;
// v2 untimed where v3 does not take the convolution (run(true, ..) ran no v3 kernel: the same kernels both ways);
// inside a capture an untimed convolution takes v2 and stays untimed.
template <class Run>
bool found_v3(const FindKey& key, const Tensor& out, const Stream& stream, Run run) {
  bool cached = false;
  if (found_choices().lookup(key, cached)) return cached;
  if (find::capturing(detail::native(stream))) {
    HPDT_LOG(debug) << "conv2d (NHWC): " << describe(key) << " first seen inside a CUDA-graph capture: not timed, v2";
    return false;
  }
  Tensor scratch = Tensor::empty(out.shape(), out.dtype(), out.device(), AllocOptions{.stream = &stream});
  ConvFound f;
  f.call = describe(key);
  f.choice = "v2";
  if (run(true, scratch)) {
    const std::vector<double> ms = find::time_each(2, detail::native(stream), [&](int i) { run(i == 1, scratch); });
    f.choice = ms[1] < ms[0] ? "v3" : "v2";
    f.ms = {{"v2", ms[0]}, {"v3", ms[1]}};
  }
  HPDT_LOG(debug) << "conv2d (NHWC): Find took " << f.choice << " for " << f.call
                  << (f.ms.empty() ? " (v3 does not take it)" : "");
  const bool v3 = f.choice == "v3";
  return found_choices().add(key, v3, std::move(f));
}

FindKey find_key(int direction, const Conv2dShape& s, DType in, DType out, const Conv2dEpilogue* e,
                 const Tensor* residual, const Stream& stream) {
  FindKey k{};
  k.device = stream.device().index, k.direction = direction;
  k.n = s.n, k.h = s.h, k.w = s.w, k.c_in = s.c_in, k.c_out = s.c_out, k.kh = s.kh, k.kw = s.kw, k.stride = s.stride;
  k.pad = s.pad, k.in = in, k.out = out;
  if (e)
    k.epilogue = (e->bias ? 1 : 0) | (e->scale ? 2 : 0) | (e->shift ? 4 : 0) | (e->residual ? 8 : 0) |
                 (e->relu ? 16 : 0) | (e->stats ? 32 : 0);  // both compute the statistics, each at its own cost
  if (residual) k.epilogue |= 8;
  return k;
}

// Whether this call runs v3: kernels::conv_choice() v3, or under find Find's choice (16-bit, automatic: where the
// two differ at all).
template <class Run>
bool choose_v3(int direction, const Conv2dShape& s, DType in, DType out, const Conv2dEpilogue* e,
               const Tensor* residual, const Tensor& dst, ConvVariant variant, const Stream& stream, Run run) {
  const ConvChoice c = conv_choice();
  if (c != ConvChoice::find) return c == ConvChoice::v3;
  if (variant != ConvVariant::automatic || in == DType::f32 || dst.numel() == 0) return false;
  return found_v3(find_key(direction, s, in, out, e, residual, stream), dst, stream, run);
}

}  // namespace

void conv2d_forward_nhwc(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& e, Tensor& y,
                         const Stream& stream, ConvVariant variant) {
  const bool tc = use_tensor_cores(variant, x.dtype(), "conv2d_forward");
  check_index_range("conv2d_forward", s);
  if (e.stats) e.stats->clear_results();
  if (y.numel() == 0) return;
  const bool v3 = choose_v3(0, s, x.dtype(), y.dtype(), &e, nullptr, y, variant, stream, [&](bool c, Tensor& out) {
    return forward_with(c, s, x, w, e, out, stream, variant, tc);
  });
  forward_with(v3, s, x, w, e, y, stream, variant, tc);
}

void conv2d_backward_data_nhwc(const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx,
                               const Stream& stream, ConvVariant variant, const Tensor* residual,
                               ChannelGradSums* bn_grad) {
  const bool tc = use_tensor_cores(variant, dy.dtype(), "conv2d_backward_data");
  check_index_range("conv2d_backward_data", s);
  if (bn_grad) bn_grad->clear_results();
  if (dx.numel() == 0) return;
  // Find's trials run without the batch norm's sums: their output is a scratch tensor, not the one the sums describe
  const bool v3 = choose_v3(1, s, dy.dtype(), dx.dtype(), nullptr, residual, dx, variant, stream,
                            [&](bool c, Tensor& out) {
                              return backward_data_with(c, s, dy, w, out, stream, variant, residual, tc, nullptr);
                            });
  backward_data_with(v3, s, dy, w, dx, stream, variant, residual, tc, bn_grad);
}

void conv2d_backward_filter_nhwc(const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias,
                                 const Stream& stream, ConvVariant variant) {
  const bool tc = use_tensor_cores(variant, x.dtype(), "conv2d_backward_filter");
  check_index_range("conv2d_backward_filter", s);
  const bool v3 = choose_v3(2, s, x.dtype(), dw.dtype(), nullptr, nullptr, dw, variant, stream,
                            [&](bool c, Tensor& out) { return backward_filter_with(c, s, x, dy, out, stream, variant, tc); });
  backward_filter_with(v3, s, x, dy, dw, stream, variant, tc);
  if (dbias) conv_detail::bias_grad_nhwc(dy, *dbias, stream);
}

std::vector<ConvFound> conv_found() { return found_choices().reports(); }

void conv_forget_found() { found_choices().clear(); }

void tma_im2col_load_nhwc(const Tensor& src, const int (&lower)[2], const int (&upper)[2], int stride, int x, int y,
                          int img, int ox, int oy, int pixels, Tensor& dst, const Stream& stream) {
  HPDT_CHECK(src.ndim() == 4 && src.size(3) == 64 && src.is_cuda() && dst.is_cuda() && dst.dtype() == src.dtype() &&
                 dst.numel() == int64_t(pixels) * 64,
             "tma_im2col_load_nhwc: src [n][h][w][64] and dst of ", pixels, " x 64 values of src's dtype are needed");
#if HPDT_HAVE_GEMM_WGMMA
  conv_detail::conv_v3_im2col_load(src.data(), src.dtype(), int(src.size(0)), int(src.size(1)), int(src.size(2)), lower,
                                   upper, stride, x, y, img, ox, oy, pixels, dst.data(), stream);
#else
  (void)lower, (void)upper, (void)stride, (void)x, (void)y, (void)img, (void)ox, (void)oy, (void)stream;
  HPDT_CHECK(false, "tma_im2col_load_nhwc: this build has no sm_90 kernels");
#endif
}

void conv2d_filter_from_krsc(const Conv2dShape& s, const Tensor& w_krsc, Tensor& dw, const Stream& stream) {
  const int64_t n = dw.numel();
  if (n == 0) return;
  dispatch_floating(dw.dtype(), "conv2d_backward_filter", [&](auto tag) {
    using T = decltype(tag);
    filter_from_krsc<T><<<detail::grid_for(n, kThreads1D), kThreads1D, 0, detail::native(stream)>>>(
        static_cast<const T*>(w_krsc.data()), static_cast<T*>(dw.data()), int(s.c_in), int(s.kh * s.kw), n);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

namespace conv_detail {

void bias_grad_nhwc(const Tensor& dy, Tensor& dbias, const Stream& stream) {
  const int64_t co = dy.size(3), npix = dy.size(0) * dy.size(1) * dy.size(2);
  if (co == 0) return;
  HPDT_CHECK(npix * co < (int64_t(1) << 31), "conv2d_backward_filter: dy ", dy.str(),
             " too large for the dbias reduction");
  const cudaStream_t st = detail::native(stream);
  // Chunks of at least 512 pixels and about 1024 blocks in all: a function of the shape only.
  const int64_t col_blocks = (co + 31) / 32;
  int64_t splits = std::clamp<int64_t>(std::min<int64_t>(npix / 512, (1024 + col_blocks - 1) / col_blocks), 1, 1024);
  const int64_t chunk = std::max<int64_t>(1, (npix + splits - 1) / splits);
  splits = std::max<int64_t>(1, (npix + chunk - 1) / chunk);
  Tensor partial = device_buffer(co * splits, DType::f32, dy.device(), stream);
  dispatch_floating(dy.dtype(), "conv2d_backward_filter", [&](auto tag) {
    using T = decltype(tag);
    bias_grad_nhwc_partial<T><<<dim3(unsigned(col_blocks), unsigned(splits)), 256, 0, st>>>(
        static_cast<const T*>(dy.data()), int(co), int(npix), int(chunk), partial.data<float>());
    HPDT_CUDA_CHECK_LAUNCH();
  });
  bias_grad_final(partial.data<float>(), int(co), int(splits), dbias, st);
}

}  // namespace conv_detail

}  // namespace hpdt::kernels::cuda
