// Stand-ins for kernels/cuda/gemm_vendor.cu (cuBLAS) and kernels/cuda/conv_vendor.cu (cuDNN) in the emulated
// kernels library: the vendor libraries cannot run on the CPU, so every vendor entry point throws, and the
// GPU tests skip their vendor cases under emulation (hpdt::test::emulated()).
#include "../../kernels/cuda/vendor.cuh"
#include "hpdt/core/error.h"
#include "hpdt/kernels/cuda/conv.h"
#include "hpdt/kernels/cuda/gemm.h"

namespace hpdt::kernels::cuda {

namespace {
[[noreturn]] void no_vendor(const char* op) {
  HPDT_FAIL(op, ": the vendor backend is not available in the CUDA emulator (cuBLAS and cuDNN need a GPU)");
}
}  // namespace

void open_cublas(const std::string&) { no_vendor("open_cublas"); }

namespace detail {
void gemm_cublas(bool, bool, int64_t, int64_t, int64_t, float, const void*, int64_t, const void*, int64_t, float, void*,
                 int64_t, DType, DType, const Stream&) {
  no_vendor("gemm (vendor)");
}
}  // namespace detail

void conv2d_forward_vendor(const Conv2dShape&, const Tensor&, const Tensor&, const Conv2dEpilogue&, Tensor&,
                           const Stream&, Layout) {
  no_vendor("conv2d_forward (vendor)");
}
void conv2d_backward_data_vendor(const Conv2dShape&, const Tensor&, const Tensor&, Tensor&, const Stream&, Layout,
                                 const Tensor*) {
  no_vendor("conv2d_backward_data (vendor)");
}
void conv2d_backward_filter_vendor(const Conv2dShape&, const Tensor&, const Tensor&, Tensor&, Tensor*, const Stream&,
                                   Layout) {
  no_vendor("conv2d_backward_filter (vendor)");
}

}  // namespace hpdt::kernels::cuda
