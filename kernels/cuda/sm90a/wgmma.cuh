// The Hopper (sm_90a) building blocks of hpdt's wgmma kernels (gemm_wgmma.cu: GEMM v3; conv_wgmma.cu: the NHWC
// implicit-GEMM convolution): mbarriers, TMA tile loads, wgmma from shared-memory descriptors, the block tile
// configurations, one 64-wide k tile of MMAs, the k loops of the three pipelines ("barrier", "ws", "pingpong") and
// the block tile choice.
// Layouts (PTX ISA, "Matrix Descriptor" and "Shared Memory Matrix Layout", K-major, 128B swizzle): row r
// of a tile holds its 64 k values in 128 bytes at r * 128, the 16-byte chunk c stored at chunk c ^ (r % 8);
// TMA writes that and wgmma reads it, both XOR-ing address bits [4,7) with bits [7,10), so every tile starts
// 1024-byte aligned. A descriptor addresses 8-row groups 1024 bytes apart (stride byte offset); the k step
// of 16 values moves its start by 32 bytes inside the swizzled rows.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "hpdt/core/check_cuda.h"
#include "hpdt/core/dtype.h"
#include "hpdt/core/env.h"
#include "hpdt/core/error.h"
#include "hpdt/core/float16.h"
#include "mma_sync.cuh"  // smem_u32
#include "prefetch.cuh"  // EpiloguePrefetch
#include "split_k.cuh"
#include "watchdog.cuh"

namespace hpdt::kernels::cuda::sm90a {

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
using Slim = Cfg<64, 8>;     // 192 KiB of stages, 32 accumulators per thread (N up to 64: 64 output channels)

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
// A wait on a phase that never completes (a wrong transaction byte count, a box the map does not cover, a lost
// arrival) would hang the process, and a GPU lease with it. mbar_wait gives up after kMbarTimeoutNs (watchdog.cuh's
// limit of every device-side wait) instead: the thread executes `trap`, and the launch fails with
// cudaErrorLaunchFailure ("unspecified launch failure"), which the host's next HPDT_CUDA_CHECK reports. Every phase
// here waits for the block's own TMA loads or its own warps. No
// printf or assert before the trap: a function call in the k loop makes ptxas serialise the wgmmas in flight
// across it (C7510), in every kernel, whether or not the call is ever reached. ptxas does inject a wgmma wait at
// the trap itself in the barrier pipeline's kernels ("C7517 warpgroup.wait is injected ... to allow use of registers
// defined by GMMA", 24 notes building gemm_wgmma.cu): only on that path, which ends the kernel; without the trap
// the notes go (checked on a one-kernel build, 2026-11-28).
using cuda::global_ns;
constexpr uint64_t kMbarTimeoutNs = kWaitTimeoutNs;
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, uint64_t timeout_ns = kMbarTimeoutNs) {
  if (mbar_try_wait(bar, parity)) return;
  const uint64_t t0 = global_ns();
  while (!mbar_try_wait(bar, parity))
    if (global_ns() - t0 > timeout_ns) asm volatile("trap;\n" ::: "memory");
}
// 2-D tile (c0 along the contiguous k, c1 along rows) of `map` into shared memory, completing on `bar`
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// 4-D box (c0 contiguous, then c1, c2, c3) of `map` into shared memory, completing on `bar`: the box's rows of
// 128 bytes one after another, c1 fastest (conv_wgmma.cu: [image][y][x] boxes of 64 channels of NHWC activations)
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// im2col load (rank 4) of `map` (im2col_map) into shared memory, completing on `bar`: the map's 128 pixels of 64
// channels from channel c0 of the traversal at (x, y) of image img (the bounding box's coordinates: the first output
// pixel's tap (0, 0)), each pixel shifted by the offsets (ox, oy) (the tap); rows of 128 bytes one after another
// as tma_load_4d's box lands (conv_wgmma.cu: a forward's or backward-data phase's 128 consecutive output pixels)
__device__ __forceinline__ void tma_load_im2col_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int x,
                                                   int y, int img, uint16_t ox, uint16_t oy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2], {%7, %8};\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(x), "r"(y), "r"(img), "h"(ox), "h"(oy)
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
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n64k16_f16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

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
  if constexpr (BN == 64 && std::is_same_v<T, bf16_t>) wgmma_m64n64k16_bf16<TA, TB>(d, da, db, scale_d);
  else if constexpr (BN == 64) wgmma_m64n64k16_f16<TA, TB>(d, da, db, scale_d);
  else if constexpr (BN == 128 && std::is_same_v<T, bf16_t>) wgmma_m64n128k16_bf16<TA, TB>(d, da, db, scale_d);
  else if constexpr (BN == 128) wgmma_m64n128k16_f16<TA, TB>(d, da, db, scale_d);
  else if constexpr (std::is_same_v<T, bf16_t>) wgmma_m64n256k16_bf16<TA, TB>(d, da, db, scale_d);
  else wgmma_m64n256k16_f16<TA, TB>(d, da, db, scale_d);
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

