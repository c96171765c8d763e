// CUDA flash-style multi-head self-attention; the CPU oracle is kernels/cpu/attention.cpp.
//
// Layout: qkv [b, t, 3, heads, dh] (row stride 3d, d = heads * dh), out/dout [b, t, heads, dh],
// lse [b, heads, t] f32. Scale 1 / sqrt(dh).
//
// Forward: one CTA per (batch, head, block of query rows) streams the key/value blocks of its head
// through shared memory and keeps the online-softmax state of each row in f32 registers (running max m,
// running sum l, output accumulator), rescaling the accumulator by exp(m_old - m_new) whenever the max
// grows: no t x t matrix ever reaches memory. Scores live in the log2 domain (scale * log2(e) folded
// into one multiply, exp2 in the inner loop); lse = m + log(l) is stored as a natural log.
//
// Backward, deterministic (no float atomics in an order that varies: same bits every run):
//   1. D = rowsum(dout * out) per query row (attention_rowdot_kernel);
//   2. per (batch, head, key block) a CTA loops over all query blocks, recomputes S = q k^T and
//      P = exp(S - lse), and accumulates dV += P^T dO and dK += dS^T Q in registers, with
//      dS = P * (dO V^T - D);
//   3. per (batch, head, query block) a second CTA loops over all key blocks for dQ += dS K.
//   FlashAttention-2 does 2 and 3 in one pass and adds dQ into an f32 buffer with atomicAdd, whose
//   order (so the rounding) changes from run to run. Splitting dQ off keeps every sum in a fixed order
//   at the price of recomputing S = QK^T and dP = dO V^T once more: 7 tile GEMMs instead of 5.
//   Variant 3 does 2 and 3 in one pass and still keeps the order: each key block's CTA adds its share of a
//   query block's dQ into an f32 accumulator only when the key block before it in that query block's order has (a
//   turn counter per query block and warp; dq_add_in_turn), as FlashAttention-2's deterministic mode does: 5 tile
//   GEMMs, the adds of the key blocks serialised per query block. Its CTAs take their key blocks by ticket, in the
//   order they start (fused_ticket). In key order every key block visits the query blocks from the first and
//   waits for the key block before it at every step; rotated (the default where a head's key blocks fit on the
//   GPU at once), key block k starts at query block k nqb / nkb, and the query blocks take their adds in the order
//   the key blocks reach them, so that in lockstep nobody waits (the schedule above fused_offset).
//
// Variants (numbered, each kept, tested and timed):
//   v1 SIMT, every dtype (the f32 path): 256 threads as 16 x 16; thread (ty, tx) owns rows ty + 16 i
//      and columns tx + 16 j of each tile; tiles in f32 shared memory.
//   v2 tensor cores for f16/bf16: mma.sync.m16n8k16 (inline PTX) with f32 accumulation, 4 warps of 16
//      query rows (32 in the forward up to dh 64) or 16 keys (dK/dV), tiles in 16-bit shared memory fed by
//      cp.async (double-buffered) and read with ldmatrix; the probabilities go from the score
//      accumulators to 16-bit A fragments in registers for the PV product (as FlashAttention-2 does).
//   v3 (backward only; its forward is v2's): v2's dK/dV kernel with the dQ step above (FUSED_DQ).
// Head dims: kernels are compiled for padded head dims 16, 32, 64, 128; any dh up to 128 runs on the
// next one with the extra columns zero in shared memory (they add nothing to q.k and are not stored).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "attention_schedule.cuh"
#include "hpdt/core/env.h"
#include "hpdt/kernels/cuda/attention.h"
#include "launch.cuh"
#include "mma_sync.cuh"
#include "watchdog.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr unsigned kFull = 0xffffffffu;

// ---- shared helpers ---------------------------------------------------------------------------------

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// Rows [0, ROWS) of a tile into f32 shared memory with row stride LDS floats; rows >= nrows and
// columns >= dh are zero. src points at row 0 of the tile, rows ld elements apart. vec: 4 elements
// per load (16 bytes f32, 8 bytes f16/bf16; dh % 4 == 0 and src aligned to that).
template <class T, int DHP, int ROWS, int LDS, int NT>
__device__ __forceinline__ void load_tile_f32(float* __restrict__ dst, const T* __restrict__ src, int64_t ld, int nrows,
                                              int dh, bool vec) {
  static_assert(DHP % 4 == 0 && LDS % 4 == 0);
  using Vec = std::conditional_t<sizeof(T) == 4, uint4, uint2>;
  if (vec) {
    constexpr int CH = DHP / 4;
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += NT) {
      const int r = idx / CH, c = (idx % CH) * 4;
      float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < nrows && c < dh) {
        const Vec raw = __ldg(reinterpret_cast<const Vec*>(src + r * ld + c));
        T e[4];
        memcpy(e, &raw, sizeof(raw));
        f = make_float4(to_f32(e[0]), to_f32(e[1]), to_f32(e[2]), to_f32(e[3]));
      }
      *reinterpret_cast<float4*>(dst + r * LDS + c) = f;
    }
  } else {
    for (int idx = threadIdx.x; idx < ROWS * DHP; idx += NT) {
      const int r = idx / DHP, c = idx % DHP;
      dst[r * LDS + c] = (r < nrows && c < dh) ? to_f32(src[r * ld + c]) : 0.0f;
    }
  }
}

// acc[i][j] = a row (16 i) . b row (16 j) over DHP columns, rows LD floats apart; a and b point at the
// thread's first row (a: ty, b: tx). Reads are float4 along the columns.
template <int I, int J, int LD, int DHP>
__device__ __forceinline__ void simt_tile_dot(float (&acc)[I][J], const float* a, const float* b) {
#pragma unroll
  for (int i = 0; i < I; ++i)
#pragma unroll
    for (int j = 0; j < J; ++j) acc[i][j] = 0.0f;
#pragma unroll 2
  for (int c = 0; c < DHP; c += 4) {
    float4 av[I], bv[J];
#pragma unroll
    for (int i = 0; i < I; ++i) av[i] = lds4(a + 16 * i * LD + c);
#pragma unroll
    for (int j = 0; j < J; ++j) bv[j] = lds4(b + 16 * j * LD + c);
#pragma unroll
    for (int i = 0; i < I; ++i)
#pragma unroll
      for (int j = 0; j < J; ++j) acc[i][j] = dot4(av[i], bv[j], acc[i][j]);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

struct Geometry {
  int b, t, heads, dh;
  float scale() const { return 1.0f / std::sqrt(float(dh)); }
  float scale_log2() const { return scale() * kLog2e; }
};

unsigned grid_of(int64_t ctas, const char* op) {
  HPDT_CHECK(ctas < (int64_t(1) << 31), op, ": ", ctas, " thread blocks exceed the grid limit");
  return unsigned(ctas);
}

// Calls f(std::integral_constant<int, DHP>) with the padded head dim that dh runs on.
template <class F>
void with_padded_head_dim(int dh, const char* op, F&& f) {
  if (dh <= 16) return f(std::integral_constant<int, 16>{});
  if (dh <= 32) return f(std::integral_constant<int, 32>{});
  if (dh <= 64) return f(std::integral_constant<int, 64>{});
  if (dh <= 128) return f(std::integral_constant<int, 128>{});
  HPDT_FAIL(op, ": head dim ", dh, " is not supported on CUDA (at most 128)");
}

// ---- v1: SIMT, every dtype ------------------------------------------------------------------------

constexpr int kSimtThreads = 256;

// Tile sizes: BR query rows x BC keys. The 128-wide head dim takes smaller tiles so that two or three
// CTAs still fit on an SM (shared memory) and the register accumulators stay at 32-64 per thread.
template <int DHP>
struct SimtForwardTiles {
  static constexpr int BR = 64, BC = DHP == 128 ? 32 : 64;
};
template <int DHP>
struct SimtBackwardTiles {
  static constexpr int BR = DHP == 128 ? 32 : 64, BC = DHP == 128 ? 32 : 64;
};

// Row strides of the f32 tiles (floats). Rows read as float4 along dh by the 16 lanes tx of a half
// warp are 4 banks apart (stride = DHP + 4), so each quarter-warp phase hits 8 distinct bank quads.
// Probability rows read by the two rows ty of a warp are 16 banks apart (stride = cols + 16).
template <int DHP>
constexpr int kSimtRowStride = DHP + 4;

template <int DHP>
constexpr size_t simt_forward_smem() {
  using Tl = SimtForwardTiles<DHP>;
  return sizeof(float) * (size_t(Tl::BR + Tl::BC) * kSimtRowStride<DHP> + Tl::BC * DHP + Tl::BR * (Tl::BC + 16));
}

template <class T, int DHP>
__global__ void __launch_bounds__(kSimtThreads, 2)
    attention_forward_v1_kernel(const T* __restrict__ qkv, T* __restrict__ out, float* __restrict__ lse, int t,
                                int heads, int dh, float scale_log2, bool vec) {
  constexpr int BR = SimtForwardTiles<DHP>::BR, BC = SimtForwardTiles<DHP>::BC;
  constexpr int RI = BR / 16, CJ = BC / 16, DJ = DHP / 16;
  constexpr int LQ = kSimtRowStride<DHP>, LV = DHP, LP = BC + 16;
  extern __shared__ float4 smem_f4[];
  float* q_s = reinterpret_cast<float*>(smem_f4);
  float* k_s = q_s + BR * LQ;
  float* v_s = k_s + BC * LQ;
  float* p_s = v_s + BC * LV;

  const int nqb = (t + BR - 1) / BR;
  const int bh = blockIdx.x / nqb, q0 = (blockIdx.x % nqb) * BR;
  const int bi = bh / heads, h = bh % heads;
  const int64_t d = int64_t(heads) * dh, ld = 3 * d;
  const T* q_g = qkv + int64_t(bi) * t * ld + int64_t(h) * dh;
  const T* k_g = q_g + d;
  const T* v_g = q_g + 2 * d;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  load_tile_f32<T, DHP, BR, LQ, kSimtThreads>(q_s, q_g + q0 * ld, ld, t - q0, dh, vec);
  float o[RI][DJ], m[RI], l[RI];
#pragma unroll
  for (int i = 0; i < RI; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < DJ; ++j) o[i][j] = 0.0f;
  }

  for (int k0 = 0; k0 < t; k0 += BC) {
    __syncthreads();  // the previous k, v, p tiles are consumed (and q_s is complete on the first pass)
    load_tile_f32<T, DHP, BC, LQ, kSimtThreads>(k_s, k_g + k0 * ld, ld, t - k0, dh, vec);
    load_tile_f32<T, DHP, BC, LV, kSimtThreads>(v_s, v_g + k0 * ld, ld, t - k0, dh, vec);
    __syncthreads();

    float s[RI][CJ];
    simt_tile_dot<RI, CJ, LQ, DHP>(s, q_s + ty * LQ, k_s + tx * LQ);

    // Online softmax. A row's BC scores sit in the 16 lanes tx of one half warp: xor-shuffles 8..1.
    // Every block holds at least one valid key (k0 < t), so the block max is finite.
#pragma unroll
    for (int i = 0; i < RI; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < CJ; ++j) {
        s[i][j] = k0 + tx + 16 * j < t ? s[i][j] * scale_log2 : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, off));
      const float m_new = fmaxf(m[i], mx);
      const float alpha = exp2f(m[i] - m_new);  // 0 on the first block (m = -inf)
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < CJ; ++j) {
        const float p = exp2f(s[i][j] - m_new);
        sum += p;
        p_s[(ty + 16 * i) * LP + tx + 16 * j] = p;
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(kFull, sum, off);
      l[i] = l[i] * alpha + sum;
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < DJ; ++j) o[i][j] *= alpha;
    }
    __syncthreads();

    // O += P V (keys past t have p = 0 and zero v rows)
