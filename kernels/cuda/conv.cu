// CUDA conv2d, NCHW, groups = 1, as implicit GEMM: no im2col buffer, the loaders gather the convolution's
// operand from x (or dy) straight into shared memory, padding reading as zero. The CPU oracle is
// kernels/cpu/conv.cpp; cuDNN (kernels/cuda/conv_vendor.cu) is the peer to beat. The NHWC twin is conv_nhwc.cu;
// what both use (PTX wrappers, weight repacking, stride phases, split-K sums) is in conv_common.cuh.
//
// The three GEMMs (pixels = n * oh * ow output positions, taps = kh * kw):
//   forward          y[co][pixel]  = sum_k  w'[co][k] * x(k, pixel)        M = co, N = pixels, K = taps * ci
//   backward-data    dx[ci][pixel] = sum_k  w''[ci][k] * dy(k, pixel)      M = ci, N = pixels, K = taps * co
//                    (one launch per stride phase: see run_backward_data)
//   backward-filter  dw[co][k]     = sum_P  dy[co][P] * x(k, P)            M = co, N = ci * taps, K = pixels
// w' and w'' are the weights repacked tap-major (k = tap * C + channel), so that a 32-wide k tile of a layer
// with C % 16 == 0 has one tap per 16-row half, whose 16 gathers share one bounds check (the "channels" gather).
//
// Variants (each for the three directions, chosen by ConvVariant):
//   v1 SIMT: 64|128 x 128 block tile, k step 8, 8 x 8 outputs per thread from f32 shared memory, register-staged
//      double buffering; f32, f16, bf16 storage.
//   v2 tensor cores (f16, bf16): 64|128 x 128 x 32 block tile, 4|8 warps of 64 x 32, mma.sync.m16n8k16 with f32
//      accumulators, ldmatrix fragments. Shared memory is filled by cp.async where the operand is contiguous
//      (weights; x/dy of 1x1 stride-1 convs, 16 bytes or, on planes of 4k pixels such as 14 x 14, 8 bytes; dy in
//      backward-filter when the plane is a multiple of 8) and by
//      register-staged gathers otherwise (loaded before a stage's math, stored after it): 2 stages when a gather is
//      involved, 4 when every operand is cp.async (1x1 stride-1 convs, which are plain GEMMs in NCHW).
//      Backward-data and backward-filter gather x/dy tap-major too (channels / column tables).
//      A strided convolution of fewer than 16 channels (ResNet's stem, ViT's patch embedding) runs its forward,
//      backward-filter and (without a residual) backward-data as a stride-1 one of 16 or more channels on a
//      space-to-depth rearrangement (space_to_depth.cuh): the channels gather, or the direct loads for one tap.
// Both stage the f32 accumulators through shared memory for coalesced stores; the forward epilogue adds bias,
// applies per-channel scale/shift, a residual and ReLU (conv2d_forward_fused) before the one rounding to T.
// Backward-filter splits the pixel reduction over blockIdx.z into f32 partials summed in a fixed order
// (deterministic, no atomics); dbias is a fixed-order two-pass reduction.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "conv_common.cuh"
#include "hpdt/core/env.h"
#include "hpdt/kernels/cuda/conv.h"
#include "space_to_depth.cuh"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {

using namespace conv_detail;

// ---- tiles -----------------------------------------------------------------------------------------------

constexpr int kBN = 128;              // block tile along N (pixels, or ci * taps in backward-filter)
constexpr int kPitchN = kBN + 8;      // v2 [k][pixel] tiles: 272-byte rows, ditto
constexpr int kStagePitch = kBN + 8;  // f32 epilogue staging rows: float2 / float4 writes without bank conflicts
constexpr int kStageBytesTc = 64 * kStagePitch * 4;  // one warp row (64 rows) staged at a time

// kDirect4 (forward / backward-data only): kDirect with 8-byte copies of 4 pixels, for planes that are a multiple
// of 4 but not of 8: ResNet-50's 14 x 14 (196) stage, whose 1x1 convolutions gathered element by element before.
enum Gather { kGeneric = 0, kChannels = 1, kDirect = 2, kDirect4 = 3 };

// Pipeline depth: 2 stages where an operand is gathered through registers (loaded before a stage's math, stored
// after it); 4 where both operands are cp.async (1x1 stride-1 convs), in dynamic shared memory.
template <int MODE>
constexpr int kGemmStages = MODE == kDirect || MODE == kDirect4 ? 4 : 2;
template <int BM, int MODE>
constexpr int kGemmSmemBytes = std::max(kGemmStages<MODE> * (BM * kPitchK + kTcBK * kPitchN) * 2, kStageBytesTc);
template <bool kAsync>
constexpr int kWgradStages = kAsync ? 4 : 2;
template <int BM, bool kAsync>
constexpr int kWgradSmemBytes = std::max(kWgradStages<kAsync> * (BM + kBN) * kPitchK * 2, kStageBytesTc);

// ---- forward / backward-data implicit GEMM -----------------------------------------------------------------

// C[M][pixel] = sum_k A[M][k] * B[k][pixel], written through the epilogue to dst.
//   A: weights repacked tap-major, a[m * lda + k], k = tap * C + c, zero for k in [K, lda); lda % 8 == 0.
//   B: gathered, B[k][pixel (img, py, px)] = src[img][c][py * sy + oy0 + tsign * jr][px * sx + ox0 + tsign * jc]
//      for k = (jr * KWp + jc) * C + c, zero outside the source plane.
//   dst[img][m][py * dys + dy0][px * dxs + dx0] = epilogue(C[m][pixel]).
// Forward: src = x, C = ci, taps = kh x kw, (s*, o*0) = (stride, -pad), tsign = +1, dst = y on its own grid.
// Backward-data: one launch per stride phase, src = dy, C = co, the phase's taps, (s*, o*0) = (1, q*0),
// tsign = -1, dst = the dx pixels of the phase (a strided sub-grid).
struct GemmConv {
  const void* a = nullptr;
  int lda = 0, M = 0;
  const void* src = nullptr;
  int C = 0, Hs = 0, Ws = 0, plane = 0;  // source channels and plane (plane = Hs * Ws)
  int64_t src_img = 0;                   // C * plane
  FastDiv pix_hw, pix_w;                 // pixel grid Hp x Wp: m -> (img, py, px)
  int npix = 0;                          // n * Hp * Wp
  int sy = 1, sx = 1, oy0 = 0, ox0 = 0, tsign = 1;
  FastDiv div_c, div_kw;  // k -> (tap, c), tap -> (jr, jc)
  int K = 0;              // taps * C
  void* dst = nullptr;
  int64_t dst_img = 0;
  int dst_plane = 0, dst_w = 0, dys = 1, dy0 = 0, dxs = 1, dx0 = 0;
  const void* bias = nullptr;
  const void* scale = nullptr;
  const void* shift = nullptr;
  const void* residual = nullptr;
  int relu = 0;
  // v2's epilogue writes 4 pixels of a channel at a time (8-byte stores and residual loads) where the host found
  // the output dense and aligned for it (out4_ok): a warp writes 256 contiguous bytes per instruction instead of 64.
  int out4 = 0;
  // v2 prefetches its epilogue's inputs (the residual; batch norm's y and x with bn.partial) into L2 before its k loop
  // (prefetch.cuh; HPDT_EPILOGUE_PREFETCH=off: not). Set by launch_gemm_tc.
  int prefetch = 0;
  // Batch norm's statistics of dst, by v2's epilogue (a plain one: no bias, scale, shift, residual or ReLU): partials
  // [M][gridDim.x][3], (count, mean, M2) of channel m's stored values in pixel tile blockIdx.x (stage_stats).
  float* stats = nullptr;
  // Batch norm's backward sums, by v2's backward-data epilogue: dst gets dz, and the partials of channel m's stored
  // values in pixel tile blockIdx.x of this phase go to split bn.split0 + blockIdx.x (stage_bn_grad).
  BnGradEpilogue bn;
};

// Whether v2's epilogue may write groups of 4 pixels with one 8-byte store: the pixel grid is the destination's
// whole plane (a forward; a stride-1 backward-data), the plane a multiple of 4 (a group never straddles two
// images: tiles start at multiples of 128 pixels), dst and residual 8-byte aligned. 14 x 14 planes qualify,
// 7 x 7 ones do not.
bool out4_ok(const GemmConv& p) {
  const int hp = int(p.pix_hw.d), wp = int(p.pix_w.d);
  return conv_v2_vector_epilogue() && p.dys == 1 && p.dxs == 1 && p.dy0 == 0 && p.dx0 == 0 && wp == p.dst_w &&
         hp == p.dst_plane && p.dst_plane % 4 == 0 && aligned8(p.dst) && (!p.residual || aligned8(p.residual));
}

// The pixel m of the GEMM's N dimension on a grid of h x w per image.
struct Pixel {
  int img, py, px;
};
__device__ __forceinline__ Pixel decode_pixel(int m, const FastDiv& hw, const FastDiv& w) {
  const int img = hw.div(m), rem = m - img * hw.value();
  const int py = w.div(rem);
  return {img, py, rem - py * w.value()};
}

// Where the output of pixel m goes (element offset of channel 0), and whether m is a real pixel.
__device__ __forceinline__ int64_t dst_offset(const GemmConv& p, int m) {
  const Pixel q = decode_pixel(m, p.pix_hw, p.pix_w);
  return int64_t(q.img) * p.dst_img + int64_t(q.py * p.dys + p.dy0) * p.dst_w + (q.px * p.dxs + p.dx0);
}

