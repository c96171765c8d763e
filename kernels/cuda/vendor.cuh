// Private to kernels/cuda: the cuBLAS side of the GEMM (gemm_vendor.cu), which gemm.cu calls for the vendor variant.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpdt/core/dtype.h"
#include "hpdt/core/stream.h"

namespace hpdt::kernels::cuda::detail {

// C = alpha * op(A) op(B) + beta * C through cublasGemmEx (row-major, CUBLAS_COMPUTE_32F), on the cached
// handle of the stream's device; cuBLAS opened at the first call (open_cublas). Arguments already validated by
// cuda::gemm; M, N, K > 0.
void gemm_cublas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
                 const void* B, int64_t ldb, float beta, void* C, int64_t ldc, DType ab_type, DType c_type,
                 const Stream& stream);

}  // namespace hpdt::kernels::cuda::detail