#pragma unroll 2
    for (int j = 0; j < BC; ++j) {
      float pv[RI], vv[DJ];
#pragma unroll
      for (int i = 0; i < RI; ++i) pv[i] = p_s[(ty + 16 * i) * LP + j];
#pragma unroll
      for (int c = 0; c < DJ; ++c) vv[c] = v_s[j * LV + tx + 16 * c];
#pragma unroll
      for (int i = 0; i < RI; ++i)
#pragma unroll
        for (int c = 0; c < DJ; ++c) o[i][c] = fmaf(pv[i], vv[c], o[i][c]);
    }
  }

#pragma unroll
  for (int i = 0; i < RI; ++i) {
    const int r = q0 + ty + 16 * i;
    if (r >= t) continue;
    const float inv = 1.0f / l[i];
    T* o_g = out + (int64_t(bi) * t + r) * d + int64_t(h) * dh;
#pragma unroll
    for (int c = 0; c < DJ; ++c)
      if (tx + 16 * c < dh) o_g[tx + 16 * c] = from_f32<T>(o[i][c] * inv);
    if (tx == 0) lse[int64_t(bh) * t + r] = (m[i] + log2f(l[i])) * kLn2;
  }
}

// D[b, h, i] = sum_c out[b, i, h, c] * dout[b, i, h, c]: one warp per (b, i, h) row, a fixed order.
template <class T>
__global__ void __launch_bounds__(256)
    attention_rowdot_kernel(const T* __restrict__ out, const T* __restrict__ dout, float* __restrict__ D, int64_t rows,
                            int t, int heads, int dh) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t w = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; w < rows; w += warps) {
    const T* o = out + w * dh;  // [b, t, heads, dh] rows are contiguous: row w = (b t + i) heads + h
    const T* g = dout + w * dh;
    float acc = 0.0f;
    for (int c = lane; c < dh; c += 32) acc = fmaf(to_f32(o[c]), to_f32(g[c]), acc);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(kFull, acc, off);
    if (lane == 0) {
      const int64_t bt = w / heads, h = w % heads, bi = bt / t, i = bt % t;
      D[(bi * heads + h) * t + i] = acc;
    }
  }
}

template <int DHP>
constexpr size_t simt_dkdv_smem() {
  using Tl = SimtBackwardTiles<DHP>;
  return sizeof(float) *
         (size_t(2 * Tl::BC + 2 * Tl::BR) * kSimtRowStride<DHP> + 2 * Tl::BC * (Tl::BR + 16) + 2 * Tl::BR);
}

// dK, dV for one block of BC keys, looping over all query blocks. Thread (ty, tx) owns keys ty + 16 i
// and, in the score tiles, queries tx + 16 j; in the accumulators, head columns tx + 16 j.
template <class T, int DHP>
__global__ void __launch_bounds__(kSimtThreads, 2)
    attention_backward_dkdv_v1_kernel(const T* __restrict__ qkv, const T* __restrict__ dout,
                                      const float* __restrict__ lse, const float* __restrict__ D, T* __restrict__ dqkv,
                                      int t, int heads, int dh, float scale, float scale_log2, bool vec) {
  constexpr int BR = SimtBackwardTiles<DHP>::BR, BC = SimtBackwardTiles<DHP>::BC;
  constexpr int CI = BC / 16, RJ = BR / 16, DJ = DHP / 16;
  constexpr int LQ = kSimtRowStride<DHP>, LP = BR + 16;
  extern __shared__ float4 smem_f4[];
  float* k_s = reinterpret_cast<float*>(smem_f4);
  float* v_s = k_s + BC * LQ;
  float* q_s = v_s + BC * LQ;
  float* do_s = q_s + BR * LQ;
  float* pt_s = do_s + BR * LQ;    // P^T [key][query]
  float* dst_s = pt_s + BC * LP;   // dS^T [key][query]
  float* lse_s = dst_s + BC * LP;  // log2-domain lse of the query block (+inf past t: P = 0 there)
  float* d_s = lse_s + BR;

  const int nkb = (t + BC - 1) / BC;
  const int bh = blockIdx.x / nkb, k0 = (blockIdx.x % nkb) * BC;
  const int bi = bh / heads, h = bh % heads;
  const int64_t d = int64_t(heads) * dh, ld = 3 * d;
  const T* q_g = qkv + int64_t(bi) * t * ld + int64_t(h) * dh;
  const T* do_g = dout + int64_t(bi) * t * d + int64_t(h) * dh;
  const float* lse_g = lse + int64_t(bh) * t;
  const float* D_g = D + int64_t(bh) * t;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  load_tile_f32<T, DHP, BC, LQ, kSimtThreads>(k_s, q_g + d + k0 * ld, ld, t - k0, dh, vec);
  load_tile_f32<T, DHP, BC, LQ, kSimtThreads>(v_s, q_g + 2 * d + k0 * ld, ld, t - k0, dh, vec);
  float dk[CI][DJ] = {}, dv[CI][DJ] = {};

  for (int q0 = 0; q0 < t; q0 += BR) {
    __syncthreads();  // the previous q, dO, P^T, dS^T tiles are consumed
    load_tile_f32<T, DHP, BR, LQ, kSimtThreads>(q_s, q_g + q0 * ld, ld, t - q0, dh, vec);
    load_tile_f32<T, DHP, BR, LQ, kSimtThreads>(do_s, do_g + q0 * d, d, t - q0, dh, vec);
    for (int r = threadIdx.x; r < BR; r += kSimtThreads) {
      const bool valid = q0 + r < t;
      lse_s[r] = valid ? lse_g[q0 + r] * kLog2e : INFINITY;
      d_s[r] = valid ? D_g[q0 + r] : 0.0f;
    }
    __syncthreads();

    // S^T = K Q^T and dP^T = V dO^T as two separate passes (half the operand registers live at a time)
    float s[CI][RJ], dp[CI][RJ];
    simt_tile_dot<CI, RJ, LQ, DHP>(s, k_s + ty * LQ, q_s + tx * LQ);
    simt_tile_dot<CI, RJ, LQ, DHP>(dp, v_s + ty * LQ, do_s + tx * LQ);
#pragma unroll
    for (int i = 0; i < CI; ++i)
#pragma unroll
      for (int j = 0; j < RJ; ++j) {
        const int r = tx + 16 * j;
        const float p = exp2f(s[i][j] * scale_log2 - lse_s[r]);
        pt_s[(ty + 16 * i) * LP + r] = p;
        dst_s[(ty + 16 * i) * LP + r] = p * (dp[i][j] - d_s[r]);
      }
    __syncthreads();

#pragma unroll 2
    for (int r = 0; r < BR; ++r) {
      float pv[CI], sv[CI], gv[DJ], qv[DJ];
#pragma unroll
      for (int i = 0; i < CI; ++i) {
        pv[i] = pt_s[(ty + 16 * i) * LP + r];
        sv[i] = dst_s[(ty + 16 * i) * LP + r];
      }
#pragma unroll
      for (int c = 0; c < DJ; ++c) {
        gv[c] = do_s[r * LQ + tx + 16 * c];
        qv[c] = q_s[r * LQ + tx + 16 * c];
      }
#pragma unroll
      for (int i = 0; i < CI; ++i)
#pragma unroll
        for (int c = 0; c < DJ; ++c) {
          dv[i][c] = fmaf(pv[i], gv[c], dv[i][c]);
          dk[i][c] = fmaf(sv[i], qv[c], dk[i][c]);
        }
    }
  }

#pragma unroll
  for (int i = 0; i < CI; ++i) {
    const int key = k0 + ty + 16 * i;
    if (key >= t) continue;
    T* dk_g = dqkv + (int64_t(bi) * t + key) * ld + d + int64_t(h) * dh;
    T* dv_g = dk_g + d;
#pragma unroll
    for (int c = 0; c < DJ; ++c) {
      if (tx + 16 * c >= dh) continue;
      dk_g[tx + 16 * c] = from_f32<T>(dk[i][c] * scale);
      dv_g[tx + 16 * c] = from_f32<T>(dv[i][c]);
    }
  }
}

template <int DHP>
constexpr size_t simt_dq_smem() {
  using Tl = SimtBackwardTiles<DHP>;
  return sizeof(float) * (size_t(2 * Tl::BR + 2 * Tl::BC) * kSimtRowStride<DHP> + Tl::BR * (Tl::BC + 16));
}