// Both pipelines' consumer step: wait for the stage of the block's k tile number `it` (counted over every work
// unit the block has run; its "full" barrier at full_bars + 8 s completes once per use, phase parity
// (it / STAGES) & 1), then issue and commit the tile's MMAs for warpgroup wg; `first`: the unit's first k tile
// (scale-d 0). The caller waits for them (wgmma_wait) and frees the stage its own way.
template <class T, class C, bool A_MN, bool B_MN>
__device__ __forceinline__ void mma_stage(float (&d)[C::BN / 2], uint32_t base, uint32_t full_bars, int it, int wg,
                                          bool first) {
  const uint32_t s = uint32_t(it % C::STAGES);
  mbar_wait(full_bars + 8u * s, uint32_t(it / C::STAGES) & 1u);
  // (no fence_reg on the accumulators inside the loop: with a group in flight, ptxas then serialises
  // every wgmma, C7515 "non wgmma instructions defining accumulator registers"; only wgmmas touch them here)
  wgmma_fence();
  mma_ktile<T, C, A_MN, B_MN>(d, base + s * uint32_t(C::kStageBytes), wg, first);
  wgmma_commit();
}

// Pipeline "barrier" (the first v3): both warpgroups compute; thread 0 also issues the loads. One group of
// MMAs stays in flight across a block barrier per k tile, after which thread 0 refills the stage the
// previous k tile used (IN_FLIGHT 0: the barrier after every k tile's MMAs). issue(kt, stage, bar) loads k tile
// kt (counted from 0) into the stage at shared address `stage`, completing on `bar` (thread 0 alone calls it).
// On return d holds this warpgroup's 64 x BN sums, every MMA waited for.
template <class T, class C, int IN_FLIGHT, bool A_MN, bool B_MN, class Issue>
__device__ __forceinline__ void barrier_pipeline(float (&d)[C::BN / 2], uint32_t base, int kt_total, Issue issue) {
  const uint32_t bars = base + uint32_t(C::STAGES * C::kStageBytes);
  const int tid = int(threadIdx.x), wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) mbar_init(bars + 8u * uint32_t(s), 1);
    fence_mbar_init();
  }
  __syncthreads();
  auto issue_kt = [&](int kt) {  // k tile kt into stage kt % STAGES
    const uint32_t s = uint32_t(kt % C::STAGES);
    issue(kt, base + s * uint32_t(C::kStageBytes), bars + 8u * s);
  };
  if (tid == 0)
    for (int kt = 0; kt < min(C::STAGES, kt_total); ++kt) issue_kt(kt);

  // No zero fill: the first MMA runs with scale-d 0 (D = A B), so nothing but wgmmas ever defines the
  // accumulators before the last wait (ptxas serialises wgmmas whose accumulators other instructions define
  // while a group is in flight, C7515).
  for (int kt = 0; kt < kt_total; ++kt) {
    mma_stage<T, C, A_MN, B_MN>(d, base, bars, kt, wg, kt == 0);
    wgmma_wait<IN_FLIGHT>();  // the MMAs of k tile kt - IN_FLIGHT are done (this warpgroup's)
    __syncthreads();  // ... and both warpgroups': refill the stage that k tile used
    const int done = kt - IN_FLIGHT;
    if (tid == 0 && done >= 0 && done + C::STAGES < kt_total) issue_kt(done + C::STAGES);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < C::BN / 2; ++i) fence_reg(d[i]);  // the epilogue reads them after the last wait
}

// Pipeline "ws" (warp-specialised, persistent): a producer warpgroup (warpgroup 0, one thread of it) issues the
// loads as stages free up, two consumer warpgroups (1 and 2) compute; no block barrier in the k loop. The block
// runs work units blockIdx.x, blockIdx.x + gridDim.x, .. < units (output tiles, or a tile's split-K part; the
// launch has one block per SM: pipeline_blocks), one k-tile sequence after another through the same stages, so the
// producer loads the next unit's first k tiles while the consumers store this one's sums, and no unit waits for a
// block to start, initialise its barriers and fill its pipeline. Per stage a "full" mbarrier (the producer's
// arrival with the TMA bytes) and an "empty" one that each of the 8 consumer warps arrives on once its MMAs
// reading the stage are done (wait_group 1 after the next k tile's MMAs; a unit's last stage after its
// wait_group 0). A warp's lane 0 arrives, not one thread per warpgroup as in CUTLASS: the same on the GPU (a
// warpgroup's MMA completes as a whole) and what the CUDA emulator, which performs each warp's share of a wgmma at
// that warp's own wait, can check. The block has kWsThreads<C> threads. unit(u): unit u's coordinates, an object w
// with w.kt_count >= 1 k tiles; issue(w, kt, stage, bar) loads its k tile kt (counted from 0) into the stage at
// shared address `stage`, completing on `bar` (the producer's thread 0 alone calls it); store(w, cw) (cw 0 or 1:
// rows 64 cw.. of the tile) with the unit's 64 x BN sums in d, every MMA waited for; the producer warpgroup stores
// nothing. (The epilogue
// runs inside, not after a returned "producer or consumer" flag: with the flag, ptxas gave conv v3's ws forward
// 9-23 more registers, its 256-wide tile the 168 that 384 threads allow, and GEMM v3's ws kernels 6-8 more.)
template <class C>
inline constexpr int kWsThreads = C::kThreads + 128;

