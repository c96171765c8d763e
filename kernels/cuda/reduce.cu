// CUDA sum to a scalar, deterministic: a fixed grid (a function of n only) writes one partial per
// block, reduced in a fixed tree order; a single block then adds the partials in a fixed order.
#include "hpdt/kernels/cuda/reduce.h"
#include "launch.cuh"
#include "warp.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

template <class T>
__global__ void __launch_bounds__(kThreads) partial_sums(const T* __restrict__ x, int64_t n, float* __restrict__ partial) {
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) acc += to_f32(x[i]);
  acc = block_sum<kThreads>(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kThreads) final_sum(const float* __restrict__ partial, int blocks, float* __restrict__ out) {
  float acc = 0.0f;
  for (int i = threadIdx.x; i < blocks; i += kThreads) acc += partial[i];
  acc = block_sum<kThreads>(acc);
  if (threadIdx.x == 0) *out = acc;
}

}  // namespace

void sum(const Tensor& x, Tensor& out, const Stream& stream) {
  check_dtype("sum", "out", out, DType::f32);
  HPDT_CHECK(out.numel() == 1, "sum: out must have one element, got ", out.str());
  const int64_t n = x.numel();
  const int blocks = int(std::min<int64_t>(kMaxBlocks, std::max<int64_t>(1, (n + kThreads * 8 - 1) / (kThreads * 8))));
  // Partials live in device memory from the caching allocator; freed (returned to the cache) with the tensor.
  AllocOptions opts;
  opts.stream = &stream;
  Tensor partial = Tensor::empty({blocks}, DType::f32, x.device(), opts);
  const cudaStream_t s = detail::native(stream);
  dispatch_floating(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    partial_sums<T><<<blocks, kThreads, 0, s>>>(static_cast<const T*>(x.data()), n, partial.data<float>());
    HPDT_CUDA_CHECK_LAUNCH();
  });
  final_sum<<<1, kThreads, 0, s>>>(partial.data<float>(), blocks, out.data<float>());
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace hpdt::kernels::cuda
