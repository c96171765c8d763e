// CUDA twins of kernels/cpu/accumulate.cpp (grid-stride, element-wise, so bitwise equal to the CPU).
#include "hpdt/kernels/accumulate.h"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void accumulate_kernel(float* __restrict__ dst, const float* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x; i < n; i += size_t(gridDim.x) * kThreads) dst[i] += src[i];
}
__global__ void divide_kernel(float* __restrict__ x, size_t n, float d) {
  for (size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x; i < n; i += size_t(gridDim.x) * kThreads) x[i] = __fdiv_rn(x[i], d);
}
template <class D, class S>
__global__ void convert_kernel(D* __restrict__ dst, const S* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x; i < n; i += size_t(gridDim.x) * kThreads)
    dst[i] = from_f32<D>(to_f32(src[i]));
}
}  // namespace

void accumulate_f32(float* dst, const float* src, size_t n, void* stream) {
  if (!n) return;
  accumulate_kernel<<<detail::grid_for(int64_t(n), kThreads), kThreads, 0, cudaStream_t(stream)>>>(dst, src, n);
  HPDT_CUDA_CHECK_LAUNCH();
}

void divide_f32(float* x, size_t n, float d, void* stream) {
  if (!n) return;
  divide_kernel<<<detail::grid_for(int64_t(n), kThreads), kThreads, 0, cudaStream_t(stream)>>>(x, n, d);
  HPDT_CUDA_CHECK_LAUNCH();
}

void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n, void* stream) {
  if (!n) return;
  if (dst_type == src_type) {
    if (dst != src) HPDT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(dst_type), cudaMemcpyDeviceToDevice, cudaStream_t(stream)));
    return;
  }
  dispatch_floating(dst_type, "convert", [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_floating(src_type, "convert", [&](auto stag) {
      using S = decltype(stag);
      convert_kernel<D, S><<<detail::grid_for(int64_t(n), kThreads), kThreads, 0, cudaStream_t(stream)>>>(
          static_cast<D*>(dst), static_cast<const S*>(src), n);
      HPDT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace hpdt::kernels::cuda
