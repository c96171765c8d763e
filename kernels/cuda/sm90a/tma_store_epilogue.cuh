// The TMA-store epilogue of GEMM v3 (HPDT_GEMM_V3_STORE=tma) and conv v3 (HPDT_CONV_V3_STORE=tma): a warp's 16 rows
// of accumulators through shared memory into C by TMA stores, for the plain epilogue (C 16-bit, alpha, bias and a
// residual; no beta, activation, batch-norm reductions or split-K: those keep band_epilogue.cuh).
//
// Why: where the k loop is one or a few k tiles (ResNet-50's 1x1 convolutions at 56^2: K = 64, 256 output
// channels), a block tile's time is its epilogue. On the H200 (2026-11-29) GEMM v3 took 0.070 ms on 12608 x 3072 at
// K = 64, cuBLAS 0.034: ~6.7 us a 128 x 256 tile against ~0.6 us of MMAs. band_epilogue.cuh spends ~250 instructions
// a warp on each 16 x 32 chunk (f32 into its buffer and back, the row's coordinates, a pair's checks, 4-byte stores
// of C), ~2,000 a warp a tile, with two warps a scheduler to hide their latencies. Here a chunk is ~30: the
// accumulators are rounded in registers and written once to shared memory as the 16-bit pairs C stores, and one
// lane hands the chunk to TMA, which writes it to C by itself while the warp goes on (CUTLASS's sm90 epilogues store
// by TMA too). Rows past M are clipped by TMA; columns past N too, in whole 16-byte granules (on the H200 of
// 2026-11-27 a TMA store overwrote the padding after a row ending mid-granule), so the host takes this path only
// where N and ldc are multiples of 8 (tma_store_eligible below; conv v3: conv_wgmma.cu's conv_tma_store_eligible).
// A residual (since 2026-11-30, fourth session: the 1x1 backward-datas of ResNet-50's blocks add one, 0.64 ms at
// 56^2 on the H200, 2.4x their least traffic) is read by each lane as the pairs it holds, 4 bytes a pair, all 8 of
// a chunk issued together before the chunk is written: a warp's load covers 8 rows x 16 bytes, and the next
// 8-column group the other half of the same 32-byte sectors (from L1), the lines prefetched into L2 as the tile's k
// loop began (band_prefetch_inputs).
//
// The chunk's image in shared memory: 16 rows of 32 16-bit values, 64-byte rows, in the 64-byte swizzle (16-byte
// unit u of row r at u ^ ((r / 2) % 4)): a lane's 4-byte pair stores (8 lanes of 4 rows' pairs a phase) then hit 32
// distinct banks; the map's box is 32 values by 16 rows with the same swizzle: {32, 16} of C as a matrix (GEMM v3,
// conv v3's im2col tiles), or {32, bw, bh, bn} of an NHWC output whose 16 rows are a sub-box of the tile's pixel box
// (conv v3's boxes). Two such images a warp, in its 2 KiB band buffer, alternate between chunks: before writing one,
// the warp waits until the TMA store issued from it two chunks ago has read it (cp.async.bulk.wait_group.read 1),
// and at the end until all have (read 0), so that the next tile's epilogue, or the block's exit, finds its buffer
// free.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "band_epilogue.cuh"

namespace hpdt::kernels::cuda::sm90a {

constexpr int kTmaStoreRows = 16;                                                      // a warp's band of the tile
constexpr uint32_t kTmaStoreImageBytes = kTmaStoreRows * gemm_detail::kChunkCols * 2;  // one chunk, 16-bit: 1 KiB
static_assert(2 * kTmaStoreImageBytes <= uint32_t(gemm_detail::kBandBufBytes), "two images in a warp's buffer");

// Where the TMA-store epilogue can take a GEMM v3 or conv v3 call (its Params; conv v3 asks for a dense output grid
// besides: conv_wgmma.cu, conv_tma_store_eligible): a 16-bit C, 16-byte aligned, with N and ldc multiples of 8 (TMA
// writes whole 16-byte granules: a row ending mid-granule would have the padding after it overwritten), nothing but
// alpha, a bias and a residual (4-byte aligned: read in pairs) in the epilogue, no split-K (checked by the caller).
inline bool tma_store_eligible(const gemm_detail::Params& p) {
  return !p.c_f32 && p.beta == 0.0f && p.act == gemm_detail::kActNone && !p.aux && !p.col_stats && !p.partial &&
         p.N % 8 == 0 && p.ldc % 8 == 0 && reinterpret_cast<uintptr_t>(p.C) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.res) % 4 == 0;
}