// dQ for one block of BR query rows, looping over all key blocks (S and dP recomputed: see the top).
template <class T, int DHP>
__global__ void __launch_bounds__(kSimtThreads, 2)
    attention_backward_dq_v1_kernel(const T* __restrict__ qkv, const T* __restrict__ dout,
                                    const float* __restrict__ lse, const float* __restrict__ D, T* __restrict__ dqkv,
                                    int t, int heads, int dh, float scale, float scale_log2, bool vec) {
  constexpr int BR = SimtBackwardTiles<DHP>::BR, BC = SimtBackwardTiles<DHP>::BC;
  constexpr int RI = BR / 16, CJ = BC / 16, DJ = DHP / 16;
  constexpr int LQ = kSimtRowStride<DHP>, LS = BC + 16;
  extern __shared__ float4 smem_f4[];
  float* q_s = reinterpret_cast<float*>(smem_f4);
  float* do_s = q_s + BR * LQ;
  float* k_s = do_s + BR * LQ;
  float* v_s = k_s + BC * LQ;
  float* ds_s = v_s + BC * LQ;

  const int nqb = (t + BR - 1) / BR;
  const int bh = blockIdx.x / nqb, q0 = (blockIdx.x % nqb) * BR;
  const int bi = bh / heads, h = bh % heads;
  const int64_t d = int64_t(heads) * dh, ld = 3 * d;
  const T* q_g = qkv + int64_t(bi) * t * ld + int64_t(h) * dh;
  const T* k_g = q_g + d;
  const T* v_g = q_g + 2 * d;
  const T* do_g = dout + int64_t(bi) * t * d + int64_t(h) * dh;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  load_tile_f32<T, DHP, BR, LQ, kSimtThreads>(q_s, q_g + q0 * ld, ld, t - q0, dh, vec);
  load_tile_f32<T, DHP, BR, LQ, kSimtThreads>(do_s, do_g + q0 * d, d, t - q0, dh, vec);
  float lse2[RI], Dr[RI], dq[RI][DJ] = {};
#pragma unroll
  for (int i = 0; i < RI; ++i) {
    const int r = q0 + ty + 16 * i;
    lse2[i] = r < t ? lse[int64_t(bh) * t + r] * kLog2e : INFINITY;
    Dr[i] = r < t ? D[int64_t(bh) * t + r] : 0.0f;
  }

  for (int k0 = 0; k0 < t; k0 += BC) {
    __syncthreads();  // the previous k, v, dS tiles are consumed (and q, dO complete on the first pass)
    load_tile_f32<T, DHP, BC, LQ, kSimtThreads>(k_s, k_g + k0 * ld, ld, t - k0, dh, vec);
    load_tile_f32<T, DHP, BC, LQ, kSimtThreads>(v_s, v_g + k0 * ld, ld, t - k0, dh, vec);
    __syncthreads();

    float s[RI][CJ], dp[RI][CJ];
    simt_tile_dot<RI, CJ, LQ, DHP>(s, q_s + ty * LQ, k_s + tx * LQ);
    simt_tile_dot<RI, CJ, LQ, DHP>(dp, do_s + ty * LQ, v_s + tx * LQ);
#pragma unroll
    for (int i = 0; i < RI; ++i)
#pragma unroll
      for (int j = 0; j < CJ; ++j) {
        const float p = k0 + tx + 16 * j < t ? exp2f(s[i][j] * scale_log2 - lse2[i]) : 0.0f;
        ds_s[(ty + 16 * i) * LS + tx + 16 * j] = p * (dp[i][j] - Dr[i]);
      }
    __syncthreads();

#pragma unroll 2
    for (int j = 0; j < BC; ++j) {
      float sv[RI], kv[DJ];
#pragma unroll
      for (int i = 0; i < RI; ++i) sv[i] = ds_s[(ty + 16 * i) * LS + j];
#pragma unroll
      for (int c = 0; c < DJ; ++c) kv[c] = k_s[j * LQ + tx + 16 * c];
#pragma unroll
      for (int i = 0; i < RI; ++i)
#pragma unroll
        for (int c = 0; c < DJ; ++c) dq[i][c] = fmaf(sv[i], kv[c], dq[i][c]);
    }
  }

#pragma unroll
  for (int i = 0; i < RI; ++i) {
    const int r = q0 + ty + 16 * i;
    if (r >= t) continue;
    T* dq_g = dqkv + (int64_t(bi) * t + r) * ld + int64_t(h) * dh;
#pragma unroll
    for (int c = 0; c < DJ; ++c)
      if (tx + 16 * c < dh) dq_g[tx + 16 * c] = from_f32<T>(dq[i][c] * scale);
  }
}

// ---- v2: tensor cores (mma.sync m16n8k16), f16/bf16 ---------------------------------------------------
//
// The PTX (cp.async, ldmatrix, mma.sync) and the fragments of mma.m16n8k16 are in mma_sync.cuh.
// A C tile pair (n-tiles 2k, 2k+1) is exactly the A fragment of k-step k: that is how P (and dS) go
// from the score accumulators to the next product without leaving registers.
// Shared tiles are [rows][DHP + 8] 16-bit: rows 16 bytes apart in the banks, so the 8 row addresses of
// every ldmatrix 8x8 matrix hit distinct banks.

constexpr int kMmaWarps = 4, kMmaThreads = 32 * kMmaWarps;

// Two f32 -> one register of two 16-bit values (round to nearest even), `lo` in the low half.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, bf16_t>)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// A C-tile pair (n-tiles 2k, 2k+1 of f32 accumulators) as the 16-bit A fragment of k-step k.
template <class T>
__device__ __forceinline__ void c_pair_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

// ldmatrix addressing (lane l supplies one 16-byte row address; matrices 0..3 from lanes 0-7, 8-15, ...):
// A fragment of rows [r0, r0+16) x cols [c0, c0+16) of a row-major tile.
template <int LS>
__device__ __forceinline__ const uint16_t* a_frag_addr(const uint16_t* tile, int r0, int c0, int lane) {
  return tile + (r0 + lane % 16) * LS + c0 + (lane / 16) * 8;
}
// B fragments of two n-tiles [n0, n0+8), [n0+8, n0+16) at k-step [c0, c0+16) when B[k][n] = tile[n][k]
// (tile rows are the n index: keys for q k^T): regs 0, 1 -> n-tile n0, regs 2, 3 -> n-tile n0 + 8.
template <int LS>
__device__ __forceinline__ const uint16_t* bt_frag_addr(const uint16_t* tile, int n0, int c0, int lane) {
  return tile + (n0 + lane % 8 + (lane / 16) * 8) * LS + c0 + ((lane / 8) % 2) * 8;
}
// B fragments (with ldmatrix .trans) of two n-tiles [n0, n0+8), [n0+8, n0+16) at k-step [k0, k0+16)
// when B[k][n] = tile[k][n] (tile rows are the k index: keys for P V): regs 0, 1 -> n0, regs 2, 3 -> n0 + 8.
template <int LS>
__device__ __forceinline__ const uint16_t* b_frag_addr(const uint16_t* tile, int k0, int n0, int lane) {
  return tile + (k0 + lane % 16) * LS + n0 + (lane / 16) * 8;
}

// Rows [0, ROWS) of a 16-bit tile into shared memory (row stride DHP + 8) with cp.async; rows >= nrows
// and columns >= dh zero-filled. dh % 8 == 0 and src 16-byte aligned (checked by the host).
// Lane order: row r, chunk c lands on 16-byte bank group (r (CH + 1) + c) % 8. With 8 or 16 chunks a row, the 8
// lanes of a phase take 8 chunks of one row: 8 groups. With 2 or 4 (dh 16, 32) they would take 2 rows sharing
// groups (2-way conflicts, CUDA_EMU_STATS), so there the 8 lanes take one chunk of 8 consecutive rows.
template <class T, int DHP, int ROWS>
__device__ __forceinline__ void cp_async_tile(uint16_t* dst, const T* src, int64_t ld, int nrows, int dh) {
  constexpr int LS = DHP + 8, CH = DHP / 8;
  static_assert(CH >= 8 || (ROWS % 8 == 0 && kMmaThreads % (8 * CH) == 0), "whole 8-row groups per pass");
  if constexpr (CH >= 8) {
    // Chunk idx = threadIdx.x + i kMmaThreads is row idx / CH, chunk idx % CH, walked with one running source
    // pointer: a 64-bit row offset per chunk cost the dh-128 forward's Wide tile its last registers (it spilled).
    constexpr int RSTEP = kMmaThreads / CH;
    static_assert(kMmaThreads % CH == 0 && ROWS % RSTEP == 0, "whole passes of the block over the tile");
    const int r0 = threadIdx.x / CH, c = (threadIdx.x % CH) * 8;
    const T* p = src + r0 * ld + c;
    const uint32_t d = smem_u32(dst + r0 * LS + c);
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; ++i, p += RSTEP * ld) {
      const bool ok = r0 + i * RSTEP < nrows && c < dh;
      cp_async16_zfill(d + i * RSTEP * LS * 2, ok ? p : src, ok ? 16 : 0);
    }
  } else {
#pragma unroll
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += kMmaThreads) {
      const int r = idx % 8 + 8 * (idx / (8 * CH)), c = (idx / 8) % CH * 8;
      const bool ok = r < nrows && c < dh;
      cp_async16_zfill(smem_u32(dst + r * LS + c), ok ? src + r * ld + c : src, ok ? 16 : 0);
    }
  }
}

template <class T>
__device__ __forceinline__ void store2(T* p, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(p) = pack2<T>(lo, hi);
}

// Two f32 adds into global memory at p (8-byte aligned), performed in L2 (a reduction: nothing comes back; sm_90's
// vector red). atomicAdd(float2*) compiles to atom, which returns the old values.
__device__ __forceinline__ void red_add_f32x2(float* p, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(x), "f"(y) : "memory");
}

// Variant 3's turn counters: an acquire load (what the key blocks before did to the accumulator is visible after
// it) and the release fence before a turn passes on. fence.acq_rel is all the order needs; __threadfence is the
// heavier fence.sc.
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void fence_release() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

// Forward tiles: each warp owns MT m-tiles of 16 query rows (BR = 16 MT warps), so every K and V fragment
// read from shared memory feeds MT mma's; BC keys per step.
//   dh <= 64: MT = 2, BC = 64, Q's fragments in registers for the whole pass (FlashAttention-2's 128-row tile).
//   dh 128, the default (Wide): MT = 2, BC = 32, Q's fragments re-read from shared memory at every k step,
//     as FlashAttention-2 does at dh 128: two m-tiles' Q (64 registers) next to their 128 accumulators would not
//     fit. Per mma 0.375 ldmatrix instead of Narrow's 0.5 (each V fragment feeds 4 mma's, not 2).
//   dh 128, Narrow (HPDT_ATTENTION_V2_TILES=narrow, the tile measured on 2026-11-26): MT = 1, BC = 64, Q in
//     registers; 0.59-0.69x SDPA at dh 128 there, against 0.85-1.24x at dh 64 with MT = 2.
template <int MT_, int BC_, bool Q_IN_REGISTERS>
struct MmaForwardTile {
  static constexpr int MT = MT_, BR = 16 * kMmaWarps * MT_, BC = BC_;
  static constexpr bool kQInRegisters = Q_IN_REGISTERS;
};
using ForwardTileUpTo64 = MmaForwardTile<2, 64, true>;
using ForwardTileWide128 = MmaForwardTile<2, 32, false>;
using ForwardTileNarrow128 = MmaForwardTile<1, 64, true>;

// HPDT_ATTENTION_V2_TILES=narrow|wide pins v2's tiles where two exist (the dh-128 forward, the dh 32 and 64
// backward, the dh-128 dQ pass): narrow, one m-tile a warp, the tiles measured on 2026-11-26; wide, two. For measuring both; read at
// every call, as HPDT_GEMM_V3_TILE. Unset: wide.
bool narrow_v2_tiles() {
  const char* e = std::getenv("HPDT_ATTENTION_V2_TILES");
  if (!e || std::strcmp(e, "wide") == 0) return false;
  HPDT_CHECK(std::strcmp(e, "narrow") == 0, "HPDT_ATTENTION_V2_TILES=", e, ": expected narrow or wide");
  return true;
}

