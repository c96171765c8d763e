// v3_wgmma: Hopper GEMM (sm_90a only: wgmma and TMA). C = alpha * op(A) op(B) + beta * C + bias[col], row-major,
// 16-bit A and B (bf16/f16) in any layout, f32 accumulation; the CPU oracle is cpu::gemm.
//
//   - TMA (cp.async.bulk.tensor) loads 128 x 64 tiles of A and BN x 64 tiles of B into shared memory with
//     the 128-byte swizzle, completing on one mbarrier per stage (expect-tx = the stage's bytes; the edge
//     tiles' out-of-bounds elements arrive as zeros and count too). STAGES deep, so the loads of the next
//     stages run under the MMAs of this one.
//   - Two warpgroups (256 threads), each 64 rows x BN columns of the 128 x BN block tile, issue
//     wgmma.mma_async m64nBNk16 straight from the swizzled tiles (no ldmatrix, no register staging):
//     4 per 64-wide k tile, f32 accumulators in BN / 2 registers per thread.
//   - Pipeline "barrier" (the default): one group of MMAs stays in flight (IN_FLIGHT = 1; 0 waits for every
//     k tile's MMAs), a block barrier then frees the stage the previous k tile used and thread 0 refills it,
//     so a k tile's MMAs run under the barrier and the refill; one block per output tile (and split).
//     Pipeline "ws" (HPDT_GEMM_V3_PIPELINE=ws): a producer warpgroup and full/empty mbarriers per stage,
//     persistent: one block per SM walks the tiles, loading the next tile's first k tiles while it stores this
//     one's (wgmma.cuh: ws_pipeline). Pipeline "pingpong" (HPDT_GEMM_V3_PIPELINE=pingpong): the same producer and
//     persistence, but each consumer warpgroup computes whole 128 x 128 (or 128 x 64) tiles, the two in turns,
//     so that one's epilogue runs under the other's MMAs (wgmma.cuh: pingpong_pipeline).
//   - Split-K, sized in whole waves (detail::choose_split_k): work unit u is split u / tiles of tile u % tiles;
//     f32 partials summed in split order by gemm.cu's splitk_reduce.
//   - MN-major operands (A transposed, B not) arrive as 64 x 64 boxes read with wgmma's transpose bits.
//   - The epilogue (bias, residual, GELU or its gradient, split-K partials): band_epilogue.cuh, each warp's 16 rows
//     through a 2 KiB shared-memory buffer, row-contiguous stores; asked (GemmEpilogue::column_stats), batch norm's
//     statistics of C's columns too (column_stats.cuh).
// The building blocks (mbarriers, TMA, wgmma, the tile configurations and their choice, the pipelines) and the shared
// memory layouts are in wgmma.cuh, shared with conv_wgmma.cu.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "band_epilogue.cuh"
#include "column_stats.cuh"
#include "find.cuh"
#include "gemm_common.cuh"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/cuda/gemm.h"
#include "launch.cuh"
#include "tma_store_epilogue.cuh"
#include "v3_find.cuh"
#include "wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(HPDT_CUDA_EMU)
#error "gemm_wgmma.cu is built for sm_90a only (wgmma and TMA); kernels/CMakeLists.txt gives it its own target"
#endif

