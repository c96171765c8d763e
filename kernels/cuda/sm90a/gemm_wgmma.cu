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
// Layouts (PTX ISA, "Matrix Descriptor" and "Shared Memory Matrix Layout", K-major, 128B swizzle): row r
// of a tile holds its 64 k values in 128 bytes at r * 128, the 16-byte chunk c stored at chunk c ^ (r % 8);
// TMA writes that and wgmma reads it, both XOR-ing address bits [4,7) with bits [7,10), so every tile starts
// 1024-byte aligned. A descriptor addresses 8-row groups 1024 bytes apart (stride byte offset); the k step
// of 16 values moves its start by 32 bytes inside the swizzled rows.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "gemm_common.cuh"
#include "launch.cuh"
#include "hpdt/core/error.h"
#include "hpdt/core/tensor.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(HPDT_CUDA_EMU)
#error "gemm_wgmma.cu is built for sm_90a only (wgmma and TMA); kernels/CMakeLists.txt gives it its own target"
#endif

namespace hpdt::kernels::cuda::gemm_detail {

namespace {

constexpr int kBM = 128;  // two warpgroups of 64 rows
constexpr int kBK = 64;   // one 128-byte swizzled row of 16-bit values
// An MN-major operand (A transposed: [K][M]; B not transposed: [K][N]) arrives as boxes of 64 k rows by
// 64 m or n values (one 128-byte swizzled row per k), one box per 64 of m or n, kMnBoxBytes apart.
constexpr uint32_t kMnBoxBytes = kBK * 64 * 2;

template <int BN_, int STAGES_>
struct Cfg {
  static constexpr int BN = BN_, STAGES = STAGES_;
  static constexpr int kThreads = 256;
  static constexpr int kABytes = kBM * kBK * 2, kBBytes = BN * kBK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // stages, 1024 bytes to align the first tile, two 8-byte mbarriers per stage (one used by "barrier")
  static constexpr int kSmem = STAGES * kStageBytes + 1024 + 16 * STAGES;
  static_assert(BN % 64 == 0 && BN <= 256, "wgmma n and the TMA box (<= 256 rows)");
};
using Wide = Cfg<256, 4>;    // 192 KiB of stages, 128 accumulators per thread
using Narrow = Cfg<128, 6>;  // 192 KiB of stages, 64 accumulators per thread

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// makes the initialised barriers visible to the async proxy (TMA) before it completes on them
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// 2-D tile (c0 along the contiguous k, c1 along rows) of `map` into shared memory, completing on `bar`
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// wgmma shared-memory descriptor, 128-byte swizzle (mode 1 in bits 62-63): start >> 4, leading byte offset
// (LBO) >> 4, stride byte offset (SBO) >> 4. SBO is 1024 in both layouts used here: from one 8-row group of
// 128-byte rows to the next (k-major: 8 rows of m or n; MN-major: 8 rows of k). LBO: unused by k-major
// swizzled tiles (16); MN-major, from one 64-wide block of m or n to the next (kMnBoxBytes apart).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo) {
  return uint64_t((addr & 0x3ffffu) >> 4) | uint64_t(lbo >> 4) << 16 | uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// waits until at most N committed groups of this warpgroup's MMAs are still running
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// keeps the compiler from moving accumulator accesses across the asynchronous MMAs (CUTLASS's
// warpgroup_fence_operand)
__device__ __forceinline__ void fence_reg(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// wgmma.mma_async m64nNk16, D = A B + (scale_d ? D : 0), A and B from shared-memory descriptors, no transposes
// (both k-major). One function per (N, type): the accumulators are N / 2 asm operands, written out.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n128k16_f16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, %131, %132;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n256k16_f16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, %131, %132;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

template <class T, int BN, int TA, int TB>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (BN == 128 && std::is_same_v<T, bf16_t>) wgmma_m64n128k16_bf16<TA, TB>(d, da, db, scale_d);
  else if constexpr (BN == 128) wgmma_m64n128k16_f16<TA, TB>(d, da, db, scale_d);
  else if constexpr (std::is_same_v<T, bf16_t>) wgmma_m64n256k16_bf16<TA, TB>(d, da, db, scale_d);
  else wgmma_m64n256k16_f16<TA, TB>(d, da, db, scale_d);
}

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

// The 4 wgmmas of one 64-wide k tile for warpgroup `wg` (its 64 rows of A) from the stage at `stage`;
// scale-d 0 on the first of the first tile (D = A B: nothing but wgmmas defines the accumulators, see below).
template <class T, class C, bool A_MN, bool B_MN>
__device__ __forceinline__ void mma_ktile(float (&d)[C::BN / 2], uint32_t stage, int wg, bool first) {
  // this warpgroup's 64 rows of A: k-major, rows 64 wg.. (64 rows of 128 bytes); MN-major, box wg
  // (both 8 KiB in)
  static_assert(64u * 128u == kMnBoxBytes, "a warpgroup's A tile starts 8 KiB in, in both layouts");
  const uint32_t a_tile = stage + uint32_t(wg) * 64u * 128u;
  const uint32_t b_tile = stage + uint32_t(C::kABytes);
  // k step j of 16: k-major, 32 bytes along the swizzled rows; MN-major, 16 rows of 128 bytes down
  constexpr uint32_t a_step = A_MN ? 16u * 128u : 32u, b_step = B_MN ? 16u * 128u : 32u;
  constexpr uint32_t a_lbo = A_MN ? kMnBoxBytes : 16u, b_lbo = B_MN ? kMnBoxBytes : 16u;
#pragma unroll
  for (int j = 0; j < kBK / 16; ++j)
    wgmma_tile<T, C::BN, A_MN, B_MN>(d, smem_desc(a_tile + a_step * j, a_lbo), smem_desc(b_tile + b_step * j, b_lbo),
                                     !first || j > 0);
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

// Pipeline "barrier" (the first v3): both warpgroups compute; thread 0 also issues the loads. One group of
// MMAs stays in flight across a block barrier per k tile, after which thread 0 refills the stage the
// previous k tile used (IN_FLIGHT 0: the barrier after every k tile's MMAs).
template <class T, class C, int IN_FLIGHT, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(C::kThreads, 1)
    gemm_v3_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, const Params p) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  const uint32_t bars = base + uint32_t(C::STAGES * C::kStageBytes);
  int tm, tn;
  tile_coords(int(blockIdx.x), p.tiles_m, p.tiles_n, tm, tn);
  // this split's k tiles: kt0, kt0 + 1, ... (kt below counts them from 0); no split: all of them
  const int kt0 = int(blockIdx.y) * p.kt_per_split;
  const int kt_total = min((p.K + kBK - 1) / kBK - kt0, p.kt_per_split);
  const int tid = int(threadIdx.x), wg = tid / 128;

  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) mbar_init(bars + 8u * uint32_t(s), 1);
    fence_mbar_init();
  }
  __syncthreads();
  auto issue = [&](int kt) {  // the split's k tile kt into stage kt % STAGES
    const uint32_t s = uint32_t(kt % C::STAGES);
    issue_stage<C, A_MN, B_MN>(&map_a, &map_b, bars + 8u * s, base + s * uint32_t(C::kStageBytes), tm, tn, kt0 + kt);
  };
  if (tid == 0)
    for (int kt = 0; kt < min(C::STAGES, kt_total); ++kt) issue(kt);

  // No zero fill: the first MMA runs with scale-d 0 (D = A B), so nothing but wgmmas ever defines the
  // accumulators before the last wait (ptxas serialises wgmmas whose accumulators other instructions define
  // while a group is in flight, C7515).
  float d[C::BN / 2];

  for (int kt = 0; kt < kt_total; ++kt) {
    const uint32_t s = uint32_t(kt % C::STAGES);
    // the stage's phase flips once per use: use kt / STAGES completes phase parity (kt / STAGES) & 1
    while (!mbar_try_wait(bars + 8u * s, uint32_t(kt / C::STAGES) & 1u)) {
    }
    // (no fence_reg on the accumulators inside the loop: with a group in flight, ptxas then serialises
    // every wgmma, C7515 "non wgmma instructions defining accumulator registers"; only wgmmas touch them here)
    wgmma_fence();
    mma_ktile<T, C, A_MN, B_MN>(d, base + s * uint32_t(C::kStageBytes), wg, kt == 0);
    wgmma_commit();
    wgmma_wait<IN_FLIGHT>();  // the MMAs of k tile kt - IN_FLIGHT are done (this warpgroup's)
    __syncthreads();  // ... and both warpgroups': refill the stage that k tile used
    const int done = kt - IN_FLIGHT;
    if (tid == 0 && done >= 0 && done + C::STAGES < kt_total) issue(done + C::STAGES);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < C::BN / 2; ++i) fence_reg(d[i]);  // the epilogue reads them after the last wait
  store_tile<T, C>(p, d, tm, tn, wg, tid % 128);
}