// One output element through the epilogue: relu?((v + bias) * scale + shift + residual), rounded once.
template <class T>
__device__ __forceinline__ void store_output(const GemmConv& p, int ch, int64_t pixel_offset, float v) {
  const int64_t i = pixel_offset + int64_t(ch) * p.dst_plane;
  if (p.bias) v += to_f32(static_cast<const T*>(p.bias)[ch]);
  if (p.scale) v *= to_f32(static_cast<const T*>(p.scale)[ch]);
  if (p.shift) v += to_f32(static_cast<const T*>(p.shift)[ch]);
  if (p.residual) v += to_f32(static_cast<const T*>(p.residual)[i]);
  if (p.relu) v = v > 0.0f ? v : 0.0f;
  static_cast<T*>(p.dst)[i] = from_f32<T>(v);
}

// Four consecutive pixels of channel ch through the same epilogue (v2 with out4): one 8-byte residual load and one
// 8-byte store; the same operations in the same order as store_output, so the same bits.
template <class T>
__device__ __forceinline__ void store_output4(const GemmConv& p, int ch, int64_t pixel_offset, float4 acc) {
  const int64_t i = pixel_offset + int64_t(ch) * p.dst_plane;
  float v[4] = {acc.x, acc.y, acc.z, acc.w}, r[4] = {};
  if (p.residual) load<4>(static_cast<const T*>(p.residual) + i, r);
  const float b = p.bias ? to_f32(static_cast<const T*>(p.bias)[ch]) : 0.0f;
  const float sc = p.scale ? to_f32(static_cast<const T*>(p.scale)[ch]) : 0.0f;
  const float sh = p.shift ? to_f32(static_cast<const T*>(p.shift)[ch]) : 0.0f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (p.bias) v[e] += b;
    if (p.scale) v[e] *= sc;
    if (p.shift) v[e] += sh;
    if (p.residual) v[e] += r[e];
    if (p.relu) v[e] = v[e] > 0.0f ? v[e] : 0.0f;
  }
  store<4>(static_cast<T*>(p.dst) + i, v);
}

// v2's epilogue, p.stats: the batch-norm partial of each of the 64 staged channel rows (row0 + r, r < 64) of pixel
// tile blockIdx.x. A warp a row, 4 pixels a lane (a conflict-free float4 read), two passes over the values as stored
// (rounded to T): the sum, then the squared deviations from the tile's mean, each by a fixed xor tree, so the
// same bits every run. The tile's real pixels are its count (128, fewer in the last tile).
template <class T, int kWarps>
__device__ __forceinline__ void stage_stats(const GemmConv& p, const float* st, int row0, int n0, int warp, int lane) {
  const int real = min(kBN, p.npix - n0);
  for (int r = warp; r < 64; r += kWarps) {
    const int m = row0 + r;
    if (m >= p.M) break;  // whole warps
    const float4 q = *reinterpret_cast<const float4*>(st + r * kStagePitch + 4 * lane);
    float v[4] = {q.x, q.y, q.z, q.w}, sum = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[e] = 4 * lane + e < real ? to_f32(from_f32<T>(v[e])) : 0.0f;
      sum += v[e];
    }
    const float mean = warp_allsum(sum) / float(real);
    float m2 = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float d = 4 * lane + e < real ? v[e] - mean : 0.0f;
      m2 += d * d;
    }
    m2 = warp_allsum(m2);
    if (lane == 0) {
      float* out = p.stats + (int64_t(m) * gridDim.x + blockIdx.x) * 3;
      out[0] = float(real), out[1] = mean, out[2] = m2;
    }
  }
}

// v2's backward-data epilogue with p.bn.partial, in place of the stores: each of the 64 staged channel rows (row0 + r)
// through the residual and the fused ReLU's mask, stored, and summed for batch norm's backward. A warp a row; with
// out4 lane l takes pixels 4 l .. 4 l + 3 (group: their dx offset, channel 0, and whether they are real; 8-byte
// loads and stores), else pixels l, l + 32, l + 64, l + 96 (off/ok), so a warp's stores and reads of y and x are
// 256 or 64 contiguous bytes. Fixed xor trees.
template <class T, int kWarps>
__device__ __forceinline__ void stage_bn_grad(const GemmConv& p, const float* st, int row0, int warp, int lane,
                                              const int64_t (&off)[4], const bool (&ok)[4], bool group_ok,
                                              int64_t group) {
  for (int r = warp; r < 64; r += kWarps) {
    const int m = row0 + r;
    if (m >= p.M) break;  // whole warps
    const float mean = p.bn.mean[m];
    float sum = 0.0f, sum_x = 0.0f;
    if (p.out4) {
      if (group_ok) {
        const int64_t i = group + int64_t(m) * p.dst_plane;
        const float4 a = *reinterpret_cast<const float4*>(st + r * kStagePitch + 4 * lane);
        float g[4] = {a.x, a.y, a.z, a.w}, res[4] = {}, y[4] = {}, x[4];
        if (p.residual) load<4>(static_cast<const T*>(p.residual) + i, res);
        if (p.bn.y) load<4>(static_cast<const T*>(p.bn.y) + i, y);
        load<4>(static_cast<const T*>(p.bn.x) + i, x);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (p.residual) g[e] += res[e];
          if (p.bn.y && !(y[e] > 0.0f)) g[e] = 0.0f;
          g[e] = to_f32(from_f32<T>(g[e]));  // as stored (rounding it again below is exact)
          sum += g[e];
          sum_x += g[e] * (x[e] - mean);
        }
        store<4>(static_cast<T*>(p.dst) + i, g);
      }
    } else {  // the 4 pixels' inputs loaded together (bn_grad_elements)
      bn_grad_elements<T, 4>(
          p.bn, p.residual, p.dst, [&](int j) { return ok[j]; }, [&](int j) { return off[j] + int64_t(m) * p.dst_plane; },
          [&](int j) { return st[r * kStagePitch + lane + 32 * j]; }, mean, sum, sum_x);
    }
    sum = warp_allsum(sum);
    sum_x = warp_allsum(sum_x);
    if (lane == 0) {
      float* out = p.bn.partial + (int64_t(m) * p.bn.splits + p.bn.split0 + blockIdx.x) * 2;
      out[0] = sum, out[1] = sum_x;
    }
  }
}

// Per-thread state of the B gather: the thread's pixel, as the source offset of its image and the source
// coordinates of tap (0, 0).
struct PixelGather {
  int64_t img_offset = 0;
  int by = 0, bx = 0;
  bool ok = false;
};
__device__ __forceinline__ PixelGather pixel_gather(const GemmConv& p, int m) {
  PixelGather g;
  g.ok = m < p.npix;
  if (g.ok) {
    const Pixel q = decode_pixel(m, p.pix_hw, p.pix_w);
    g.img_offset = int64_t(q.img) * p.src_img;
    g.by = q.py * p.sy + p.oy0;
    g.bx = q.px * p.sx + p.ox0;
  }
  return g;
}

// B[k][pixel] for any k (the generic gather): two fast divisions decode k into (tap, channel).
template <class T>
__device__ __forceinline__ T gather_any(const GemmConv& p, const T* __restrict__ src, const PixelGather& g, int k) {
  if (g.ok && k < p.K) {
    const int tap = p.div_c.div(k), c = k - tap * p.C;
    const int jr = p.div_kw.div(tap), jc = tap - jr * p.div_kw.value();
    const int y = g.by + p.tsign * jr, x = g.bx + p.tsign * jc;
    if (unsigned(y) < unsigned(p.Hs) && unsigned(x) < unsigned(p.Ws))
      return src[g.img_offset + (int64_t(c) * p.plane + y * p.Ws + x)];
  }
  return T{};
}

// v1: SIMT. Block tile BM x 128 (threads 2 * BM, each 8 x 8 outputs: rows {tm*4 + i, BM/2 + tm*4 + i},
// columns {tn*4 + j, 64 + tn*4 + j}, so that every shared-memory read is a conflict-free float4).
template <class T, int BM>
__global__ void __launch_bounds__(2 * BM, 2) conv_gemm_simt(const GemmConv p) {
  constexpr int kThreads = 2 * BM;
  constexpr int kRowStep = kThreads / kBN;         // B rows per pass of the block: 1 or 2
  constexpr int kBPerThread = kSimtBK / kRowStep;  // 8 or 4
  constexpr int kPA = BM + 4, kPB = kBN + 4;       // f32 pitches: 16-byte rows, conflict-free transposed stores
  constexpr int kPipeFloats = 2 * kSimtBK * (kPA + kPB);
  constexpr int kEpiFloats = (BM / 2) * kStagePitch;
  __shared__ __align__(16) float smem[kPipeFloats > kEpiFloats ? kPipeFloats : kEpiFloats];
  float* As = smem;                     // [2][kSimtBK][kPA]  A transposed: As[k][m]
  float* Bs = smem + 2 * kSimtBK * kPA;  // [2][kSimtBK][kPB]  Bs[k][pixel]

  const T* __restrict__ a = static_cast<const T*>(p.a);
  const T* __restrict__ src = static_cast<const T*>(p.src);
  const int tid = threadIdx.x, tm = tid / 16, tn = tid % 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * kBN;
  const int KT = (p.K + kSimtBK - 1) / kSimtBK;

  // A loader: row tid / 2, four consecutive k. B loader: pixel column tid % 128, rows krow0 + j * kRowStep.
  const int a_row = tid >> 1, a_k = (tid & 1) * 4;
  const int col = tid % kBN, krow0 = tid / kBN;
  const PixelGather g = pixel_gather(p, n0 + col);
  float areg[4], breg[kBPerThread];

  auto fetch = [&](int kt) {
    const int gm = m0 + a_row;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int k = kt * kSimtBK + a_k + e;
      areg[e] = (gm < p.M && k < p.K) ? to_f32(a[int64_t(gm) * p.lda + k]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBPerThread; ++j) breg[j] = to_f32(gather_any(p, src, g, kt * kSimtBK + krow0 + j * kRowStep));
  };
  auto stash = [&](int stage) {
#pragma unroll
    for (int e = 0; e < 4; ++e) As[(stage * kSimtBK + a_k + e) * kPA + a_row] = areg[e];
#pragma unroll
    for (int j = 0; j < kBPerThread; ++j) Bs[(stage * kSimtBK + krow0 + j * kRowStep) * kPB + col] = breg[j];
  };

  float acc[8][8] = {};
  simt_k_loop<kPA, kPB, BM / 2, 64>(0, KT, As, Bs, tm, tn, acc, fetch, stash);

  // Epilogue: half the rows at a time through shared memory, then coalesced stores along pixels.
  const bool out_ok = n0 + col < p.npix;
  const int64_t out_offset = out_ok ? dst_offset(p, n0 + col) : 0;
  float* st = smem;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    __syncthreads();  // the pipeline (or the previous half) is done with shared memory
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float* row = st + (tm * 4 + i) * kStagePitch;
      *reinterpret_cast<float4*>(row + tn * 4) =
          make_float4(acc[h * 4 + i][0], acc[h * 4 + i][1], acc[h * 4 + i][2], acc[h * 4 + i][3]);
      *reinterpret_cast<float4*>(row + 64 + tn * 4) =
          make_float4(acc[h * 4 + i][4], acc[h * 4 + i][5], acc[h * 4 + i][6], acc[h * 4 + i][7]);
    }
    __syncthreads();
    for (int r = krow0; r < BM / 2; r += kRowStep) {
      const int m = m0 + h * (BM / 2) + r;
      if (out_ok && m < p.M) store_output<T>(p, m, out_offset, st[r * kStagePitch + col]);
    }
  }
}