namespace hpdt::kernels::cuda::gemm_detail {

namespace {

using namespace sm90a;

// A_MN / B_MN: the operand is MN-major (A transposed, B not transposed); wgmma reads it with its transpose
// bit set, from the boxes described at kMnBoxBytes.

// k tile kt into the stage at a_dst (A) / a_dst + kABytes (B), completing on `bar`: one arrival announcing
// the bytes TMA will deliver, then the loads (one thread).
template <class C, bool A_MN, bool B_MN>
__device__ __forceinline__ void issue_stage(const CUtensorMap* map_a, const CUtensorMap* map_b, uint32_t bar,
                                            uint32_t a_dst, int tm, int tn, int kt) {
  const uint32_t b_dst = a_dst + uint32_t(C::kABytes);
  mbar_arrive_expect_tx(bar, uint32_t(C::kStageBytes));
  if constexpr (A_MN) {
#pragma unroll
    for (int j = 0; j < kBM / 64; ++j) tma_load_2d(a_dst + uint32_t(j) * kMnBoxBytes, map_a, bar, tm * kBM + 64 * j, kt * kBK);
  } else {
    tma_load_2d(a_dst, map_a, bar, kt * kBK, tm * kBM);
  }
  if constexpr (B_MN) {
#pragma unroll
    for (int j = 0; j < C::BN / 64; ++j)
      tma_load_2d(b_dst + uint32_t(j) * kMnBoxBytes, map_b, bar, tn * C::BN + 64 * j, kt * kBK);
  } else {
    tma_load_2d(b_dst, map_b, bar, kt * kBK, tn * C::BN);
  }
}

// The epilogue's shared memory (band_epilogue.cuh): a 2 KiB buffer for each of the 8 consumer warps, then the
// column statistics' exchange of the two consumer warpgroups (column_stats.cuh).
constexpr uint32_t kStagingBytes = 8 * kBandBufBytes + 2 * kColumnReductionBytes;

// GEMM v3's shared memory: the stages, 1 KiB for their barriers (the pipeline's from its start, the column
// statistics' two at 512), the epilogue's buffers, and 1 KiB to align the first stage (the 128-byte swizzle repeats
// every 1024 bytes).
template <class C>
constexpr int kGemmSmem = C::STAGES * C::kStageBytes + 1024 + int(kStagingBytes) + 1024;
static_assert(kGemmSmem<Wide> <= 227 * 1024 && kGemmSmem<Narrow> <= 227 * 1024 && kGemmSmem<Slim> <= 227 * 1024,
              "an H100 block has 227 KiB");
template <class C>
__device__ __forceinline__ uint32_t staging_of(uint32_t base) {
  return base + uint32_t(C::STAGES * C::kStageBytes) + 1024u;
}
template <class C>
__device__ __forceinline__ uint32_t stats_bars_of(uint32_t base) {
  static_assert(16 * C::STAGES + 16 <= 512, "the pipelines' barriers end before the column statistics' ones");
  return base + uint32_t(C::STAGES * C::kStageBytes) + 512u;
}
// Consumer warpgroup wg's column statistics exchange (column_stats.cuh), chunk 0's rows in split split0.
template <class C>
__device__ __forceinline__ ColumnReduction stats_exchange(unsigned char* staging, uint32_t base, int wg, int split0,
                                                      int group_chunks) {
  return column_reduction_of(staging + 8 * kBandBufBytes, stats_bars_of<C>(base), wg, split0, group_chunks);
}

// tma_store_epilogue's `store` for C as a matrix: chunk c's box at its first row and column (at(c, 0)).
template <class At>
struct MatrixStore {
  const CUtensorMap* map_c;
  At& at;
  __device__ __forceinline__ void operator()(int c, uint32_t image) const {
    const int2 rc = at(c, 0);
    tma_store_2d(map_c, image, rc.y, rc.x);
  }
};

// The epilogue of 64 x BN accumulators of tile (tm, tn), rows 64 half.. of it, split `split` of its k range, by
// the warpgroup that computed them: each warp its 16 rows through band_epilogue, in its buffer of the staging area
// (warpgroup wg's warp w: buffer 4 wg + w), or by TMA stores through C's map (tma_store_epilogue.cuh; p.tma_store).
// Accumulator layout of m64nN (PTX ISA, "wgmma .m64nNk16 register fragment D"): warp w of the warpgroup holds rows
// 16 w + lane / 4 (+ 8); d[4 j + 2 h + e] is column 8 j + 2 (lane % 4) + e of row + 8 h, the mma C fragment
// band_epilogue takes.
template <class T, class C>
__device__ __forceinline__ void store_rows(const Params& p, const CUtensorMap* map_c, float (&d)[C::BN / 2], int tm,
                                           int tn, int split, int half, int wg, unsigned char* staging, uint32_t base) {
  const int warp = (int(threadIdx.x) % 128) / 32;
  const int row0 = tm * kBM + half * 64 + warp * 16, col0 = tn * C::BN;
  auto frag = [&](auto J) {
    constexpr int j = decltype(J)::value;
    return make_float4(d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
  };
  auto at = [&](int c, int r) { return make_int2(row0 + r, col0 + c * kChunkCols); };
  unsigned char* buf = staging + (wg * 4 + warp) * kBandBufBytes;
  if (p.tma_store)
    tma_store_epilogue<T, C::BN / kChunkCols>(p, frag, at, buf, MatrixStore{map_c, at});
  else
    band_epilogue<T, C::BN / kChunkCols>(p, split, frag, at, buf,
                                         stats_exchange<C>(staging, base, wg, 2 * tm + half, C::BN / kChunkCols));
}

// Work unit u (wgmma.cuh's pipelines): split u / tiles of output tile u % tiles, tiles = tiles_m * tiles_n; its
// k tiles are kt0 = split * kt_per_split, kt0 + 1, .. (kt below counts them from 0); no split-K: all of them.
struct Unit {
  int tm, tn, split, kt0, kt_count;
};
__device__ __forceinline__ Unit unit_of(const Params& p, int u) {
  const int tiles = p.tiles_m * p.tiles_n;
  Unit w;
  w.split = u / tiles;
  tile_coords(u - w.split * tiles, p.tiles_m, p.tiles_n, w.tm, w.tn);
  w.kt0 = w.split * p.kt_per_split;
  w.kt_count = min((p.K + kBK - 1) / kBK - w.kt0, p.kt_per_split);
  return w;
}

// The pipelines' `store` step (a functor, not a lambda: its operator() is forced inline. A lambda around the
// epilogue was left a function of its own, called with the accumulators through local memory: 640 bytes of stack
// in the 128 x 256 tile's kernels, and ptxas serialised their wgmmas, C7514.)
template <class T, class C>
struct StoreTile {
  const Params& p;
  float (&d)[C::BN / 2];
  unsigned char* staging;
  uint32_t base;
  const CUtensorMap* map_c;
  __device__ __forceinline__ void operator()(const Unit& w, int wg) const {
    store_rows<T, C>(p, map_c, d, w.tm, w.tn, w.split, wg, wg, staging, base);
  }
  // the inputs of warpgroup wg's 64 rows (wgmma.cuh: prefetch_unit)
  __device__ __forceinline__ void prefetch(const Unit& w, int wg) const {
    const int row0 = w.tm * kBM + wg * 64;
    band_prefetch_inputs<T>(p, 64, [&](int r) { return row0 + r; }, w.tn * C::BN, C::BN);
  }
};

// The pingpong pipeline's `store` step: consumer cw's whole tile, both 64-row halves (d0, d1) in one band_epilogue
// of twice the chunks (chunks 0.. of d0's rows, then d1's), so that its code is there once (two calls made the
// kernels 277 KiB, against 157 for the wide tile's).
template <class T, class C>
struct StoreWholeTile {
  const Params& p;
  float (&d0)[C::BN / 2];
  float (&d1)[C::BN / 2];
  unsigned char* staging;
  uint32_t base;
  const CUtensorMap* map_c;
  __device__ __forceinline__ void operator()(const Unit& w, int cw) const {
    constexpr int kHalfChunks = C::BN / kChunkCols;
    const int warp = (int(threadIdx.x) % 128) / 32;
    const int row0 = w.tm * kBM + warp * 16, col0 = w.tn * C::BN;
    HalvesFrag<C::BN> frag{d0, d1};
    auto at = [&](int c, int r) {
      const int half = c / kHalfChunks;
      return make_int2(row0 + half * 64 + r, col0 + (c - half * kHalfChunks) * kChunkCols);
    };
    unsigned char* buf = staging + (cw * 4 + warp) * kBandBufBytes;
    if (p.tma_store)
      tma_store_epilogue<T, 2 * kHalfChunks>(p, frag, at, buf, MatrixStore{map_c, at});
    else
      band_epilogue<T, 2 * kHalfChunks>(p, w.split, frag, at, buf,
                                        stats_exchange<C>(staging, base, cw, 2 * w.tm, kHalfChunks));
  }
  // the inputs of the whole tile's 128 rows
  __device__ __forceinline__ void prefetch(const Unit& w, int) const {
    const int row0 = w.tm * kBM;
    band_prefetch_inputs<T>(p, 128, [&](int r) { return row0 + r; }, w.tn * C::BN, C::BN);
  }
};

// GEMM v3 on the pipeline WS chooses (wgmma.cuh: run_pipeline): "barrier" (the default; IN_FLIGHT groups of MMAs
// in flight), or "ws", persistent over the units; the epilogue: StoreTile.
template <class T, class C, bool WS, int IN_FLIGHT, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(kPipelineThreads<C, WS>, 1)
    gemm_v3_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, const Params p, int units) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  unsigned char* staging = smem_raw + (staging_of<C>(base) - smem_u32(smem_raw));
  init_column_reduction(stats_bars_of<C>(base));
  float d[C::BN / 2];
  run_pipeline<T, C, WS, IN_FLIGHT, A_MN, B_MN>(
      d, base, units, [&](int u) { return unit_of(p, u); },
      [&](const Unit& w, int kt, uint32_t stage, uint32_t bar) {
        issue_stage<C, A_MN, B_MN>(&map_a, &map_b, bar, stage, w.tm, w.tn, w.kt0 + kt);
      },
      StoreTile<T, C>{p, d, staging, base, &map_c});
}

// GEMM v3 on the pingpong pipeline (wgmma.cuh: pingpong_pipeline): persistent, each consumer warpgroup a whole
// 128 x BN tile, BN 64 or 128 (Slim's or Narrow's stages; two m64nBN accumulator sets, 128 registers a thread for
// Narrow, as the wide tile's).
template <class T, class C, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(kWsThreads<C>, 1)
    gemm_v3_pingpong_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                            const __grid_constant__ CUtensorMap map_c, const Params p, int units) {
  static_assert(C::BN <= 128, "a warpgroup's whole tile: 128 accumulators a thread at most");
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  unsigned char* staging = smem_raw + (staging_of<C>(base) - smem_u32(smem_raw));
  init_column_reduction(stats_bars_of<C>(base));
  float d0[C::BN / 2], d1[C::BN / 2];
  pingpong_pipeline<T, C, A_MN, B_MN>(
      d0, d1, base, units, [&](int u) { return unit_of(p, u); },
      [&](const Unit& w, int kt, uint32_t stage, uint32_t bar) {
        issue_stage<C, A_MN, B_MN>(&map_a, &map_b, bar, stage, w.tm, w.tn, w.kt0 + kt);
      },
      StoreWholeTile<T, C>{p, d0, d1, staging, base, &map_c});
}

