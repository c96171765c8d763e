// Batch norm's reductions from GEMM v3's and conv v3's epilogue (band_epilogue.cuh), one partial per column and
// 64-row group of a tile, in batch norm's layouts (hpdt/kernels/channel_stats.h). In NHWC C's columns are the
// channels, so the batch norm next to a convolution skips a pass, as next to conv v2 (conv.cu's stage_stats and
// stage_bn_grad, conv_nhwc.cu's stage_stats_nhwc and stage_bn_grad_nhwc):
//   mode kBandStats, a forward's y: the per-column (count, mean, M2) of the stored values, [c][splits][3], for the
//     batch norm that reads y (its statistics pass);
//   mode kBandGradSums, a backward-data's dx (the gradient of the batch norm's output; stored through its fused
//     ReLU's mask): (sum dz, sum dz (x - mean)), [c][splits][2] (its backward reduce pass).
//
// A warp's epilogue covers 16 rows of the tile; a partial per warp would be 12 bytes per 16 values of a channel,
// 0.75 bytes an element written and read back, a third of what the pass saves on a bf16 activation. So the 4 warps
// of the warpgroup that owns 64 rows merge theirs through shared memory at the end of each chunk (32 columns):
// every warp writes its columns' sums over its 16 rows to the chunk's exchange buffer and arrives on the
// warpgroup's mbarrier (its lane 0, after a __syncwarp that orders the other lanes' stores before that release:
// 4 arrivals a phase, not 128 atomics on one word); warp c % 4 waits for the phase and merges the 4 in warp order
// (the same bits every run).
// The statistics travel as shifted sums (band_epilogue.cuh: PairShifted): each warp's (count, k, sum d, sum d^2),
// k its first row's value; the merger moves the 4 to warp 0's shift (sum over warp w of d' = s_w + n_w e and of d'^2
// = q_w + e (2 s_w + n_w e), e = k_w - k_0: FMAs) and divides once, for the partial's mean and M2. Batch norm's
// partials stay (count, mean, M2), as every other producer of them writes.
// Two buffers, alternate chunks: a warp writes buffer c % 2 once phase c - 1 has completed, i.e. once chunk c - 2's
// merger has arrived for chunk c - 1, after its reads (the merger of chunk c - 1 waited for that phase already and
// does not wait again: a second wait on a completed phase is what the CUDA emulator reports as a wait two phases
// ahead). A band epilogue has an even number of chunks, so chunk c of every tile is a phase of parity c % 2, and a
// fresh barrier passes the first wait (parity 1: the phase "before" phase 0). The cost: per chunk of 16 x 32
// values a warp, one mbarrier phase of the warpgroup and 256 or 448 bytes through shared memory.
#pragma once

#include <cstdint>

#include "band_epilogue.cuh"
#include "wgmma.cuh"

namespace hpdt::kernels::cuda::sm90a {

// One chunk's exchange. kBandStats: the 4 warps' shifts [4][32], sums of d [4][32], of d^2 [4][32] (column j of
// the chunk at [w][j]), then their 16 column pairs' counts [4][16]; kBandGradSums: (sum, sum_x) of column j at
// [w][j][2].
constexpr int kXchgShifts = 0, kXchgSums = 4 * 32, kXchgSquares = 2 * 4 * 32, kXchgCounts = 3 * 4 * 32;
constexpr int kStatsChunkFloats = kXchgCounts + 4 * 16;
// A warpgroup's two buffers: 3,584 bytes (a block: two warpgroups).
constexpr uint32_t kColumnReductionBytes = 2u * kStatsChunkFloats * 4u;

struct ColumnReduction {
  static constexpr bool kOn = true;
  float* xchg;       // the warpgroup's kColumnReductionBytes (16-byte aligned)
  uint32_t bar;      // its mbarrier (shared address): 4 arrivals (a warp's lane 0) a phase, one phase a chunk
  int split0;        // the split of chunk 0's rows: 2 tm + its 64-row group (after p.stats_split0)
  int group_chunks;  // chunks of one 64-row group: chunk c's split is split0 + c / group_chunks