// v2's epilogue inputs for the tile's BM channel rows from m0 x 128 pixels from n0 (the residual; batch norm's y and x
// with bn.partial), prefetched into L2 before the k loop (prefetch.cuh): thread t its pixel n0 + t % 128 in rows
// t / 128, + 2 * BM / 128, .. (a warp's prefetch: 32 consecutive pixels of a row, the lines the epilogue reads).
template <class T, int BM>
__device__ __forceinline__ void prefetch_epilogue_inputs(const GemmConv& p, int m0, int n0) {
  const int tid = int(threadIdx.x), col = tid % kBN;
  if (n0 + col >= p.npix) return;
  const int64_t pixel = dst_offset(p, n0 + col);
  for (int r = tid / kBN; r < BM && m0 + r < p.M; r += 2 * BM / kBN)
    prefetch_epilogue_inputs_at<T>(p.bn, p.residual, pixel + int64_t(m0 + r) * p.dst_plane, sizeof(T), 0, 1);
}

// v2: tensor cores. Block tile BM x 128 x 32, warps (BM / 64) x 4 of 64 x 32 (4 x 4 mma tiles each).
// A (weights) by cp.async; B by cp.async (kDirect: 1x1 stride-1 unpadded, plane % 8 == 0, so 8 pixels are 16
// contiguous bytes of one channel plane; kDirect4: plane % 4 == 0, 4 pixels in 8 bytes) or gathered into registers
// (kChannels: C % 16 == 0, one tap per half tile; kGeneric: any shape).
template <class T, int BM, int MODE>
__global__ void __launch_bounds__(2 * BM) conv_gemm_tc(const GemmConv p) {
  constexpr bool kAsyncB = MODE == kDirect || MODE == kDirect4;
  constexpr int kChunk = MODE == kDirect4 ? 4 : 8;  // pixels per cp.async (kAsyncB)
  constexpr int kChunksPerRow = kBN / kChunk;       // 16 or 32
  constexpr int kThreads = 2 * BM;
  constexpr int kRowStep = kThreads / kBN;        // 1 or 2
  constexpr int kBPerThread = kTcBK / kRowStep;   // 32 or 16 register-staged B elements
  constexpr int kAStage = BM * kPitchK;           // 16-bit elements
  constexpr int kBStage = kTcBK * kPitchN;
  constexpr int kStages = kGemmStages<MODE>;
  extern __shared__ __align__(16) unsigned char smem[];  // kGemmSmemBytes<BM, MODE>
  uint16_t* As = reinterpret_cast<uint16_t*>(smem);     // [kStages][BM][kPitchK]
  uint16_t* Bs = As + kStages * kAStage;                // [kStages][kTcBK][kPitchN]

  const uint16_t* __restrict__ a = static_cast<const uint16_t*>(p.a);
  const uint16_t* __restrict__ src = static_cast<const uint16_t*>(p.src);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / 4, wn = warp % 4;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * kBN;
  const int KT = (p.K + kTcBK - 1) / kTcBK;

  auto load_a = [&](int kt, int stage) {
#pragma unroll
    for (int i = 0; i < BM * 4 / kThreads; ++i) {
      const KChunk ch = k_chunk(tid + i * kThreads);
      const int gm = m0 + ch.row, gk = kt * kTcBK + ch.q * 8;
      const bool ok = gm < p.M && gk < p.lda;
      cp_async16(As + stage * kAStage + ch.row * kPitchK + ch.q * 8, ok ? a + int64_t(gm) * p.lda + gk : a, ok);
    }
  };

  // B thread mapping. Register-staged: pixel column tid % 128, k rows krow0 + j * kRowStep.
  // Direct: chunk q = tid % kChunksPerRow (pixels kChunk * q ..) of k rows tid / kChunksPerRow + i * (kThreads /
  // kChunksPerRow): a warp copies whole rows, so the shared-memory writes are conflict-free.
  const int col = tid % kBN, krow0 = tid / kBN;
  PixelGather g;
  if constexpr (kAsyncB) {
    const int m = n0 + (tid % kChunksPerRow) * kChunk;
    g.ok = m < p.npix;
    if (g.ok) {
      const int img = p.pix_hw.div(m);
      g.img_offset = int64_t(img) * p.src_img + (m - img * p.pix_hw.value());
    }
  } else {
    g = pixel_gather(p, n0 + col);
  }
  uint16_t breg[kAsyncB ? 1 : kBPerThread];

  auto fetch_b = [&](int kt, int stage) {
    if constexpr (kAsyncB) {
#pragma unroll
      for (int i = 0; i < kTcBK * kChunksPerRow / kThreads; ++i) {
        const int row = tid / kChunksPerRow + i * (kThreads / kChunksPerRow), k = kt * kTcBK + row;
        const bool ok = g.ok && k < p.K;
        uint16_t* dst = Bs + stage * kBStage + row * kPitchN + (tid % kChunksPerRow) * kChunk;
        const uint16_t* from = ok ? src + g.img_offset + int64_t(k) * p.plane : src;
        if constexpr (MODE == kDirect4) cp_async8(dst, from, ok);
        else cp_async16(dst, from, ok);
      }
    } else if constexpr (MODE == kChannels) {
      // C % 16 == 0: each 16-row half of the k tile lies in one tap. The thread's rows krow0 + j * kRowStep,
      // j = kPerHalf * half + jj, are channels c0 + krow0 + jj * kRowStep of that tap: one bounds check per half.
      (void)stage;
      constexpr int kPerHalf = kBPerThread / 2;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int k = kt * kTcBK + half * 16;
        const int tap = p.div_c.div(k), c0 = k - tap * p.C;
        const int jr = p.div_kw.div(tap), jc = tap - jr * p.div_kw.value();
        const int y = g.by + p.tsign * jr, x = g.bx + p.tsign * jc;
        if (g.ok && k < p.K && unsigned(y) < unsigned(p.Hs) && unsigned(x) < unsigned(p.Ws)) {
          const uint16_t* s = src + g.img_offset + (int64_t(c0 + krow0) * p.plane + y * p.Ws + x);
          const int step = kRowStep * p.plane;
#pragma unroll
          for (int jj = 0; jj < kPerHalf; ++jj) breg[half * kPerHalf + jj] = __ldg(s + jj * step);
        } else {
#pragma unroll
          for (int jj = 0; jj < kPerHalf; ++jj) breg[half * kPerHalf + jj] = 0;
        }
      }
    } else {
      (void)stage;
#pragma unroll
      for (int j = 0; j < kBPerThread; ++j)
        breg[j] = gather_any(p, reinterpret_cast<const T*>(src), g, kt * kTcBK + krow0 + j * kRowStep).bits;
    }
  };
  auto stash_b = [&](int stage) {
    if constexpr (!kAsyncB) {
#pragma unroll
      for (int j = 0; j < kBPerThread; ++j) Bs[stage * kBStage + (krow0 + j * kRowStep) * kPitchN + col] = breg[j];
    } else {
      (void)stage;
    }
  };

  float acc[4][4][4] = {};
  auto compute = [&](int stage) {
    warp_tile_mma<T, true, false>(acc, As + stage * kAStage, kPitchK, wm * 64, Bs + stage * kBStage, kPitchN, wn * 32,
                                  lane);
  };

  if (p.prefetch && (p.residual || p.bn.partial)) prefetch_epilogue_inputs<T, BM>(p, m0, n0);
  pipelined_k_loop<kStages>(
      0, KT,
      [&](int kt, int stage) {
        load_a(kt, stage);
        fetch_b(kt, stage);
      },
      stash_b, compute);

  // Epilogue: one warp row (64 output channels) at a time through shared memory, coalesced stores: with out4, lane
  // q of warp w writes pixels 4q .. 4q + 3 of rows w, w + kWarps, ... (a warp reads one staged row, conflict-free,
  // and stores 256 contiguous bytes); else thread t writes pixel t % 128 of rows t / 128, + kRowStep, ...
  constexpr int kWarps = kThreads / 32;
  const bool out_ok = n0 + col < p.npix;
  const int64_t out_offset = out_ok && !p.out4 ? dst_offset(p, n0 + col) : 0;
  const bool group_ok = n0 + 4 * lane < p.npix;  // the group's 4 pixels are real together (npix % 4 == 0)
  const int64_t group_offset = group_ok && p.out4 ? dst_offset(p, n0 + 4 * lane) : 0;
  float* st = reinterpret_cast<float*>(smem);
  const int gq = lane >> 2, tq = lane & 3;  // the fragments' row and column pair
  int64_t bn_off[4] = {};
  bool bn_ok[4] = {};
  if (p.bn.partial && !p.out4) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      bn_ok[j] = n0 + lane + 32 * j < p.npix;
      if (bn_ok[j]) bn_off[j] = dst_offset(p, n0 + lane + 32 * j);
    }
  }