// A row-major matrix [rows][cols] (row stride ld elements) as a TMA map of box_rows x 64 boxes (64 values of a
// row, 128 bytes, by box_rows rows), 128-byte swizzle, out-of-bounds elements read as zeros. A k-major operand
// is [m or n][K] in boxes of the tile's rows; an MN-major one [K][m or n] in boxes of 64 k rows.
CUtensorMap tile_map(const void* ptr, int64_t rows, int64_t cols, int64_t ld, int box_rows, DType t) {
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * 2};  // bytes, of dimension 1
  const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
  return swizzled_map("gemm v3", ptr, 2, dims, strides, box, t);
}

// One launch of gemm_v3_kernel<T, C, WS, IN_FLIGHT, ..> over tiles x splits work units, its shared-memory limit
// raised once per kernel and device.
template <class T, class C, bool WS, int IN_FLIGHT, bool A_MN, bool B_MN>
void launch_kernel(int splits, const Params& p, const CUtensorMap& ma, const CUtensorMap& mb, const CUtensorMap& mc,
                   int device, cudaStream_t s) {
  constexpr auto kernel = gemm_v3_kernel<T, C, WS, IN_FLIGHT, A_MN, B_MN>;
  detail::allow_dynamic_smem<kernel>(kGemmSmem<C>);
  const int64_t units = int64_t(p.tiles_m) * p.tiles_n * splits;
  const int64_t blocks = pipeline_blocks("gemm v3", WS, units, detail::sm_count(device));
  kernel<<<unsigned(blocks), unsigned(kPipelineThreads<C, WS>), kGemmSmem<C>, s>>>(ma, mb, mc, p, int(units));
  HPDT_CUDA_CHECK_LAUNCH();
}

