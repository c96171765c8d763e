// CUDA GEMM, row-major: C = alpha * op(A) op(B) + beta * C + bias[col]; the CPU oracle is cpu::gemm<float>.
//
//   v1_simt  128x128x8 block tile, 256 threads, 8x8 outputs per thread (two 4x4 quadrants 64 apart so
//            the shared-memory reads are float4 broadcasts / contiguous). Loads are scalar and coalesced
//            along whichever of (mn, k) is contiguous in memory, so any dtype, alignment and leading
//            dimension works; the next tile is fetched into registers while the current one is used
//            (double-buffered shared memory, one barrier per tile).
//   v2_mma   bf16/f16 tensor cores: mma.sync.m16n8k16 (f32 accumulators) fed by ldmatrix from an
//            XOR-swizzled, STAGES-deep cp.async pipeline (BK = 32). 64x64 warp tiles; block tiles
//            128x128 (4 warps, 2 blocks/SM) or 128x256 (8 warps). Edge tiles come zero-filled by
//            cp.async's src-size, so the k loop never branches. Few output tiles and a long K get a
//            deterministic split-K: f32 partials per split, summed in split order by a second kernel.
//   v3_wgmma Hopper wgmma + TMA, sm90a/gemm_wgmma.cu (its own target: sm_90a only); k-major A and B.
//   vendor   cuBLAS (gemm_vendor.cu); a bias is put in C first, cuBLAS then accumulates onto it.
// Every variant is deterministic; element offsets are int64.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "band_epilogue.cuh"
#include "conv_v3.cuh"
#include "gemm_common.cuh"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/channel_stats.h"
#include "hpdt/kernels/cuda/gemm.h"
#include "launch.cuh"
#include "mma_sync.cuh"
#include "vec.cuh"
#include "vendor.cuh"

#ifndef HPDT_HAVE_GEMM_WGMMA
#define HPDT_HAVE_GEMM_WGMMA 0
#endif

namespace hpdt::kernels::cuda {

namespace {

constexpr int64_t kIntMax = 0x7fffffff;

using gemm_detail::Params;
using gemm_detail::tile_coords;

// ---- small kernels: the epilogue alone (K == 0, alpha == 0; vendor's bias and activation) and the split-K
// reduction ----

constexpr int kEwThreads = 256;

// C = beta * C + bias + residual, then the activation (the GEMM's epilogue with alpha * AB = 0).
template <class TC>
__global__ void epilogue_only_kernel(const Params p) {
  const int64_t n = int64_t(p.M) * p.N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.N, col = i - r * p.N;
    gemm_detail::store_one<TC>(p, r * p.ldc + col, int(col), 0.0f);
  }
}

// The epilogue's activation as a pass of its own (activation_only): the vendor backend's after cuBLAS, GEMM v3's
// "+gelu pass" plans. A thread takes V elements of a row (V = 1: any shape; a 16-byte vector where N, ldc and the
// pointers allow). kFromAux: the plain GEMM stored its value in aux, the GELU's kept input, and C = gelu(aux) (one
// read and one write); else the value is C's (the GELU copies it to aux first; the gradient scales it by gelu'(aux)).
// The same bits as the fused epilogue's activate on the stored value. One element a thread with a 64-bit division
// each took ~0.23 ms for ViT-B/16's fc1 on the H200 (2026-11-29), ~4x the GELU layer's vector kernel.
template <class TC, int V, bool kFromAux>
__global__ void activation_only_kernel(const Params p) {
  const int64_t per_row = p.N / V, n = int64_t(p.M) * per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, off = r * p.ldc + (i - r * per_row) * V;
    float v[V];
    if constexpr (V == 1)
      v[0] = to_f32(static_cast<const TC*>(kFromAux ? p.aux : p.C)[off]);
    else
      load<V>(static_cast<const TC*>(kFromAux ? p.aux : p.C) + off, v);
    if (p.act == gemm_detail::kActGeluGrad) {
      float h[V];
      if constexpr (V == 1)
        h[0] = to_f32(static_cast<const TC*>(p.aux)[off]);
      else
        load<V>(static_cast<const TC*>(p.aux) + off, h);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] *= p.gelu_tanh ? math::gelu_tanh_grad(h[k]) : math::gelu_erf_grad(h[k]);
    } else {
      if (!kFromAux && p.aux) {
        if constexpr (V == 1)
          static_cast<TC*>(p.aux)[off] = from_f32<TC>(v[0]);
        else
          store<V>(static_cast<TC*>(p.aux) + off, v);
      }
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = p.gelu_tanh ? math::gelu_tanh(v[k]) : math::gelu_erf(v[k]);
    }
    if constexpr (V == 1)
      static_cast<TC*>(p.C)[off] = from_f32<TC>(v[0]);
    else
      store<V>(static_cast<TC*>(p.C) + off, v);
  }
}