#pragma unroll
  for (int pass = 0; pass < BM / 64; ++pass) {
    __syncthreads();
    if (wm == pass) stage_warp_tile(st, kStagePitch, acc, wn, gq, tq);
    __syncthreads();
    if (p.bn.partial) {
      stage_bn_grad<T, kWarps>(p, st, m0 + pass * 64, warp, lane, bn_off, bn_ok, group_ok, group_offset);
    } else if (p.out4) {
      for (int r = warp; r < 64; r += kWarps) {
        const int m = m0 + pass * 64 + r;
        if (group_ok && m < p.M)
          store_output4<T>(p, m, group_offset, *reinterpret_cast<const float4*>(st + r * kStagePitch + 4 * lane));
      }
    } else {
      for (int r = krow0; r < 64; r += kRowStep) {
        const int m = m0 + pass * 64 + r;
        if (out_ok && m < p.M) store_output<T>(p, m, out_offset, st[r * kStagePitch + col]);
      }
    }
    if (p.stats) stage_stats<T, kWarps>(p, st, m0 + pass * 64, n0, warp, lane);
  }
}

// Weights repacked tap-major (Repack, conv_common.cuh).
template <class T>
__global__ void repack_weights(const T* __restrict__ w, T* __restrict__ out, const Repack r) {
  const int64_t n = int64_t(r.rows) * r.lda;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int row = int(i / r.lda), k = int(i % r.lda);
    T v{};
    if (k < r.K) {
      const int tap = k / r.Cg, ch = k - tap * r.Cg;
      const int jr = tap / r.KWp, jc = tap - jr * r.KWp;
      v = w[row * r.row_stride + ch * r.ch_stride + (r.ry0 + r.rstep * jr) * r.KW + (r.rx0 + r.rstep * jc)];
    }
    out[i] = v;
  }
}

// ---- backward-filter ----------------------------------------------------------------------------------------

// dW[co][k] (+)= sum over pixels P of dy[co][P] * x(k, P), k = (ci * KH + r) * KW + c (dw's own layout), the
// pixel reduction split over blockIdx.z into chunks of tiles_per_split k tiles.
struct GemmWgrad {
  const void* dy = nullptr;
  const void* x = nullptr;
  int CO = 0, CI = 0, H = 0, W = 0, KH = 0, KW = 0, stride = 1, pad = 0;
  int K = 0;     // ci * kh * kw: N of the GEMM
  int npix = 0;  // n * oh * ow: the reduction
  int ohw = 0;   // oh * ow
  FastDiv div_ohw, div_ow;
  int tiles_per_split = 0;
  void* dw = nullptr;    // partials == nullptr: dw += sum (one split)
  float* ws = nullptr;   // else partials [splits][CO][K]
};

// Column k of the GEMM as (ci, tap): dw's own order k = ci * taps + tap, or tap-major k = tap * ci_count + ci
// (v2's channels gather: 32 consecutive columns then share one tap).
struct WgradColumn {
  int ci, r, c;
};
__device__ __forceinline__ WgradColumn wgrad_column(const GemmWgrad& p, int k, bool tap_major) {
  const int taps = p.KH * p.KW;
  const int ci = tap_major ? k % p.CI : k / taps, tap = tap_major ? k / p.CI : k - (k / taps) * taps;
  const int r = tap / p.KW;
  return {ci, r, tap - r * p.KW};
}
// The index of column k in dw's row.
__device__ __forceinline__ int wgrad_dw_column(const GemmWgrad& p, int k, bool tap_major) {
  return tap_major ? (k % p.CI) * (p.KH * p.KW) + k / p.CI : k;
}

// Column table of the x gather, built once per block: {ci * H * W + r * W + c, r, c, k < K}.
__device__ __forceinline__ void wgrad_table(const GemmWgrad& p, int n0, int4* tab, int threads, bool tap_major) {
  for (int i = threadIdx.x; i < kBN; i += threads) {
    const int k = n0 + i;
    int4 e = make_int4(0, 0, 0, 0);
    if (k < p.K) {
      const WgradColumn col = wgrad_column(p, k, tap_major);
      e = make_int4(col.ci * p.H * p.W + col.r * p.W + col.c, col.r, col.c, 1);
    }
    tab[i] = e;
  }
}

// The pixel P of the reduction: offsets of its dy column (channel 0) and of x at tap (0, 0), and its tap-(0, 0)
// input coordinates.
struct WgradPixel {
  int64_t dy_offset = 0, x_offset = 0;
  int by = 0, bx = 0;
  bool ok = false;
};
__device__ __forceinline__ WgradPixel wgrad_pixel(const GemmWgrad& p, int P) {
  WgradPixel w;
  w.ok = P < p.npix;
  if (w.ok) {
    const int img = p.div_ohw.div(P), rem = P - img * p.ohw;
    const int oy = p.div_ow.div(rem), ox = rem - oy * p.div_ow.value();
    w.dy_offset = int64_t(img) * p.CO * p.ohw + rem;
    w.by = oy * p.stride - p.pad;
    w.bx = ox * p.stride - p.pad;
    w.x_offset = int64_t(img) * p.CI * p.H * p.W + (int64_t(w.by) * p.W + w.bx);
  }
  return w;
}

template <class T>
__device__ __forceinline__ T wgrad_x(const GemmWgrad& p, const T* __restrict__ x, const WgradPixel& w, int4 e) {
  const int y = w.by + e.y, xx = w.bx + e.z;
  if (w.ok && e.w && unsigned(y) < unsigned(p.H) && unsigned(xx) < unsigned(p.W)) return x[w.x_offset + e.x];
  return T{};
}

// dw[co][column] (+)= v, or the split's partial (in dw's layout, so that wgrad_reduce adds like with like).
template <class T>
__device__ __forceinline__ void wgrad_store(const GemmWgrad& p, int co, int column, float v) {
  const int64_t i = int64_t(co) * p.K + column;
  if (p.ws)
    p.ws[int64_t(blockIdx.z) * p.CO * p.K + i] = v;
  else
    static_cast<T*>(p.dw)[i] = from_f32<T>(to_f32(static_cast<const T*>(p.dw)[i]) + v);
}

// v1: SIMT backward-filter, same tiling as conv_gemm_simt with k = 8 pixels per stage.
template <class T, int BM>
__global__ void __launch_bounds__(2 * BM, 2) conv_wgrad_simt(const GemmWgrad p) {
  constexpr int kThreads = 2 * BM;
  constexpr int kAPerThread = BM * kSimtBK / kThreads;   // 4
  constexpr int kBPerThread = kBN * kSimtBK / kThreads;  // 4 or 8
  constexpr int kRows = kThreads / kSimtBK;              // rows per pass of the loaders
  constexpr int kPA = BM + 4, kPB = kBN + 4;
  constexpr int kPipeFloats = 2 * kSimtBK * (kPA + kPB);
  constexpr int kEpiFloats = (BM / 2) * kStagePitch;
  __shared__ __align__(16) float smem[kPipeFloats > kEpiFloats ? kPipeFloats : kEpiFloats];
  __shared__ int4 tab[kBN];
  float* As = smem;                      // [2][pixel][kPA]
  float* Bs = smem + 2 * kSimtBK * kPA;  // [2][pixel][kPB]

  const T* __restrict__ dy = static_cast<const T*>(p.dy);
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const int tid = threadIdx.x, tm = tid / 16, tn = tid % 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * kBN;
  const int KT = (p.npix + kSimtBK - 1) / kSimtBK;
  const int kt0 = blockIdx.z * p.tiles_per_split, kt1 = min(KT, kt0 + p.tiles_per_split);
  wgrad_table(p, n0, tab, kThreads, false);
  __syncthreads();

  const int pl = tid & 7, row0 = tid >> 3;  // loaders: pixel pl of the tile, rows row0 + i * kRows
  float areg[kAPerThread], breg[kBPerThread];
  auto fetch = [&](int kt) {
    const WgradPixel w = wgrad_pixel(p, kt * kSimtBK + pl);
#pragma unroll
    for (int i = 0; i < kAPerThread; ++i) {
      const int co = m0 + row0 + i * kRows;
      areg[i] = (w.ok && co < p.CO) ? to_f32(dy[w.dy_offset + int64_t(co) * p.ohw]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kBPerThread; ++i) breg[i] = to_f32(wgrad_x(p, x, w, tab[row0 + i * kRows]));
  };
  auto stash = [&](int stage) {
#pragma unroll
    for (int i = 0; i < kAPerThread; ++i) As[(stage * kSimtBK + pl) * kPA + row0 + i * kRows] = areg[i];
#pragma unroll
    for (int i = 0; i < kBPerThread; ++i) Bs[(stage * kSimtBK + pl) * kPB + row0 + i * kRows] = breg[i];
  };

  float acc[8][8] = {};
  simt_k_loop<kPA, kPB, BM / 2, 64>(kt0, kt1, As, Bs, tm, tn, acc, fetch, stash);

  const int col = tid % kBN, rstep = kThreads / kBN;
  float* st = smem;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float* row = st + (tm * 4 + i) * kStagePitch;
      *reinterpret_cast<float4*>(row + tn * 4) =
          make_float4(acc[h * 4 + i][0], acc[h * 4 + i][1], acc[h * 4 + i][2], acc[h * 4 + i][3]);
      *reinterpret_cast<float4*>(row + 64 + tn * 4) =
          make_float4(acc[h * 4 + i][4], acc[h * 4 + i][5], acc[h * 4 + i][6], acc[h * 4 + i][7]);
    }
    __syncthreads();
    for (int r = tid / kBN; r < BM / 2; r += rstep) {
      const int co = m0 + h * (BM / 2) + r;
      if (co < p.CO && n0 + col < p.K) wgrad_store<T>(p, co, n0 + col, st[r * kStagePitch + col]);
    }
  }
}