// The ws pipeline's register split (setmaxnreg, as CUTLASS's warp-specialised kernels): a block of 384 threads
// starts with 168 registers a thread (the 64 Ki of one SM, __launch_bounds__(384, 1); with setmaxnreg in the
// kernel ptxas allocates exactly that); the producer warpgroup gives back all but 40, and the consumers take them,
// 232 each. Without it the 128 x 256 tile's consumers (128 accumulators, the unit loop, the staged epilogue) spilled
// at 168. The two must balance: setmaxnreg.inc waits until the block's pool has the registers.
inline constexpr int kWsLaunchRegs = 168, kWsProducerRegs = 40, kWsConsumerRegs = 232;
static_assert((kWsLaunchRegs - kWsProducerRegs) * 128 == (kWsConsumerRegs - kWsLaunchRegs) * 256 &&
                  kWsLaunchRegs * 384 <= 65536 && kWsLaunchRegs * 384 > 65536 - 384 * 8,
              "the producer frees exactly what the two consumer warpgroups take");
__device__ __forceinline__ void producer_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWsProducerRegs) : "memory");
}
__device__ __forceinline__ void consumer_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWsConsumerRegs) : "memory");
}

// Unit w's prefetch of its epilogue's inputs (band_epilogue.cuh: band_prefetch_inputs) by consumer warpgroup cw, as
// its k loop starts: Store::prefetch(w, cw), where the store step has one (GEMM v3's and conv v3's forward and
// backward-data; the backward-filter's store reads no inputs).
template <class Store, class W>
__device__ __forceinline__ void prefetch_unit(const Store& store, const W& w, int cw) {
  if constexpr (requires { store.prefetch(w, cw); }) store.prefetch(w, cw);
}

// The persistent pipelines' prefetch as consumer cw starts unit u (its first when `first`), its next unit being
// u + step: unit u's inputs unless its previous unit prefetched them already, and where the store's Params ask for
// EpiloguePrefetch::ahead the next unit's too (prefetch.cuh says why), a whole unit before its epilogue reads them.
template <class Store, class UnitOf>
__device__ __forceinline__ void prefetch_units(const Store& store, UnitOf& unit, int u, int step, int units, bool first,
                                               int cw) {
  bool ahead = false;
  if constexpr (requires { store.p.prefetch; }) ahead = store.p.prefetch == EpiloguePrefetch::ahead;
  if (first || !ahead) prefetch_unit(store, unit(u), cw);
  if (ahead && u + step < units) prefetch_unit(store, unit(u + step), cw);
}

// The start of the ws and pingpong pipelines. Thread 0 sets up the barriers, past the stages at base: per stage a
// "full" one (the producer's arrival with the TMA bytes) and an "empty" one (an arrival from each of the `readers`
// warps that read the stage, once their MMAs are done), then TURNS more of `readers` arrivals (pingpong's turns).
// Then the producer warpgroup gives back its registers and its thread 0 loads the k tiles of the block's units, in
// order, as the stages free up (`it` counts the block's k tiles over all its units: k tile `it` uses stage
// it % STAGES, for the (it / STAGES)-th time; use v needs the consumers' release of use v - 1, phase v - 1 of the
// stage's "empty" barrier); false there, once every load is issued. The consumers take their registers: true.
template <class C, int TURNS, class Unit, class Issue>
__device__ __forceinline__ bool start_consumers(uint32_t base, uint32_t readers, int units, Unit& unit, Issue& issue) {
  const uint32_t full = base + uint32_t(C::STAGES * C::kStageBytes), empty = full + 8u * uint32_t(C::STAGES);
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(full + 8u * uint32_t(s), 1);
      mbar_init(empty + 8u * uint32_t(s), readers);
    }
    for (int t = 0; t < TURNS; ++t) mbar_init(empty + 8u * uint32_t(C::STAGES + t), readers);
    fence_mbar_init();
  }
  __syncthreads();
  if (threadIdx.x >= 128) {
    consumer_registers();
    return true;
  }
  producer_registers();
  if (threadIdx.x == 0) {
    int it = 0;
    for (int u = int(blockIdx.x); u < units; u += int(gridDim.x)) {
      const auto w = unit(u);
      for (int kt = 0; kt < w.kt_count; ++kt, ++it) {
        const uint32_t s = uint32_t(it % C::STAGES);
        if (it >= C::STAGES) mbar_wait(empty + 8u * s, uint32_t(it / C::STAGES - 1) & 1u);
        issue(w, kt, base + s * uint32_t(C::kStageBytes), full + 8u * s);
      }
    }
  }
  return false;
}