// HPDT_ATTENTION_V2_DKDV_STEP=32|64: the queries a step of the dK/dV pass at dh 128 (BackwardTileNarrow's 32 or
// BackwardTileTall128's 64, above). Unset: 32, the step measured on the H200 (2026-11-29: 0.76x SDPA's backward at
// t = 4096); 64 is for measuring against it (hpdt-bench-attention-cuda's v2_step64 rows). Read at every call, as
// HPDT_ATTENTION_V2_TILES; anything else is an error naming the variable.
bool tall_dkdv128_step() { return !env_switch("HPDT_ATTENTION_V2_DKDV_STEP", "32", "64"); }

template <int DHP, class Tile>
constexpr size_t mma_forward_smem() {
  return sizeof(uint16_t) * size_t(Tile::BR + 4 * Tile::BC) * (DHP + 8);
}

template <class T, int DHP, class Tile>
__global__ void __launch_bounds__(kMmaThreads)
    attention_forward_v2_kernel(const T* __restrict__ qkv, T* __restrict__ out, float* __restrict__ lse, int t,
                                int heads, int dh, float scale_log2) {
  constexpr int MT = Tile::MT, BR = Tile::BR, BC = Tile::BC;
  constexpr bool QREG = Tile::kQInRegisters;
  constexpr int LS = DHP + 8, KS = DHP / 16, ND = DHP / 8, NS = BC / 8;
  static_assert(NS % 2 == 0 && ND % 2 == 0, "key and head-dim tiles in pairs of n-tiles");
  extern __shared__ uint4 smem_u4[];
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem_u4);
  uint16_t* k_s = q_s + BR * LS;      // [2][BC][LS]
  uint16_t* v_s = k_s + 2 * BC * LS;  // [2][BC][LS]

  const int nqb = (t + BR - 1) / BR;
  const int bh = blockIdx.x / nqb, q0 = (blockIdx.x % nqb) * BR;
  const int bi = bh / heads, h = bh % heads;
  const int64_t d = int64_t(heads) * dh, ld = 3 * d;
  const T* q_g = qkv + int64_t(bi) * t * ld + int64_t(h) * dh;
  const T* k_g = q_g + d;
  const T* v_g = q_g + 2 * d;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  cp_async_tile<T, DHP, BR>(q_s, q_g + q0 * ld, ld, t - q0, dh);
  cp_async_commit();
  cp_async_tile<T, DHP, BC>(k_s, k_g, ld, t, dh);
  cp_async_tile<T, DHP, BC>(v_s, v_g, ld, t, dh);
  cp_async_commit();
  // Q's fragments: loaded once here (QREG), or at every k step from q_s, which nothing overwrites.
  uint32_t qf[MT][QREG ? KS : 1][4];  // (!QREG: unused)
  if constexpr (QREG) {
    cp_async_wait<1>();  // the q tile has landed (k, v may still be in flight)
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
        ldmatrix_x4(qf[mt][ks], a_frag_addr<LS>(q_s, (warp * MT + mt) * 16, ks * 16, lane));
  }

  // Per m-tile: rows g and g + 8 (index 0, 1) of the running max m and sum l (l per thread: its columns).
  float o[MT][ND][4] = {}, m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  const int nkb = (t + BC - 1) / BC;
  for (int kb = 0; kb < nkb; ++kb) {
    cp_async_wait<0>();
    __syncthreads();     // block kb is in shared memory, and everyone is done with block kb - 1's buffers
    if (kb + 1 < nkb) {  // prefetch block kb + 1 into the other buffer while this one is computed on
      const int nb = (kb + 1) * BC, buf = (kb + 1) & 1;
      cp_async_tile<T, DHP, BC>(k_s + buf * BC * LS, k_g + nb * ld, ld, t - nb, dh);
      cp_async_tile<T, DHP, BC>(v_s + buf * BC * LS, v_g + nb * ld, ld, t - nb, dh);
      cp_async_commit();
    }
    const uint16_t* kt = k_s + (kb & 1) * BC * LS;
    const uint16_t* vt = v_s + (kb & 1) * BC * LS;
    const int k0 = kb * BC;

    float s[MT][NS][4] = {};
    // S = Q K^T over k steps of 16 head-dim columns.
    const auto score_step = [&](int ks, const uint32_t(&q)[MT][4]) {
#pragma unroll
      for (int np = 0; np < NS / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, bt_frag_addr<LS>(kt, np * 16, ks * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(s[mt][2 * np], q[mt], b[0], b[1]);
          mma_16816<T>(s[mt][2 * np + 1], q[mt], b[2], b[3]);
        }
      }
    };
    if constexpr (QREG) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        uint32_t q[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) q[mt][i] = qf[mt][ks][i];
        score_step(ks, q);
      }
    } else {
      // Q from shared memory (the first block's wait and barrier above cover the q tile)
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        uint32_t q[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(q[mt], a_frag_addr<LS>(q_s, (warp * MT + mt) * 16, ks * 16, lane));
        score_step(ks, q);
      }
    }

    // Online softmax; a row's scores sit in the 4 lanes of a quad (xor-shuffles 1, 2).
    const bool ragged = k0 + BC > t;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][n][e] *= scale_log2;
          if (ragged && k0 + n * 8 + 2 * (lane % 4) + (e & 1) >= t) s[mt][n][e] = -INFINITY;
          mx[e / 2] = fmaxf(mx[e / 2], s[mt][n][e]);
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFull, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFull, mx[r], 2));
        const float m_new = fmaxf(m[mt][r], mx[r]);   // finite: every block has a valid key
        const float alpha = exp2f(m[mt][r] - m_new);  // 0 on the first block (m = -inf)
        m[mt][r] = m_new;
        l[mt][r] *= alpha;
#pragma unroll
        for (int n = 0; n < ND; ++n) {
          o[mt][n][2 * r] *= alpha;
          o[mt][n][2 * r + 1] *= alpha;
        }
      }