// v2: tensor-core backward-filter. A = dy tile [co][32 pixels] (cp.async of DYV pixels when oh * ow % DYV == 0:
// 8 pixels in 16 bytes, or 4 in 8 bytes on planes such as 14 x 14; DYV = 0: gathered element by element),
// B = x tile [k][32 pixels]: cp.async for 1x1 stride-1 unpadded convs (kDirect with DYV 8, kDirect4 with DYV 4),
// else gathered through the column table: tap-major columns when ci % 16 == 0 (kChannels: one bounds check per
// 16 columns, as the forward's channels gather), dw's own order otherwise (kGeneric). Both tiles are
// k-contiguous, so both fragments are plain ldmatrix.
template <class T, int BM, int DYV, int XMODE>
__global__ void __launch_bounds__(2 * BM) conv_wgrad_tc(const GemmWgrad p) {
  static_assert(DYV == 0 || DYV == 4 || DYV == 8, "conv_wgrad_tc: dy chunks of 8 or 4 pixels, or none");
  static_assert((XMODE != kDirect || DYV == 8) && (XMODE != kDirect4 || DYV == 4), "direct x: dy's chunks");
  constexpr bool kVecDy = DYV != 0;
  constexpr int kThreads = 2 * BM;
  constexpr int kAStage = BM * kPitchK, kBStage = kBN * kPitchK;
  constexpr int kAPerThread = BM * kTcBK / kThreads;   // 16
  constexpr int kBPerThread = kBN * kTcBK / kThreads;  // 16 or 32
  constexpr int kRows = kThreads / 32;                 // rows per pass of the element loaders
  constexpr int kChunksPerRow = kTcBK / (kVecDy ? DYV : 8);
  constexpr bool kDirectX = XMODE == kDirect || XMODE == kDirect4, kTapMajor = XMODE == kChannels;
  constexpr int kStages = kWgradStages<kVecDy && kDirectX>;
  extern __shared__ __align__(16) unsigned char smem[];  // kWgradSmemBytes<BM, kVecDy && kDirectX>
  __shared__ int4 tab[kDirectX ? 1 : kBN];
  uint16_t* As = reinterpret_cast<uint16_t*>(smem);  // [kStages][BM][kPitchK]
  uint16_t* Bs = As + kStages * kAStage;             // [kStages][kBN][kPitchK]

  const uint16_t* __restrict__ dy = static_cast<const uint16_t*>(p.dy);
  const uint16_t* __restrict__ x = static_cast<const uint16_t*>(p.x);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / 4, wn = warp % 4;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * kBN;
  const int KT = (p.npix + kTcBK - 1) / kTcBK;
  const int kt0 = blockIdx.z * p.tiles_per_split, kt1 = min(KT, kt0 + p.tiles_per_split);
  if constexpr (!kDirectX) {
    wgrad_table(p, n0, tab, kThreads, kTapMajor);
    __syncthreads();
  }

  const int pl = tid & 31, row0 = tid >> 5;  // element loaders: pixel pl, rows row0 + i * kRows
  // Chunk loaders: chunk c = tid + i * kThreads is pixels DYV q .. of row chunk(c).row (k_chunk / k_chunk8: the lane
  // orders without bank conflicts); q is the same for all of a thread's chunks.
  const auto chunk = [](int c) { return DYV == 4 ? k_chunk8(c) : k_chunk(c); };
  const int q = chunk(tid).q;
  uint16_t areg[kVecDy ? 1 : kAPerThread], breg[kDirectX ? 1 : kBPerThread];
  const auto cp_async = [](void* dst, const void* src, bool ok) {
    if constexpr (DYV == 4) cp_async8(dst, src, ok);
    else cp_async16(dst, src, ok);
  };

  auto fetch = [&](int kt, int stage) {
    const WgradPixel w = wgrad_pixel(p, kt * kTcBK + (kVecDy ? q * DYV : pl));
    if constexpr (kVecDy) {
#pragma unroll
      for (int i = 0; i < BM * kChunksPerRow / kThreads; ++i) {
        const int row = chunk(tid + i * kThreads).row, co = m0 + row;
        const bool ok = w.ok && co < p.CO;
        cp_async(As + stage * kAStage + row * kPitchK + q * DYV, ok ? dy + w.dy_offset + int64_t(co) * p.ohw : dy, ok);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kAPerThread; ++i) {
        const int co = m0 + row0 + i * kRows;
        areg[i] = (w.ok && co < p.CO) ? __ldg(dy + w.dy_offset + int64_t(co) * p.ohw) : uint16_t(0);
      }
    }
    if constexpr (kDirectX) {
      // 1x1, stride 1, no padding: x(k = ci, P) = x[img][ci][pixel]; w.x_offset is x[img][0][pixel].
#pragma unroll
      for (int i = 0; i < kBN * kChunksPerRow / kThreads; ++i) {
        const int row = chunk(tid + i * kThreads).row, k = n0 + row;
        const bool ok = w.ok && k < p.K;
        cp_async(Bs + stage * kBStage + row * kPitchK + q * DYV, ok ? x + w.x_offset + int64_t(k) * p.ohw : x, ok);
      }
    } else if constexpr (kTapMajor) {
      // The thread's rows row0 + i * kRows, i = 16 / kRows * g + j, lie in column group g (16 columns, one tap as
      // ci % 16 == 0): one bounds check per group, then loads kRows channels apart.
      const WgradPixel wx = kVecDy ? wgrad_pixel(p, kt * kTcBK + pl) : w;
      constexpr int kPerGroup = 16 / kRows;
#pragma unroll
      for (int g = 0; g < kBN / 16; ++g) {
        const int4 e = tab[16 * g + row0];
        const int y = wx.by + e.y, xx = wx.bx + e.z;
        if (wx.ok && e.w && unsigned(y) < unsigned(p.H) && unsigned(xx) < unsigned(p.W)) {
          const uint16_t* s = x + wx.x_offset + e.x;
          const int step = kRows * p.H * p.W;
#pragma unroll
          for (int j = 0; j < kPerGroup; ++j) breg[g * kPerGroup + j] = __ldg(s + j * step);
        } else {
#pragma unroll
          for (int j = 0; j < kPerGroup; ++j) breg[g * kPerGroup + j] = 0;
        }
      }
    } else {
      const WgradPixel wx = kVecDy ? wgrad_pixel(p, kt * kTcBK + pl) : w;
#pragma unroll
      for (int i = 0; i < kBPerThread; ++i)
        breg[i] = wgrad_x(p, reinterpret_cast<const T*>(x), wx, tab[row0 + i * kRows]).bits;
    }
  };
  auto stash = [&](int stage) {
    if constexpr (!kVecDy) {
#pragma unroll
      for (int i = 0; i < kAPerThread; ++i) As[stage * kAStage + (row0 + i * kRows) * kPitchK + pl] = areg[i];
    }
    if constexpr (!kDirectX) {
#pragma unroll
      for (int i = 0; i < kBPerThread; ++i) Bs[stage * kBStage + (row0 + i * kRows) * kPitchK + pl] = breg[i];
    }
    (void)stage;
  };

  float acc[4][4][4] = {};
  auto compute = [&](int stage) {
    warp_tile_mma<T, true, true>(acc, As + stage * kAStage, kPitchK, wm * 64, Bs + stage * kBStage, kPitchK, wn * 32,
                                 lane);
  };

  pipelined_k_loop<kStages>(kt0, kt1, fetch, stash, compute);

  const int col = tid % kBN, rstep = kThreads / kBN;
  const int dw_column = n0 + col < p.K ? wgrad_dw_column(p, n0 + col, kTapMajor) : 0;
  float* st = reinterpret_cast<float*>(smem);
  const int gq = lane >> 2, tq = lane & 3;  // the fragments' row and column pair
#pragma unroll
  for (int pass = 0; pass < BM / 64; ++pass) {
    __syncthreads();
    if (wm == pass) stage_warp_tile(st, kStagePitch, acc, wn, gq, tq);
    __syncthreads();
    for (int r = tid / kBN; r < 64; r += rstep) {
      const int co = m0 + pass * 64 + r;
      if (co < p.CO && n0 + col < p.K) wgrad_store<T>(p, co, dw_column, st[r * kStagePitch + col]);
    }
  }
}

// dw[i] (+)= sum over splits s of ws[s][i], in split order.
template <class T>
__global__ void wgrad_reduce_kernel(const float* __restrict__ ws, int splits, int64_t n, T* __restrict__ dw) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float acc = to_f32(dw[i]);
    for (int s = 0; s < splits; ++s) acc += ws[s * n + i];
    dw[i] = from_f32<T>(acc);
  }
}

