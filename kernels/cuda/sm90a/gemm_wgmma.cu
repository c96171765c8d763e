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
//     so a k tile's MMAs run under the barrier and the refill. Pipeline "ws" (HPDT_GEMM_V3_PIPELINE=ws): a
//     producer warpgroup and full/empty mbarriers per stage (gemm_v3ws_kernel).
//   - Split-K over blockIdx.y, sized in whole waves (detail::choose_split_k): f32 partials summed in split
//     order by gemm.cu's splitk_reduce. No persistent tiles (what is left: docs/kernels-cuda.md).
//   - MN-major operands (A transposed, B not) arrive as 64 x 64 boxes read with wgmma's transpose bits.
// The building blocks (mbarriers, TMA, wgmma, the tile configurations, the "barrier" pipeline) and the shared
// memory layouts are in wgmma.cuh, shared with conv_wgmma.cu.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "gemm_common.cuh"
#include "launch.cuh"
#include "wgmma.cuh"
#include "hpdt/core/error.h"
#include "hpdt/core/tensor.h"

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

// The epilogue of warpgroup `wg`'s 64 x BN accumulators (t: the thread's index in the warpgroup).
// Accumulator layout of m64nN (PTX ISA, "wgmma .m64nNk16 register fragment D"): warp w of the
// warpgroup holds rows 16 w + lane / 4 (+ 8); d[4 j + 2 h + e] is column 8 j + 2 (lane % 4) + e of row + 8 h.
template <class T, class C>
__device__ __forceinline__ void store_tile(const Params& p, const float (&d)[C::BN / 2], int tm, int tn, int wg, int t) {
  const int warp = t / 32, lane = t % 32;
  const int row0 = tm * kBM + wg * 64 + warp * 16 + lane / 4;
  const int col0 = tn * C::BN + 2 * (lane % 4);
  if (p.partial) {  // split-K: raw f32 sums of this split's k range
#pragma unroll
    for (int j = 0; j < C::BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_partial_pair(p, int(blockIdx.y), row0 + 8 * h, col0 + 8 * j, d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
    return;
  }
  auto epilogue = [&](auto tag) {
    using TC = decltype(tag);
    const bool pair_ok = pairs_aligned<TC>(p);
#pragma unroll
    for (int j = 0; j < C::BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_pair<TC>(p, row0 + 8 * h, col0 + 8 * j, d[4 * j + 2 * h], d[4 * j + 2 * h + 1], pair_ok);
  };
  if (p.c_f32)
    epilogue(float{});
  else
    epilogue(T{});
}

// Pipeline "barrier" (wgmma.cuh: barrier_pipeline), the default.
template <class T, class C, int IN_FLIGHT, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(C::kThreads, 1)
    gemm_v3_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, const Params p) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  int tm, tn;
  tile_coords(int(blockIdx.x), p.tiles_m, p.tiles_n, tm, tn);
  // this split's k tiles: kt0, kt0 + 1, ... (kt below counts them from 0); no split: all of them
  const int kt0 = int(blockIdx.y) * p.kt_per_split;
  const int kt_total = min((p.K + kBK - 1) / kBK - kt0, p.kt_per_split);
  float d[C::BN / 2];
  barrier_pipeline<T, C, IN_FLIGHT, A_MN, B_MN>(d, base, kt_total, [&](int kt, uint32_t stage, uint32_t bar) {
    issue_stage<C, A_MN, B_MN>(&map_a, &map_b, bar, stage, tm, tn, kt0 + kt);
  });
  store_tile<T, C>(p, d, tm, tn, int(threadIdx.x) / 128, int(threadIdx.x) % 128);
}

// Pipeline "ws" (wgmma.cuh: ws_pipeline): a producer warpgroup and full/empty mbarriers per stage.
template <class T, class C, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(kWsThreads<C>, 1)
    gemm_v3ws_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const Params p) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  int tm, tn;
  tile_coords(int(blockIdx.x), p.tiles_m, p.tiles_n, tm, tn);
  const int kt0 = int(blockIdx.y) * p.kt_per_split;  // this split's k tiles, as in gemm_v3_kernel
  const int kt_total = min((p.K + kBK - 1) / kBK - kt0, p.kt_per_split);
  float d[C::BN / 2];
  ws_pipeline<T, C, A_MN, B_MN>(
      d, base, kt_total,
      [&](int kt, uint32_t stage, uint32_t bar) {
        issue_stage<C, A_MN, B_MN>(&map_a, &map_b, bar, stage, tm, tn, kt0 + kt);
      },
      [&](int cw) { store_tile<T, C>(p, d, tm, tn, cw, int(threadIdx.x) % 128); });
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

