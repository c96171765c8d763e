// The PTX of the sm_80-style tensor-core kernels (GEMM v2 in gemm.cu, conv v2 in conv.cu / conv_nhwc.cu, attention
// v2 / v3 in attention.cu), once: shared-memory addresses, cp.async (global -> shared, asynchronous, zero-filling),
// ldmatrix (8 x 8 16-bit matrices from shared memory into mma fragments) and mma.sync m16n8k16 (16-bit inputs, f32
// accumulators). The Hopper kernels' PTX (wgmma, TMA, mbarriers) is in sm90a/wgmma.cuh. The CUDA emulator
// (tests/cuda_emu/transform.py) implements every instruction here.
//
// Fragments of mma.m16n8k16 (g = lane / 4, q = lane % 4), 16-bit pairs low half first:
//   A 16x16 row-major: a0 (row g, cols 2q..2q+1), a1 (row g+8, same), a2 (row g, cols 2q+8..), a3 (row g+8, ..);
//   B 16x8 ("col"):    b0 (k rows 2q..2q+1, col g), b1 (k rows 2q+8..2q+9, col g);
//   C 16x8 f32:        c0, c1 (row g, cols 2q, 2q+1), c2, c3 (row g+8, same cols).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "hpdt/core/float16.h"

namespace hpdt::kernels::cuda {

// The shared-memory address (the .shared window's 32-bit offset) of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared at address dst, asynchronously: the first src_bytes (0..16) read from src, the rest
// zero-filled (0: nothing is read).
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// 16 bytes global -> shared; valid == false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  cp_async16_zfill(smem_u32(smem), gmem, valid ? 16 : 0);
}
// 8 bytes global -> shared (cp.async.ca: .cg takes 16 only); valid == false writes 8 zero bytes.
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(valid ? 8 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of the committed groups are still in flight. "memory": shared-memory reads after the wait
// must not be hoisted above it.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Four 8 x 8 matrices of 16-bit values from shared memory, lane l giving the address of row l % 8 of matrix l / 8;
// _trans: each matrix transposed on the way (a k-contiguous fragment from an mn-contiguous tile).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// c += a * b on one 16 x 8 x 16 tile: a row-major 16 x 16, b "col" 16 x 8 (k pairs packed), f32 accumulators; T is
// bf16_t or f16_t.
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, f16_t>, "mma_16816: bf16_t or f16_t");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_16816<T>(c, a, b[0], b[1]);
}

}  // namespace hpdt::kernels::cuda