template <class T, class C, bool A_MN, bool B_MN>
void launch_pingpong(int splits, const Params& p, const CUtensorMap& ma, const CUtensorMap& mb, const CUtensorMap& mc,
                     int device, cudaStream_t s) {
  constexpr auto kernel = gemm_v3_pingpong_kernel<T, C, A_MN, B_MN>;
  detail::allow_dynamic_smem<kernel>(kGemmSmem<C>);
  const int64_t units = int64_t(p.tiles_m) * p.tiles_n * splits;
  const int64_t blocks = pipeline_blocks("gemm v3", true, units, detail::sm_count(device));
  kernel<<<unsigned(blocks), unsigned(kWsThreads<C>), kGemmSmem<C>, s>>>(ma, mb, mc, p, int(units));
  HPDT_CUDA_CHECK_LAUNCH();
}

template <class T, class C, bool A_MN, bool B_MN>
void launch_layout(const Params& p, V3Pipeline pipeline, int splits, const CUtensorMap& ma, const CUtensorMap& mb,
                   const CUtensorMap& mc, int device, cudaStream_t s) {
  // HPDT_GEMM_V3_IN_FLIGHT=0 runs the barrier pipeline waiting for every k tile's MMAs (k-major x k-major only;
  // read at every call: tests and benchmarks switch it)
  const char* in_flight = std::getenv("HPDT_GEMM_V3_IN_FLIGHT");
  if (pipeline == V3Pipeline::pingpong) {
    if constexpr (C::BN <= 128)
      launch_pingpong<T, C, A_MN, B_MN>(splits, p, ma, mb, mc, device, s);
    else
      HPDT_CHECK(false, "gemm v3: the pingpong pipeline has the slim and narrow tiles only");
  } else if (pipeline == V3Pipeline::ws)
    launch_kernel<T, C, true, 1, A_MN, B_MN>(splits, p, ma, mb, mc, device, s);
  else if constexpr (!A_MN && !B_MN) {
    if (in_flight && std::strcmp(in_flight, "0") == 0)
      launch_kernel<T, C, false, 0, false, false>(splits, p, ma, mb, mc, device, s);
    else
      launch_kernel<T, C, false, 1, false, false>(splits, p, ma, mb, mc, device, s);
  } else {
    launch_kernel<T, C, false, 1, A_MN, B_MN>(splits, p, ma, mb, mc, device, s);
  }
}

