// The epilogue of the tensor-core GEMMs (gemm.cu's v2, sm90a/gemm_wgmma.cu's v3, sm90a/conv_wgmma.cu's conv v3):
// one warp's f32 accumulators, in the mma / wgmma C fragment layout, through alpha, beta * C, bias, residual and
// the activation (gemm_common.cuh's order of operations: epilogue_one) into C, or raw into the split-K partials.
//
// Why it is built this way: written out per accumulator pair (store_pair, fully unrolled: 64 pairs a thread for a
// 128 x 256 tile, each with every option's code, GELU and its gradient in two flavours, pair and single stores),
// the epilogue made GEMM v3's kernels 2.5 MB of SASS each and v2's 1.5 MB (2026-11-27; bench/.. ptxas -v did
// not show it, the cubin's .text sections did). A warp then ran its epilogue once per tile through code spread
// over megabytes, every few instructions an instruction-cache miss: Nsight Compute's top stall on 4096^3 was "no
// instruction", the per-tile cost of the K = 768 GEMMs ~25 us, and v2 lost 44 % at K = 768 (25 % at 4096^3)
// the day the GELU and residual fusion went in. Here the per-element code exists once per mode and is small:
//   1. the warp writes one chunk of its accumulators, 16 rows x 32 columns of f32 (2 KiB), to its shared-memory
//      buffer (8 64-bit stores a lane, conflict-free: 16-byte units swizzled by row, band_offset);
//   2. each half-warp reads back one row of the chunk at a time (8 rows a lane), so the epilogue's reads of C,
//      the residual and the GELU's input, and the stores of C, are 32 consecutive columns of a row (64 or 128
//      contiguous bytes) instead of 4 lanes' 8-16 bytes;
//   3. the chunk loop is not unrolled (the accumulators of chunk c are picked by a ladder of `c == C` branches of
//      8 stores each), and the mode (split-K partials, plain, GELU erf / tanh, GELU gradient erf / tanh) is a
//      template parameter chosen once per band, so the code a warp runs is a few hundred instructions, hot in the
//      instruction cache after the first chunk.
// Rows and columns outside C are dropped; a pair that is not whole inside C or not pairs_aligned goes through
// epilogue_one element by element (a rare, rolled fallback).
// Mode kBandStats (the plain epilogue, p.col_stats set; GEMM v3 and conv v3 only) also hands a batch norm the
// statistics of C's columns, the channels of an NHWC activation (hpdt/kernels/channel_stats.h): each lane keeps the
// count and the shifted sums (sum d, sum d^2, d = v - k) of its two columns over its rows of the chunk, the values
// as stored, k the column's value in the warp's first row of the chunk; the chunk's end merges them over the
// warpgroup's 64 rows (sm90a/column_stats.cuh) into one (count, mean, M2) per column and 64-row group. Mode
// kBandGradSums (p.col_stats and p.bn_x: a backward-data's dx) does the same for batch norm's backward: the value
// goes through the fused ReLU's mask (p.bn_y > 0) before its store, and the lane sums dz and dz (x - mean).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "gemm_common.cuh"
#include "prefetch.cuh"