#pragma unroll
      for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][n][e] = exp2f(s[mt][n][e] - m[mt][e / 2]);
          l[mt][e / 2] += s[mt][n][e];
        }
    }

    // O += P V, P as 16-bit A fragments straight from the score accumulators
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c_pair_to_a<T>(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < ND / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, b_frag_addr<LS>(vt, kk * 16, np * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(o[mt][2 * np], a[mt], b[0], b[1]);
          mma_16816<T>(o[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(kFull, sum, 1);
      sum += __shfl_xor_sync(kFull, sum, 2);
      const int row = q0 + (warp * MT + mt) * 16 + lane / 4 + 8 * r;
      if (row >= t) continue;
      const float inv = 1.0f / sum;
      T* o_g = out + (int64_t(bi) * t + row) * d + int64_t(h) * dh;
#pragma unroll
      for (int n = 0; n < ND; ++n) {
        const int c = n * 8 + 2 * (lane % 4);
        if (c < dh) store2(o_g + c, o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
      }
      if (lane % 4 == 0) lse[int64_t(bh) * t + row] = (m[mt][r] + log2f(sum)) * kLn2;
    }
}

// Backward tiles, one shape for both passes: each warp owns MT m-tiles of 16 rows (keys in the dK/dV pass,
// queries in the dQ pass), BLOCK = 16 MT warps rows a CTA, and STEP rows of the other side per loop step.
//   Narrow (MT = 1; STEP 64, 32 at dh 128): the tiles measured on 2026-11-26 (bwd 0.78-0.79x SDPA at t = 4096),
//     and the default of the dK/dV pass at dh 128, where two m-tiles' dK and dV (256 registers) cannot fit, and
//     of both passes at dh 16 (where ptxas spills the wide dK/dV kernel at 128 registers).
//   Wide (MT = 2, STEP 32; the default since 2026-11-27: both passes at dh 32 and 64, the dQ pass at dh 128):
//     every Q / dO (dK/dV pass) or K / V (dQ pass) fragment read from shared memory feeds two m-tiles' mma's:
//     ldmatrix per mma 0.56 -> 0.375 (dK/dV) and 0.58 -> 0.42 (dQ) at dh 64, 0.67 -> 0.42 (dQ) at dh 128.
template <int MT_, int STEP_>
struct MmaBackwardTile {
  static constexpr int MT = MT_, BLOCK = 16 * kMmaWarps * MT_, STEP = STEP_;
  static_assert(STEP <= BLOCK, "v3's rotated order needs as many query blocks (of STEP) as key blocks (of BLOCK)");
};
template <int DHP>
using BackwardTileNarrow = MmaBackwardTile<1, DHP == 128 ? 32 : 64>;
using BackwardTileWide = MmaBackwardTile<2, 32>;
//   Tall (HPDT_ATTENTION_V2_DKDV_STEP=64; the dK/dV pass at dh 128 only, v2's and v3's): MT = 1, STEP 64. Each warp's
//     K and V fragments, re-read from shared memory at every k step, feed 64 queries' mma's instead of 32: ldmatrix
//     per mma 0.625 -> 0.56 over the step's four products, and half the steps (barriers, lse and D loads) a key
//     block. 254 registers against 238 (ptxas, sm_90, no spills: still 2 CTAs an SM), 104 KB of shared memory
//     against 70. dK and dV are the same values: their sums add the same 16-query products in the same order.
using BackwardTileTall128 = MmaBackwardTile<1, 64>;

// FUSED_DQ (variant 3): and the dS^T tile of a step, [BLOCK keys][STEP + 8] 16-bit.
template <int DHP, class Tile, bool FUSED_DQ = false>
constexpr size_t mma_dkdv_smem() {
  return sizeof(uint16_t) * size_t(2 * Tile::BLOCK + 4 * Tile::STEP) * (DHP + 8) + sizeof(float) * 4 * Tile::STEP +
         (FUSED_DQ ? sizeof(uint16_t) * size_t(Tile::BLOCK) * (Tile::STEP + 8) : 0);
}

// Variant 3's ticket: the CTA's work (batch, head, key block) in the order CTAs started (the kernel below). A static
// shared variable, instantiated by the fused kernels alone: its address is a constant, so the dQ step reads it
// without a pointer held across the dK/dV loop (one made the dh-64 wide kernel spill 20 bytes).
__device__ __forceinline__ int& fused_ticket() {
  __shared__ int ticket;
  return ticket;
}

// Variant 3's schedule: the order in which a key block visits the query blocks, and its place in each query block's
// order of dQ adds. The host picks one per call (`rotate`; HPDT_ATTENTION_V3_ORDER, fused_backward_rotates below).
//   - Key order (rotate 0): every key block visits query blocks 0, 1, ..., nqb - 1, and query block qb takes its
//     adds from key blocks 0, 1, ..., nkb - 1 (rank kbi). All key blocks reach query block qb at about the same
//     step, so its adds queue: key block kbi adds kbi hand-overs late at every step, a lag that grows along the key
//     blocks.
//   - Rotated: key block kbi starts at query block kbi nqb / nkb (fused_offset) and wraps around, so the key blocks
//     reach a query block at different steps, each at least one step after the one before, and the query block takes
//     its adds in that order: from kstar, the last key block that starts at or before it, down to 0, then from
//     nkb - 1 down to kstar + 1 (rank (kstar - kbi) mod nkb). In lockstep nobody waits; a key block passes its turn
//     on one step late, at its next dQ step, when its adds have long reached L2 (dq_add_in_turn). Key block kbi
//     waits for kbi + 1, which starts later: the order is a cycle, so all nkb key blocks of a head must be resident
//     at once, which the host checks against what the GPU holds. (The tickets still give a head's key blocks in
//     the order they start: a head whose blocks have all started finishes, and frees room for the next.)
// The offset is a static shared variable, as the ticket: set with it, read at every step.
__device__ __forceinline__ int& fused_offset() {
  __shared__ int offset;
  return offset;
}

// The rotated order's query block and rank of step s (attention_schedule.cuh's v3_rotated_rank, checked on the CPU
// by test_attention_schedule), in slot s % 2: thread 0 computes them at the top of the step, where only dK and dV
// are live (computed in the dQ step, next to its outputs, a division made the tall dh-128 kernel spill), and every
// warp reads them in the dQ step, and those of step s - 1 (the turn to pass on) in the other slot. (The query block
// could be computed again from s - 1, but with it the tall kernel spilled 16 bytes.) Thread 0 writes slot s % 2
// after the loop's barrier at the top of step s, which every warp passes only once done with step s - 1's dQ step,
// the last to read that slot (as step s - 2's turn to pass on).
__device__ __forceinline__ int2* fused_turn_info() {
  __shared__ int2 info[2];
  return info;
}

// Step s's query block (FUSED_DQ: rotated by the offset, 0 in key order).
template <bool FUSED_DQ>
__device__ __forceinline__ int query_block_at(int s, int nqb) {
  if constexpr (FUSED_DQ) {
    const int qb = s + fused_offset();
    return qb >= nqb ? qb - nqb : qb;
  } else {
    return s;
  }
}

// Passes query block qb's turn on (this warp's counter, batch and head bh): the warp's adds to it first (release),
// then the count of adds done, rank + 1.
__device__ __forceinline__ void pass_turn(unsigned* turns, int bh, int nqb, int qb, int rank) {
  fence_release();
  __syncwarp();
  if (threadIdx.x % 32 == 0)
    atomicExch(turns + (int64_t(bh) * nqb + qb) * kMmaWarps + threadIdx.x / 32, unsigned(rank + 1));
}

// The dK/dV kernel's block: its ticket (FUSED_DQ), else blockIdx.x (unsigned, as blockIdx.x: the divisions by it
// compile as before).
template <bool FUSED_DQ>
__device__ __forceinline__ unsigned block_of() {
  if constexpr (FUSED_DQ) return unsigned(fused_ticket());
  else return blockIdx.x;
}

// Variant 3's dQ step (step s's query block of a dK/dV CTA, FUSED_DQ below): this CTA's share of dQ for the block's
// BR = STEP queries, dS K over its BC = BLOCK keys, added into dQ in its turn (the schedule above: key order or
// rotated).
//   - The GEMM (BR x DHP outputs, K = BC): dS from ds_s, where the warps left dS^T ([key][query], so the A
//     fragments come through ldmatrix .trans), K from k_s. The (BR / 16) x (DHP / 16) output units of 16 x 16 go
//     to the 4 warps round-robin, the same units to warp w in every CTA.
//   - The order, per warp: warp w of key block kbi (0 .. nkb - 1 of its batch and head) waits until its turn counter
//     for the query block reads its rank (fused_turn_info; in key order kbi), i.e. until warp w of the key block before
//     it has added its units; the first stores its share into the f32 accumulator acc, the middle ones add to it, the
//     last adds, scales and stores dQ itself in T (one key block: it stores straight to dQ). The counter is read once
//     before the GEMM (an acquire load, whose latency the GEMM hides; in the rotated order the turn has usually come by
//     then) and again only while it is not yet this block's turn. The middle ones add with a vector red, a reduction
//     performed in L2, so that the accumulator is not read back to the SM nkb times (at t = 4096, dh 128 a load and a
//     store of it per key block would be 2 x 64 x 268 MB of L2 traffic a backward; the adds are half that, as
//     FlashAttention-2's, whose order is not fixed). So every dQ element is the same sum in the same order on every run
//     (the reductions are float atomics, but one at a time per element, in the turns' order), with one f32 accumulator
//     of [b, heads, t, dh]; the accumulator needs no zeroing, the counters do. A warp waits only for the same warp of
//     the block before (the units it adds to), so the step needs no block barrier after the GEMM's. In key order, key
//     block kbi - 1 went to a block that started before this one (the kernel hands out its work by tickets, in the
//     order blocks start), so it is resident or done and the wait ends, whatever order the GPU dispatches blocks in;
//     FlashAttention-2's deterministic backward orders its dQ adds the same way (per CTA), relying on dispatch in index
//     order instead. The rotated order needs the head's key blocks resident together (above). A wait past
//     watchdog.cuh's kWaitTimeoutNs traps (a lost turn would hang the GPU).
//   - Passing the turn on: in key order right after the adds; rotated, the step before's at the start of this one
//     (pass_turn). A key block's last step in the rotated order is the query block it reaches after every other key
//     block (rank nkb - 1): no turn to pass on.
// The CTA whose ticket is `block` (fused_ticket(): batch and head block / nkb, key block kbi = block % nkb); acc
// [b, heads, t, dh] f32, dqkv as the kernel's, turns kMmaWarps counters per batch, head and query block. (The
// offsets are computed here from the kernel's parameters, not passed in: three more 64-bit values live across the
// dK/dV loop made the dh-128 kernel spill.)
template <class T, int DHP, class Tile>
__device__ __forceinline__ void dq_add_in_turn(const uint16_t* ds_s, const uint16_t* k_s, float* acc_all, T* dqkv,
                                               unsigned* turns, int heads, int s, int t, int dh, int nkb, float scale,
                                               bool rotate) {
  constexpr int BR = Tile::STEP, BC = Tile::BLOCK, LS = DHP + 8, LQ = BR + 8;
  constexpr int NP = DHP / 16, UNITS = (BR / 16) * NP, U = UNITS / kMmaWarps;
  static_assert(UNITS % kMmaWarps == 0, "whole output units a warp");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int nqb = (t + BR - 1) / BR;
  // The step before's turn (rotated: its adds were issued a step ago), and the first read of this step's, whose
  // latency the GEMM hides.
  if (rotate && s > 0) {
    const int2 before = fused_turn_info()[(s - 1) & 1];
    pass_turn(turns, fused_ticket() / nkb, nqb, before.x, before.y);
  }
  const int block = fused_ticket();
  const int bh = block / nkb, kbi = block % nkb, qb = query_block_at<true>(s, nqb), q0 = qb * BR;
  const int rank = rotate ? fused_turn_info()[s & 1].y : kbi;
  const int64_t ld = 3 * int64_t(heads) * dh;
  float* acc = acc_all + int64_t(bh) * t * dh;
  T* dq = dqkv + int64_t(bh / heads) * t * ld + int64_t(bh % heads) * dh;
  unsigned* turn = turns + (int64_t(bh) * nqb + qb) * kMmaWarps + warp;
  unsigned seen = 0;
  if (lane == 0) seen = ld_acquire(turn);
  // The warp's U output units in H passes of UP: a pass's GEMM, then its adds (the turn waited for before the first
  // pass's, and held through the second's GEMM). At 64 queries a step a warp has 8 units: 64 accumulators at once
  // next to dK and dV's 128 made the tall dh-128 kernel spill; 2 passes of 32 do not. Each element still gets this
  // block's share once, so the sums are the same.
  constexpr int H = U > 4 ? 2 : 1, UP = U / H;
#pragma unroll 1
  for (int pass = 0; pass < H; ++pass) {
    float part[UP][2][4] = {};
    // (not unrolled: with the dK and dV accumulators live, loads hoisted from later k steps made the dh-64 wide
    // kernel spill)
#pragma unroll 1
    for (int kk = 0; kk < BC / 16; ++kk) {
#pragma unroll
      for (int i = 0; i < UP; ++i) {
        const int u = warp + kMmaWarps * (pass * UP + i), mi = u / NP, np = u % NP;
        uint32_t a[4], b[4];
        // A = dS rows mi*16.., keys kk*16..: stored transposed, 8 x 8 matrix j from key rows 8 (j / 2).., query
        // columns 8 (j % 2)..
        ldmatrix_x4_trans(a, ds_s + (kk * 16 + lane % 8 + 8 * (lane / 16)) * LQ + mi * 16 + 8 * ((lane / 8) % 2));
        ldmatrix_x4_trans(b, b_frag_addr<LS>(k_s, kk * 16, np * 16, lane));
        mma_16816<T>(part[i][0], a, b[0], b[1]);
        mma_16816<T>(part[i][1], a, b[2], b[3]);
      }
    }
    if (pass == 0 && lane == 0 && seen != unsigned(rank)) {  // (each read an acquire of the adds before this block's)
      const uint64_t t0 = global_ns();
      do {
        if (global_ns() - t0 > kWaitTimeoutNs) asm volatile("trap;\n" ::: "memory");
        __nanosleep(64);
      } while (ld_acquire(turn) != unsigned(rank));
    }
    __syncwarp();
    // The lane's pairs of this pass: f(pair, its f32 accumulator entry, row, column) for each inside dQ; one loop per
    // kind of key block (first, middle, last), each with one kind of access (one loop with the choice inside
    // spilled the dh-64 wide kernel).
    auto each = [&](auto&& f) {
#pragma unroll
      for (int i = 0; i < UP; ++i) {
        const int u = warp + kMmaWarps * (pass * UP + i), mi = u / NP, np = u % NP;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = q0 + mi * 16 + lane / 4 + 8 * half, c = np * 16 + 8 * h + 2 * (lane % 4);
            if (r < t && c < dh)
              f(make_float2(part[i][h][2 * half], part[i][h][2 * half + 1]), acc + int64_t(r) * dh + c, r, c);
          }
      }
    };
    if (rank == nkb - 1) {  // the last: the sum so far plus its share, scaled, into dQ
      each([&](float2 v, float* a, int r, int c) {
        if (rank > 0) {
          const float2 o = __ldcg(reinterpret_cast<const float2*>(a));
          v.x = o.x + v.x;
          v.y = o.y + v.y;
        }
        store2(dq + int64_t(r) * ld + c, v.x * scale, v.y * scale);
      });
    } else if (rank == 0) {  // the first: its share
      each([&](float2 v, float* a, int, int) { __stcg(reinterpret_cast<float2*>(a), v); });
    } else {  // the middle ones: added in L2, nothing read back (the turns fix the order)
      each([&](float2 v, float* a, int, int) { red_add_f32x2(a, v.x, v.y); });
    }
  }
  if (!rotate) pass_turn(turns, bh, nqb, qb, rank);
}

// dK, dV with tensor cores: a CTA holds BC = BLOCK keys (16 MT per warp) and loops over query blocks of BR = STEP.
// Each warp works on its own keys in the transposed orientation (S^T = K Q^T, dP^T = V dO^T), so
// P^T and dS^T are A fragments for dV += P^T dO and dK += dS^T Q without any exchange between warps.
// FUSED_DQ (variant 3): dQ in the same pass, each query block's dS^T through shared memory into dq_add_in_turn
// (dq_acc: the f32 accumulator, turns: zeroed counters, one per batch, head, query block and warp; rotate: the
// rotated order, else key order; 0 without FUSED_DQ).
template <class T, int DHP, class Tile, bool FUSED_DQ>
__global__ void __launch_bounds__(kMmaThreads)
    attention_backward_dkdv_v2_kernel(const T* __restrict__ qkv, const T* __restrict__ dout,
                                      const float* __restrict__ lse, const float* __restrict__ D, T* __restrict__ dqkv,
                                      float* dq_acc, unsigned* turns, int t, int heads, int dh, float scale,
                                      float scale_log2, int rotate) {
  constexpr int MT = Tile::MT, BC = Tile::BLOCK, BR = Tile::STEP;
  constexpr int LS = DHP + 8, KS = DHP / 16, ND = DHP / 8, NR = BR / 8;
  extern __shared__ uint4 smem_u4[];
  uint16_t* k_s = reinterpret_cast<uint16_t*>(smem_u4);
  uint16_t* v_s = k_s + BC * LS;
  uint16_t* q_s = v_s + BC * LS;                                // [2][BR][LS]
  uint16_t* do_s = q_s + 2 * BR * LS;                           // [2][BR][LS]
  float* lse_s = reinterpret_cast<float*>(do_s + 2 * BR * LS);  // [2][BR], log2 domain, +inf past t
  float* d_s = lse_s + 2 * BR;                                  // [2][BR]
  uint16_t* ds_s = reinterpret_cast<uint16_t*>(d_s + 2 * BR);   // FUSED_DQ: [BC][BR + 8], dS^T

  const int nkb = (t + BC - 1) / BC;
  // FUSED_DQ: the block's work (batch, head, key block) comes from a ticket, the order in which blocks started,
  // not from blockIdx.x: key block kbi waits for kbi - 1 in its dQ steps, and a ticket handed out earlier went to
  // a block that is resident or done, whatever order the GPU dispatches blocks in (CUB's single-pass scans take
  // their tiles the same way). The ticket counter follows the turns (one cudaMemsetAsync zeroes both).
  // Its first query block (fused_offset) follows from the key block: the schedule above fused_offset.
  if constexpr (FUSED_DQ) {
    if (threadIdx.x == 0) {
      const int nqb_all = (t + BR - 1) / BR;
      const int ticket = int(atomicAdd(turns + int64_t(gridDim.x / nkb) * nqb_all * kMmaWarps, 1u));
      fused_ticket() = ticket;
      fused_offset() = rotate ? detail::v3_first_query_block(ticket % nkb, nkb, nqb_all) : 0;
    }
    __syncthreads();
  }
  const int bh = block_of<FUSED_DQ>() / nkb, k0 = (block_of<FUSED_DQ>() % nkb) * BC;
  const int bi = bh / heads, h = bh % heads;
  const int64_t d = int64_t(heads) * dh, ld = 3 * d;
  const T* q_g = qkv + int64_t(bi) * t * ld + int64_t(h) * dh;
  const T* do_g = dout + int64_t(bi) * t * d + int64_t(h) * dh;
  const float* lse_g = lse + int64_t(bh) * t;
  const float* D_g = D + int64_t(bh) * t;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // Query block qb's q, dO (cp.async) and lse, D (plain stores, read after the next barrier) into buffer buf.
  auto load_queries = [&](int qb, int buf) {
    const int r0 = qb * BR;
    cp_async_tile<T, DHP, BR>(q_s + buf * BR * LS, q_g + r0 * ld, ld, t - r0, dh);
    cp_async_tile<T, DHP, BR>(do_s + buf * BR * LS, do_g + r0 * d, d, t - r0, dh);
    for (int r = threadIdx.x; r < BR; r += kMmaThreads) {
      const bool valid = r0 + r < t;
      lse_s[buf * BR + r] = valid ? lse_g[r0 + r] * kLog2e : INFINITY;
      d_s[buf * BR + r] = valid ? D_g[r0 + r] : 0.0f;
    }
  };
  cp_async_tile<T, DHP, BC>(k_s, q_g + d + k0 * ld, ld, t - k0, dh);
  cp_async_tile<T, DHP, BC>(v_s, q_g + 2 * d + k0 * ld, ld, t - k0, dh);
  const int nqb = (t + BR - 1) / BR;
  load_queries(query_block_at<FUSED_DQ>(0, nqb), 0);
  cp_async_commit();

  float dk[MT][ND][4] = {}, dv[MT][ND][4] = {};
  // step s: query block query_block_at(s) (s itself but in variant 3's rotated order)
  for (int s = 0; s < nqb; ++s) {
    cp_async_wait<0>();
    __syncthreads();  // step s's query block is in shared memory; step s - 1's buffers are free
    if constexpr (FUSED_DQ) {
      if (rotate && threadIdx.x == 0) {  // this step's query block and rank, for the dQ step (fused_turn_info)
        const int qb = query_block_at<true>(s, nqb);
        fused_turn_info()[s & 1] = make_int2(qb, detail::v3_rotated_rank(qb, fused_ticket() % nkb, nkb, nqb));
      }
    }
    if (s + 1 < nqb) {
      load_queries(query_block_at<FUSED_DQ>(s + 1, nqb), (s + 1) & 1);
      cp_async_commit();
    }
    const int buf = s & 1;
    const uint16_t* qt = q_s + buf * BR * LS;
    const uint16_t* gt = do_s + buf * BR * LS;
    const float* ls = lse_s + buf * BR;
    const float* Ds = d_s + buf * BR;

    float st[MT][NR][4] = {}, dpt[MT][NR][4] = {};
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t ka[MT][4], va[MT][4];  // re-read at every step: registers are short (dK, dV live throughout)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ldmatrix_x4(ka[mt], a_frag_addr<LS>(k_s, (warp * MT + mt) * 16, ks * 16, lane));
        ldmatrix_x4(va[mt], a_frag_addr<LS>(v_s, (warp * MT + mt) * 16, ks * 16, lane));
      }
#pragma unroll
      for (int np = 0; np < NR / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, bt_frag_addr<LS>(qt, np * 16, ks * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(st[mt][2 * np], ka[mt], b[0], b[1]);
          mma_16816<T>(st[mt][2 * np + 1], ka[mt], b[2], b[3]);
        }
        ldmatrix_x4(b, bt_frag_addr<LS>(gt, np * 16, ks * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(dpt[mt][2 * np], va[mt], b[0], b[1]);
          mma_16816<T>(dpt[mt][2 * np + 1], va[mt], b[2], b[3]);
        }
      }
    }
    // P^T and dS^T; the column index is the query (lse, D per column)
#pragma unroll
    for (int n = 0; n < NR; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = n * 8 + 2 * (lane % 4) + (e & 1);
        const float lr = ls[r], dr = Ds[r];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const float p = exp2f(st[mt][n][e] * scale_log2 - lr);
          st[mt][n][e] = p;
          dpt[mt][n][e] = p * (dpt[mt][n][e] - dr);
        }
      }
    if constexpr (FUSED_DQ) {  // dS^T into shared memory for the dQ step, rounded as the dK product's A fragments
      constexpr int LQ = BR + 8;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < NR; ++n) {
          uint16_t* at = ds_s + ((warp * MT + mt) * 16 + lane / 4) * LQ + n * 8 + 2 * (lane % 4);
          *reinterpret_cast<uint32_t*>(at) = pack2<T>(dpt[mt][n][0], dpt[mt][n][1]);
          *reinterpret_cast<uint32_t*>(at + 8 * LQ) = pack2<T>(dpt[mt][n][2], dpt[mt][n][3]);
        }
    }
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
      uint32_t pa[MT][4], sa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        c_pair_to_a<T>(pa[mt], st[mt][2 * kk], st[mt][2 * kk + 1]);
        c_pair_to_a<T>(sa[mt], dpt[mt][2 * kk], dpt[mt][2 * kk + 1]);
      }