// The epilogue's stores (the plan's tma_store: HPDT_GEMM_V3_STORE, wgmma.cuh's pinned_v3_store, or Find's choice):
// direct, each lane's pairs by st.global after band_epilogue.cuh's round trip through shared memory (the rule's,
// until a GPU has timed both); TMA, the plain GEMM's chunks by TMA stores (tma_store_epilogue.cuh) where
// tma_store_eligible holds and the call is not split, band_epilogue elsewhere.
template <class T, class C>
void launch_tile(Params p, V3Pipeline pipeline, bool tma_store, DType ab, DType c_type, const Stream& stream) {
  const int device = stream.device().index;
  const cudaStream_t s = detail::native(stream);
  p.tiles_m = int((int64_t(p.M) + kBM - 1) / kBM);
  p.tiles_n = int((int64_t(p.N) + C::BN - 1) / C::BN);
  p.prefetch = epilogue_prefetch_mode();
  // Split-K in whole waves (one block per SM): >= 4 k tiles (256 k) per split. The weight-gradient GEMMs of
  // ViT-B/16 (K = 12,608) have 36-144 tiles. None with the column statistics (computed from the final values).
  HPDT_CHECK(!p.col_stats || p.stats_split0 + 2 * p.tiles_m <= p.stats_splits, "gemm v3: column reductions for ",
             p.stats_splits, " row groups from ", p.stats_split0, ", the tiles have ", 2 * p.tiles_m);
  Tensor partial;
  const int splits = plan_split_k(p, (p.K + kBK - 1) / kBK, detail::sm_count(device), 2.0 * kBM * C::BN * kBK, 4,
                                  p.col_stats ? 1 : 16, detail::kWgmmaFlops, stream, partial);
  const CUtensorMap ma = p.a_kmajor ? tile_map(p.A, p.M, p.K, p.lda, kBM, ab) : tile_map(p.A, p.K, p.M, p.lda, kBK, ab);
  const CUtensorMap mb = p.b_kmajor ? tile_map(p.B, p.N, p.K, p.ldb, C::BN, ab) : tile_map(p.B, p.K, p.N, p.ldb, kBK, ab);
  // C's store map where the TMA-store epilogue runs (else unused: zeros)
  p.tma_store = splits == 1 && tma_store && tma_store_eligible(p);
  CUtensorMap mc{};
  if (p.tma_store) mc = store_map("gemm v3 (C)", p.C, p.M, p.N, p.ldc, c_type);
  if (p.a_kmajor && p.b_kmajor)
    launch_layout<T, C, false, false>(p, pipeline, splits, ma, mb, mc, device, s);
  else if (p.a_kmajor)
    launch_layout<T, C, false, true>(p, pipeline, splits, ma, mb, mc, device, s);
  else if (p.b_kmajor)
    launch_layout<T, C, true, false>(p, pipeline, splits, ma, mb, mc, device, s);
  else
    launch_layout<T, C, true, true>(p, pipeline, splits, ma, mb, mc, device, s);
  if (splits > 1) splitk_reduce(p, splits, c_type, s);
}