namespace hpdt::kernels::cuda::gemm_detail {

constexpr int kBandRows = 16;    // rows of a warp's band (the fragment's rows g and g + 8 of 16)
constexpr int kChunkCols = 32;   // f32 columns of one chunk: a 128-byte row
constexpr int kBandBufBytes = kBandRows * kChunkCols * 4;  // a warp's shared-memory buffer: 2 KiB

// Byte offset of f32 column cc (even) of row r in a chunk buffer: 128-byte rows, the 16-byte unit cc / 4 stored
// at unit (cc / 4) ^ (2 (r % 4)). A fragment store (8 bytes a lane) goes through shared memory 16 lanes at a time:
// 4 rows x 4 lanes, each row's lanes on two adjacent units u, u + 1 (u even), which the XOR moves to 4 different
// pairs, so the 16 lanes cover all 32 banks; a half-warp's load of one row covers them too. (u ^ (r % 8), the
// 128-byte TMA swizzle, put rows r and r ^ 1 on the same pair: two wavefronts a phase, which the emulator's count,
// EmulatedEpilogueBufferWritesAreConflictFree, showed.)
__device__ __forceinline__ uint32_t band_offset(int r, int cc) {
  return uint32_t(r) * 128u + ((uint32_t(cc >> 2) ^ (uint32_t(r & 3) << 1)) << 4) + uint32_t(cc & 3) * 4u;
}

// The modes of the epilogue (band_epilogue's template parameter).
enum : int {
  kBandPartial = 0,
  kBandPlain,
  kBandGeluErf,
  kBandGeluTanh,
  kBandGeluGradErf,
  kBandGeluGradTanh,
  kBandStats,
  kBandGradSums
};

__host__ __device__ inline int band_mode(const Params& p) {
  if (p.partial) return kBandPartial;
  if (p.col_stats && p.act == kActNone) return p.bn_x ? kBandGradSums : kBandStats;
  if (p.act == kActGelu) return p.gelu_tanh ? kBandGeluTanh : kBandGeluErf;
  if (p.act == kActGeluGrad) return p.gelu_tanh ? kBandGeluGradTanh : kBandGeluGradErf;
  return kBandPlain;
}

// Prefetching the epilogue's global inputs into L2 (Params::prefetch, the v3 kernels; prefetch.cuh says why): C
// (beta != 0), the residual, the GELU gradient's input (aux), batch norm's x and y (kBandGradSums). A lane loads them
// 4 rows at a time and waits: a warp has 512 bytes of an input in flight, an SM's 8 consumer warps 4 KiB, and a
// backward-data with batch norm's sums and a residual (three inputs) would wait ~30 us a 128 x 256 tile at DRAM
// latency. So each consumer warpgroup prefetches its rows' input lines as the tile's k loop starts.
//
// Row `row` of C's inputs for mode `mode` (C's element type TC), columns col0 .. col0 + cols - 1 (all inside C): its
// lines part, part + parts, .. of each input.
template <class TC>
__device__ __forceinline__ void band_prefetch_row(const Params& p, int mode, int row, int col0, int cols, int part,
                                                  int parts) {
  const int64_t off = int64_t(row) * p.ldc + col0;
  const uint32_t bytes = uint32_t(cols) * uint32_t(sizeof(TC));
  const bool grad_sums = mode == kBandGradSums;
  prefetch_input_lines<TC>(p.beta != 0.0f ? p.C : nullptr, off, bytes, part, parts);
  prefetch_input_lines<TC>(p.res, off, bytes, part, parts);
  prefetch_input_lines<TC>(mode == kBandGeluGradErf || mode == kBandGeluGradTanh ? p.aux : nullptr, off, bytes, part,
                           parts);
  prefetch_input_lines<TC>(grad_sums ? p.bn_y : nullptr, off, bytes, part, parts);
  prefetch_input_lines<TC>(grad_sums ? p.bn_x : nullptr, off, bytes, part, parts);
}

// A warpgroup's (128 threads') prefetch of the inputs of the tile rows it will store: `rows` of them (64 or 128),
// row_of(r) the row of C of the r-th (>= p.M: none), columns col0 .. col0 + ncols - 1 (those inside C). Thread t takes
// row t / (128 / rows), its lines t % (128 / rows), .. . Nothing unless p.prefetch and the mode reads inputs (never
// the split-K partials).
template <class T, class RowOf>
__device__ __forceinline__ void band_prefetch_inputs(const Params& p, int rows, RowOf row_of, int col0, int ncols) {
  const int mode = band_mode(p);
  const bool reads = p.beta != 0.0f || p.res || mode == kBandGeluGradErf || mode == kBandGeluGradTanh ||
                     mode == kBandGradSums;
  if (p.prefetch == EpiloguePrefetch::off || mode == kBandPartial || !reads || col0 >= p.N) return;
  const int per_row = 128 / rows, t = int(threadIdx.x) % 128;
  const int row = row_of(t / per_row);
  if (row >= p.M) return;
  const int cols = min(ncols, p.N - col0);
  if (p.c_f32)
    band_prefetch_row<float>(p, mode, row, col0, cols, t % per_row, per_row);
  else
    band_prefetch_row<T>(p, mode, row, col0, cols, t % per_row, per_row);
}

template <int N, class F>
__device__ __forceinline__ void band_static_for(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }
  (std::make_integer_sequence<int, N>{});
}