// Pipeline "ws" (warp-specialised): a producer warpgroup (warpgroup 0, one thread of it) issues the loads
// as stages free up, two consumer warpgroups (1 and 2) compute; no block barrier in the k loop. Per stage a
// "full" mbarrier (the producer's arrival with the TMA bytes) and an "empty" one that each of the 8
// consumer warps arrives on once its MMAs reading the stage are done (wait_group 1 after the next k tile's
// MMAs). A warp's lane 0 arrives, not one thread per warpgroup as in CUTLASS: the same on the GPU (a
// warpgroup's MMA completes as a whole) and what the CUDA emulator, which performs each warp's share of a
// wgmma at that warp's own wait, can check.
template <class T, class C, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(C::kThreads + 128, 1)
    gemm_v3ws_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const Params p) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t full = base + uint32_t(C::STAGES * C::kStageBytes), empty = full + 8u * uint32_t(C::STAGES);
  int tm, tn;
  tile_coords(int(blockIdx.x), p.tiles_m, p.tiles_n, tm, tn);
  const int kt0 = int(blockIdx.y) * p.kt_per_split;  // this split's k tiles, as in gemm_v3_kernel
  const int kt_total = min((p.K + kBK - 1) / kBK - kt0, p.kt_per_split);
  const int tid = int(threadIdx.x), wg = tid / 128;
  constexpr uint32_t kConsumerWarps = C::kThreads / 32;

  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(full + 8u * uint32_t(s), 1);
      mbar_init(empty + 8u * uint32_t(s), kConsumerWarps);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0) {  // producer
    if (tid == 0)
      for (int kt = 0; kt < kt_total; ++kt) {
        const uint32_t s = uint32_t(kt % C::STAGES);
        // use u = kt / STAGES of the stage needs the consumers' release of use u - 1 (phase u - 1)
        if (kt >= C::STAGES)
          while (!mbar_try_wait(empty + 8u * s, uint32_t(kt / C::STAGES - 1) & 1u)) {
          }
        issue_stage<C, A_MN, B_MN>(&map_a, &map_b, full + 8u * s, base + s * uint32_t(C::kStageBytes), tm, tn,
                                   kt0 + kt);
      }
    return;
  }

  const int cw = wg - 1;  // consumer warpgroup: rows 64 cw.. of the block tile
  float d[C::BN / 2];
  for (int kt = 0; kt < kt_total; ++kt) {
    const uint32_t s = uint32_t(kt % C::STAGES);
    while (!mbar_try_wait(full + 8u * s, uint32_t(kt / C::STAGES) & 1u)) {
    }
    wgmma_fence();
    mma_ktile<T, C, A_MN, B_MN>(d, base + s * uint32_t(C::kStageBytes), cw, kt == 0);
    wgmma_commit();
    wgmma_wait<1>();  // this warp's MMAs of k tile kt - 1 are done: release its stage
    if (kt > 0 && tid % 32 == 0) mbar_arrive(empty + 8u * uint32_t((kt - 1) % C::STAGES));
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < C::BN / 2; ++i) fence_reg(d[i]);
  store_tile<T, C>(p, d, tm, tn, cw, tid % 128);
}

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    HPDT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    HPDT_CHECK(q == cudaDriverEntryPointSuccess && f != nullptr,
               "gemm v3: the driver has no cuTensorMapEncodeTiled (CUDA 12.0 or newer is needed)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A row-major matrix [rows][cols] (row stride ld elements) as a TMA map of box_rows x 64 boxes (64 values of a
// row, 128 bytes, by box_rows rows), 128-byte swizzle, out-of-bounds elements read as zeros. A k-major operand
// is [m or n][K] in boxes of the tile's rows; an MN-major one [K][m or n] in boxes of 64 k rows.
CUtensorMap tile_map(const void* ptr, int64_t rows, int64_t cols, int64_t ld, int box_rows, DType t) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * 2};  // bytes, of dimension 1
  const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(
      &map, t == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
      const_cast<void*>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HPDT_CHECK(r == CUDA_SUCCESS, "gemm v3: cuTensorMapEncodeTiled failed (CUresult ", int(r), ") for a ", rows, " x ",
             cols, " matrix with row stride ", ld, " at ", ptr);
  return map;
}

