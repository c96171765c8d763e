// Private to kernels/cuda: the cuBLAS side of the GEMM (gemm_vendor.cu) and the small epilogue kernels
// the GEMM variants share (gemm.cu).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <source_location>
#include <string>

#include "hpdt/core/dtype.h"
#include "hpdt/core/error.h"
#include "hpdt/core/stream.h"

namespace hpdt::kernels::cuda::detail {

[[noreturn]] inline void cublas_failed(cublasStatus_t st, const char* expr, std::source_location loc) {
  throw Error(
      std::string("cuBLAS error ") + cublasGetStatusName(st) + " (" + cublasGetStatusString(st) + ") in " + expr, {},
      loc);
}

// C = alpha * op(A) op(B) + beta * C through cublasGemmEx (row-major, CUBLAS_COMPUTE_32F), on the cached
// handle of the stream's device. Arguments already validated by cuda::gemm; M, N, K > 0.
void gemm_cublas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
                 const void* B, int64_t ldb, float beta, void* C, int64_t ldc, DType ab_type, DType c_type,
                 const Stream& stream);

}  // namespace hpdt::kernels::cuda::detail

// HPDT_CUBLAS_CHECK(expr): throws hpdt::Error naming the call and cuBLAS's status name and text.
#define HPDT_CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                                \
    const cublasStatus_t hpdt_st_ = (expr);                                                           \
    if (hpdt_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                               \
      ::hpdt::kernels::cuda::detail::cublas_failed(hpdt_st_, #expr, std::source_location::current()); \
  } while (0)