template <class T, class C, bool A_MN, bool B_MN, class Unit, class Issue, class Store>
__device__ __forceinline__ void ws_pipeline(float (&d)[C::BN / 2], uint32_t base, int units, Unit unit, Issue issue,
                                            Store store) {
  const uint32_t full = base + uint32_t(C::STAGES * C::kStageBytes), empty = full + 8u * uint32_t(C::STAGES);
  const int tid = int(threadIdx.x), wg = tid / 128;
  // a stage is read by all 8 consumer warps
  if (!start_consumers<C, 0>(base, C::kThreads / 32, units, unit, issue)) return;
  const int cw = wg - 1;
  const bool arrives = tid % 32 == 0;
  int it = 0;
  for (int u = int(blockIdx.x); u < units; u += int(gridDim.x)) {
    const auto w = unit(u);
    prefetch_units(store, unit, u, int(gridDim.x), units, u == int(blockIdx.x), cw);
    for (int kt = 0; kt < w.kt_count; ++kt, ++it) {
      mma_stage<T, C, A_MN, B_MN>(d, base, full, it, cw, kt == 0);
      wgmma_wait<1>();  // this warp's MMAs of k tile it - 1 are done: release its stage
      if (kt > 0 && arrives) mbar_arrive(empty + 8u * uint32_t((it - 1) % C::STAGES));
    }
    wgmma_wait<0>();  // the unit's last k tile too: release its stage before the stores
    if (arrives) mbar_arrive(empty + 8u * uint32_t((it - 1) % C::STAGES));
#pragma unroll
    for (int i = 0; i < C::BN / 2; ++i) fence_reg(d[i]);
    store(w, cw);
  }
}

// Pipeline "pingpong" (GEMM v3, conv v3's forward and backward-data; CUTLASS's KernelTmaWarpSpecializedPingpong): the
// ws pipeline's producer and stages, but each consumer warpgroup computes whole 128 x BN tiles by itself (both 64-row
// halves: d0, d1), the two taking the block's units in turns (consumer 0 its 1st, 3rd, .. unit, consumer 1 its 2nd,
// 4th, ..), and their k loops alternate: a consumer starts issuing a unit's MMAs once the other has issued all of its
// previous unit's. So one warpgroup's epilogue (its loads and stores of C) runs while the other's MMAs keep the
// tensor cores busy, where in "ws" both store at once and the tensor cores wait (at K = 768, 12 k tiles of MMAs a
// tile, a sizeable share). The turns are two mbarriers, turn[c] completing a phase when the 4 warps of the other
// consumer have issued a unit's MMAs; consumer c's n-th wait (its unit j = 2 n + c + 1 of the block's, counted from
// 0) is on phase n, never more than one phase ahead (the other's next arrival needs this consumer's turn first), and
// so are its waits on the stages' "full" barriers: a unit's first stage wait comes after every earlier k tile's. Each
// consumer counts the other's k tiles too (`it` runs over all the block's units, as the producer's). A stage is read
// by one warpgroup: "empty" takes 4 arrivals. store(w, cw): unit w's sums, d0 and d1, of consumer cw (0 or 1), every
// MMA waited for. Shared memory: the ws pipeline's barriers and two more, 8 bytes each.
template <class T, class C, bool A_MN, bool B_MN, class Unit, class Issue, class Store>
__device__ __forceinline__ void pingpong_pipeline(float (&d0)[C::BN / 2], float (&d1)[C::BN / 2], uint32_t base,
                                                  int units, Unit unit, Issue issue, Store store) {
  const uint32_t full = base + uint32_t(C::STAGES * C::kStageBytes), empty = full + 8u * uint32_t(C::STAGES),
                 turn = empty + 8u * uint32_t(C::STAGES);
  const int tid = int(threadIdx.x), wg = tid / 128;
  // a stage is read by one consumer warpgroup (4 warps), whose 4 warps also complete a turn
  if (!start_consumers<C, 2>(base, 4, units, unit, issue)) return;
  const int cw = wg - 1;
  const bool arrives = tid % 32 == 0;
  int it = 0, j = 0;
  for (int u = int(blockIdx.x); u < units; u += int(gridDim.x), ++j) {
    const auto w = unit(u);
    if (j % 2 != cw) {  // the other consumer's unit
      it += w.kt_count;
      continue;
    }
    // (before the turn: the other consumer's k loop covers the wait for the lines too)
    prefetch_units(store, unit, u, 2 * int(gridDim.x), units, j == cw, cw);
    if (j > 0) mbar_wait(turn + 8u * uint32_t(cw), uint32_t((j - 1) / 2) & 1u);
    for (int kt = 0; kt < w.kt_count; ++kt, ++it) {
      const uint32_t s = uint32_t(it % C::STAGES);
      mbar_wait(full + 8u * s, uint32_t(it / C::STAGES) & 1u);
      wgmma_fence();
      const uint32_t stage = base + s * uint32_t(C::kStageBytes);
      mma_ktile<T, C, A_MN, B_MN>(d0, stage, 0, kt == 0);
      mma_ktile<T, C, A_MN, B_MN>(d1, stage, 1, kt == 0);
      wgmma_commit();
      wgmma_wait<1>();  // this warp's MMAs of k tile it - 1 are done: release its stage
      if (kt > 0 && arrives) mbar_arrive(empty + 8u * uint32_t((it - 1) % C::STAGES));
    }
    if (arrives) mbar_arrive(turn + 8u * uint32_t(1 - cw));  // every MMA of the unit issued: the other's turn
    wgmma_wait<0>();
    if (arrives) mbar_arrive(empty + 8u * uint32_t((it - 1) % C::STAGES));
#pragma unroll
    for (int i = 0; i < C::BN / 2; ++i) fence_reg(d0[i]), fence_reg(d1[i]);
    store(w, cw);
  }
}