template <class TC>
__global__ void splitk_reduce_kernel(const Params p, int splits) {
  const int64_t n = int64_t(p.M) * p.N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int z = 0; z < splits; ++z) s += p.partial[z * n + i];  // fixed order: deterministic
    const int64_t r = i / p.N, col = i - r * p.N;
    gemm_detail::store_one<TC>(p, r * p.ldc + col, int(col), s);
  }
}

template <class F>
void dispatch_c(DType c_type, F&& f) {
  dispatch_floating(c_type, "gemm (C)", std::forward<F>(f));
}

// ================================================ v1: SIMT ================================================

namespace v1 {

constexpr int kBM = 128, kBN = 128, kBK = 8, kThreads = 256;
constexpr int kLd = kBM + 4;  // shared row [k][mn]: +4 floats so the k-contiguous stores hit 32 banks
static_assert(kBM == kBN, "one smem row length serves A and B");

// The 4 elements of a BK x 128 tile this thread moves: consecutive threads walk the contiguous index.
__device__ __forceinline__ void slot(bool kmajor, int i, int& mn, int& k) {
  const int t = threadIdx.x;
  if (kmajor) {
    k = t & 7;
    mn = (t >> 3) + 32 * i;
  } else {
    mn = t & 127;
    k = (t >> 7) + 2 * i;
  }
}

template <class T>
__device__ __forceinline__ void fetch(const T* __restrict__ X, int64_t ld, bool kmajor, int extent, int K, int mn0,
                                      int k0, float (&r)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int mn, k;
    slot(kmajor, i, mn, k);
    const int gmn = mn0 + mn, gk = k0 + k;
    r[i] = 0.0f;  // outside the matrix: zero, so the k loop needs no predicate
    if (gmn < extent && gk < K) r[i] = to_f32(X[kmajor ? int64_t(gmn) * ld + gk : int64_t(gk) * ld + gmn]);
  }
}

__device__ __forceinline__ void stash(float* __restrict__ s, bool kmajor, const float (&r)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int mn, k;
    slot(kmajor, i, mn, k);
    s[k * kLd + mn] = r[i];
  }
}