#pragma unroll
      for (int np = 0; np < ND / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, b_frag_addr<LS>(gt, kk * 16, np * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(dv[mt][2 * np], pa[mt], b[0], b[1]);
          mma_16816<T>(dv[mt][2 * np + 1], pa[mt], b[2], b[3]);
        }
        ldmatrix_x4_trans(b, b_frag_addr<LS>(qt, kk * 16, np * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(dk[mt][2 * np], sa[mt], b[0], b[1]);
          mma_16816<T>(dk[mt][2 * np + 1], sa[mt], b[2], b[3]);
        }
      }
    }
    if constexpr (FUSED_DQ) {
      __syncthreads();  // every warp's dS^T is in ds_s
      dq_add_in_turn<T, DHP, Tile>(ds_s, k_s, dq_acc, dqkv, turns, heads, s, t, dh, nkb, scale, rotate != 0);
    }
  }
  // (Rotated, the last step's turn is not passed on: the last step's query block is the one this key block reaches
  // after all the others, its rank nkb - 1, and nobody waits for it.)

  // (FUSED_DQ: the block's coordinates read back from the ticket, not held across the loop: with them live, the
  // dh-64 wide kernel spilled)
  const int k0_e = FUSED_DQ ? (fused_ticket() % nkb) * BC : k0;
  const int bi_e = FUSED_DQ ? fused_ticket() / nkb / heads : bi, h_e = FUSED_DQ ? fused_ticket() / nkb % heads : h;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int c0 = k0_e + (warp * MT + mt) * 16 + lane / 4, c1 = c0 + 8;
    T* dk0 = dqkv + (int64_t(bi_e) * t + c0) * ld + d + int64_t(h_e) * dh;
    T* dk1 = dk0 + 8 * ld;
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      const int c = n * 8 + 2 * (lane % 4);
      if (c >= dh) continue;
      if (c0 < t) {
        store2(dk0 + c, dk[mt][n][0] * scale, dk[mt][n][1] * scale);
        store2(dk0 + d + c, dv[mt][n][0], dv[mt][n][1]);
      }
      if (c1 < t) {
        store2(dk1 + c, dk[mt][n][2] * scale, dk[mt][n][3] * scale);
        store2(dk1 + d + c, dv[mt][n][2], dv[mt][n][3]);
      }
    }
  }
}