__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The box of `map` at (c0, c1[, c2, c3]) (c0 the contiguous dimension) from shared memory at src, in a bulk group.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// until at most the 1 (0) most recent bulk groups still read their shared memory
__device__ __forceinline__ void bulk_wait_read_1() { asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read_0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// 4 bytes into shared memory as an asm statement (band_store_shared says why: the ladder's branches stay apart)
__device__ __forceinline__ void store_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// Byte offset of the 16-bit pair at column cc (even) of row r in a chunk image (the 64-byte swizzle above).
__device__ __forceinline__ uint32_t tma_store_offset(int r, int cc) {
  const uint32_t off = uint32_t(r) * 64u + uint32_t(cc) * 2u;
  return off ^ (((off >> 7) & 3u) << 4);
}

// The epilogue of one warp's accumulators, NCHUNKS chunks of 16 rows x 32 columns, by TMA stores: frag as
// band_write_chunk's (gemm_detail), at(c, r) -> int2{row, column} of chunk c's row r (0..15) and its first column
// (row >= p.M: outside C), as band_epilogue's; buf the warp's 2 KiB band buffer (1024-byte aligned); store(c, image)
// (lane 0, chunk c's first row inside C) issues the TMA store of chunk c's image at shared address `image` (through
// C's store map: boxes of 32 values by 16 rows, the 64-byte swizzle). TC is C's 16-bit type; p.alpha, p.bias and
// p.res apply, nothing else may be set (tma_store_eligible, conv_tma_store_eligible).
template <class TC, int NCHUNKS, class Frag, class At, class Store>
__device__ __forceinline__ void tma_store_epilogue(const gemm_detail::Params& p, Frag& frag, At& at, unsigned char* buf,
                                                   const Store& store) {
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
  const TC* bias = static_cast<const TC*>(p.bias);
  const TC* res = static_cast<const TC*>(p.res);
#pragma unroll 1
  for (int c = 0; c < NCHUNKS; ++c) {
    const uint32_t image = base + uint32_t(c & 1) * kTmaStoreImageBytes;
    const int2 rc = at(c, 0);
    // the residual's pairs of this lane's rows g and g + 8 (C's rows at(c, g), at(c, g + 8)), all 8 loads in flight
    // before the chunk's image is written. Without one (and outside C) -0.0, as the bias without one: x + -0.0 is x
    // for every x, -0.0 included, so the values are the direct stores' bits (which add neither)
    float2 rv[4][2];
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) rv[jj][0] = rv[jj][1] = make_float2(-0.0f, -0.0f);
    if (res) {
      const int r0 = at(c, g).x, r1 = at(c, g + 8).x;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int col = rc.y + 8 * jj + 2 * t;  // N is even here: the pair is whole
        if (col < p.N && r0 < p.M) rv[jj][0] = gemm_detail::band_load_pair<TC>(res + int64_t(r0) * p.ldc + col);
        if (col < p.N && r1 < p.M) rv[jj][1] = gemm_detail::band_load_pair<TC>(res + int64_t(r1) * p.ldc + col);
      }
    }
    if (c >= 2) {  // the store issued from this image two chunks ago has read it
      if (lane == 0) bulk_wait_read_1();
      __syncwarp();
    }
    gemm_detail::band_static_for<NCHUNKS>([&](auto C) {
      if (c == C) {
        gemm_detail::band_static_for<4>([&](auto JJ) {
          const float4 f = frag(std::integral_constant<int, 4 * decltype(C)::value + decltype(JJ)::value>{});
          const int cc = 8 * JJ + 2 * t;
          float b0 = -0.0f, b1 = -0.0f;
          if (bias && rc.y + cc < p.N) {
            b0 = to_f32(bias[rc.y + cc]);
            b1 = to_f32(bias[rc.y + cc + 1]);
          }
          const float2 r0 = rv[JJ][0], r1 = rv[JJ][1];
          store_shared_b32(image + tma_store_offset(g, cc),
                           gemm_detail::pack2<TC>(p.alpha * f.x + b0 + r0.x, p.alpha * f.y + b1 + r0.y));
          store_shared_b32(image + tma_store_offset(g + 8, cc),
                           gemm_detail::pack2<TC>(p.alpha * f.z + b0 + r1.x, p.alpha * f.w + b1 + r1.y));
        });
      }
    });
    fence_proxy_async_shared();  // this lane's writes, seen by the async proxy (TMA) ...
    __syncwarp();                // ... once every lane has made them
    if (lane == 0) {
      if (rc.x < p.M && rc.y < p.N) store(c, image);
      bulk_commit();  // (an empty group where the chunk lies outside C: the waits count groups)
    }
  }
  if (lane == 0) bulk_wait_read_0();
  __syncwarp();
}

}  // namespace hpdt::kernels::cuda::sm90a