using Plan = V3Plan;

void launch_plan(const Params& p, const Plan& plan, DType ab_type, DType c_type, const Stream& stream) {
  if (plan.act_pass && p.act != kActNone) {  // a plain GEMM, then the activation as a pass of its own (same bits)
    Params plain = p;
    plain.act = kActNone;
    plain.aux = nullptr;  // the gradient's input is read by the pass
    // The GELU with its input kept and C not read (beta 0): the plain GEMM stores its value straight into aux, and
    // the pass reads it there and writes C (else the pass would read C, write aux and write C).
    const bool from_aux = p.act == kActGelu && p.aux && p.beta == 0.0f;
    if (from_aux) plain.C = p.aux;
    launch_plan(plain, Plan{plan.pipeline, plan.tile, false, false, plan.tma_store}, ab_type, c_type, stream);
    activation_only(p, c_type, detail::native(stream), from_aux);
    return;
  }
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    if (plan.tile == V3Tile::slim)
      launch_tile<T, Slim>(p, plan.pipeline, plan.tma_store, ab_type, c_type, stream);
    else if (plan.tile == V3Tile::wide)
      launch_tile<T, Wide>(p, plan.pipeline, plan.tma_store, ab_type, c_type, stream);
    else
      launch_tile<T, Narrow>(p, plan.pipeline, plan.tma_store, ab_type, c_type, stream);
  };
  if (ab_type == DType::bf16) run(bf16_t{});
  else run(f16_t{});
}

// ---- Find (kernels::GemmTuning::find) ----------------------------------------------------------------------------

// A call shape, as far as the plan's speed goes: sizes, layouts, dtypes, the epilogue's work, the device, and the
// pins of HPDT_GEMM_V3_PIPELINE / _TILE (-1 unset), which restrict the candidates.
struct FindKey {
  int device, M, N, K;
  bool a_kmajor, b_kmajor;
  DType ab;
  bool c_f32;
  int mode;  // band_mode: plain, GELU (erf / tanh), GELU gradient (erf / tanh)
  bool bias, res, aux, beta;
  int pin_pipeline, pin_tile, pin_act_pass, pin_tma_store;
  auto operator<=>(const FindKey&) const = default;
};

// The process's choices (all devices).
find::Choices<FindKey, Plan, GemmV3Found>& found_plans() {
  static auto* c = new find::Choices<FindKey, Plan, GemmV3Found>;  // never destroyed
  return *c;
}

