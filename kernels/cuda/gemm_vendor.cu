// The `vendor` GEMM: cublasGemmEx with f32 compute, for comparison (and as a user-selectable fallback).
//
// Row-major C (M x N) = op(A) op(B) is column-major C^T (N x M) = op(B)^T op(A)^T, and a row-major
// matrix with leading dimension ld is its transpose in column-major with the same ld: so cuBLAS is
// called with the operands swapped (B first), each keeping its own transpose flag, and m, n = N, M.
#include <array>
#include <mutex>

#include "launch.cuh"
#include "vendor.cuh"

namespace hpdt::kernels::cuda::detail {

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      break;
  }
  HPDT_FAIL("gemm (vendor): dtype ", dtype_name(t), " is not supported");
}

// One handle per device, created on first use and kept for the life of the process (destroying it in a
// static destructor would race the CUDA runtime's own teardown). The lock also covers
// cublasSetStream + cublasGemmEx, so two threads sharing a device never enqueue on each other's stream.
struct HandleSlot {
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
};
constexpr int kMaxDevices = 64;

HandleSlot& slot_for(int device) {
  static std::array<HandleSlot, kMaxDevices> slots;
  HPDT_CHECK(device >= 0 && device < kMaxDevices, "gemm (vendor): device index ", device, " out of range");
  return slots[size_t(device)];
}

}  // namespace

void gemm_cublas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
                 const void* B, int64_t ldb, float beta, void* C, int64_t ldc, DType ab_type, DType c_type,
                 const Stream& stream) {
  constexpr int64_t kIntMax = 0x7fffffff;
  HPDT_CHECK(M <= kIntMax && N <= kIntMax && K <= kIntMax && lda <= kIntMax && ldb <= kIntMax && ldc <= kIntMax,
             "gemm (vendor): sizes and leading dimensions must fit cuBLAS's int, got M ", M, " N ", N, " K ", K);
  const int device = stream.device().index;
  HandleSlot& slot = slot_for(device);
  std::lock_guard<std::mutex> lock(slot.mutex);
  if (!slot.handle) {
    int current = 0;
    HPDT_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device) HPDT_CUDA_CHECK(cudaSetDevice(device));
    cublasHandle_t h = nullptr;
    const cublasStatus_t st = cublasCreate(&h);
    if (current != device) HPDT_CUDA_CHECK(cudaSetDevice(current));
    HPDT_CUBLAS_CHECK(st);
    slot.handle = h;
  }
  HPDT_CUBLAS_CHECK(cublasSetStream(slot.handle, native(stream)));
  HPDT_CUBLAS_CHECK(cublasGemmEx(slot.handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 int(N), int(M), int(K), &alpha, B, cuda_type(ab_type), int(ldb), A, cuda_type(ab_type),
                                 int(lda), &beta, C, cuda_type(c_type), int(ldc), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
}

}  // namespace hpdt::kernels::cuda::detail