// The thread's 8 x 8 outputs through a local copy that a loop not unrolled walks: unrolled, the 64 store_one calls
// (each with every option of the epilogue) made this kernel 0.4 MB of SASS (27 KiB now), slow to fetch (band_epilogue.cuh).
template <class TC>
__device__ __forceinline__ void epilogue(const Params& p, int m0, int n0, const float (&acc)[8][8]) {
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  float out[64];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) out[i * 8 + j] = acc[i][j];
#pragma unroll 1
  for (int k = 0; k < 64; ++k) {
    const int i = k / 8, j = k % 8;
    const int row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    const int col = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
    if (row < p.M && col < p.N) store_one<TC>(p, int64_t(row) * p.ldc + col, col, out[k]);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads, 2) gemm_v1_kernel(const Params p) {
  __shared__ __align__(16) float As[2][kBK * kLd];
  __shared__ __align__(16) float Bs[2][kBK * kLd];
  int tm, tn;
  tile_coords(blockIdx.x, p.tiles_m, p.tiles_n, tm, tn);
  const int m0 = tm * kBM, n0 = tn * kBN;
  const T* A = static_cast<const T*>(p.A);
  const T* B = static_cast<const T*>(p.B);
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  const int KT = p.K / kBK + (p.K % kBK != 0);  // ceil without overflow near INT_MAX
  float ra[4], rb[4];
  fetch(A, p.lda, p.a_kmajor, p.M, p.K, m0, 0, ra);
  fetch(B, p.ldb, p.b_kmajor, p.N, p.K, n0, 0, rb);
  stash(As[0], p.a_kmajor, ra);
  stash(Bs[0], p.b_kmajor, rb);
  __syncthreads();

  for (int kt = 0; kt < KT; ++kt) {
    const int buf = kt & 1;
    const bool more = kt + 1 < KT;
    if (more) {  // next tile's global loads in flight while this one is multiplied
      fetch(A, p.lda, p.a_kmajor, p.M, p.K, m0, (kt + 1) * kBK, ra);
      fetch(B, p.ldb, p.b_kmajor, p.N, p.K, n0, (kt + 1) * kBK, rb);
    }
    const float* sa = As[buf];
    const float* sb = Bs[buf];
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(sa + k * kLd + ty * 4);
      const float4 a1 = *reinterpret_cast<const float4*>(sa + k * kLd + 64 + ty * 4);
      const float4 b0 = *reinterpret_cast<const float4*>(sb + k * kLd + tx * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(sb + k * kLd + 64 + tx * 4);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (more) {  // the other buffer was last read before the previous barrier: free to overwrite
      stash(As[buf ^ 1], p.a_kmajor, ra);
      stash(Bs[buf ^ 1], p.b_kmajor, rb);
    }
    __syncthreads();
  }

  if (p.c_f32)
    epilogue<float>(p, m0, n0, acc);
  else
    epilogue<T>(p, m0, n0, acc);
}

template <class T>
void launch(Params p, cudaStream_t s) {
  p.tiles_m = int((int64_t(p.M) + kBM - 1) / kBM);
  p.tiles_n = int((int64_t(p.N) + kBN - 1) / kBN);
  gemm_v1_kernel<T><<<unsigned(int64_t(p.tiles_m) * p.tiles_n), kThreads, 0, s>>>(p);
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace v1

// ========================================= v2: tensor cores (mma.sync) =========================================

namespace v2 {

constexpr int kBK = 32;  // k per stage: a k-major smem row is 64 bytes = 4 chunks of 16 bytes

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, int MIN_BLOCKS_>
struct Cfg {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // warp tile
  static constexpr int MT = WM / 16, NT = WN / 8;             // mma tiles per warp
  static constexpr int kStageElems = (BM + BN) * kBK;         // 16-bit elements per stage
  static constexpr int kSmem = STAGES * kStageElems * 2;
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile in 16x16 steps (B fragments load in pairs)");
  static_assert(BM >= 64 && BN >= 64, "mn-major rows need 8 chunks for the 8-way swizzle");
  static_assert((BM * kBK / 8) % kThreads == 0 && (BN * kBK / 8) % kThreads == 0, "whole chunks per thread");
};
using Small = Cfg<128, 128, 2, 2, 4, 2>;  // 64 KiB smem, 4 warps, 2 blocks per SM
using Large = Cfg<128, 256, 2, 4, 4, 1>;  // 96 KiB smem, 8 warps

// Shared tiles, in 16-bit elements, 16-byte chunks XOR-swizzled so that the 8 rows one ldmatrix phase
// reads (and the rows a warp's cp.asyncs write) fall in 8 different 16-byte bank groups:
//   k-major  [MN][32]: 4 chunks per 64-byte row, two rows per 128 bytes -> chunk ^ ((row >> 1) & 3)
//   mn-major [32][MN]: MN/8 chunks per row, rows a multiple of 128 bytes -> chunk ^ (row & 7)
__device__ __forceinline__ int off_kmajor(int row, int chunk) { return row * kBK + ((chunk ^ ((row >> 1) & 3)) << 3); }
template <int MN>
__device__ __forceinline__ int off_mnmajor(int row, int chunk) {
  return row * MN + ((chunk ^ (row & 7)) << 3);
}

// One BK-slice of an operand (MN rows of the output side x 32 k) into shared memory; chunks outside
// the matrix (mn >= extent or k >= K) are zero-filled, partial chunks at the edge partly.
// Needs ld % 8 == 0 and a 16-byte aligned base: every chunk start is then 16-byte aligned.
template <bool KMAJOR, int MN, int THREADS>
__device__ __forceinline__ void load_tile(uint16_t* __restrict__ s, const uint16_t* __restrict__ g, int64_t ld,
                                          int extent, int K, int mn0, int k0) {
  constexpr int kChunks = MN * kBK / 8;
#pragma unroll
  for (int i = 0; i < kChunks / THREADS; ++i) {
    const int q = int(threadIdx.x) + i * THREADS;
    int valid;
    int64_t src;
    int dst;
    if constexpr (KMAJOR) {
      const int row = q >> 2, chunk = q & 3;
      const int gmn = mn0 + row, gk = k0 + chunk * 8;
      valid = gmn < extent ? min(max(K - gk, 0), 8) : 0;
      src = int64_t(gmn) * ld + gk;
      dst = off_kmajor(row, chunk);
    } else {
      const int row = q / (MN / 8), chunk = q % (MN / 8);
      const int gk = k0 + row, gmn = mn0 + chunk * 8;
      valid = gk < K ? min(max(extent - gmn, 0), 8) : 0;
      src = int64_t(gk) * ld + gmn;
      dst = off_mnmajor<MN>(row, chunk);
    }
    cp_async16_zfill(smem_u32(s + dst), valid > 0 ? g + src : g, valid * 2);
  }
}

// A fragments of one m16 x k16 step (mma's row layout) for warp rows wm0 + mi*16.
// ldmatrix x4: lanes 8i..8i+7 address the rows of 8x8 matrix i; matrix i covers
// (m + (i & 1) * 8, k + (i >> 1) * 8), which lands in register i as the mma A operand expects.
template <bool KMAJOR, int BM>
__device__ __forceinline__ void load_a_frag(uint32_t (&a)[4], const uint16_t* sA, int m, int kk, int lane) {
  if constexpr (KMAJOR) {  // [m][k]: rows are m, plain ldmatrix gives (m = lane/4, k = 2*(lane%4) + {0,1})
    const int row = m + (lane & 7) + ((lane >> 3) & 1) * 8;
    const int chunk = kk * 2 + (lane >> 4);
    ldmatrix_x4(a, sA + off_kmajor(row, chunk));
  } else {  // [k][m]: rows are k, the transposing ldmatrix gives the same fragment
    const int row = kk * 16 + (lane >> 4) * 8 + (lane & 7);
    const int chunk = (m >> 3) + ((lane >> 3) & 1);
    ldmatrix_x4_trans(a, sA + off_mnmajor<BM>(row, chunk));
  }
}

// B fragments of two n8 x k16 steps (mma's col layout) for warp columns n and n + 8: matrix i covers
// (n + (i >> 1) * 8, k + (i & 1) * 8): registers {0, 1} are the first n8 tile's b0, b1, {2, 3} the second's.
template <bool KMAJOR, int BN>
__device__ __forceinline__ void load_b_frag(uint32_t (&b)[4], const uint16_t* sB, int n, int kk, int lane) {
  if constexpr (KMAJOR) {  // [n][k] (B transposed in memory)
    const int row = n + (lane >> 4) * 8 + (lane & 7);
    const int chunk = kk * 2 + ((lane >> 3) & 1);
    ldmatrix_x4(b, sB + off_kmajor(row, chunk));
  } else {  // [k][n]
    const int row = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
    const int chunk = (n >> 3) + (lane >> 4);
    ldmatrix_x4_trans(b, sB + off_mnmajor<BN>(row, chunk));
  }
}

template <class T, class C, bool A_KMAJOR, bool B_KMAJOR>
__global__ void __launch_bounds__(C::kThreads, C::MIN_BLOCKS) gemm_v2_kernel(const Params p) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint16_t* smem = reinterpret_cast<uint16_t*>(smem_raw);
  int tm, tn;
  tile_coords(blockIdx.x, p.tiles_m, p.tiles_n, tm, tn);
  const int m0 = tm * C::BM, n0 = tn * C::BN;
  const int kt_total = p.K / kBK + (p.K % kBK != 0);
  const int kt0 = int(blockIdx.y) * p.kt_per_split;
  const int KT = min(kt_total, kt0 + p.kt_per_split) - kt0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm0 = (warp / C::WARPS_N) * C::WM, wn0 = (warp % C::WARPS_N) * C::WN;
  const uint16_t* A = static_cast<const uint16_t*>(p.A);
  const uint16_t* B = static_cast<const uint16_t*>(p.B);

  auto load_stage = [&](int stage, int kt) {
    uint16_t* s = smem + stage * C::kStageElems;
    const int k0 = (kt0 + kt) * kBK;
    load_tile<A_KMAJOR, C::BM, C::kThreads>(s, A, p.lda, p.M, p.K, m0, k0);
    load_tile<B_KMAJOR, C::BN, C::kThreads>(s + C::BM * kBK, B, p.ldb, p.N, p.K, n0, k0);
  };

  float acc[C::MT][C::NT][4];
#pragma unroll
  for (int i = 0; i < C::MT; ++i) {
#pragma unroll
    for (int j = 0; j < C::NT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
  }

  // Prologue: STAGES-1 tiles in flight (a group is committed even when empty, so the counts line up).
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < KT; ++kt) {
    // Groups committed so far: STAGES-1 + kt; leaving STAGES-2 pending means tile kt has landed
    // (for this thread); the barrier makes every thread's copies visible and also guarantees that
    // everyone is done with the stage computed in the previous iteration, which is refilled next.
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    const int next = kt + C::STAGES - 1;
    if (next < KT) load_stage(next % C::STAGES, next);
    cp_async_commit();

    const uint16_t* sA = smem + (kt % C::STAGES) * C::kStageElems;
    const uint16_t* sB = sA + C::BM * kBK;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[C::MT][4];
      uint32_t bf[C::NT][2];
#pragma unroll
      for (int mi = 0; mi < C::MT; ++mi) load_a_frag<A_KMAJOR, C::BM>(af[mi], sA, wm0 + mi * 16, kk, lane);
#pragma unroll
      for (int nj = 0; nj < C::NT / 2; ++nj) {
        uint32_t r[4];
        load_b_frag<B_KMAJOR, C::BN>(r, sB, wn0 + nj * 16, kk, lane);
        bf[2 * nj][0] = r[0];
        bf[2 * nj][1] = r[1];
        bf[2 * nj + 1][0] = r[2];
        bf[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < C::MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < C::NT; ++ni) mma_16816<T>(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
    }
  }
  cp_async_wait<0>();  // only empty groups can be left; drain them before the block exits

  // The epilogue (band_epilogue.cuh): the warp's MT bands of 16 rows x WN columns, chunk c = band c / (WN / 32),
  // columns 32 (c % (WN / 32)).. of it; acc[mi][ni] is the mma C fragment of rows mi * 16 + lane / 4 (+ 8), columns
  // ni * 8 + 2 (lane % 4) (+ 1). The buffers reuse the stages: every warp's last fragment reads must be done.
  __syncthreads();
  constexpr int kChunksPerBand = C::WN / gemm_detail::kChunkCols;
  static_assert(C::WN % gemm_detail::kChunkCols == 0 && C::kThreads / 32 * gemm_detail::kBandBufBytes <= C::kSmem,
                "whole chunks per band, a buffer per warp inside the stages");
  auto frag = [&](auto J) {
    constexpr int j = decltype(J)::value;
    const float(&a)[4] = acc[j / C::NT][j % C::NT];
    return make_float4(a[0], a[1], a[2], a[3]);
  };
  auto at = [&](int c, int r) {
    return make_int2(m0 + wm0 + c / kChunksPerBand * 16 + r, n0 + wn0 + c % kChunksPerBand * gemm_detail::kChunkCols);
  };
  gemm_detail::band_epilogue<T, C::MT * kChunksPerBand>(p, int(blockIdx.y), frag, at,
                                                        smem_raw + warp * gemm_detail::kBandBufBytes);
}

template <class T, class C, bool AK, bool BK>
void launch_cfg(const Params& p, int splits, int device, cudaStream_t s) {
  auto kernel = gemm_v2_kernel<T, C, AK, BK>;
  // Dynamic shared memory above 48 KiB must be allowed once per kernel and device (one flag set per
  // instantiation of this function, i.e. per kernel).
  static std::atomic<uint64_t> smem_allowed{0};
  const uint64_t bit = uint64_t(1) << (device & 63);
  if (!(smem_allowed.load(std::memory_order_acquire) & bit)) {
    HPDT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    smem_allowed.fetch_or(bit, std::memory_order_acq_rel);
  }
  const dim3 grid(unsigned(int64_t(p.tiles_m) * p.tiles_n), unsigned(splits));
  kernel<<<grid, C::kThreads, C::kSmem, s>>>(p);
  HPDT_CUDA_CHECK_LAUNCH();
}

template <class T, class C>
void launch_transposes(const Params& p, int splits, int device, cudaStream_t s) {
  if (p.a_kmajor && p.b_kmajor)
    launch_cfg<T, C, true, true>(p, splits, device, s);
  else if (p.a_kmajor)
    launch_cfg<T, C, true, false>(p, splits, device, s);
  else if (p.b_kmajor)
    launch_cfg<T, C, false, true>(p, splits, device, s);
  else
    launch_cfg<T, C, false, false>(p, splits, device, s);
}


// HPDT_GEMM_V2_TILE=small|large pins the block tile (for tuning); unset: chosen by shape.
int forced_tile() {
  static const int forced = [] {
    const char* e = std::getenv("HPDT_GEMM_V2_TILE");
    if (!e) return 0;
    if (std::strcmp(e, "small") == 0) return 1;
    if (std::strcmp(e, "large") == 0) return 2;
    return 0;
  }();
  return forced;
}

template <class T>
void launch(Params p, DType c_type, const Stream& stream) {
  const int device = stream.device().index;
  const cudaStream_t s = detail::native(stream);
  const int sms = detail::sm_count(device);
  const int64_t large_tiles =
      ((int64_t(p.M) + Large::BM - 1) / Large::BM) * ((int64_t(p.N) + Large::BN - 1) / Large::BN);
  // The large tile reuses each loaded element twice as often but runs one block per SM: worth it only
  // when there are enough tiles for several full waves.
  const bool large = forced_tile() ? forced_tile() == 2 : large_tiles >= 4 * sms;
  const int BM = large ? Large::BM : Small::BM, BN = large ? Large::BN : Small::BN;
  const int64_t slots = int64_t(large ? Large::MIN_BLOCKS : Small::MIN_BLOCKS) * sms;  // blocks the GPU runs at once
  p.tiles_m = int((int64_t(p.M) + BM - 1) / BM);
  p.tiles_n = int((int64_t(p.N) + BN - 1) / BN);
  const int kt_total = p.K / kBK + (p.K % kBK != 0);

  // Split-K in whole waves: each split keeps >= 8 k tiles (256 k), none below 16 k tiles. The ViT-B/16 weight
  // gradients (144 tiles of 128 x 128, K = 12,608) took 2 splits, 288 blocks on 264 slots: two waves, the second
  // almost empty.
  Tensor partial;
  const int splits = gemm_detail::plan_split_k(p, kt_total, slots, 2.0 * BM * BN * kBK, 8, kt_total >= 16 ? 16 : 1,
                                               detail::kTensorFlops, stream, partial);
  if (large)
    launch_transposes<T, Large>(p, splits, device, s);
  else
    launch_transposes<T, Small>(p, splits, device, s);

  if (splits > 1) gemm_detail::splitk_reduce(p, splits, c_type, s);
}

}  // namespace v2

bool v2_can_take(int64_t lda, int64_t ldb, const void* A, const void* B, DType ab_type) {
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return (ab_type == DType::bf16 || ab_type == DType::f16) && lda % 8 == 0 && ldb % 8 == 0 && aligned16(A) &&
         aligned16(B);
}

// v3 needs what v2 needs (TMA: 16-byte aligned base and row stride) and sm_90a code for this device; any
// transposes (k-major operands as they are, MN-major ones through wgmma's transpose bits).
bool v3_can_take(bool trans_a, bool trans_b, int64_t lda, int64_t ldb, const void* A, const void* B, DType ab_type,
                 const Stream& stream) {
#if HPDT_HAVE_GEMM_WGMMA
  (void)trans_a, (void)trans_b;  // every layout: k-major operands as such, MN-major ones with wgmma's transpose
  return v2_can_take(lda, ldb, A, B, ab_type) && stream.is_cuda() && gemm_detail::v3_device_ok(stream.device().index);
#else
  (void)trans_a, (void)trans_b, (void)lda, (void)ldb, (void)A, (void)B, (void)ab_type, (void)stream;
  return false;
#endif
}

// C = beta * C + bias + residual, then the activation, over p's M x N (alpha * AB taken as 0, whatever alpha is).
void epilogue_only(Params p, DType c_type, cudaStream_t s) {
  const int64_t n = int64_t(p.M) * p.N;
  if (n == 0) return;
  p.alpha = 0.0f;
  dispatch_c(c_type, [&](auto tag) {
    epilogue_only_kernel<decltype(tag)><<<detail::grid_for(n, kEwThreads), kEwThreads, 0, s>>>(p);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

namespace gemm_detail {

int plan_split_k(Params& p, int kt_total, int64_t resident, double step_flops, int min_steps, int max_splits,
                 double flops_per_second, const Stream& stream, Tensor& workspace) {
  const int64_t out = std::max<int64_t>(int64_t(p.M) * p.N, 1);
  const detail::SplitK sk = detail::choose_split_k(int64_t(p.tiles_m) * p.tiles_n, kt_total, resident, step_flops,
                                                   out, min_steps, max_splits, flops_per_second);
  p.kt_per_split = int(sk.steps_per_split);
  if (sk.splits > 1) {
    workspace = Tensor::empty({sk.splits, p.M, p.N}, DType::f32, stream.device(), AllocOptions{.stream = &stream});
    p.partial = workspace.data<float>();
  }
  return sk.splits;
}

void activation_only(const Params& p, DType c_type, cudaStream_t s, bool from_aux) {
  const int64_t n = int64_t(p.M) * p.N;
  if (n == 0) return;
  HPDT_CHECK(p.act != gemm_detail::kActNone && (p.aux || p.act == gemm_detail::kActGelu) &&
                 (!from_aux || (p.act == gemm_detail::kActGelu && p.aux)),
             "gemm: activation pass without its matrix");
  dispatch_c(c_type, [&](auto tag) {
    using TC = decltype(tag);
    constexpr int V = kVec<TC>;
    const bool vector = p.N % V == 0 && p.ldc % V == 0 && aligned16(p.C) && (!p.aux || aligned16(p.aux));
    const auto launch = [&](auto kernel, int64_t threads) {
      kernel<<<detail::grid_for(threads, kEwThreads), kEwThreads, 0, s>>>(p);
      HPDT_CUDA_CHECK_LAUNCH();
    };
    if (vector)
      from_aux ? launch(activation_only_kernel<TC, V, true>, n / V)
               : launch(activation_only_kernel<TC, V, false>, n / V);
    else
      from_aux ? launch(activation_only_kernel<TC, 1, true>, n) : launch(activation_only_kernel<TC, 1, false>, n);
  });
}

void splitk_reduce(const Params& p, int splits, DType c_type, cudaStream_t s) {
  const int64_t n = int64_t(p.M) * p.N;
  if (n == 0) return;
  dispatch_c(c_type, [&](auto tag) {
    using TC = decltype(tag);
    splitk_reduce_kernel<TC><<<detail::grid_for(n, kEwThreads), kEwThreads, 0, s>>>(p, splits);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gemm_detail

bool gemm_v3_built() { return HPDT_HAVE_GEMM_WGMMA + 0 != 0; }

std::vector<GemmV3Found> gemm_v3_found() {
#if HPDT_HAVE_GEMM_WGMMA
  std::vector<GemmV3Found> out = gemm_detail::v3_found();
  for (GemmV3Found& f : conv_detail::conv_v3_found()) out.push_back(std::move(f));
  return out;
#else
  return {};
#endif
}

void gemm_v3_forget_found() {
#if HPDT_HAVE_GEMM_WGMMA
  gemm_detail::v3_forget_found();
  conv_detail::conv_v3_forget_found();
#endif
}

std::string_view gemm_variant_name(GemmVariant v) {
  switch (v) {
    case GemmVariant::automatic:
      return "automatic";
    case GemmVariant::v1_simt:
      return "v1_simt";
    case GemmVariant::v2_mma:
      return "v2_mma";
    case GemmVariant::v3_wgmma:
      return "v3_wgmma";
    case GemmVariant::vendor:
      return "vendor";
  }
  return "?";
}

GemmVariant gemm_resolve(GemmVariant requested, bool trans_a, bool trans_b, int64_t lda, int64_t ldb, const void* A,
                         const void* B, DType ab_type, const Stream& stream) {
  GemmVariant v = requested;
  if (v == GemmVariant::automatic)
    v = kernel_backend() == KernelBackend::vendor ? GemmVariant::vendor
        : ab_type == DType::f32                   ? GemmVariant::v1_simt
        : gemm_choice() == GemmChoice::v3         ? GemmVariant::v3_wgmma
                                                  : GemmVariant::v2_mma;
  if (v == GemmVariant::v3_wgmma && !v3_can_take(trans_a, trans_b, lda, ldb, A, B, ab_type, stream))
    v = GemmVariant::v2_mma;
  if (v == GemmVariant::v2_mma && !v2_can_take(lda, ldb, A, B, ab_type)) v = GemmVariant::v1_simt;
  return v;
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
          const void* B, int64_t ldb, float beta, void* C, int64_t ldc, DType ab_type, DType c_type,
          const GemmEpilogue& epi, const Stream& stream, GemmVariant variant) {
  HPDT_CHECK(stream.is_cuda(), "gemm: needs a CUDA stream, got one on ", stream.device().str());
  HPDT_CHECK(is_floating(ab_type), "gemm: A and B must be f32, f16 or bf16, got ", dtype_name(ab_type));
  HPDT_CHECK(c_type == DType::f32 || c_type == ab_type, "gemm: C must be f32 or the dtype of A and B (",
             dtype_name(ab_type), "), got ", dtype_name(c_type));
  HPDT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M ", M, " N ", N, " K ", K);
  HPDT_CHECK(M <= kIntMax && N <= kIntMax && K <= kIntMax, "gemm: sizes above 2^31-1 are not supported, got M ", M,
             " N ", N, " K ", K);
  const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  HPDT_CHECK(lda >= std::max<int64_t>(1, a_cols), "gemm: lda ", lda, " is smaller than A's row length ", a_cols,
             trans_a ? " (A is K x M, transposed)" : " (A is M x K)");
  HPDT_CHECK(ldb >= std::max<int64_t>(1, b_cols), "gemm: ldb ", ldb, " is smaller than B's row length ", b_cols,
             trans_b ? " (B is N x K, transposed)" : " (B is K x N)");
  HPDT_CHECK(ldc >= std::max<int64_t>(1, N), "gemm: ldc ", ldc, " is smaller than C's row length ", N);
  if (M == 0 || N == 0) return;
  HPDT_CHECK(C != nullptr && (K == 0 || alpha == 0.0f || (A != nullptr && B != nullptr)), "gemm: null matrix pointer");
  HPDT_CHECK(!(epi.gelu && epi.gelu_grad_input), "gemm: the epilogue's GELU and GELU gradient exclude each other");
  HPDT_CHECK(epi.gelu || !epi.pre_activation, "gemm: pre_activation is stored only with the epilogue's GELU");
  if (epi.column_stats) epi.column_stats->clear_results();  // v3 sets them where it computes them
  if (epi.column_grad_sums) {
    ChannelGradSums& g = *epi.column_grad_sums;
    g.clear_results();
    HPDT_CHECK(!epi.column_stats, "gemm: column_stats and column_grad_sums exclude each other");
    HPDT_CHECK(ldc == N, "gemm: column_grad_sums needs a dense C (ldc ", ldc, " != N ", N, ")");
    const auto matrix = [&](const Tensor& t, const char* what) {
      HPDT_CHECK(t.defined() && t.device() == stream.device() && t.dtype() == c_type && t.numel() == M * N, "gemm: ",
                 "column_grad_sums' ", what, " must be ", M, " x ", N, " ", dtype_name(c_type), " on ",
                 stream.device().str(), ", got ", t.defined() ? t.str() : std::string("none"));
    };
    matrix(g.x, "x");
    if (g.y.defined()) matrix(g.y, "y");
    HPDT_CHECK(g.mean.defined() && g.mean.device() == stream.device() && g.mean.dtype() == DType::f32 &&
                   g.mean.numel() == N,
               "gemm: column_grad_sums' mean must be [", N, "] f32 on ", stream.device().str());
  }
  const cudaStream_t s = detail::native(stream);

  Params p{};
  p.M = int(M);
  p.N = int(N);
  p.K = int(K);
  p.alpha = alpha;
  p.beta = beta;
  p.A = A;
  p.lda = lda;
  p.B = B;
  p.ldb = ldb;
  p.C = C;
  p.ldc = ldc;
  p.bias = epi.bias;
  p.res = epi.residual;
  p.act = epi.gelu_grad_input ? gemm_detail::kActGeluGrad : epi.gelu ? gemm_detail::kActGelu : gemm_detail::kActNone;
  p.gelu_tanh = epi.gelu_form == GeluForm::tanh;
  p.aux = epi.gelu_grad_input ? const_cast<void*>(epi.gelu_grad_input) : epi.pre_activation;
  p.c_f32 = c_type == DType::f32;
  p.a_kmajor = !trans_a;
  p.b_kmajor = trans_b;
  p.partial = nullptr;
  if (K == 0 || alpha == 0.0f) {  // nothing to multiply: C = beta * C + bias + residual, then the activation
    epilogue_only(p, c_type, s);
    return;
  }

  const GemmVariant v = gemm_resolve(variant, trans_a, trans_b, lda, ldb, A, B, ab_type, stream);
  if (v == GemmVariant::vendor) {
    // Bias and residual first (C = beta * C + bias + residual, then cuBLAS adds alpha * AB with beta 1): with
    // beta == 0 and no residual, as in linear forward, the result is rounded once, exactly like ours; adding the
    // bias after cuBLAS would round the product before the bias is added. The activation then runs on C's
    // stored value.
    float beta_blas = beta;
    if (epi.bias || epi.residual) {
      Params bias_only = p;
      bias_only.act = gemm_detail::kActNone;
      epilogue_only(bias_only, c_type, s);
      beta_blas = 1.0f;
    }
    detail::gemm_cublas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta_blas, C, ldc, ab_type, c_type, stream);
    if (p.act != gemm_detail::kActNone) gemm_detail::activation_only(p, c_type, s);
    return;
  }

  const int64_t tiles_v1 = ((M + v1::kBM - 1) / v1::kBM) * ((N + v1::kBN - 1) / v1::kBN);
  HPDT_CHECK(tiles_v1 <= kIntMax, "gemm: ", M, " x ", N, " has too many output tiles for one launch");

#if HPDT_HAVE_GEMM_WGMMA
  if (v == GemmVariant::v3_wgmma) {
    const bool pairs = p.c_f32 ? gemm_detail::pairs_aligned<float>(p) : gemm_detail::pairs_aligned<bf16_t>(p);
    const bool plain_pairs = !epi.has_activation() && N % 2 == 0 && pairs;
    const auto aligned_pair = [](const void* ptr, DType t) {
      return reinterpret_cast<uintptr_t>(ptr) % (2 * dtype_size(t)) == 0;
    };
    const auto start = [&](auto& r) {  // partials per column and 64-row group
      p.stats_splits = int(2 * ((M + 127) / 128));
      p.col_stats = r.start(N, p.stats_splits, C, M, stream);
    };
    if (epi.column_stats && plain_pairs) start(*epi.column_stats);
    ChannelGradSums* g = epi.column_grad_sums;
    if (g && plain_pairs && aligned_pair(g->x.data(), c_type) && (!g->y.defined() || aligned_pair(g->y.data(), c_type))) {
      start(*g);
      p.bn_x = g->x.data(), p.bn_y = g->y.defined() ? g->y.data() : nullptr, p.bn_mean = g->mean.data<float>();
    }
    gemm_detail::v3_launch(p, ab_type, c_type, stream);
    return;
  }
#endif
  if (v == GemmVariant::v2_mma) {
    if (ab_type == DType::bf16)
      v2::launch<bf16_t>(p, c_type, stream);
    else
      v2::launch<f16_t>(p, c_type, stream);
    return;
  }
  dispatch_floating(ab_type, "gemm", [&](auto tag) { v1::launch<decltype(tag)>(p, s); });
}

}  // namespace hpdt::kernels::cuda