// The pipeline a kernel runs over `units` work units (unit, issue and store as ws_pipeline's): ws_pipeline
// when WS (pipeline_blocks blocks), else one unit per block (units blocks, u = blockIdx.x) on barrier_pipeline
// with IN_FLIGHT groups of MMAs in flight, then store(w, warpgroup) in both warpgroups.
// Threads: kPipelineThreads<C, WS>.
template <class C, bool WS>
inline constexpr int kPipelineThreads = WS ? kWsThreads<C> : C::kThreads;

template <class T, class C, bool WS, int IN_FLIGHT, bool A_MN, bool B_MN, class Unit, class Issue, class Store>
__device__ __forceinline__ void run_pipeline(float (&d)[C::BN / 2], uint32_t base, int units, Unit unit, Issue issue,
                                             Store store) {
  if constexpr (WS) {
    ws_pipeline<T, C, A_MN, B_MN>(d, base, units, unit, issue, store);
  } else {
    const auto w = unit(int(blockIdx.x));
    prefetch_unit(store, w, int(threadIdx.x) / 128);
    barrier_pipeline<T, C, IN_FLIGHT, A_MN, B_MN>(
        d, base, w.kt_count, [&](int kt, uint32_t stage, uint32_t bar) { issue(w, kt, stage, bar); });
    store(w, int(threadIdx.x) / 128);
  }
}

// Blocks of a launch of `units` work units: WS (persistent), one per SM (the stages leave room for one block), or
// fewer when HPDT_GEMM_V3_CTAS=N caps them (read at every call: tests give every block several units of a small
// problem with it; anything but a positive integer is an error naming the variable); barrier, one per unit.
// `who` names the kernel in the error a launch of 2^31 or more units (blockIdx.x and the units' int) gets.
inline int64_t pipeline_blocks(const char* who, bool ws, int64_t units, int sms) {
  HPDT_CHECK(units < (int64_t(1) << 31), who, ": ", units, " work units is more than one launch takes");
  if (!ws) return units;
  int64_t cap = sms;
  if (const char* e = std::getenv("HPDT_GEMM_V3_CTAS")) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    HPDT_CHECK(end != e && *end == '\0' && v > 0, "HPDT_GEMM_V3_CTAS=", e, ": expected a positive number of blocks");
    cap = v;
  }
  return std::min(units, cap);
}

// The pipeline HPDT_GEMM_V3_PIPELINE pins (read at every call, so that tests and benchmarks can switch it):
// "barrier", "ws" (warp-specialised, persistent) or "pingpong" (GEMM v3, conv v3's forward and backward-data; conv
// v3's backward-filter runs "ws" under it); anything else is an error naming the variable. Unset, each call's plan
// by rule (v3_rule_plan, since 2026-11-30; barrier before) or under Find the fastest of all three.
// pinned_v3_pipeline: the one the variable names, or none when it is unset. v3_pipeline: that, or barrier (what
// v3_tile's tile rule assumes).
enum class V3Pipeline { barrier, ws, pingpong };
inline bool pinned_v3_pipeline(V3Pipeline& out) {
  const char* e = std::getenv("HPDT_GEMM_V3_PIPELINE");
  if (!e) return false;
  if (std::strcmp(e, "barrier") == 0)
    out = V3Pipeline::barrier;
  else if (std::strcmp(e, "ws") == 0)
    out = V3Pipeline::ws;
  else {
    HPDT_CHECK(std::strcmp(e, "pingpong") == 0, "HPDT_GEMM_V3_PIPELINE=", e, ": expected barrier, ws or pingpong");
    out = V3Pipeline::pingpong;
  }
  return true;
}
inline V3Pipeline v3_pipeline() {
  V3Pipeline p = V3Pipeline::barrier;
  pinned_v3_pipeline(p);
  return p;
}