// ---- dbias and the standalone epilogue -------------------------------------------------------------------

// partial[co][s] = sum of dy[img][co][pixel] over the s-th chunk of the n * ohw (img, pixel) pairs.
template <class T>
__global__ void __launch_bounds__(256) bias_grad_partial(const T* __restrict__ dy, int CO, FastDiv ohw, int total,
                                                         int chunk, float* __restrict__ partial) {
  const int co = blockIdx.x, s = blockIdx.y;
  const int begin = s * chunk, end = min(total, begin + chunk);
  float acc = 0.0f;
  for (int i = begin + int(threadIdx.x); i < end; i += 256) {
    const int img = ohw.div(i);
    acc += to_f32(dy[(int64_t(img) * CO + co) * ohw.value() + (i - img * ohw.value())]);
  }
  acc = block_sum<256>(acc);
  if (threadIdx.x == 0) partial[int64_t(co) * gridDim.y + s] = acc;
}

template <class T>
__global__ void bias_grad_final_kernel(const float* __restrict__ partial, int CO, int splits, T* __restrict__ dbias) {
  const int co = blockIdx.x * blockDim.x + threadIdx.x;
  if (co >= CO) return;
  float acc = to_f32(dbias[co]);
  for (int s = 0; s < splits; ++s) acc += partial[int64_t(co) * splits + s];
  dbias[co] = from_f32<T>(acc);
}

template <class T>
__global__ void epilogue_inplace(T* __restrict__ y, int n, FastDiv plane, int CO, const T* bias, const T* scale,
                                 const T* shift, const T* residual, int relu) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int co = plane.div(i) % CO;
    float v = to_f32(y[i]);
    if (bias) v += to_f32(bias[co]);
    if (scale) v *= to_f32(scale[co]);
    if (shift) v += to_f32(shift[co]);
    if (residual) v += to_f32(residual[i]);
    if (relu) v = v > 0.0f ? v : 0.0f;
    y[i] = from_f32<T>(v);
  }
}

// ---- host side -------------------------------------------------------------------------------------------

template <class T, int BM, int MODE>
void launch_gemm_tc(GemmConv p, dim3 grid, cudaStream_t st) {
  p.prefetch = epilogue_prefetch() ? 1 : 0;
  detail::allow_dynamic_smem<conv_gemm_tc<T, BM, MODE>>(kGemmSmemBytes<BM, MODE>);
  conv_gemm_tc<T, BM, MODE><<<grid, 2 * BM, kGemmSmemBytes<BM, MODE>, st>>>(p);
}

template <class T, int DYV, int XMODE>
void launch_wgrad_tc(bool small, const GemmWgrad& p, const WgradGrid& g, Tensor& dw, const Stream& stream) {
  constexpr bool kAsync = XMODE == kDirect || XMODE == kDirect4;  // both operands cp.async: 4 stages
  if (small)
    launch_wgrad<conv_wgrad_tc<T, 64, DYV, XMODE>>(p, g, 128, kWgradSmemBytes<64, kAsync>, dw, stream);
  else
    launch_wgrad<conv_wgrad_tc<T, 128, DYV, XMODE>>(p, g, 256, kWgradSmemBytes<128, kAsync>, dw, stream);
}

// The dy chunks of a backward-filter launch: 16-byte (8 pixels) when the plane and pointer allow, else 8-byte.
template <class T, int XMODE>
void launch_wgrad_tc_dy(int dyv, bool small, const GemmWgrad& p, const WgradGrid& g, Tensor& dw, const Stream& stream) {
  if (dyv == 8) launch_wgrad_tc<T, 8, XMODE>(small, p, g, dw, stream);
  else if (dyv == 4) launch_wgrad_tc<T, 4, XMODE>(small, p, g, dw, stream);
  else launch_wgrad_tc<T, 0, XMODE>(small, p, g, dw, stream);
}

template <class T>
void launch_gemm(const GemmConv& p, bool tc, int mode, cudaStream_t st) {
  if (p.npix == 0 || p.M == 0) return;
  const bool small = p.M <= 64;
  const dim3 grid(unsigned((p.npix + kBN - 1) / kBN), unsigned((p.M + (small ? 63 : 127)) / (small ? 64 : 128)));
  if constexpr (std::is_same_v<T, float>) {
    (void)tc, (void)mode;
    if (small) conv_gemm_simt<T, 64><<<grid, 128, 0, st>>>(p);
    else conv_gemm_simt<T, 128><<<grid, 256, 0, st>>>(p);
  } else if (!tc) {
    if (small) conv_gemm_simt<T, 64><<<grid, 128, 0, st>>>(p);
    else conv_gemm_simt<T, 128><<<grid, 256, 0, st>>>(p);
  } else if (small) {
    if (mode == kDirect) launch_gemm_tc<T, 64, kDirect>(p, grid, st);
    else if (mode == kDirect4) launch_gemm_tc<T, 64, kDirect4>(p, grid, st);
    else if (mode == kChannels) launch_gemm_tc<T, 64, kChannels>(p, grid, st);
    else launch_gemm_tc<T, 64, kGeneric>(p, grid, st);
  } else {
    if (mode == kDirect) launch_gemm_tc<T, 128, kDirect>(p, grid, st);
    else if (mode == kDirect4) launch_gemm_tc<T, 128, kDirect4>(p, grid, st);
    else if (mode == kChannels) launch_gemm_tc<T, 128, kChannels>(p, grid, st);
    else launch_gemm_tc<T, 128, kGeneric>(p, grid, st);
  }
  HPDT_CUDA_CHECK_LAUNCH();
}

// The gather mode of a v2 launch: direct needs a 1x1 stride-1 unpadded tap (one phase covering the plane), a
// plane of whole 16-byte chunks and an aligned source (direct4: 8-byte chunks); channels needs 16-channel halves
// of k tiles in one tap.
int gather_mode(const GemmConv& p, bool one_by_one_unit) {
  if (one_by_one_unit && p.plane % 8 == 0 && aligned16(p.src)) return kDirect;
  if (one_by_one_unit && p.plane % 4 == 0 && aligned8(p.src)) return kDirect4;
  if (p.C % 16 == 0) return kChannels;
  return kGeneric;
}

template <class T>
void run_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& e, Tensor& y, bool tc,
                 const Stream& stream) {
  const cudaStream_t st = detail::native(stream);
  const int64_t oh = s.out_h(), ow = s.out_w(), K = s.c_in * s.kh * s.kw;
  // Weights as [co][lda] tap-major. A 1x1 kernel already is; others (and unaligned ones, for cp.async) are repacked.
  const bool one_tap = s.kh == 1 && s.kw == 1;
  GemmConv p;
  Tensor packed, xs;  // (released after the launch: the stream-ordered allocator reuses them after it)
  bool unit = one_tap && s.stride == 1 && s.pad == 0;  // a plain GEMM: the direct loads
  if (space_to_depth_applies(s, tc && !std::is_same_v<T, float>)) {
    const SpaceToDepth d = space_to_depth<T>(s, x, w, Layout::nchw, packed, xs, stream);
    const int64_t lda = int64_t(d.cs) * d.th * d.tw;
    p.a = packed.data(), p.lda = int(lda);
    p.src = xs.data(), p.C = d.cs, p.Hs = d.hs, p.Ws = d.ws, p.plane = d.hs * d.ws;
    p.src_img = int64_t(d.cs) * p.plane;
    p.sy = p.sx = 1, p.oy0 = p.ox0 = 0;
    p.div_c = FastDiv(d.cs), p.div_kw = FastDiv(d.tw), p.K = int(lda);
    unit = d.th == 1 && d.tw == 1;  // (the patch embedding)
  } else {
    int64_t lda = K;
    p.a = forward_weights(s, w, tc, true, packed, &lda, stream), p.lda = int(lda);
    p.src = x.data(), p.C = int(s.c_in), p.Hs = int(s.h), p.Ws = int(s.w), p.plane = int(s.h * s.w);
    p.src_img = s.c_in * s.h * s.w;
    p.sy = p.sx = int(s.stride), p.oy0 = p.ox0 = int(-s.pad);
    p.div_c = FastDiv(s.c_in), p.div_kw = FastDiv(s.kw), p.K = int(K);
  }
  p.M = int(s.c_out), p.tsign = 1;
  p.pix_hw = FastDiv(oh * ow), p.pix_w = FastDiv(ow), p.npix = int(s.n * oh * ow);
  p.dst = y.data(), p.dst_img = s.c_out * oh * ow, p.dst_plane = int(oh * ow), p.dst_w = int(ow);
  p.bias = e.bias ? e.bias->data() : nullptr;
  p.scale = e.scale ? e.scale->data() : nullptr;
  p.shift = e.shift ? e.shift->data() : nullptr;
  p.residual = e.residual ? e.residual->data() : nullptr;
  p.relu = e.relu ? 1 : 0;
  p.out4 = out4_ok(p) ? 1 : 0;
  if (epilogue_computes_stats(e, tc && !std::is_same_v<T, float>))  // a partial per channel and pixel tile
    p.stats = e.stats->start(p.M, (int64_t(p.npix) + kBN - 1) / kBN, y.data(), p.npix, stream);
  launch_gemm<T>(p, tc, gather_mode(p, unit), st);
}