template <int DHP, class Tile>
constexpr size_t mma_dq_smem() {
  return sizeof(uint16_t) * size_t(2 * Tile::BLOCK + 4 * Tile::STEP) * (DHP + 8);
}

// dQ with tensor cores: 16 MT query rows per warp (BR = BLOCK a CTA), looping over key blocks of BC = STEP
// (double-buffered).
template <class T, int DHP, class Tile>
__global__ void __launch_bounds__(kMmaThreads)
    attention_backward_dq_v2_kernel(const T* __restrict__ qkv, const T* __restrict__ dout,
                                    const float* __restrict__ lse, const float* __restrict__ D, T* __restrict__ dqkv,
                                    int t, int heads, int dh, float scale, float scale_log2) {
  constexpr int MT = Tile::MT, BR = Tile::BLOCK, BC = Tile::STEP;
  constexpr int LS = DHP + 8, KS = DHP / 16, ND = DHP / 8, NC = BC / 8;
  extern __shared__ uint4 smem_u4[];
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem_u4);
  uint16_t* do_s = q_s + BR * LS;
  uint16_t* k_s = do_s + BR * LS;     // [2][BC][LS]
  uint16_t* v_s = k_s + 2 * BC * LS;  // [2][BC][LS]

  const int nqb = (t + BR - 1) / BR;
  const int bh = blockIdx.x / nqb, q0 = (blockIdx.x % nqb) * BR;
  const int bi = bh / heads, h = bh % heads;
  const int64_t d = int64_t(heads) * dh, ld = 3 * d;
  const T* q_g = qkv + int64_t(bi) * t * ld + int64_t(h) * dh;
  const T* k_g = q_g + d;
  const T* v_g = q_g + 2 * d;
  const T* do_g = dout + int64_t(bi) * t * d + int64_t(h) * dh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  cp_async_tile<T, DHP, BR>(q_s, q_g + q0 * ld, ld, t - q0, dh);
  cp_async_tile<T, DHP, BR>(do_s, do_g + q0 * d, d, t - q0, dh);
  cp_async_tile<T, DHP, BC>(k_s, k_g, ld, t, dh);
  cp_async_tile<T, DHP, BC>(v_s, v_g, ld, t, dh);
  cp_async_commit();

  // Rows g and g + 8 of each m-tile: their lse (log2 domain) and D
  float lse_r[MT][2], D_r[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = q0 + (warp * MT + mt) * 16 + lane / 4 + 8 * i;
      lse_r[mt][i] = r < t ? lse[int64_t(bh) * t + r] * kLog2e : INFINITY;
      D_r[mt][i] = r < t ? D[int64_t(bh) * t + r] : 0.0f;
    }

  float dq[MT][ND][4] = {};
  const int nkb = (t + BC - 1) / BC;
  for (int kb = 0; kb < nkb; ++kb) {
    cp_async_wait<0>();
    __syncthreads();
    if (kb + 1 < nkb) {
      const int nb = (kb + 1) * BC, buf = (kb + 1) & 1;
      cp_async_tile<T, DHP, BC>(k_s + buf * BC * LS, k_g + nb * ld, ld, t - nb, dh);
      cp_async_tile<T, DHP, BC>(v_s + buf * BC * LS, v_g + nb * ld, ld, t - nb, dh);
      cp_async_commit();
    }
    const uint16_t* kt = k_s + (kb & 1) * BC * LS;
    const uint16_t* vt = v_s + (kb & 1) * BC * LS;
    const int k0 = kb * BC;

    float s[MT][NC][4] = {}, dp[MT][NC][4] = {};
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t qa[MT][4], ga[MT][4];  // re-read from shared memory: keeps 64 registers free at DHP = 128
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ldmatrix_x4(qa[mt], a_frag_addr<LS>(q_s, (warp * MT + mt) * 16, ks * 16, lane));
        ldmatrix_x4(ga[mt], a_frag_addr<LS>(do_s, (warp * MT + mt) * 16, ks * 16, lane));
      }
#pragma unroll
      for (int np = 0; np < NC / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, bt_frag_addr<LS>(kt, np * 16, ks * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(s[mt][2 * np], qa[mt], b[0], b[1]);
          mma_16816<T>(s[mt][2 * np + 1], qa[mt], b[2], b[3]);
        }
        ldmatrix_x4(b, bt_frag_addr<LS>(vt, np * 16, ks * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(dp[mt][2 * np], ga[mt], b[0], b[1]);
          mma_16816<T>(dp[mt][2 * np + 1], ga[mt], b[2], b[3]);
        }
      }
    }
    const bool ragged = k0 + BC > t;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < NC; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool valid = !ragged || k0 + n * 8 + 2 * (lane % 4) + (e & 1) < t;
          const float p = valid ? exp2f(s[mt][n][e] * scale_log2 - lse_r[mt][e / 2]) : 0.0f;
          s[mt][n][e] = p * (dp[mt][n][e] - D_r[mt][e / 2]);  // dS
        }
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c_pair_to_a<T>(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < ND / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, b_frag_addr<LS>(kt, kk * 16, np * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(dq[mt][2 * np], a[mt], b[0], b[1]);
          mma_16816<T>(dq[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r0 = q0 + (warp * MT + mt) * 16 + lane / 4, r1 = r0 + 8;
    T* dq0 = dqkv + (int64_t(bi) * t + r0) * ld + int64_t(h) * dh;
    T* dq1 = dq0 + 8 * ld;
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      const int c = n * 8 + 2 * (lane % 4);
      if (c >= dh) continue;
      if (r0 < t) store2(dq0 + c, dq[mt][n][0] * scale, dq[mt][n][1] * scale);
      if (r1 < t) store2(dq1 + c, dq[mt][n][2] * scale, dq[mt][n][3] * scale);
    }
  }
}

// ---- host side ------------------------------------------------------------------------------------

Geometry geometry(const char* op, const Tensor& qkv, int64_t heads) {
  const int64_t b = qkv.size(0), t = qkv.size(1), dh = qkv.size(2) / 3 / heads;
  HPDT_CHECK(dh <= 128, op, ": head dim ", dh, " is not supported on CUDA (at most 128)");
  HPDT_CHECK(t < (int64_t(1) << 30) && b * heads < (int64_t(1) << 30), op, ": ", qkv.shape().str(), " with ", heads,
             " heads is too large for CUDA");
  return {int(b), int(t), int(heads), int(dh)};
}

template <class T>
constexpr bool kIs16Bit = !std::is_same_v<T, float>;

// The variant that runs: an explicit one is checked, 0 picks the fastest that applies.
// HPDT_ATTENTION_BACKWARD=v2|v3: the tensor-core backward that auto (variant 0) runs, v2's two passes (unset: the
// default) or v3's one pass; for timing v3 inside a training step (scripts/gpu/benchmarks.txt). Read at every call,
// as HPDT_ATTENTION_V2_TILES; anything else is an error naming the variable.
int auto_backward_variant() {
  return env_switch("HPDT_ATTENTION_BACKWARD", "v2", "v3") ? kAttentionTensorCore : kAttentionFusedBackward;
}

// backward: the call is attention_backward's (auto may take HPDT_ATTENTION_BACKWARD's v3).
int resolve_variant(int variant, const char* op, const Tensor& qkv, int64_t heads,
                    std::initializer_list<const Tensor*> tensors, bool backward = false) {
  const int64_t dh = qkv.size(2) / 3 / heads;
  bool tc = qkv.dtype() != DType::f32 && dh % 8 == 0 && dh <= 128;
  for (const Tensor* x : tensors) tc = tc && aligned16(x->data());
  if (variant == kAttentionAuto) {
    const int fast = backward ? auto_backward_variant() : kAttentionTensorCore;
    return tc ? fast : kAttentionSimt;
  }
  HPDT_CHECK(variant == kAttentionSimt || variant == kAttentionTensorCore || variant == kAttentionFusedBackward, op,
             ": no variant ", variant, " (1: SIMT, 2: tensor cores, 3: tensor cores with a one-pass backward)");
  HPDT_CHECK(variant == kAttentionSimt || tc, op, ": variant ", variant,
             " (tensor cores) needs f16 or bf16, a head dim that is a multiple of 8 (at most 128) and "
             "16-byte aligned tensors; got ",
             dtype_name(qkv.dtype()), " with head dim ", dh);
  return variant;
}

// The backward's tiles at padded head dim DHP: f(dK/dV tile, dQ tile). dh 128: the dK/dV pass one m-tile a warp,
// 32 queries a step or 64 (tall); dh 16: narrow alone; elsewhere wide or narrow (HPDT_ATTENTION_V2_TILES).
template <int DHP, class F>
void with_backward_tiles(F&& f) {
  if constexpr (DHP == 16) {
    f(BackwardTileNarrow<DHP>{}, BackwardTileNarrow<DHP>{});
  } else if constexpr (DHP == 128) {
    const bool narrow = narrow_v2_tiles();
    if (tall_dkdv128_step())
      narrow ? f(BackwardTileTall128{}, BackwardTileNarrow<DHP>{}) : f(BackwardTileTall128{}, BackwardTileWide{});
    else
      narrow ? f(BackwardTileNarrow<DHP>{}, BackwardTileNarrow<DHP>{})
             : f(BackwardTileNarrow<DHP>{}, BackwardTileWide{});
  } else if (narrow_v2_tiles()) {
    f(BackwardTileNarrow<DHP>{}, BackwardTileNarrow<DHP>{});
  } else {
    f(BackwardTileWide{}, BackwardTileWide{});
  }
}

// Variant 3's order for the fused dK/dV kernel of this dtype, head dim and tile at sequence length t (the schedule
// above fused_offset): HPDT_ATTENTION_V3_ORDER=rotated (unset: the default) or keys, read at every call; anything
// else is an error naming the variable. Rotated needs the nkb key blocks of a head resident at once, so it runs
// only where nkb is at most half of what the GPU holds of the kernel at once (the occupancy calculator's blocks an
// SM times the SMs; on the emulator, CUDA_EMU_RESIDENT): the other half leaves room for what runs beside it (a comm
// kernel, another process's under MPS). Elsewhere, and at one key block, key order (and where the ranks would not
// fit their 32-bit arithmetic, v3_rotation_fits: far beyond what a GPU holds). Raises the kernel's limit on dynamic
// shared memory first (allow_dynamic_smem), which the occupancy query and the launch need.
template <class T, int DHP, class Tile>
bool fused_backward_rotates(int t) {
  const size_t smem = mma_dkdv_smem<DHP, Tile, true>();
  constexpr auto fused = attention_backward_dkdv_v2_kernel<T, DHP, Tile, true>;
  detail::allow_dynamic_smem<fused>(int(smem));
  const int nkb = (t + Tile::BLOCK - 1) / Tile::BLOCK, nqb = (t + Tile::STEP - 1) / Tile::STEP;
  const bool wanted = env_switch("HPDT_ATTENTION_V3_ORDER", "rotated", "keys");
  if (!wanted || nkb < 2 || !detail::v3_rotation_fits(nkb, nqb)) return false;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
  const int64_t resident = cuda_emu::resident_blocks();
#else
  int device = 0;
  HPDT_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t resident = int64_t(detail::blocks_per_sm<fused>(kMmaThreads, int(smem))) * detail::sm_count(device);
#endif
  return 2 * int64_t(nkb) <= resident;
}

}  // namespace