// The block tile of GEMM v3 and conv v3, 128 rows by 64 (slim), 128 (narrow) or 256 (wide) columns of N, for a
// problem of `tiles_m` 128-row tiles by n columns on `sms` SMs. HPDT_GEMM_V3_TILE=slim|narrow|wide pins it (read at
// every call, so that tests and benchmarks can cover each; anything else is an error naming the variable). Unset:
// slim where n <= 64 (a wider tile would multiply zeros: ResNet-50's 64-channel convolutions), else narrow or wide by
// whole waves (split_k.cuh: wide_tile_by_waves), narrow under the pingpong pipeline, whose warpgroups each hold a
// whole tile (wide there is an error).
enum class V3Tile { slim, narrow, wide };
// pinned_v3_tile: the tile HPDT_GEMM_V3_TILE names, or none when it is unset.
inline bool pinned_v3_tile(V3Tile& out) {
  const char* e = std::getenv("HPDT_GEMM_V3_TILE");
  if (!e) return false;
  if (std::strcmp(e, "slim") == 0)
    out = V3Tile::slim;
  else if (std::strcmp(e, "wide") == 0)
    out = V3Tile::wide;
  else {
    HPDT_CHECK(std::strcmp(e, "narrow") == 0, "HPDT_GEMM_V3_TILE=", e, ": expected slim, narrow or wide");
    out = V3Tile::narrow;
  }
  return true;
}
// The pingpong pipeline's warpgroups each hold a whole tile: no wide one there (an error when both are pinned).
inline void check_v3_pins(V3Pipeline pipeline, V3Tile tile) {
  HPDT_CHECK(pipeline != V3Pipeline::pingpong || tile != V3Tile::wide, "HPDT_GEMM_V3_TILE=wide: "
             "HPDT_GEMM_V3_PIPELINE=pingpong has the slim and narrow tiles (a warpgroup holds a whole tile)");
}
inline V3Tile v3_tile(int64_t tiles_m, int64_t n, int64_t sms) {
  const V3Pipeline pipeline = v3_pipeline();
  V3Tile t = V3Tile::narrow;
  if (pinned_v3_tile(t)) {
    check_v3_pins(pipeline, t);
    return t;
  }
  if (n <= 64) return V3Tile::slim;
  if (pipeline == V3Pipeline::pingpong) return V3Tile::narrow;
  const int64_t wide_tiles = tiles_m * ((n + Wide::BN - 1) / Wide::BN);
  const int64_t narrow_tiles = tiles_m * ((n + Narrow::BN - 1) / Narrow::BN);
  return detail::wide_tile_by_waves(wide_tiles, narrow_tiles, sms) ? V3Tile::wide : V3Tile::narrow;
}

// Where GEMM v3 applies its epilogue's activation (the GELU or its gradient; conv v3 has none): in the epilogue
// ("fused", the default) or as a pass of its own after a plain GEMM ("pass": gemm_common.cuh's activation_only, the
// vendor backend's). Both give the same bits (gemm_common.cuh: activate takes v as C stores it), so under Find each
// GELU call shape times both (2026-11-29: on the H200 of 2026-11-27 the fused GELU GEMMs ran at half the plain
// GEMMs' speed; the pass reads C and writes it, and the kept input, once more). HPDT_GEMM_V3_ACTIVATION=fused|pass
// pins it (read at every call; anything else is an error naming the variable).
inline bool pinned_v3_activation_pass(bool& out) {
  const int pin = env_pin("HPDT_GEMM_V3_ACTIVATION", "fused", "pass");
  if (pin >= 0) out = pin == 1;
  return pin >= 0;
}

// GEMM v3's epilogue stores (sm90a/tma_store_epilogue.cuh): HPDT_GEMM_V3_STORE=direct|tma pins them (out: tma), read
// at every call; anything else is an error naming the variable. Unset: direct by rule, both timed under Find. Conv
// v3's forward and backward-data have their own, HPDT_CONV_V3_STORE (conv_wgmma.cu: pinned_conv_v3_store).
inline bool pinned_v3_store(bool& tma) {
  const int pin = env_pin("HPDT_GEMM_V3_STORE", "direct", "tma");
  if (pin >= 0) tma = pin == 1;
  return pin >= 0;
}

// A plan of GEMM v3 or conv v3: the pipeline and the block tile (and for a GEMM with an activation, where it runs).
// Under kernels::GemmTuning::find each call shape takes the fastest of v3_find_candidates, timed (gemm_wgmma.cu,
// conv_wgmma.cu); by rule v3_rule_plan.
struct V3Plan {
  V3Pipeline pipeline;
  V3Tile tile;
  bool act_pass = false;  // the activation as a pass after a plain GEMM (pinned_v3_activation_pass)
  bool im2col = false;    // conv v3: its pixels by TMA's im2col mode (conv_wgmma.cu: HPDT_CONV_V3_LOAD)
  bool tma_store = false;  // the plain epilogue by TMA stores where it applies (pinned_v3_store, pinned_conv_v3_store)
};
inline const char* v3_pipeline_name(V3Pipeline p) {
  return p == V3Pipeline::ws ? "ws" : p == V3Pipeline::pingpong ? "pingpong" : "barrier";
}
inline const char* v3_tile_name(V3Tile t) { return t == V3Tile::slim ? "slim" : t == V3Tile::wide ? "wide" : "narrow"; }
// The plan by rule of a call of `tiles_m` 128-row tiles by n columns reducing K = k, on `sms` SMs: the tile by v3_tile,
// the pipeline HPDT_GEMM_V3_PIPELINE's where it is set, else by split_k.cuh's short_k_loop (since 2026-11-30; barrier
// before): pingpong on the slim and narrow tiles, ws on the wide one, for a short k loop over a wave of tiles or
// more; barrier otherwise. A pinned tile keeps its pin (wide with a short k loop: ws).
inline V3Plan v3_rule_plan(int64_t tiles_m, int64_t n, int64_t k, int64_t sms) {
  V3Pipeline pinned = V3Pipeline::barrier;
  const bool pipeline_pinned = pinned_v3_pipeline(pinned);
  const V3Tile tile = v3_tile(tiles_m, n, sms);  // by whole waves as on barrier, unless pinned (pingpong: narrow)
  if (pipeline_pinned) return {pinned, tile};
  const int bn = tile == V3Tile::slim ? Slim::BN : tile == V3Tile::wide ? Wide::BN : Narrow::BN;
  if (!detail::short_k_loop(k, tiles_m * ((n + bn - 1) / bn), sms)) return {V3Pipeline::barrier, tile};
  return {tile == V3Tile::wide ? V3Pipeline::ws : V3Pipeline::pingpong, tile};
}
inline std::string v3_plan_name(const V3Plan& plan) {
  return std::string(v3_pipeline_name(plan.pipeline)) + "/" + v3_tile_name(plan.tile) +
         (plan.act_pass ? "+gelu pass" : "") + (plan.im2col ? "+im2col" : "") + (plan.tma_store ? "+tma store" : "");
}

