// CUDA elementwise kernels; the CPU oracle is kernels/cpu/elementwise.cpp.
// Grid-stride loops, f32 math, RNE rounding through the shared hpdt/core/float16.h conversions.
#include <type_traits>

#include "hpdt/core/philox.h"
#include "hpdt/kernels/cuda/elementwise.h"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__device__ __forceinline__ T store_as(float v) {
  if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, uint8_t>) return T(v);
  else return from_f32<T>(v);
}

template <class T>
__global__ void fill_kernel(T* __restrict__ y, int64_t n, float value) {
  const T v = store_as<T>(value);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) y[i] = v;
}

template <class T>
__global__ void fill_uniform_kernel(T* __restrict__ y, int64_t n, float lo, float scale, uint64_t seed, uint64_t offset) {
  // One Philox block gives 4 numbers: each thread handles 4 consecutive elements so no output is wasted.
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * 4;
  for (int64_t base = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * 4; base < n; base += stride) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = base + k;
      if (i < n) y[i] = from_f32<T>(fmaf(scale, philox_uniform(seed, 0, offset + uint64_t(i)), lo));  // as the CPU
    }
  }
}

template <class T>
__global__ void axpy_kernel(float alpha, const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_f32<T>(fmaf(alpha, to_f32(x[i]), to_f32(y[i])));  // one rounding, as the CPU's std::fma
}

template <class TIn, class TOut>
__global__ void cast_kernel(const TIn* __restrict__ x, TOut* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_f32<TOut>(to_f32(x[i]));
}

template <class T>
void launch_fill(Tensor& y, float value, cudaStream_t s) {
  const int64_t n = y.numel();
  if (n == 0) return;
  fill_kernel<T><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(static_cast<T*>(y.data()), n, value);
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fill(Tensor& y, float value, const Stream& stream) {
  const cudaStream_t s = detail::native(stream);
  switch (y.dtype()) {
    case DType::f32: return launch_fill<float>(y, value, s);
    case DType::f16: return launch_fill<f16_t>(y, value, s);
    case DType::bf16: return launch_fill<bf16_t>(y, value, s);
    case DType::i32: return launch_fill<int32_t>(y, value, s);
    case DType::u8: return launch_fill<uint8_t>(y, value, s);
  }
}

void fill_uniform(Tensor& y, float lo, float hi, uint64_t seed, uint64_t offset, const Stream& stream) {
  HPDT_CHECK(lo <= hi, "fill_uniform: lo ", lo, " > hi ", hi);
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_floating(y.dtype(), "fill_uniform", [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<T><<<detail::grid_for(n, kThreads, 4), kThreads, 0, detail::native(stream)>>>(
        static_cast<T*>(y.data()), n, lo, hi - lo, seed, offset);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

void axpy(float alpha, const Tensor& x, Tensor& y, const Stream& stream) {
  check_same_dtype("axpy", x, y);
  check_same_numel("axpy", x, y);
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_floating(y.dtype(), "axpy", [&](auto tag) {
    using T = decltype(tag);
    axpy_kernel<T><<<detail::grid_for(n, kThreads), kThreads, 0, detail::native(stream)>>>(
        alpha, static_cast<const T*>(x.data()), static_cast<T*>(y.data()), n);
    HPDT_CUDA_CHECK_LAUNCH();
  });
}

void cast(const Tensor& x, Tensor& y, const Stream& stream) {
  check_same_numel("cast", x, y);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_floating(x.dtype(), "cast (input)", [&](auto in_tag) {
    dispatch_floating(y.dtype(), "cast (output)", [&](auto out_tag) {
      using TIn = decltype(in_tag);
      using TOut = decltype(out_tag);
      cast_kernel<TIn, TOut><<<detail::grid_for(n, kThreads), kThreads, 0, detail::native(stream)>>>(
          static_cast<const TIn*>(x.data()), static_cast<TOut*>(y.data()), n);
      HPDT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace hpdt::kernels::cuda
