// CPU GEMM: C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T.
//
// float: our own cache-blocked, packed, register-tiled SGEMM (AVX-512 or AVX2+FMA micro-kernel, a
// portable loop otherwise); see docs/kernels-cpu.md for the measurement against OpenBLAS.
// double: a plain blocked loop (used by the double-precision gradient checks only).
//
// Threading: the float path splits row blocks over OpenMP threads when called outside a parallel
// region; inside one (conv parallelises over images) it runs on the calling thread.
#pragma once

#include <cstdint>

namespace hpdt::kernels::cpu {

// The float path's k block: every element of C is an FMA chain from zero over each block of kGemmKChunk k values in
// order, the blocks' sums added to C in order (one rounding each). kernels::powersgd_product computes that order on
// any device.
constexpr int64_t kGemmKChunk = 256;

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

}  // namespace hpdt::kernels::cpu