// HPDT_GEMM_V3_PIPELINE's, HPDT_GEMM_V3_TILE's, HPDT_GEMM_V3_ACTIVATION's and HPDT_GEMM_V3_STORE's pins as ints (-1
// unset; conv v3 puts HPDT_CONV_V3_STORE's in tma_store), part of a Find key: they restrict the candidates.
struct V3Pins {
  int pipeline = -1, tile = -1, act_pass = -1, tma_store = -1;
};
inline V3Pins v3_pins() {
  V3Pins pins;
  V3Pipeline p = V3Pipeline::barrier;
  V3Tile t = V3Tile::narrow;
  bool pass = false, tma = false;
  if (pinned_v3_pipeline(p)) pins.pipeline = int(p);
  if (pinned_v3_tile(t)) pins.tile = int(t);
  if (pinned_v3_activation_pass(pass)) pins.act_pass = int(pass);
  if (pinned_v3_store(tma)) pins.tma_store = int(tma);
  return pins;
}

// Find's candidates for a call n wide: every pipeline and tile (slim where n <= 64, where wider tiles multiply
// zeros; else narrow and wide), less pingpong with the wide tile, each restricted to its pin; for a GEMM with an
// activation (`activation`) each of those fused and then as a pass (unless HPDT_GEMM_V3_ACTIVATION pins one); for a
// GEMM the TMA-store epilogue can take (`tma_store`) each of those with the direct stores and then with TMA's ("+tma
// store", unless HPDT_GEMM_V3_STORE pins one).
inline std::vector<V3Plan> v3_find_candidates(int64_t n, const V3Pins& pins, bool activation = false,
                                              bool tma_store = false) {
  if (pins.pipeline >= 0 && pins.tile >= 0) check_v3_pins(V3Pipeline(pins.pipeline), V3Tile(pins.tile));
  std::vector<V3Pipeline> pipelines{V3Pipeline::barrier, V3Pipeline::ws, V3Pipeline::pingpong};
  std::vector<V3Tile> tiles = n <= 64 ? std::vector<V3Tile>{V3Tile::slim} : std::vector<V3Tile>{V3Tile::narrow, V3Tile::wide};
  if (pins.pipeline >= 0) pipelines = {V3Pipeline(pins.pipeline)};
  if (pins.tile >= 0) tiles = {V3Tile(pins.tile)};
  std::vector<V3Plan> out;
  std::vector<bool> passes{false};
  if (activation) passes = pins.act_pass >= 0 ? std::vector<bool>{pins.act_pass == 1} : std::vector<bool>{false, true};
  std::vector<bool> stores{false};
  if (tma_store) stores = pins.tma_store >= 0 ? std::vector<bool>{pins.tma_store == 1} : std::vector<bool>{false, true};
  for (bool store : stores)
    for (bool pass : passes)
      for (V3Pipeline pl : pipelines)
        for (V3Tile t : tiles)
          if (pl != V3Pipeline::pingpong || t != V3Tile::wide) out.push_back({pl, t, pass, false, store});
  return out;
}

// The driver's entry point `name` (CUDA 12.0's version) as Fn; `who` names the caller in the error.
template <class Fn>
Fn driver_entry_point(const char* name, const char* who) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q{};
  HPDT_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q));
  HPDT_CHECK(q == cudaDriverEntryPointSuccess && f != nullptr, who, ": the driver has no ", name,
             " (CUDA 12.0 or newer is needed)");
  return reinterpret_cast<Fn>(f);
}
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const auto fn =
      driver_entry_point<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", "GEMM / conv v3");
  return fn;
}
inline PFN_cuTensorMapEncodeIm2col_v12000 im2col_map_encoder() {
  static const auto fn = driver_entry_point<PFN_cuTensorMapEncodeIm2col_v12000>("cuTensorMapEncodeIm2col", "conv v3");
  return fn;
}