std::string describe_call(const Params& p, DType ab_type, DType c_type) {
  std::string s = std::to_string(p.M) + "x" + std::to_string(p.N) + "x" + std::to_string(p.K) + " " +
                  (p.a_kmajor ? "N" : "T") + (p.b_kmajor ? "T" : "N") + " " + std::string(dtype_name(ab_type)) + "->" +
                  std::string(dtype_name(c_type));
  if (p.beta != 0.0f) s += " beta";
  if (p.bias) s += " bias";
  if (p.res) s += " residual";
  if (p.act == kActGelu) s += p.gelu_tanh ? " gelu(tanh)" : " gelu(erf)";
  if (p.act == kActGeluGrad) s += p.gelu_tanh ? " gelu_grad(tanh)" : " gelu_grad(erf)";
  if (p.col_stats) s += p.bn_x ? " column-grad-sums" : " column-stats";
  return s;
}

// The plan of a call under Find (v3_find.cuh: find_v3_plan), its candidates timed on scratch outputs: the call's C
// (and the GELU's pre-activation) are not written, nor is C read as the call reads it (the scratch C holds whatever
// the allocator gave: the values do not change the time).
Plan found_plan(const Params& p, DType ab_type, DType c_type, const Stream& stream, const Plan& fallback) {
  FindKey key{};
  key.device = stream.device().index;
  key.M = p.M, key.N = p.N, key.K = p.K;
  key.a_kmajor = p.a_kmajor, key.b_kmajor = p.b_kmajor;
  key.ab = ab_type;
  key.c_f32 = p.c_f32;
  key.mode = band_mode(p);
  key.bias = p.bias != nullptr, key.res = p.res != nullptr, key.aux = p.aux != nullptr, key.beta = p.beta != 0.0f;
  const V3Pins pins = v3_pins();
  key.pin_pipeline = pins.pipeline;
  key.pin_tile = pins.tile;
  key.pin_act_pass = pins.act_pass;
  key.pin_tma_store = pins.tma_store;
  Tensor c_scratch, aux_scratch;
  Params q = p;
  const auto on_scratch = [&](const Plan& plan) {
    if (!c_scratch.defined()) {
      const int64_t c_elems = int64_t(p.M - 1) * p.ldc + p.N;
      const AllocOptions on_stream{.stream = &stream};
      c_scratch = Tensor::empty({c_elems}, c_type, stream.device(), on_stream);
      q.C = c_scratch.data();
      if (p.act == kActGelu && p.aux) {
        aux_scratch = Tensor::empty({c_elems}, c_type, stream.device(), on_stream);
        q.aux = aux_scratch.data();
      }
    }
    launch_plan(q, plan, ab_type, c_type, stream);
  };
  return find_v3_plan(
      found_plans(), key, "gemm v3", [&] { return describe_call(p, ab_type, c_type); },
      [&] { return v3_find_candidates(p.N, pins, p.act != kActNone, tma_store_eligible(p)); }, fallback,
      detail::native(stream), on_scratch);
}

}  // namespace

bool v3_device_ok(int device) {
  static std::atomic<int> cache[64] = {};  // 0 unknown, 1 yes, 2 no
  int v = cache[device & 63].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0, minor = 0;
    HPDT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    HPDT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    v = major == 9 && minor == 0 ? 1 : 2;  // sm_90a code runs on 9.0 only
    cache[device & 63].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void v3_launch(Params p, DType ab_type, DType c_type, const Stream& stream) {
  HPDT_CHECK(c_type == DType::f32 || c_type == ab_type, "gemm v3: C must be f32 or A's dtype");
  const int sms = detail::sm_count(stream.device().index);
  bool act_pass = false, tma_store = false;
  pinned_v3_activation_pass(act_pass);
  pinned_v3_store(tma_store);
  Plan heuristic = v3_rule_plan((int64_t(p.M) + kBM - 1) / kBM, p.N, p.K, sms);
  heuristic.act_pass = act_pass;
  heuristic.tma_store = tma_store;
  const Plan plan = gemm_tuning() == GemmTuning::find ? found_plan(p, ab_type, c_type, stream, heuristic) : heuristic;
  launch_plan(p, plan, ab_type, c_type, stream);
}

std::vector<GemmV3Found> v3_found() { return found_plans().reports(); }

void v3_forget_found() { found_plans().clear(); }

}  // namespace hpdt::kernels::cuda::gemm_detail