bool attention_v3_rotated(const Tensor& qkv, int64_t heads) {
  const char* op = "attention_v3_rotated";
  const Geometry g = geometry(op, qkv, heads);
  if (!attention_variant_supported(kAttentionFusedBackward, qkv, heads) || int64_t(g.b) * g.t == 0) return false;
  bool rotated = false;
  dispatch_floating(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIs16Bit<T>) {
      with_padded_head_dim(g.dh, op, [&](auto dhp) {
        constexpr int DHP = decltype(dhp)::value;
        with_backward_tiles<DHP>(
            [&](auto dkdv_tile, auto) { rotated = fused_backward_rotates<T, DHP, decltype(dkdv_tile)>(g.t); });
      });
    }
  });
  return rotated;
}

bool attention_variant_supported(int variant, const Tensor& qkv, int64_t heads) {
  const int64_t dh = qkv.size(2) / 3 / heads;
  if (dh > 128) return false;
  if (variant == kAttentionAuto || variant == kAttentionSimt) return true;
  return (variant == kAttentionTensorCore || variant == kAttentionFusedBackward) && qkv.dtype() != DType::f32 &&
         dh % 8 == 0 && aligned16(qkv.data());
}

void attention_forward(const Tensor& qkv, int64_t heads, Tensor& lse, Tensor& out, const Stream& stream, int variant) {
  const char* op = "attention_forward";
  const Geometry g = geometry(op, qkv, heads);
  if (int64_t(g.b) * g.t == 0) return;
  variant = resolve_variant(variant, op, qkv, heads, {&qkv, &out});
  const cudaStream_t s = detail::native(stream);
  dispatch_floating(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    with_padded_head_dim(g.dh, op, [&](auto dhp) {
      constexpr int DHP = decltype(dhp)::value;
      const T* q = static_cast<const T*>(qkv.data());
      T* o = static_cast<T*>(out.data());
      if constexpr (kIs16Bit<T>) {
        if (variant == kAttentionTensorCore || variant == kAttentionFusedBackward) {  // one forward for both
          const auto launch = [&](auto tile) {
            using Tile = decltype(tile);
            const size_t smem = mma_forward_smem<DHP, Tile>();
            constexpr auto kernel = attention_forward_v2_kernel<T, DHP, Tile>;
            detail::allow_dynamic_smem<kernel>(int(smem));
            const int nqb = (g.t + Tile::BR - 1) / Tile::BR;
            kernel<<<grid_of(int64_t(g.b) * g.heads * nqb, op), kMmaThreads, smem, s>>>(q, o, lse.data<float>(), g.t,
                                                                                        g.heads, g.dh, g.scale_log2());
            HPDT_CUDA_CHECK_LAUNCH();
          };
          if constexpr (DHP <= 64)
            launch(ForwardTileUpTo64{});
          else if (narrow_v2_tiles())
            launch(ForwardTileNarrow128{});
          else
            launch(ForwardTileWide128{});
          return;
        }
      }
      const bool vec = g.dh % 4 == 0 && aligned16(q);
      const size_t smem = simt_forward_smem<DHP>();
      constexpr auto kernel = attention_forward_v1_kernel<T, DHP>;
      detail::allow_dynamic_smem<kernel>(int(smem));
      const int nqb = (g.t + SimtForwardTiles<DHP>::BR - 1) / SimtForwardTiles<DHP>::BR;
      kernel<<<grid_of(int64_t(g.b) * g.heads * nqb, op), kSimtThreads, smem, s>>>(q, o, lse.data<float>(), g.t,
                                                                                   g.heads, g.dh, g.scale_log2(), vec);
      HPDT_CUDA_CHECK_LAUNCH();
    });
  });
}

void attention_backward(const Tensor& qkv, const Tensor& lse, const Tensor& out, const Tensor& dout, int64_t heads,
                        Tensor& dqkv, const Stream& stream, int variant) {
  const char* op = "attention_backward";
  const Geometry g = geometry(op, qkv, heads);
  if (int64_t(g.b) * g.t == 0) return;
  variant = resolve_variant(variant, op, qkv, heads, {&qkv, &out, &dout, &dqkv}, true);
  const cudaStream_t s = detail::native(stream);
  Tensor D = Tensor::empty({g.b, g.heads, g.t}, DType::f32, qkv.device(), AllocOptions{.stream = &stream});
  dispatch_floating(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* q = static_cast<const T*>(qkv.data());
    const T* o = static_cast<const T*>(out.data());
    const T* go = static_cast<const T*>(dout.data());
    T* dq = static_cast<T*>(dqkv.data());
    const float* L = lse.data<float>();
    float* Dp = D.data<float>();
    const int64_t rows = int64_t(g.b) * g.t * g.heads;
    attention_rowdot_kernel<T><<<detail::grid_for(rows * 32, 256), 256, 0, s>>>(o, go, Dp, rows, g.t, g.heads, g.dh);
    HPDT_CUDA_CHECK_LAUNCH();
    with_padded_head_dim(g.dh, op, [&](auto dhp) {
      constexpr int DHP = decltype(dhp)::value;
      if constexpr (kIs16Bit<T>) {
        if (variant == kAttentionTensorCore || variant == kAttentionFusedBackward) {
          // one launch of each pass, with its own tile (dh 128: the dK/dV pass one m-tile a warp, narrow or tall)
          const auto launch = [&](auto dkdv_tile, auto dq_tile) {
            using KT = decltype(dkdv_tile);
            using QT = decltype(dq_tile);
            const int key_blocks = (g.t + KT::BLOCK - 1) / KT::BLOCK;
            const int64_t dkdv_ctas = int64_t(g.b) * g.heads * key_blocks;
            if (variant == kAttentionFusedBackward) {
              // variant 3: one pass; dQ through an f32 accumulator and zeroed turn counters (per query block and
              // warp), in key order or rotated (fused_backward_rotates)
              const AllocOptions on{.stream = &stream};
              const int query_blocks = (g.t + KT::STEP - 1) / KT::STEP;
              Tensor acc = Tensor::empty({g.b, g.heads, g.t, g.dh}, DType::f32, qkv.device(), on);
              Tensor turns = Tensor::zeros({int64_t(g.b) * g.heads * query_blocks * kMmaWarps + 1}, DType::i32,
                                           qkv.device(), on);  // + the ticket counter
              const size_t smem = mma_dkdv_smem<DHP, KT, true>();
              constexpr auto fused = attention_backward_dkdv_v2_kernel<T, DHP, KT, true>;
              const int rotate = fused_backward_rotates<T, DHP, KT>(g.t) ? 1 : 0;
              fused<<<grid_of(dkdv_ctas, op), kMmaThreads, smem, s>>>(q, go, L, Dp, dq, acc.data<float>(),
                                                                      static_cast<unsigned*>(turns.data()), g.t,
                                                                      g.heads, g.dh, g.scale(), g.scale_log2(), rotate);
              HPDT_CUDA_CHECK_LAUNCH();
              return;
            }
            size_t smem = mma_dkdv_smem<DHP, KT>();
            constexpr auto dkdv = attention_backward_dkdv_v2_kernel<T, DHP, KT, false>;
            detail::allow_dynamic_smem<dkdv>(int(smem));
            dkdv<<<grid_of(dkdv_ctas, op), kMmaThreads, smem, s>>>(q, go, L, Dp, dq, nullptr, nullptr, g.t, g.heads,
                                                                   g.dh, g.scale(), g.scale_log2(), 0);
            HPDT_CUDA_CHECK_LAUNCH();
            smem = mma_dq_smem<DHP, QT>();
            constexpr auto dqk = attention_backward_dq_v2_kernel<T, DHP, QT>;
            detail::allow_dynamic_smem<dqk>(int(smem));
            const int query_blocks = (g.t + QT::BLOCK - 1) / QT::BLOCK;
            dqk<<<grid_of(int64_t(g.b) * g.heads * query_blocks, op), kMmaThreads, smem, s>>>(
                q, go, L, Dp, dq, g.t, g.heads, g.dh, g.scale(), g.scale_log2());
            HPDT_CUDA_CHECK_LAUNCH();
          };
          with_backward_tiles<DHP>(launch);
          return;
        }
      }
      using Tl = SimtBackwardTiles<DHP>;
      const bool vec = g.dh % 4 == 0 && aligned16(q) && aligned16(go);
      size_t smem = simt_dkdv_smem<DHP>();
      constexpr auto dkdv = attention_backward_dkdv_v1_kernel<T, DHP>;
      detail::allow_dynamic_smem<dkdv>(int(smem));
      const int nkb = (g.t + Tl::BC - 1) / Tl::BC;
      dkdv<<<grid_of(int64_t(g.b) * g.heads * nkb, op), kSimtThreads, smem, s>>>(q, go, L, Dp, dq, g.t, g.heads, g.dh,
                                                                                 g.scale(), g.scale_log2(), vec);
      HPDT_CUDA_CHECK_LAUNCH();
      smem = simt_dq_smem<DHP>();
      constexpr auto dqk = attention_backward_dq_v1_kernel<T, DHP>;
      detail::allow_dynamic_smem<dqk>(int(smem));
      const int nqb = (g.t + Tl::BR - 1) / Tl::BR;
      dqk<<<grid_of(int64_t(g.b) * g.heads * nqb, op), kSimtThreads, smem, s>>>(q, go, L, Dp, dq, g.t, g.heads, g.dh,
                                                                                g.scale(), g.scale_log2(), vec);
      HPDT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace hpdt::kernels::cuda
