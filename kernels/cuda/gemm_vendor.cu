// The `vendor` GEMM: cublasGemmEx with f32 compute, for comparison (and as a user-selectable fallback).
//
// Row-major C (M x N) = op(A) op(B) is column-major C^T (N x M) = op(B)^T op(A)^T, and a row-major
// matrix with leading dimension ld is its transpose in column-major with the same ld: so cuBLAS is
// called with the operands swapped (B first), each keeping its own transpose flag, and m, n = N, M.
//
// cuBLAS is opened at its first use (dlopen), not linked: loading libcublas and its libcublasLt (540 MB) cost every
// process that linked hpdt's kernels ~0.3 s and 210 MB of resident memory at start (2026-12-02), though only the
// vendor GEMM calls it. The library is the soname of the toolkit built with (HPDT_CUBLAS_LIBRARY), found as the
// dynamic loader finds any (LD_LIBRARY_PATH, the caller's RUNPATH, the system's cache).
#include <cublas_v2.h>
#include <dlfcn.h>

#include <array>
#include <mutex>
#include <source_location>
#include <string>

#include "hpdt/core/error.h"
#include "hpdt/kernels/cuda/gemm.h"
#include "launch.cuh"
#include "vendor.cuh"

namespace hpdt::kernels::cuda {

namespace {

// The five entry points the vendor GEMM calls (cublasCreate and cublasSetStream are macros for their _v2 symbols).
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  const char* (*status_name)(cublasStatus_t);
  const char* (*status_string)(cublasStatus_t);
};

CublasApi load_cublas(const std::string& library) {
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    HPDT_FAIL("cuBLAS (the vendor GEMM): cannot open ", library, ": ", why ? why : "dlopen failed",
              " (the toolkit's lib64 in LD_LIBRARY_PATH?)");
  }
  CublasApi api{};
  const auto get = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, symbol));
    HPDT_CHECK(fn != nullptr, "cuBLAS (the vendor GEMM): ", library, " has no ", symbol);
  };
  get(api.create, "cublasCreate_v2");
  get(api.set_stream, "cublasSetStream_v2");
  get(api.gemm_ex, "cublasGemmEx");
  get(api.status_name, "cublasGetStatusName");
  get(api.status_string, "cublasGetStatusString");
  return api;  // (the library stays open for the life of the process)
}

const CublasApi& cublas() {
  static const CublasApi api = load_cublas(HPDT_CUBLAS_LIBRARY);  // (a throw leaves it to the next call)
  return api;
}

}  // namespace

void open_cublas(const std::string& library) {
  if (library.empty())
    (void)cublas();
  else
    (void)load_cublas(library);
}

namespace detail {

namespace {

[[noreturn]] void cublas_failed(cublasStatus_t st, const char* expr, std::source_location loc) {
  throw Error(
      std::string("cuBLAS error ") + cublas().status_name(st) + " (" + cublas().status_string(st) + ") in " + expr, {},
      loc);
}

// HPDT_CUBLAS_CHECK(expr): throws hpdt::Error naming the call and cuBLAS's status name and text.
#define HPDT_CUBLAS_CHECK(expr)                                        \
  do {                                                                 \
    const cublasStatus_t hpdt_st_ = (expr);                            \
    if (hpdt_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                \
      cublas_failed(hpdt_st_, #expr, std::source_location::current()); \
  } while (0)

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
  const CublasApi& api = cublas();
  const int device = stream.device().index;
  HandleSlot& slot = slot_for(device);
  std::lock_guard<std::mutex> lock(slot.mutex);
  if (!slot.handle) {
    int current = 0;
    HPDT_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device) HPDT_CUDA_CHECK(cudaSetDevice(device));
    cublasHandle_t h = nullptr;
    const cublasStatus_t st = api.create(&h);
    if (current != device) HPDT_CUDA_CHECK(cudaSetDevice(current));
    HPDT_CUBLAS_CHECK(st);
    slot.handle = h;
  }
  HPDT_CUBLAS_CHECK(api.set_stream(slot.handle, native(stream)));
  HPDT_CUBLAS_CHECK(api.gemm_ex(slot.handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                int(N), int(M), int(K), &alpha, B, cuda_type(ab_type), int(ldb), A, cuda_type(ab_type),
                                int(lda), &beta, C, cuda_type(c_type), int(ldc), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

}  // namespace detail

}  // namespace hpdt::kernels::cuda