  // Chunk c's end (every thread of the warpgroup), kBandStats: `mine` is this lane's two columns (2 (lane % 16) and
  // + 1 of the chunk) over its 8 rows of the warp's 16.
  template <int NCHUNKS, class At>
  __device__ __forceinline__ void finish_chunk(const gemm_detail::Params& p, int c,
                                               const gemm_detail::PairShifted& mine, At& at) const {
    const int lane = int(threadIdx.x) & 31;
    // the warp's 16 rows: lanes l and l ^ 16 hold the other 8 rows of the same columns, with the same shifts (two
    // terms: the same bits in both lanes whichever comes first)
    const auto other = [&](float x) { return x + __shfl_xor_sync(0xffffffffu, x, 16); };
    const float n = other(mine.n), s0 = other(mine.s0), q0 = other(mine.q0), s1 = other(mine.s1), q1 = other(mine.q1);
    exchange<NCHUNKS>(
        c,
        [&](float* buf, int warp) {  // (a row counts for both columns or neither: one count)
          const int j = warp * 32 + 2 * lane;
          *reinterpret_cast<float2*>(buf + kXchgShifts + j) = make_float2(mine.k0, mine.k1);
          *reinterpret_cast<float2*>(buf + kXchgSums + j) = make_float2(s0, s1);
          *reinterpret_cast<float2*>(buf + kXchgSquares + j) = make_float2(q0, q1);
          buf[kXchgCounts + warp * 16 + lane] = n;
        },
        [&](const float* buf) {  // lane = column, the 4 warps in order, moved to warp 0's shift
          const float k = buf[kXchgShifts + lane];
          float cnt = 0.0f, s = 0.0f, q = 0.0f;
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const float nw = buf[kXchgCounts + w * 16 + lane / 2], sw = buf[kXchgSums + w * 32 + lane];
            const float qw = buf[kXchgSquares + w * 32 + lane];
            // e: 0 for warp 0; a warp without rows has nw = sw = qw = 0
            const float e = buf[kXchgShifts + w * 32 + lane] - k;
            cnt += nw;
            q += fmaf(e, fmaf(nw, e, 2.0f * sw), qw);
            s += fmaf(nw, e, sw);
          }
          const int col = at(c, 0).y + lane;
          if (col < p.N) {
            float* out = p.col_stats + (int64_t(col) * p.stats_splits + p.stats_split0 + split0 + c / group_chunks) * 3;
            const float d = cnt > 0.0f ? s / cnt : 0.0f;  // the mean's offset from k
            out[0] = cnt, out[1] = cnt > 0.0f ? k + d : 0.0f, out[2] = cnt > 0.0f ? fmaxf(fmaf(-s, d, q), 0.0f) : 0.0f;
          }
        });
  }

  // kBandGradSums: the lane's sums of dz and dz (x - mean) of its two columns.
  template <int NCHUNKS, class At>
  __device__ __forceinline__ void finish_chunk(const gemm_detail::Params& p, int c, const gemm_detail::PairSums& mine,
                                               At& at) const {
    const int lane = int(threadIdx.x) & 31;
    const float o0 = __shfl_xor_sync(0xffffffffu, mine.sum0, 16), ox0 = __shfl_xor_sync(0xffffffffu, mine.sum_x0, 16);
    const float o1 = __shfl_xor_sync(0xffffffffu, mine.sum1, 16), ox1 = __shfl_xor_sync(0xffffffffu, mine.sum_x1, 16);
    // lower half first in both lanes: the same bits
    const float4 w = lane < 16 ? make_float4(mine.sum0 + o0, mine.sum_x0 + ox0, mine.sum1 + o1, mine.sum_x1 + ox1)
                               : make_float4(o0 + mine.sum0, ox0 + mine.sum_x0, o1 + mine.sum1, ox1 + mine.sum_x1);
    exchange<NCHUNKS>(
        c, [&](float* buf, int warp) { *reinterpret_cast<float4*>(buf + (warp * 32 + 2 * lane) * 2) = w; },
        [&](const float* buf) {
          float sum = 0.0f, sum_x = 0.0f;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float2 q = *reinterpret_cast<const float2*>(buf + (k * 32 + lane) * 2);
            sum += q.x, sum_x += q.y;
          }
          const int col = at(c, 0).y + lane;
          if (col < p.N) {
            float* out = p.col_stats + (int64_t(col) * p.stats_splits + p.stats_split0 + split0 + c / group_chunks) * 2;
            out[0] = sum, out[1] = sum_x;
          }
        });
  }

  // The protocol (the header comment): wait until chunk c's buffer is free, write(buf, warp) (the half-warp with the
  // columns' moments), arrive; warp c % 4 then waits for the others and merge(buf)s.
  template <int NCHUNKS, class Write, class Merge>
  __device__ __forceinline__ void exchange(int c, Write write, Merge merge) const {
    static_assert(NCHUNKS % 2 == 0, "chunk c is a phase of parity c % 2 in every tile");
    const int lane = int(threadIdx.x) & 31, warp = (int(threadIdx.x) % 128) / 32;
    float* buf = xchg + (c & 1) * kStatsChunkFloats;
    const int prev_merger = (c == 0 ? NCHUNKS - 1 : c - 1) % 4;
    if (warp != prev_merger) mbar_wait(bar, uint32_t(c + 1) & 1u);  // phase c - 1 complete: the buffer is free
    if (lane < 16) write(buf, warp);
    __syncwarp();  // the warp's stores before its lane 0's arrival (a release)
    if (lane == 0) mbar_arrive(bar);
    if (warp != c % 4) return;
    mbar_wait(bar, uint32_t(c) & 1u);
    merge(buf);
  }
};

// Consumer warpgroup wg's exchange: its buffers at `area` (the block's 2 kColumnReductionBytes) and its mbarrier at
// `bars` + 8 wg (two, set up by init_column_reduction).
__device__ __forceinline__ ColumnReduction column_reduction_of(unsigned char* area, uint32_t bars, int wg, int split0,
                                                           int group_chunks) {
  return ColumnReduction{reinterpret_cast<float*>(area + uint32_t(wg) * kColumnReductionBytes), bars + 8u * uint32_t(wg),
                     split0, group_chunks};
}

// The two mbarriers, by thread 0 at the kernel's start, before its pipeline sets up its own (whose block barrier
// publishes them).
__device__ __forceinline__ void init_column_reduction(uint32_t bars) {
  if (threadIdx.x == 0) {
    mbar_init(bars, 4);  // a warp's lane 0 each
    mbar_init(bars + 8u, 4);
  }
}

}  // namespace hpdt::kernels::cuda::sm90a