// 8 bytes into shared memory, as an asm statement: written as a plain store, the ladder's branches below (the same
// stores of other accumulators) were merged by the compiler into one store fed by an index into the accumulator
// array, which put the array in local memory (GEMM v3's 128 x 256 tile, 2026-11-28: 640 bytes of stack, and ptxas
// serialised its wgmmas, C7514); branches of asm statements with other operands are not merged.
__device__ __forceinline__ void band_store_shared(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// Chunk c's accumulators into the buffer: frag(J) (J = 4 c .. 4 c + 3, an integral_constant) is the float4 of
// 8-column group J, {row g, column 8 J' + 2 t; column + 1; row g + 8, column; column + 1} with g = lane / 4,
// t = lane % 4 and J' = J - 4 c (the mma m16n8 C fragment; wgmma's D per warp: d[4 J .. 4 J + 3]).
template <int NCHUNKS, class Frag>
__device__ __forceinline__ void band_write_chunk(unsigned char* buf, Frag& frag, int c, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
  band_static_for<NCHUNKS>([&](auto C) {
    if (c == C) {
      band_static_for<4>([&](auto JJ) {
        const float4 f = frag(std::integral_constant<int, 4 * decltype(C)::value + decltype(JJ)::value>{});
        const int cc = 8 * JJ + 2 * t;
        band_store_shared(base + band_offset(g, cc), f.x, f.y);
        band_store_shared(base + band_offset(g + 8, cc), f.z, f.w);
      });
    }
  });
}

template <int MODE>
__device__ __forceinline__ float band_gelu(float v) {
  if constexpr (MODE == kBandGeluTanh) return math::gelu_tanh(v);
  else return math::gelu_erf(v);
}
template <int MODE>
__device__ __forceinline__ float band_gelu_grad(float h) {
  if constexpr (MODE == kBandGeluGradTanh) return math::gelu_tanh_grad(h);
  else return math::gelu_erf_grad(h);
}

// A 16-bit pair at `ptr` (4-byte aligned) or an f32 pair (8-byte aligned) as two floats, and back.
template <class TC>
__device__ __forceinline__ float2 band_load_pair(const void* ptr) {
  if constexpr (std::is_same_v<TC, float>) {
    return *static_cast<const float2*>(ptr);
  } else {
    float2 r;
    unpack2<TC>(*static_cast<const uint32_t*>(ptr), r.x, r.y);
    return r;
  }
}
template <class TC>
__device__ __forceinline__ void band_store_pair(void* ptr, float2 v) {
  if constexpr (std::is_same_v<TC, float>)
    *static_cast<float2*>(ptr) = v;
  else
    *static_cast<uint32_t*>(ptr) = pack2<TC>(v.x, v.y);
}

// band_epilogue's frag for a warpgroup's whole 128-row tile of BN columns, two 64-row halves of m64nBN accumulators
// (the pingpong pipeline's d0, d1): 8-column groups 0 .. BN / 8 - 1 are d0's, the next BN / 8 d1's, so that chunks
// 0 .. BN / 32 - 1 are the first half's rows and the next as many the second's.
template <int BN>
struct HalvesFrag {
  float (&d0)[BN / 2];
  float (&d1)[BN / 2];
  template <class J>
  __device__ __forceinline__ float4 operator()(J) const {
    constexpr int j = J::value, g = BN / 8;
    if constexpr (j < g)
      return make_float4(d0[4 * j], d0[4 * j + 1], d0[4 * j + 2], d0[4 * j + 3]);
    else
      return make_float4(d1[4 * (j - g)], d1[4 * (j - g) + 1], d1[4 * (j - g) + 2], d1[4 * (j - g) + 3]);
  }
};

// The epilogue of one warp's accumulators, NCHUNKS chunks of 16 rows x 32 columns: frag as band_write_chunk's,
// at(c, r) -> int2{row, column} of chunk c's row r (0..15) and its first column (row >= p.M: a row outside C,
// dropped), buf the warp's kBandBufBytes of shared memory, split the split-K part (kBandPartial). MODE must be
// band_mode(p); TC is C's element type (float when p.c_f32).
// The statistics of two columns over the same rows, as shifted sums: n rows, and for each column its shift k (the
// column's value in the warp's first row of the chunk), sum d and sum d^2 with d = v - k: adds and FMAs, no division
// (Welford's mean-then-M2 and Chan's merges, before 2026-11-30, chained ~7 divisions a chunk a lane; with them the
// H200 ran GEMM v3 and conv v3 2-3x as long as without the statistics, 2026-11-29). A shift inside the data keeps
// sum d^2 - (sum d)^2 / n well conditioned where the mean is large beside the spread.
struct PairShifted {
  float n = 0.0f, k0 = 0.0f, s0 = 0.0f, q0 = 0.0f, k1 = 0.0f, s1 = 0.0f, q1 = 0.0f;
};

// Batch norm's backward sums of two columns over some rows: sum dz, sum dz (x - mean), each column.
struct PairSums {
  float sum0 = 0.0f, sum_x0 = 0.0f, sum1 = 0.0f, sum_x1 = 0.0f;
};

// What band_epilogue does with a lane's column reductions (PairShifted in mode kBandStats, PairSums in
// kBandGradSums) at a chunk's end: nothing here (GEMM v2, and every caller without the exchange of
// sm90a/column_stats.cuh, whose ColumnReduction has kOn and finish_chunk for both).
struct NoColumnReduction {
  static constexpr bool kOn = false;
  template <int NCHUNKS, class Lane, class At>
  __device__ __forceinline__ void finish_chunk(const Params&, int, const Lane&, At&) const {}
};

template <class TC, int MODE, int NCHUNKS, class Frag, class At, class Stats = NoColumnReduction>
__device__ __forceinline__ void band_epilogue_mode(const Params& p, int split, Frag& frag, At& at, unsigned char* buf,
                                                   const Stats& stats = {}) {
  const int lane = int(threadIdx.x) & 31;
  const int half = lane >> 4, cc = 2 * (lane & 15);
  const bool pair_ok = MODE == kBandPartial ? (p.N & 1) == 0 : pairs_aligned<TC>(p);
  constexpr int kIters = kBandRows / 4;  // rows a lane reads back per step, two steps a chunk
#pragma unroll 1
  for (int c = 0; c < NCHUNKS; ++c) {
    band_write_chunk<NCHUNKS>(buf, frag, c, lane);
    __syncwarp();
    PairShifted moments;  // kBandStats: this lane's columns over its rows of the chunk, as stored
    PairSums sums;        // kBandGradSums: the same for batch norm's backward
    // kBandGradSums: the columns' saved means, loaded before any store of the chunk (after one, the compiler must
    // assume C may alias them: a round trip a step between the stores and the sums)
    [[maybe_unused]] float mean0 = 0.0f, mean1 = 0.0f;
    if constexpr (MODE == kBandGradSums) {
      const int col = at(c, 0).y + cc;
      if (col + 1 < p.N) mean0 = p.bn_mean[col], mean1 = p.bn_mean[col + 1];
    }
#pragma unroll 1
    for (int rows0 = 0; rows0 < kBandRows; rows0 += 2 * kIters) {
      // The lane's pair in row rows0 + 2 it + half of the chunk, it = 0..kIters - 1: its value v[it], its row of C
      // row[it]; bit it of `ok`: the pair is inside C and moves as a pair; of `one`: the row is inside C but the pair
      // is not whole or not aligned, element by element. (Half the chunk's rows at a time, rows as ints and bits as
      // masks: registers are short in the 128 x 256 tile's warp-specialised kernel, whose consumers hold 128
      // accumulators in 232 registers.)
      float2 v[kIters];
      int row[kIters];
      uint32_t ok = 0, one = 0;
      const int col = at(c, 0).y + cc;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int r = rows0 + 2 * it + half;
        row[it] = at(c, r).x;
        v[it] = *reinterpret_cast<const float2*>(buf + band_offset(r, cc));
        const bool row_in = row[it] < p.M && col < p.N;
        const bool pair = row_in && col + 1 < p.N && pair_ok;
        ok |= uint32_t(pair) << it;
        one |= uint32_t(row_in && !pair) << it;
      }
      const auto off = [&](int it) { return int64_t(row[it]) * p.ldc + col; };
      if constexpr (MODE == kBandPartial) {
        float* part = p.partial + int64_t(split) * p.M * p.N + col;
#pragma unroll
        for (int it = 0; it < kIters; ++it) {
          float* at_row = part + int64_t(row[it]) * p.N;
          if (ok >> it & 1u) *reinterpret_cast<float2*>(at_row) = v[it];
          if (one >> it & 1u) {
            at_row[0] = v[it].x;
            if (col + 1 < p.N) at_row[1] = v[it].y;
          }
        }
      } else {
        TC* C = static_cast<TC*>(p.C);
        // the pairs: each step over the kIters rows, so that a step's loads are in flight together
#pragma unroll
        for (int it = 0; it < kIters; ++it) v[it] = make_float2(p.alpha * v[it].x, p.alpha * v[it].y);
        if (p.beta != 0.0f) {
#pragma unroll
          for (int it = 0; it < kIters; ++it)
            if (ok >> it & 1u) {
              const float2 o = band_load_pair<TC>(C + off(it));
              v[it].x += p.beta * o.x;
              v[it].y += p.beta * o.y;
            }
        }
        if (p.bias && col + 1 < p.N) {  // the lane's two columns, the same in every row
          const TC* bias = static_cast<const TC*>(p.bias);
          const float b0 = to_f32(bias[col]), b1 = to_f32(bias[col + 1]);
#pragma unroll
          for (int it = 0; it < kIters; ++it) {
            v[it].x += b0;
            v[it].y += b1;
          }
        }
        if (p.res) {
#pragma unroll
          for (int it = 0; it < kIters; ++it)
            if (ok >> it & 1u) {
              const float2 r = band_load_pair<TC>(static_cast<const TC*>(p.res) + off(it));
              v[it].x += r.x;
              v[it].y += r.y;
            }
        }
        if constexpr (MODE == kBandGeluErf || MODE == kBandGeluTanh || MODE == kBandGeluGradErf ||
                      MODE == kBandGeluGradTanh) {  // the activation takes v as a plain GEMM stores it (activate)
#pragma unroll
          for (int it = 0; it < kIters; ++it) v[it] = make_float2(as_stored<TC>(v[it].x), as_stored<TC>(v[it].y));
        }
        if constexpr (MODE == kBandGeluGradErf || MODE == kBandGeluGradTanh) {
#pragma unroll
          for (int it = 0; it < kIters; ++it)
            if (ok >> it & 1u) {
              const float2 h = band_load_pair<TC>(static_cast<const TC*>(p.aux) + off(it));
              v[it].x *= band_gelu_grad<MODE>(h.x);
              v[it].y *= band_gelu_grad<MODE>(h.y);
            }
        }
        if constexpr (MODE == kBandGeluErf || MODE == kBandGeluTanh) {
          if (p.aux) {
#pragma unroll
            for (int it = 0; it < kIters; ++it)
              if (ok >> it & 1u) band_store_pair<TC>(static_cast<TC*>(p.aux) + off(it), v[it]);
          }
#pragma unroll
          for (int it = 0; it < kIters; ++it) v[it] = make_float2(band_gelu<MODE>(v[it].x), band_gelu<MODE>(v[it].y));
        }
        // kBandGradSums: batch norm's x, loaded with the mask's y before C's stores, so that both are one round trip
        // (after the stores the compiler must assume C may alias x: a second one)
        [[maybe_unused]] float2 bx[kIters];
        if constexpr (MODE == kBandGradSums) {  // the fused ReLU's mask, from its output
#pragma unroll
          for (int it = 0; it < kIters; ++it)
            if (ok >> it & 1u) {
              bx[it] = band_load_pair<TC>(static_cast<const TC*>(p.bn_x) + off(it));
              if (p.bn_y) {
                const float2 y = band_load_pair<TC>(static_cast<const TC*>(p.bn_y) + off(it));
                if (!(y.x > 0.0f)) v[it].x = 0.0f;
                if (!(y.y > 0.0f)) v[it].y = 0.0f;
              }
            }
        }
#pragma unroll
        for (int it = 0; it < kIters; ++it)
          if (ok >> it & 1u) band_store_pair<TC>(C + off(it), v[it]);
        if constexpr (MODE == kBandGradSums) {  // dz as stored, with x (pairs only, as kBandStats)
#pragma unroll
          for (int it = 0; it < kIters; ++it)
            if (ok >> it & 1u) {
              const float dz0 = to_f32(from_f32<TC>(v[it].x)), dz1 = to_f32(from_f32<TC>(v[it].y));
              sums.sum0 += dz0, sums.sum_x0 += dz0 * (bx[it].x - mean0);
              sums.sum1 += dz1, sums.sum_x1 += dz1 * (bx[it].y - mean1);
            }
        }
        if constexpr (MODE == kBandStats) {  // the step's rows (pairs only: the host asks with N even, pairs_aligned)
          float r0[kIters], r1[kIters];
#pragma unroll
          for (int it = 0; it < kIters; ++it) {
            r0[it] = to_f32(from_f32<TC>(v[it].x));  // the value stored (exact for f32)
            r1[it] = to_f32(from_f32<TC>(v[it].y));
          }
          if (rows0 == 0) {  // the shifts: the warp's row 0, lane (lane % 16)'s first row; 0 where it is outside C
                             // (so are its other rows, but in a conv v3 box wider than the image: sums about 0)
            moments.k0 = __shfl_sync(0xffffffffu, (ok & 1u) ? r0[0] : 0.0f, lane & 15);
            moments.k1 = __shfl_sync(0xffffffffu, (ok & 1u) ? r1[0] : 0.0f, lane & 15);
          }
#pragma unroll
          for (int it = 0; it < kIters; ++it)
            if (ok >> it & 1u) {
              const float d0 = r0[it] - moments.k0, d1 = r1[it] - moments.k1;
              moments.n += 1.0f;
              moments.s0 += d0, moments.q0 = fmaf(d0, d0, moments.q0);
              moments.s1 += d1, moments.q1 = fmaf(d1, d1, moments.q1);
            }
        }
        // the rest (a pair across C's last column, or C not pairs_aligned), element by element from the buffer
        if (one) {
          const float* raw = reinterpret_cast<const float*>(buf);
#pragma unroll 1
          for (int it = 0; it < kIters; ++it) {
            if (!(one >> it & 1u)) continue;
            const int r = rows0 + 2 * it + half;
            const int64_t o = int64_t(at(c, r).x) * p.ldc + col;
            const uint32_t b = band_offset(r, cc) / 4u;
            store_one<TC>(p, o, col, raw[b]);
            if (col + 1 < p.N) store_one<TC>(p, o + 1, col + 1, raw[b + 1]);
          }
        }
      }
    }
    if constexpr (MODE == kBandStats) stats.template finish_chunk<NCHUNKS>(p, c, moments, at);
    if constexpr (MODE == kBandGradSums) stats.template finish_chunk<NCHUNKS>(p, c, sums, at);
    __syncwarp();  // the buffer is read: the next chunk may overwrite it
  }
}

