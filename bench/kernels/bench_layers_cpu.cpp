// Hot CPU kernels in GFLOP/s: our SGEMM against OpenBLAS (loaded at run time with dlopen when
// libopenblas.so.0 is installed: no build dependency), conv2d forward/backward at ResNet-20 shapes in
// both layouts (NCHW im2col + SGEMM, NHWC direct), attention at ViT-Ti shapes.
//   OMP_NUM_THREADS=2 hpdt-bench-layers-cpu --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <vector>

#include "hpdt/core/philox.h"
#include "hpdt/kernels/cpu/attention.h"
#include "hpdt/kernels/cpu/conv.h"
#include "hpdt/kernels/cpu/gemm.h"

namespace {

using namespace hpdt;
using namespace hpdt::kernels;

std::vector<float> random(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  Rng r(seed);
  for (auto& x : v) x = r.uniform(-1, 1);
  return v;
}

void flops(benchmark::State& state, double per_iter) {
  state.counters["FLOP/s"] = benchmark::Counter(per_iter, benchmark::Counter::kIsIterationInvariantRate);
}

// cblas_sgemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), row-major = 101
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
CblasSgemm openblas() {
  static CblasSgemm f = [] {
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    return h ? reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm")) : nullptr;
  }();
  return f;
}

// args: M, N, K, transB
void BM_sgemm(benchmark::State& state, bool use_openblas) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const bool tb = state.range(3) != 0;
  if (use_openblas && !openblas()) {
    state.SkipWithError("libopenblas.so.0 not found (Debian: libopenblas0-openmp)");
    return;
  }
  auto a = random(size_t(M * K), 1), b = random(size_t(K * N), 2);
  std::vector<float> c(size_t(M * N));
  for (auto _ : state) {
    if (use_openblas)
      openblas()(101, 111, tb ? 112 : 111, int(M), int(N), int(K), 1.0f, a.data(), int(K), b.data(), tb ? int(K) : int(N),
                 0.0f, c.data(), int(N));
    else
      cpu::gemm<float>(false, tb, M, N, K, 1.0f, a.data(), K, b.data(), tb ? K : N, 0.0f, c.data(), N);
    benchmark::DoNotOptimize(c.data());
  }
  flops(state, 2.0 * double(M) * double(N) * double(K));
}

void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "tB"});
  for (int64_t s : {256, 512, 1024}) b->Args({s, s, s, 0});
  b->Args({6400, 576, 192, 1});  // ViT-Ti QKV projection, batch 128 x 50 tokens (x W^T)
  b->Args({6400, 768, 192, 1});  // ViT-Ti MLP up
  b->Args({6400, 192, 768, 1});  // ViT-Ti MLP down
  b->Args({16, 784, 144, 0});    // ResNet-20 stage-1 3x3 conv, one 28x28 image
  b->Args({64, 49, 576, 0});     // ResNet-20 stage-3 3x3 conv, one image
  b->UseRealTime();
}
BENCHMARK_CAPTURE(BM_sgemm, hpdt, false)->Apply(gemm_shapes);
BENCHMARK_CAPTURE(BM_sgemm, openblas, true)->Apply(gemm_shapes);

// args: batch, channels, size, stride (3x3, pad 1, c -> c*stride). NCHW: im2col + SGEMM (the oracle);
// NHWC: the direct convolution (the fast path), same shapes and FLOPs.
void BM_conv3x3(benchmark::State& state, int which, bool nhwc) {
  const int64_t n = state.range(0), c = state.range(1), hw = state.range(2), stride = state.range(3);
  const Conv2dShape s{n, c, hw, hw, c * stride, 3, 3, stride, 1};
  auto x = random(size_t(n * c * hw * hw), 3), w = random(size_t(s.c_out * c * 9), 4);
  std::vector<float> y(size_t(n * s.c_out * s.out_h() * s.out_w())), dx(x.size()), dw(w.size());
  for (auto _ : state) {
    if (nhwc) {
      if (which == 0) cpu::conv2d_forward_nhwc(s, x.data(), w.data(), nullptr, y.data());
      if (which == 1) cpu::conv2d_backward_data_nhwc(s, y.data(), w.data(), dx.data());
      if (which == 2) cpu::conv2d_backward_filter_nhwc(s, x.data(), y.data(), dw.data(), nullptr, false);
    } else {
      if (which == 0) cpu::conv2d_forward<float>(s, x.data(), w.data(), nullptr, y.data());
      if (which == 1) cpu::conv2d_backward_data<float>(s, y.data(), w.data(), dx.data());
      if (which == 2) cpu::conv2d_backward_filter<float>(s, x.data(), y.data(), dw.data(), nullptr, false);
    }
    benchmark::DoNotOptimize(y.data());
  }
  flops(state, 2.0 * double(n * s.c_out * s.out_h() * s.out_w()) * double(c * 9));
}
void conv_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "c", "hw", "stride"});
  b->Args({128, 16, 28, 1})->Args({128, 32, 14, 1})->Args({128, 64, 7, 1})->Args({128, 16, 28, 2});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_conv3x3, forward_nchw, 0, false)->Apply(conv_shapes);
BENCHMARK_CAPTURE(BM_conv3x3, backward_data_nchw, 1, false)->Apply(conv_shapes);
BENCHMARK_CAPTURE(BM_conv3x3, backward_filter_nchw, 2, false)->Apply(conv_shapes);
BENCHMARK_CAPTURE(BM_conv3x3, forward_nhwc, 0, true)->Apply(conv_shapes);
BENCHMARK_CAPTURE(BM_conv3x3, backward_data_nhwc, 1, true)->Apply(conv_shapes);
BENCHMARK_CAPTURE(BM_conv3x3, backward_filter_nhwc, 2, true)->Apply(conv_shapes);

// ViT-Ti attention core: batch 128, 50 tokens, 3 heads of 64
void BM_attention(benchmark::State& state, bool backward) {
  const int64_t b = 128, t = 50, heads = 3, dh = 64, d = heads * dh;
  auto qkv = random(size_t(b * t * 3 * d), 5);
  std::vector<float> probs(size_t(b * heads * t * t)), out(size_t(b * t * d)), dqkv(qkv.size());
  cpu::attention_forward<float>(b, t, heads, dh, qkv.data(), probs.data(), out.data());
  for (auto _ : state) {
    if (backward) cpu::attention_backward<float>(b, t, heads, dh, qkv.data(), probs.data(), out.data(), dqkv.data());
    else cpu::attention_forward<float>(b, t, heads, dh, qkv.data(), probs.data(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  flops(state, (backward ? 4.0 : 2.0) * 2.0 * double(b * heads) * double(t * t * dh));
}
BENCHMARK_CAPTURE(BM_attention, forward, false)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_attention, backward, true)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
BENCHMARK_MAIN();
