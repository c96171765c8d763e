// Memory-bound elementwise kernels in GB/s (bytes read + written), CPU and, when a GPU is usable, CUDA.
//   hpdt-bench-elementwise --benchmark_filter=cpu --benchmark_format=json
#include <benchmark/benchmark.h>

#include <chrono>

#include "hpdt/core/runtime.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/image.h"
#include "hpdt/kernels/layout.h"
#include "hpdt/kernels/reduce.h"

namespace {

using namespace hpdt;

struct Setup {
  Device device;
  Stream stream;
  explicit Setup(bool cuda) : device(cuda ? Device::cuda(0) : Device::cpu()), stream(cuda ? Stream::create_cuda(0) : Stream()) {}
};

bool skip_without_gpu(benchmark::State& state, bool cuda) {
  if (cuda && !cuda_available()) {
    state.SkipWithError(("no GPU: " + cuda_unavailable_reason()).c_str());
    return true;
  }
  return false;
}

void BM_axpy(benchmark::State& state, bool cuda, DType dt) {
  if (skip_without_gpu(state, cuda)) return;
  Setup s(cuda);
  const int64_t n = state.range(0);
  Tensor x = Tensor::empty({n}, dt, s.device), y = Tensor::empty({n}, dt, s.device);
  kernels::fill_uniform(x, -1, 1, 1, 0, s.stream);
  kernels::fill_uniform(y, -1, 1, 1, uint64_t(n), s.stream);
  for (auto _ : state) {
    kernels::axpy(1e-3f, x, y, s.stream);
    s.stream.synchronize();
  }
  state.SetBytesProcessed(state.iterations() * n * int64_t(dtype_size(dt)) * 3);
}

void BM_cast(benchmark::State& state, bool cuda, DType from, DType to) {
  if (skip_without_gpu(state, cuda)) return;
  Setup s(cuda);
  const int64_t n = state.range(0);
  Tensor x = Tensor::empty({n}, from, s.device), y = Tensor::empty({n}, to, s.device);
  kernels::fill_uniform(x, -1, 1, 1, 0, s.stream);
  for (auto _ : state) {
    kernels::cast(x, y, s.stream);
    s.stream.synchronize();
  }
  state.SetBytesProcessed(state.iterations() * n * int64_t(dtype_size(from) + dtype_size(to)));
}

void BM_sum(benchmark::State& state, bool cuda) {
  if (skip_without_gpu(state, cuda)) return;
  Setup s(cuda);
  const int64_t n = state.range(0);
  Tensor x = Tensor::empty({n}, DType::f32, s.device), out = Tensor::empty({1}, DType::f32, s.device);
  kernels::fill_uniform(x, -1, 1, 1, 0, s.stream);
  for (auto _ : state) {
    kernels::sum(x, out, s.stream);
    s.stream.synchronize();
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

// A batch of n ImageNet-sized u8 images (3 x 224 x 224) decoded with crop and flip into the model's input
// (kernels::decode_images: what hpdt-train does on the GPU in place of copying f32 images up and casting them).
// Bytes: the pixels read and the output written. The cast it replaces is BM_cast/cuda_f32_to_bf16 at n x 150,528.
// The _nhwc rows write channels last (a ResNet's input in NHWC, which the model then takes without a transpose);
// their x_nchw_then_transpose counter is the time of what they replace (the NCHW decode, then kernels::nchw_to_nhwc)
// over theirs, both sides 10 calls back to back after a warm-up, by the host's clock around a synchronize.
void BM_decode_images(benchmark::State& state, bool cuda, DType dt, kernels::Layout layout = kernels::Layout::nchw) {
  if (skip_without_gpu(state, cuda)) return;
  Setup s(cuda);
  const int64_t n = state.range(0), c = 3, h = 224, w = 224;
  Tensor pixels = Tensor::empty({n, c, h, w}, DType::u8), crops = Tensor::empty({n, 3}, DType::i32);
  for (int64_t j = 0; j < pixels.numel(); ++j) pixels.data<uint8_t>()[j] = uint8_t((j * 131) % 251);
  for (int64_t i = 0; i < n; ++i) {  // the reader's 4-pixel crops, half of them flipped
    int32_t* cr = crops.data<int32_t>() + 3 * i;
    cr[0] = int32_t(i % 9) - 4, cr[1] = int32_t((i * 7) % 9) - 4, cr[2] = int32_t(i & 1);
  }
  if (cuda) {
    pixels = pixels.to(s.device, s.stream);
    crops = crops.to(s.device, s.stream);
  }
  const auto norm = kernels::PixelNormalization::from_mean_std(c, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f});
  Tensor y = Tensor::empty(layout == kernels::Layout::nhwc ? Shape{n, h, w, c} : Shape{n, c, h, w}, dt, s.device);
  for (auto _ : state) {
    kernels::decode_images(pixels, crops, norm, y, s.stream, layout);
    s.stream.synchronize();
  }
  state.SetBytesProcessed(state.iterations() * pixels.numel() * int64_t(1 + dtype_size(dt)));
  if (layout != kernels::Layout::nhwc) return;
  Tensor nchw = Tensor::empty({n, c, h, w}, dt, s.device);
  const auto seconds = [&](auto&& call) {
    call();
    s.stream.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) call();
    s.stream.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10;
  };
  const double direct = seconds([&] { kernels::decode_images(pixels, crops, norm, y, s.stream, layout); });
  const double two_passes = seconds([&] {
    kernels::decode_images(pixels, crops, norm, nchw, s.stream);
    kernels::nchw_to_nhwc(nchw, y, s.stream);
  });
  state.counters["x_nchw_then_transpose"] = two_passes / direct;
}

constexpr int64_t kSmall = 1 << 16, kLarge = 1 << 24;

BENCHMARK_CAPTURE(BM_axpy, cpu_f32, false, DType::f32)->Range(kSmall, kLarge)->UseRealTime();
BENCHMARK_CAPTURE(BM_axpy, cpu_bf16, false, DType::bf16)->Range(kSmall, kLarge)->UseRealTime();
BENCHMARK_CAPTURE(BM_cast, cpu_f32_to_f16, false, DType::f32, DType::f16)->Range(kSmall, kLarge)->UseRealTime();
BENCHMARK_CAPTURE(BM_cast, cpu_f32_to_bf16, false, DType::f32, DType::bf16)->Range(kSmall, kLarge)->UseRealTime();
BENCHMARK_CAPTURE(BM_sum, cpu_f32, false)->Range(kSmall, kLarge)->UseRealTime();
BENCHMARK_CAPTURE(BM_decode_images, cpu_f32, false, DType::f32)->Arg(16)->Arg(64)->UseRealTime();
BENCHMARK_CAPTURE(BM_decode_images, cpu_f32_nhwc, false, DType::f32, kernels::Layout::nhwc)->Arg(64)->UseRealTime();
BENCHMARK_CAPTURE(BM_axpy, cuda_f32, true, DType::f32)->Range(kSmall, 1 << 28)->UseRealTime();
BENCHMARK_CAPTURE(BM_axpy, cuda_bf16, true, DType::bf16)->Range(kSmall, 1 << 28)->UseRealTime();
BENCHMARK_CAPTURE(BM_cast, cuda_f32_to_bf16, true, DType::f32, DType::bf16)->Range(kSmall, 1 << 28)->UseRealTime();
BENCHMARK_CAPTURE(BM_sum, cuda_f32, true)->Range(kSmall, 1 << 28)->UseRealTime();
BENCHMARK_CAPTURE(BM_decode_images, cuda_bf16, true, DType::bf16)->Arg(64)->Arg(256)->UseRealTime();
BENCHMARK_CAPTURE(BM_decode_images, cuda_bf16_nhwc, true, DType::bf16, kernels::Layout::nhwc)->Arg(256)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