// Backward-data by stride phases: the dx pixels with (iy + pad) % s == ph_y (and likewise in x) receive exactly
// the taps r = ph_y + s * jr, from dy row oy = qy0 + t - jr for the t-th such pixel iy = iy0 + s * t. Each phase
// is a dense stride-1 implicit GEMM over its own taps (no multiplications by the zeros a dilated dy would
// hold); the pixels of phases without taps (kernel smaller than the stride) are zeroed by one memset of dx.
template <class T>
void run_backward_data(const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx, bool tc,
                       const Tensor* residual, ChannelGradSums* bn, const Stream& stream) {
  if (space_to_depth_backward_data_applies(s, tc && !std::is_same_v<T, float>, residual, bn)) {
    // (space_to_depth.cuh) one phase of 16 or more rows of its tiles real instead of s^2 phases of C
    return space_to_depth_backward_data<T>(s, w, dx, Layout::nchw, stream,
                                           [&](const Conv2dShape& rs, const Tensor& wr, Tensor& dxs) {
                                             run_backward_data<T>(rs, dy, wr, dxs, tc, nullptr, nullptr, stream);
                                           });
  }
  const cudaStream_t st = detail::native(stream);
  const int64_t S = s.stride, oh = s.out_h(), ow = s.out_w();
  int64_t total = 0;
  const std::vector<DataPhase> phases = data_phases(s, &total);
  int bn_split = 0;
  if (epilogue_computes_grad_sums(bn, tc && !std::is_same_v<T, float>, phases)) {  // a partial per channel, phase and tile
    int64_t tiles = 0;
    for (const DataPhase& f : phases) tiles += (s.n * f.hp * f.wp + kBN - 1) / kBN;
    bn->start(s.c_in, tiles, dx.data(), s.n * s.h * s.w, stream);
  }
  Tensor packed = device_buffer(total, w.dtype(), w.device(), stream);
  T* pk = static_cast<T*>(packed.data());
  const bool unit = s.kh == 1 && s.kw == 1 && S == 1 && s.pad == 0;
  // dx pixels no tap reaches (3 of 4 phases of a 1x1 stride-2 convolution) are zeros: one memset of dx, then
  // only the phases with taps. A K = 0 GEMM per empty phase wrote them as a strided sub-grid instead, slowly
  // (ResNet-50's 1x1 s2 1024->2048 backward-data at batch 256 took 0.67 ms on the H100, its one real GEMM
  // about 0.3 ms of it).
  // With a residual those pixels are the residual's: one copy instead.
  if (std::any_of(phases.begin(), phases.end(), [](const DataPhase& f) { return f.khp * f.kwp == 0; }))
    clear_or_copy(dx, residual, st);
  for (const DataPhase& f : phases) {
    const int64_t K = f.khp * f.kwp * s.c_out;
    if (f.khp * f.kwp == 0) continue;
    repack_phase_weights(s, f, w, packed, st);
    GemmConv p;
    p.a = pk + f.offset, p.lda = int(f.lda), p.M = int(s.c_in);
    p.src = dy.data(), p.C = int(s.c_out), p.Hs = int(oh), p.Ws = int(ow), p.plane = int(oh * ow);
    p.src_img = s.c_out * oh * ow;
    p.pix_hw = FastDiv(f.hp * f.wp), p.pix_w = FastDiv(f.wp), p.npix = int(s.n * f.hp * f.wp);
    p.sy = p.sx = 1, p.oy0 = int(f.qy0), p.ox0 = int(f.qx0), p.tsign = -1;
    p.div_c = FastDiv(s.c_out), p.div_kw = FastDiv(f.kwp), p.K = int(K);
    p.dst = dx.data(), p.dst_img = s.c_in * s.h * s.w, p.dst_plane = int(s.h * s.w), p.dst_w = int(s.w);
    p.dys = p.dxs = int(S), p.dy0 = int(f.iy0), p.dx0 = int(f.ix0);
    p.residual = residual ? residual->data() : nullptr;
    p.out4 = out4_ok(p) ? 1 : 0;
    if (bn && bn->partial.defined()) {
      p.bn = bn_grad_epilogue(*bn, bn_split);
      bn_split += (p.npix + kBN - 1) / kBN;
      if (!aligned8(p.bn.x) || (p.bn.y && !aligned8(p.bn.y))) p.out4 = 0;  // 8-byte loads of x and y too
    }
    launch_gemm<T>(p, tc, gather_mode(p, unit), st);
  }
}

template <class T>
void run_backward_filter(const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw, bool tc,
                         const Stream& stream) {
  const int64_t oh = s.out_h(), ow = s.out_w(), K = s.c_in * s.kh * s.kw, npix = s.n * oh * ow;
  if (s.c_out == 0 || K == 0 || npix == 0) return;
  if (space_to_depth_applies(s, tc && !std::is_same_v<T, float>)) {
    // (space_to_depth.cuh) its x columns take the channels gather (one bounds check per 16 values) where x's 3
    // channels took the generic one
    return space_to_depth_backward_filter<T>(s, x, dw, Layout::nchw, stream,
                                             [&](const Conv2dShape& rs, const Tensor& xs, Tensor& dws) {
                                               run_backward_filter<T>(rs, xs, dy, dws, tc, stream);
                                             });
  }
  GemmWgrad p;
  p.dy = dy.data(), p.x = x.data();
  p.CO = int(s.c_out), p.CI = int(s.c_in), p.H = int(s.h), p.W = int(s.w), p.KH = int(s.kh), p.KW = int(s.kw);
  p.stride = int(s.stride), p.pad = int(s.pad), p.K = int(K), p.npix = int(npix), p.ohw = int(oh * ow);
  p.div_ohw = FastDiv(oh * ow), p.div_ow = FastDiv(ow);
  p.dw = dw.data();
  const bool small = s.c_out <= 64;
  const int64_t bm = small ? 64 : 128, bk = tc ? kTcBK : kSimtBK;
  tc = tc && !std::is_same_v<T, float>;
  const WgradGrid g{(K + kBN - 1) / kBN, (s.c_out + bm - 1) / bm, (npix + bk - 1) / bk, 2.0 * double(bm * kBN * bk), tc};
  if (!tc) {
    if (small) launch_wgrad<conv_wgrad_simt<T, 64>>(p, g, 128, 0, dw, stream);
    else launch_wgrad<conv_wgrad_simt<T, 128>>(p, g, 256, 0, dw, stream);
    return;
  }
  if constexpr (!std::is_same_v<T, float>) {
    const auto aligned = [](const void* ptr, uintptr_t b) { return reinterpret_cast<uintptr_t>(ptr) % b == 0; };
    const int dyv = (oh * ow) % 8 == 0 && aligned(dy.data(), 16)  ? 8
                    : (oh * ow) % 4 == 0 && aligned(dy.data(), 8) ? 4
                                                                   : 0;
    const bool unit = s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0;
    if (unit && dyv == 8 && aligned(x.data(), 16))
      launch_wgrad_tc<T, 8, kDirect>(small, p, g, dw, stream);
    else if (unit && dyv == 4 && aligned(x.data(), 8))
      launch_wgrad_tc<T, 4, kDirect4>(small, p, g, dw, stream);
    else if (s.c_in % 16 == 0)
      launch_wgrad_tc_dy<T, kChannels>(dyv, small, p, g, dw, stream);
    else
      launch_wgrad_tc_dy<T, kGeneric>(dyv, small, p, g, dw, stream);
  }
}

}  // namespace

void conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& e, Tensor& y,
                    const Stream& stream, ConvVariant variant) {
  const bool tc = use_tensor_cores(variant, x.dtype(), "conv2d_forward");
  check_index_range("conv2d_forward", s);
  if (e.stats) e.stats->clear_results();  // run_forward sets them where v2 computes them
  if (y.numel() == 0) return;
  dispatch_floating(x.dtype(), "conv2d_forward", [&](auto tag) {
    using T = decltype(tag);
    run_forward<T>(s, x, w, e, y, tc, stream);
  });
}

void conv2d_backward_data(const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx, const Stream& stream,
                          ConvVariant variant, const Tensor* residual, ChannelGradSums* bn_grad) {
  const bool tc = use_tensor_cores(variant, dy.dtype(), "conv2d_backward_data");
  check_index_range("conv2d_backward_data", s);
  if (bn_grad) bn_grad->clear_results();  // run_backward_data sets them where v2 computes them
  if (dx.numel() == 0) return;
  dispatch_floating(dy.dtype(), "conv2d_backward_data", [&](auto tag) {
    using T = decltype(tag);
    run_backward_data<T>(s, dy, w, dx, tc, residual, bn_grad, stream);
  });
}

void conv2d_backward_filter(const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias,
                            const Stream& stream, ConvVariant variant) {
  const bool tc = use_tensor_cores(variant, x.dtype(), "conv2d_backward_filter");
  check_index_range("conv2d_backward_filter", s);
  dispatch_floating(x.dtype(), "conv2d_backward_filter", [&](auto tag) {
    using T = decltype(tag);
    run_backward_filter<T>(s, x, dy, dw, tc, stream);
  });
  if (dbias) conv2d_bias_grad(dy, *dbias, stream);
}

void conv2d_bias_grad(const Tensor& dy, Tensor& dbias, const Stream& stream, Layout layout) {
  if (layout == Layout::nhwc) return conv_detail::bias_grad_nhwc(dy, dbias, stream);
  const int64_t n = dy.size(0), co = dy.size(1), ohw = dy.size(2) * dy.size(3), total = n * ohw;
  if (co == 0) return;
  HPDT_CHECK(total < (int64_t(1) << 31), "conv2d_backward_filter: dy ", dy.str(), " too large for the dbias reduction");
  const cudaStream_t st = detail::native(stream);
  // Chunks of at least 4096 (image, pixel) pairs, and about 1024 blocks in all: a function of the shape only.
  const int64_t splits = std::clamp<int64_t>(std::min<int64_t>(total / 4096, (1024 + co - 1) / co), 1, 1024);
  const int64_t chunk = (total + splits - 1) / splits;
  Tensor partial = device_buffer(co * splits, DType::f32, dy.device(), stream);
  dispatch_floating(dy.dtype(), "conv2d_backward_filter", [&](auto tag) {
    using T = decltype(tag);
    bias_grad_partial<T><<<dim3(unsigned(co), unsigned(splits)), 256, 0, st>>>(
        static_cast<const T*>(dy.data()), int(co), FastDiv(ohw), int(total), int(chunk), partial.data<float>());
    HPDT_CUDA_CHECK_LAUNCH();
  });
  bias_grad_final(partial.data<float>(), int(co), int(splits), dbias, st);
}