// One launch of `kernel` (threads per block), its shared-memory limit raised once per kernel and device.
template <class C, auto kernel>
void launch_kernel(int threads, int splits, const Params& p, const CUtensorMap& ma, const CUtensorMap& mb,
                   cudaStream_t s) {
  detail::allow_dynamic_smem<kernel>(C::kSmem);
  const dim3 grid(unsigned(int64_t(p.tiles_m) * p.tiles_n), unsigned(splits));
  kernel<<<grid, unsigned(threads), C::kSmem, s>>>(ma, mb, p);
  HPDT_CUDA_CHECK_LAUNCH();
}

template <class T, class C, bool A_MN, bool B_MN>
void launch_layout(const Params& p, int splits, const CUtensorMap& ma, const CUtensorMap& mb, cudaStream_t s) {
  // HPDT_GEMM_V3_PIPELINE=ws runs the warp-specialised pipeline; HPDT_GEMM_V3_IN_FLIGHT=0 the barrier
  // pipeline waiting for every k tile's MMAs (k-major x k-major only); both read at every call (tests and
  // benchmarks switch them)
  const char* in_flight = std::getenv("HPDT_GEMM_V3_IN_FLIGHT");
  if (ws_pipeline_chosen())
    launch_kernel<C, gemm_v3ws_kernel<T, C, A_MN, B_MN>>(kWsThreads<C>, splits, p, ma, mb, s);
  else if constexpr (!A_MN && !B_MN) {
    if (in_flight && std::strcmp(in_flight, "0") == 0)
      launch_kernel<C, gemm_v3_kernel<T, C, 0, false, false>>(C::kThreads, splits, p, ma, mb, s);
    else
      launch_kernel<C, gemm_v3_kernel<T, C, 1, false, false>>(C::kThreads, splits, p, ma, mb, s);
  } else {
    launch_kernel<C, gemm_v3_kernel<T, C, 1, A_MN, B_MN>>(C::kThreads, splits, p, ma, mb, s);
  }
}

template <class T, class C>
void launch_tile(Params p, DType ab, DType c_type, const Stream& stream) {
  const int device = stream.device().index;
  const cudaStream_t s = detail::native(stream);
  p.tiles_m = int((int64_t(p.M) + kBM - 1) / kBM);
  p.tiles_n = int((int64_t(p.N) + C::BN - 1) / C::BN);
  // Split-K in whole waves (one block per SM): >= 4 k tiles (256 k) per split. The weight-gradient GEMMs of
  // ViT-B/16 (K = 12,608) have 36-144 tiles.
  Tensor partial;
  const int splits = plan_split_k(p, (p.K + kBK - 1) / kBK, detail::sm_count(device), 2.0 * kBM * C::BN * kBK, 4, 16,
                                  detail::kWgmmaFlops, stream, partial);
  const CUtensorMap ma = p.a_kmajor ? tile_map(p.A, p.M, p.K, p.lda, kBM, ab) : tile_map(p.A, p.K, p.M, p.lda, kBK, ab);
  const CUtensorMap mb = p.b_kmajor ? tile_map(p.B, p.N, p.K, p.ldb, C::BN, ab) : tile_map(p.B, p.K, p.N, p.ldb, kBK, ab);
  if (p.a_kmajor && p.b_kmajor)
    launch_layout<T, C, false, false>(p, splits, ma, mb, s);
  else if (p.a_kmajor)
    launch_layout<T, C, false, true>(p, splits, ma, mb, s);
  else if (p.b_kmajor)
    launch_layout<T, C, true, false>(p, splits, ma, mb, s);
  else
    launch_layout<T, C, true, true>(p, splits, ma, mb, s);
  if (splits > 1) splitk_reduce(p, splits, c_type, s);
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
  // The wide tile reads each loaded A row against twice the columns; worth it with a wave of tiles or more.
  const int64_t wide_tiles = ((int64_t(p.M) + kBM - 1) / kBM) * ((int64_t(p.N) + Wide::BN - 1) / Wide::BN);
  const bool wide = wide_tile(wide_tiles >= sms);
  if (ab_type == DType::bf16) {
    if (wide) launch_tile<bf16_t, Wide>(p, ab_type, c_type, stream);
    else launch_tile<bf16_t, Narrow>(p, ab_type, c_type, stream);
  } else {
    if (wide) launch_tile<f16_t, Wide>(p, ab_type, c_type, stream);
    else launch_tile<f16_t, Narrow>(p, ab_type, c_type, stream);
  }
}

}  // namespace hpdt::kernels::cuda::gemm_detail