// One launch of `kernel` (threads per block), its shared-memory limit raised once per kernel and device.
// The kernel is a template argument, not a function-pointer parameter: every kernel then has its own
// `smem_allowed` (with a parameter, all kernels of one signature shared it, and the second kernel launched
// without its limit raised: caught by the emulator, cudaErrorInvalidValue).
template <class C, auto kernel>
void launch_kernel(int threads, int splits, const Params& p, const CUtensorMap& ma, const CUtensorMap& mb, int device,
                   cudaStream_t s) {
  static std::atomic<uint64_t> smem_allowed{0};  // per kernel and device, as in v2
  const uint64_t bit = uint64_t(1) << (device & 63);
  if (!(smem_allowed.load(std::memory_order_acquire) & bit)) {
    HPDT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    smem_allowed.fetch_or(bit, std::memory_order_acq_rel);
  }
  const dim3 grid(unsigned(int64_t(p.tiles_m) * p.tiles_n), unsigned(splits));
  kernel<<<grid, unsigned(threads), C::kSmem, s>>>(ma, mb, p);
  HPDT_CUDA_CHECK_LAUNCH();
}

template <class T, class C, bool A_MN, bool B_MN>
void launch_layout(const Params& p, int splits, const CUtensorMap& ma, const CUtensorMap& mb, int device,
                   cudaStream_t s) {
  // HPDT_GEMM_V3_PIPELINE=ws runs the warp-specialised pipeline; HPDT_GEMM_V3_IN_FLIGHT=0 the barrier
  // pipeline waiting for every k tile's MMAs (k-major x k-major only); both read at every call (tests and
  // benchmarks switch them)
  const char* pipeline = std::getenv("HPDT_GEMM_V3_PIPELINE");
  const char* in_flight = std::getenv("HPDT_GEMM_V3_IN_FLIGHT");
  if (pipeline && std::strcmp(pipeline, "ws") == 0)
    launch_kernel<C, gemm_v3ws_kernel<T, C, A_MN, B_MN>>(C::kThreads + 128, splits, p, ma, mb, device, s);
  else if constexpr (!A_MN && !B_MN) {
    if (in_flight && std::strcmp(in_flight, "0") == 0)
      launch_kernel<C, gemm_v3_kernel<T, C, 0, false, false>>(C::kThreads, splits, p, ma, mb, device, s);
    else
      launch_kernel<C, gemm_v3_kernel<T, C, 1, false, false>>(C::kThreads, splits, p, ma, mb, device, s);
  } else {
    launch_kernel<C, gemm_v3_kernel<T, C, 1, A_MN, B_MN>>(C::kThreads, splits, p, ma, mb, device, s);
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
    launch_layout<T, C, false, false>(p, splits, ma, mb, device, s);
  else if (p.a_kmajor)
    launch_layout<T, C, false, true>(p, splits, ma, mb, device, s);
  else if (p.b_kmajor)
    launch_layout<T, C, true, false>(p, splits, ma, mb, device, s);
  else
    launch_layout<T, C, true, true>(p, splits, ma, mb, device, s);
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
  // HPDT_GEMM_V3_TILE=wide|narrow pins it (read at every call, so that tests can cover both).
  const int64_t wide_tiles = ((int64_t(p.M) + kBM - 1) / kBM) * ((int64_t(p.N) + Wide::BN - 1) / Wide::BN);
  bool wide = wide_tiles >= sms;
  if (const char* e = std::getenv("HPDT_GEMM_V3_TILE")) {
    if (std::strcmp(e, "wide") == 0) wide = true;
    else if (std::strcmp(e, "narrow") == 0) wide = false;
  }
  if (ab_type == DType::bf16) {
    if (wide) launch_tile<bf16_t, Wide>(p, ab_type, c_type, stream);
    else launch_tile<bf16_t, Narrow>(p, ab_type, c_type, stream);
  } else {
    if (wide) launch_tile<f16_t, Wide>(p, ab_type, c_type, stream);
    else launch_tile<f16_t, Narrow>(p, ab_type, c_type, stream);
  }
}

}  // namespace hpdt::kernels::cuda::gemm_detail