void conv2d_epilogue_inplace(const Conv2dEpilogue& e, Tensor& y, const Stream& stream, Layout layout) {
  if (!e.bias && !e.scale && !e.shift && !e.residual && !e.relu) return;
  const int64_t n = y.numel();
  if (n == 0) return;
  HPDT_CHECK(n < (int64_t(1) << 31), "conv2d_forward: y ", y.str(), " too large");
  // NHWC: channel i % co, which is the NCHW rule with a plane of one element and co = y.size(3).
  const bool nhwc = layout == Layout::nhwc;
  const int64_t plane = nhwc ? 1 : y.size(2) * y.size(3), co = nhwc ? y.size(3) : y.size(1);
  dispatch_floating(y.dtype(), "conv2d_forward", [&](auto tag) {
    using T = decltype(tag);
    auto ptr = [](const Tensor* t) { return t ? static_cast<const T*>(t->data()) : nullptr; };
    epilogue_inplace<T><<<detail::grid_for(n, kThreads1D), kThreads1D, 0, detail::native(stream)>>>(
        static_cast<T*>(y.data()), int(n), FastDiv(plane), int(co), ptr(e.bias), ptr(e.scale), ptr(e.shift),
        ptr(e.residual), e.relu ? 1 : 0);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

// ---- conv_detail: host helpers declared in conv_common.cuh -------------------------------------------------

namespace conv_detail {

void check_index_range(std::string_view op, const Conv2dShape& s) {
  const int64_t lim = int64_t(1) << 31;
  const int64_t biggest =
      std::max({s.n * s.c_in * s.h * s.w, s.n * s.c_out * s.out_h() * s.out_w(), s.c_out * s.c_in * s.kh * s.kw});
  HPDT_CHECK(biggest < lim, op, ": tensors of 2^31 elements or more are not supported on CUDA (", s.str(), ")");
}

bool conv_v2_vector_epilogue() { return env_switch("HPDT_CONV_V2_EPILOGUE", "vec", "scalar"); }

bool conv_epilogue_bn_stats() { return !env_switch("HPDT_CONV_BN_STATS", "separate", "epilogue"); }

bool epilogue_computes_stats(const Conv2dEpilogue& e, bool tc_half) {
  return e.stats && tc_half && !e.bias && !e.scale && !e.shift && !e.residual && !e.relu && conv_epilogue_bn_stats();
}

bool epilogue_computes_grad_sums(const ChannelGradSums* bn, bool tc_half, const std::vector<DataPhase>& phases) {
  return bn && tc_half &&
         std::none_of(phases.begin(), phases.end(), [](const DataPhase& f) { return f.khp * f.kwp == 0; }) &&
         conv_epilogue_bn_stats();
}

bool use_tensor_cores(ConvVariant v, DType dt, std::string_view op) {
  const bool half = dt == DType::f16 || dt == DType::bf16;
  HPDT_CHECK(half || v != ConvVariant::v2_tensor_core, op,
             ": the tensor-core variant (v2) takes f16 or bf16 tensors, got ", dtype_name(dt));
  return half && v != ConvVariant::v1_simt;
}

Tensor device_buffer(int64_t n, DType dt, Device dev, const Stream& stream) {
  return Tensor::empty({std::max<int64_t>(n, 1)}, dt, dev, AllocOptions{.stream = &stream});
}

void launch_repack(DType dt, const void* w, void* out, const Repack& r, cudaStream_t st) {
  const int64_t n = int64_t(r.rows) * r.lda;
  if (n == 0) return;
  dispatch_floating(dt, "conv2d (weight repack)", [&](auto tag) {
    using T = decltype(tag);
    repack_weights<T>
        <<<detail::grid_for(n, kThreads1D), kThreads1D, 0, st>>>(static_cast<const T*>(w), static_cast<T*>(out), r);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

const void* forward_weights(const Conv2dShape& s, const Tensor& w, bool for_cp_async, bool pad, Tensor& packed,
                            int64_t* lda, const Stream& stream) {
  const int64_t K = s.c_in * s.kh * s.kw;
  const bool one_tap = s.kh == 1 && s.kw == 1;
  *lda = K;
  if (one_tap && !(for_cp_async && (K % 8 != 0 || !aligned16(w.data())))) return w.data();
  *lda = pad ? round_up(K, 8) : K;
  packed = device_buffer(s.c_out * *lda, w.dtype(), w.device(), stream);
  Repack r{};
  r.rows = int(s.c_out), r.lda = int(*lda), r.K = int(K), r.Cg = int(s.c_in), r.KWp = int(std::max<int64_t>(s.kw, 1));
  r.ry0 = 0, r.rx0 = 0, r.rstep = 1, r.KW = int(s.kw);
  r.row_stride = s.c_in * s.kh * s.kw, r.ch_stride = s.kh * s.kw;
  launch_repack(w.dtype(), w.data(), packed.data(), r, detail::native(stream));
  return packed.data();
}

std::vector<DataPhase> data_phases(const Conv2dShape& s, int64_t* packed_total) {
  const int64_t S = s.stride;
  std::vector<DataPhase> phases;
  int64_t total = 0;
  for (int64_t py = 0; py < S; ++py)
    for (int64_t px = 0; px < S; ++px) {
      DataPhase f{};
      f.py = py, f.px = px;
      f.khp = py < s.kh ? (s.kh - py + S - 1) / S : 0;
      f.kwp = px < s.kw ? (s.kw - px + S - 1) / S : 0;
      f.iy0 = ((py - s.pad) % S + S) % S;
      f.ix0 = ((px - s.pad) % S + S) % S;
      f.hp = f.iy0 < s.h ? (s.h - f.iy0 + S - 1) / S : 0;
      f.wp = f.ix0 < s.w ? (s.w - f.ix0 + S - 1) / S : 0;
      if (f.hp == 0 || f.wp == 0) continue;
      f.qy0 = (f.iy0 + s.pad - py) / S;  // exact: iy0 + pad == py (mod S), and >= 0
      f.qx0 = (f.ix0 + s.pad - px) / S;
      f.lda = round_up(f.khp * f.kwp * s.c_out, 8);
      f.offset = total;
      total += s.c_in * f.lda;
      phases.push_back(f);
    }
  *packed_total = total;
  return phases;
}

void clear_or_copy(Tensor& dx, const Tensor* residual, cudaStream_t st) {
  const size_t bytes = size_t(dx.numel()) * dtype_size(dx.dtype());
  if (residual)
    HPDT_CUDA_CHECK(cudaMemcpyAsync(dx.data(), residual->data(), bytes, cudaMemcpyDeviceToDevice, st));
  else
    HPDT_CUDA_CHECK(cudaMemsetAsync(dx.data(), 0, bytes, st));
}

void repack_phase_weights(const Conv2dShape& s, const DataPhase& f, const Tensor& w, Tensor& packed, cudaStream_t st) {
  Repack r{};
  r.rows = int(s.c_in), r.lda = int(f.lda), r.K = int(f.khp * f.kwp * s.c_out), r.Cg = int(s.c_out);
  r.KWp = int(std::max<int64_t>(f.kwp, 1));
  r.ry0 = int(f.py), r.rx0 = int(f.px), r.rstep = int(s.stride), r.KW = int(s.kw);
  r.row_stride = s.kh * s.kw, r.ch_stride = s.c_in * s.kh * s.kw;
  launch_repack(w.dtype(), w.data(), static_cast<char*>(packed.data()) + f.offset * int64_t(dtype_size(w.dtype())), r,
                st);
}

int wgrad_splits(int64_t tiles, int64_t KT, int64_t partial_floats, int64_t resident, double step_flops, bool tc,
                 int* tiles_per_split) {
  const detail::SplitK sk = detail::choose_split_k(tiles, KT, resident, step_flops, partial_floats, 8, 256,
                                                   tc ? detail::kTensorFlops : detail::kSimtFlops);
  *tiles_per_split = int(sk.steps_per_split);
  return sk.splits;
}

void wgrad_reduce(const float* ws, int splits, Tensor& dw, cudaStream_t st) {
  const int64_t n = dw.numel();
  if (n == 0) return;
  dispatch_floating(dw.dtype(), "conv2d_backward_filter", [&](auto tag) {
    using T = decltype(tag);
    wgrad_reduce_kernel<T>
        <<<detail::grid_for(n, kThreads1D), kThreads1D, 0, st>>>(ws, splits, n, static_cast<T*>(dw.data()));
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

void bias_grad_final(const float* partial, int co, int splits, Tensor& dbias, cudaStream_t st) {
  if (co == 0) return;
  dispatch_floating(dbias.dtype(), "conv2d_backward_filter", [&](auto tag) {
    using T = decltype(tag);
    bias_grad_final_kernel<T>
        <<<unsigned((co + 255) / 256), 256, 0, st>>>(partial, co, splits, static_cast<T*>(dbias.data()));
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace conv_detail

}  // namespace hpdt::kernels::cuda