// The bounding-box corners an im2col map of rank 4 takes: [-128, 127] (cuTensorMapEncodeIm2col).
inline bool im2col_corner_ok(int64_t v) { return v >= -128 && v <= 127; }

// An im2col TMA map (tma_load_im2col_4d) of a 16-bit NHWC tensor [dims[3]][dims[2]][dims[1]][dims[0]] (strides as
// swizzled_map's): loads of `pixels` pixels of 64 channels (one 128-byte row each, 128-byte swizzle), traversing each
// image's bounding box from (lower[0], lower[1]) (x, y) to (dims[1] - 1 + upper[0], dims[2] - 1 + upper[1]) in
// steps of `stride`, x fastest, then the next image; out-of-bounds pixels read as zeros. `who` names the caller in
// the error.
inline CUtensorMap im2col_map(const char* who, const void* ptr, const cuuint64_t* dims, const cuuint64_t* strides,
                              const int* lower, const int* upper, cuuint32_t pixels, int stride, DType t) {
  CUtensorMap map;
  HPDT_CHECK(t == DType::bf16 || t == DType::f16, who, ": im2col TMA maps of ", dtype_name(t), " are not made here");
  const cuuint32_t steps[4] = {1, cuuint32_t(stride), cuuint32_t(stride), 1};
  const CUresult r = im2col_map_encoder()(
      &map, t == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      const_cast<void*>(ptr), dims, strides, lower, upper, 64, pixels, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HPDT_CHECK(r == CUDA_SUCCESS, who, ": cuTensorMapEncodeIm2col failed (CUresult ", int(r), ") for a ", dims[3], " x ",
             dims[2], " x ", dims[1], " x ", dims[0], " tensor at ", ptr, ", corners (", lower[0], ", ", lower[1],
             ") and (", upper[0], ", ", upper[1], "), stride ", stride);
  return map;
}

// A TMA map of a 16-bit (or f32) tensor of `rank` dimensions (dims[0] contiguous; strides[i]: bytes from one index
// of dimension i + 1 to the next) in boxes of box[0] values (one 128-byte row) by box[1..], 128-byte swizzle,
// out-of-bounds elements read as zeros. steps: TMA's element strides (every steps[i]-th element along dimension
// i, ceil(box[i] / steps[i]) of them; steps[0] is ignored), or null for all 1. `who` names the caller in the
// error. (store_map: the 64-byte swizzle, no L2 promotion.)
inline CUtensorMap swizzled_map(const char* who, const void* ptr, int rank, const cuuint64_t* dims,
                                const cuuint64_t* strides, const cuuint32_t* box, DType t,
                                const cuuint32_t* steps = nullptr,
                                CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B,
                                CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  CUtensorMap map;
  const cuuint32_t ones[5] = {1, 1, 1, 1, 1};
  const cuuint32_t* elem_strides = steps ? steps : ones;
  HPDT_CHECK(t == DType::bf16 || t == DType::f16 || t == DType::f32, who, ": TMA maps of ", dtype_name(t),
             " are not made here");
  const CUtensorMapDataType type = t == DType::bf16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : t == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                     : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r =
      tensor_map_encoder()(&map, type, cuuint32_t(rank), const_cast<void*>(ptr), dims, strides, box, elem_strides,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HPDT_CHECK(r == CUDA_SUCCESS, who, ": cuTensorMapEncodeTiled failed (CUresult ", int(r), ") for a rank-", rank,
             " tensor of ", dims[rank - 1], " x .. x ", dims[0], " values at ", ptr);
  return map;
}

// A TMA-store map of a 16-bit tensor of `rank` dimensions (dims[0] contiguous, strides[i] bytes from one index of
// dimension i + 1 to the next) in boxes of box[0] = 32 values (64 bytes) by box[1..], the 64-byte swizzle
// (tma_store_epilogue.cuh's chunk images: box[1] x .. x box[rank - 1] = 16 rows). `who` names the caller in the error.
inline CUtensorMap store_map(const char* who, void* ptr, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                             const cuuint32_t* box, DType t) {
  HPDT_CHECK(t == DType::bf16 || t == DType::f16, who, ": TMA-store maps of ", dtype_name(t), " are not made here");
  return swizzled_map(who, ptr, rank, dims, strides, box, t, nullptr, CU_TENSOR_MAP_SWIZZLE_64B,
                      CU_TENSOR_MAP_L2_PROMOTION_NONE);
}
// ... of a row-major 16-bit matrix [rows][cols] (row stride ld elements): boxes of 32 values by 16 rows.
inline CUtensorMap store_map(const char* who, void* ptr, int64_t rows, int64_t cols, int64_t ld, DType t) {
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * 2};
  const cuuint32_t box[2] = {32, 16};
  return store_map(who, ptr, 2, dims, strides, box, t);
}

}  // namespace hpdt::kernels::cuda::sm90a