// band_epilogue_mode in the mode p asks for, C in C's element type (T or, when p.c_f32, float); the split-K
// partials are f32 whatever C is. (Functions forced inline all the way down, no lambda around a mode: a function
// left out of line gets the accumulators through local memory.)
template <class TC, int NCHUNKS, class Frag, class At, class Stats>
__device__ __forceinline__ void band_epilogue_typed(const Params& p, int mode, Frag& frag, At& at, unsigned char* buf,
                                                    const Stats& stats) {
  switch (mode) {
    case kBandGeluErf: band_epilogue_mode<TC, kBandGeluErf, NCHUNKS>(p, 0, frag, at, buf); break;
    case kBandGeluTanh: band_epilogue_mode<TC, kBandGeluTanh, NCHUNKS>(p, 0, frag, at, buf); break;
    case kBandGeluGradErf: band_epilogue_mode<TC, kBandGeluGradErf, NCHUNKS>(p, 0, frag, at, buf); break;
    case kBandGeluGradTanh: band_epilogue_mode<TC, kBandGeluGradTanh, NCHUNKS>(p, 0, frag, at, buf); break;
    case kBandStats:
    case kBandGradSums:
      if constexpr (Stats::kOn) {
        if (mode == kBandStats)
          band_epilogue_mode<TC, kBandStats, NCHUNKS>(p, 0, frag, at, buf, stats);
        else
          band_epilogue_mode<TC, kBandGradSums, NCHUNKS>(p, 0, frag, at, buf, stats);
        break;
      }
      [[fallthrough]];
    default: band_epilogue_mode<TC, kBandPlain, NCHUNKS>(p, 0, frag, at, buf); break;
  }
}

// stats: the column reductions' exchange (sm90a/column_stats.cuh: ColumnReduction), for modes kBandStats and
// kBandGradSums; without it (NoColumnReduction) those run as the plain mode (callers without it never ask for them).
template <class T, int NCHUNKS, class Frag, class At, class Stats = NoColumnReduction>
__device__ __forceinline__ void band_epilogue(const Params& p, int split, Frag& frag, At& at, unsigned char* buf,
                                              const Stats& stats = {}) {
  const int mode = band_mode(p);
  if (mode == kBandPartial)
    band_epilogue_mode<float, kBandPartial, NCHUNKS>(p, split, frag, at, buf);
  else if (p.c_f32)
    band_epilogue_typed<float, NCHUNKS>(p, mode, frag, at, buf, stats);
  else
    band_epilogue_typed<T, NCHUNKS>(p, mode, frag, at, buf, stats);
}

}  // namespace hpdt::kernels::cuda::gemm_detail
