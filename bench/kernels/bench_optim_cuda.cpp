// GPU optimizer step and gradient compression, in GB/s against the bytes each op must move, each call timed on the
// GPU alone (manual time; gpu_timing.h).
//
//   fused_adamw      the fused mixed-precision AdamW step (f32 master, m, v; bf16 gradients; bf16 model
//                    copy): reads p, m, v (f32) and g (bf16), writes p, m, v and the model copy: 28 bytes per
//                    parameter. grad_stats (the check + norm pass) reads g: 2 bytes. two_pass = both: 30.
//   unfused_adamw    the peer: the sequence nn runs today, on our CUDA ops (cast bf16 grads to f32, scale by
//                    1/loss scale, has_nonfinite and clip_grad_norm, which synchronise, adamw_step, cast the
//                    master to the bf16 model); counted against the same 30 bytes, x_unfused = its time / the
//                    fused pair's.
//   copy             a device-to-device copy of 14 bytes per parameter (28 moved): the bandwidth yardstick.
//   topk, qsgd       on 25M values: GB/s of the f32 input read once (topk reads it 6 times: 4 radix passes,
//                    count, scatter); QSGD quantise reads x and writes the residual (8 bytes + bits/8 + scales),
//                    dequantise += reads the message and out and writes out.
// Arena sizes: ResNet-50 25,557,032 parameters, ViT-B/16 86,567,656.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gpu_timing.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/compress.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/optim.h"

namespace {

using namespace hpdt;
using namespace hpdt::bench;

constexpr int64_t kResNet50 = 25557032, kViTB = 86567656, kCompressN = 25000000;

Tensor device_uniform(int64_t n, DType dt, float lo, float hi, uint64_t seed) {
  const Stream& s = bench_stream();
  Tensor t = Tensor::empty({n}, dt, Device::cuda(0), AllocOptions{.stream = &s});
  kernels::fill_uniform(t, lo, hi, seed, 0, s);
  return t;
}

// Times `op` a call an iteration on the GPU alone (one warm-up call first; gpu_timing.h); sets bytes/s from
// bytes_per_call. A call that synchronises with the host (the unfused peer's checks) counts its waits: each of its
// iterations shows in launch_gaps.
double time_op(benchmark::State& state, double bytes_per_call, const std::function<void()>& op) {
  const Stream& s = bench_stream();
  op();
  s.synchronize();
  const double per_call_s = time_row(state, op);
  state.counters["GB/s"] = bytes_per_call / per_call_s / 1e9;
  state.counters["ms"] = per_call_s * 1e3;
  return per_call_s;
}

// The fused pair's time per arena size, for the unfused peer's ratio.
std::map<int64_t, double>& fused_pair_seconds() {
  static std::map<int64_t, double> m;
  return m;
}
std::mutex fused_mutex;

struct AdamWArena {
  Tensor p, m, v, g16, model, stats, g32;
  explicit AdamWArena(int64_t n)
      : p(device_uniform(n, DType::f32, -1, 1, 1)),
        m(device_uniform(n, DType::f32, -0.01f, 0.01f, 2)),
        v(device_uniform(n, DType::f32, 0, 1e-4f, 3)),
        g16(device_uniform(n, DType::bf16, -1024, 1024, 4)),
        model(Tensor::empty({n}, DType::bf16, Device::cuda(0), AllocOptions{.stream = &bench_stream()})),
        stats(kernels::make_grad_stats(Device::cuda(0), bench_stream())) {}
};

kernels::FusedStepOptions adamw_options() {
  kernels::FusedStepOptions o;
  o.kind = kernels::OptimizerKind::adamw;
  o.step = 1000;
  o.inv_scale = 1.0f / 1024;
  o.max_norm = 1.0;
  return o;
}

void BM_fused_adamw(benchmark::State& state, int64_t n) {
  if (skip_without_gpu(state)) return;
  AdamWArena a(n);
  const kernels::FusedStepOptions o = adamw_options();
  kernels::grad_stats({a.g16}, o.inv_scale, a.stats, bench_stream());
  time_op(state, 28.0 * double(n), [&] {
    kernels::fused_step({a.p, a.g16, a.m, a.v, a.model, a.stats}, o, bench_stream());
  });
}

void BM_grad_stats(benchmark::State& state, int64_t n) {
  if (skip_without_gpu(state)) return;
  AdamWArena a(n);
  time_op(state, 2.0 * double(n), [&] { kernels::grad_stats({a.g16}, 1.0f / 1024, a.stats, bench_stream()); });
}

void BM_two_pass_adamw(benchmark::State& state, int64_t n) {
  if (skip_without_gpu(state)) return;
  AdamWArena a(n);
  const kernels::FusedStepOptions o = adamw_options();
  const double t = time_op(state, 30.0 * double(n), [&] {
    kernels::grad_stats({a.g16}, o.inv_scale, a.stats, bench_stream());
    kernels::fused_step({a.p, a.g16, a.m, a.v, a.model, a.stats}, o, bench_stream());
  });
  std::lock_guard<std::mutex> lock(fused_mutex);
  fused_pair_seconds()[n] = t;
}

void BM_unfused_adamw(benchmark::State& state, int64_t n) {
  if (skip_without_gpu(state)) return;
  AdamWArena a(n);
  a.g32 = Tensor::empty({n}, DType::f32, Device::cuda(0), AllocOptions{.stream = &bench_stream()});
  const kernels::AdamWOptions ao;
  const Stream& s = bench_stream();
  const double t = time_op(state, 30.0 * double(n), [&] {
    kernels::cast(a.g16, a.g32, s);
    kernels::scale(a.g32, 1.0f / 1024, s);
    if (!kernels::has_nonfinite(a.g32, s)) {
      std::vector<Tensor> g = {a.g32};
      kernels::clip_grad_norm(g, 1.0, s);
      kernels::adamw_step(a.p, a.g32, a.m, a.v, ao, 1000, s);
      kernels::cast(a.p, a.model, s);
    }
  });
  std::lock_guard<std::mutex> lock(fused_mutex);
  if (fused_pair_seconds().count(n)) state.counters["x_unfused"] = t / fused_pair_seconds()[n];
}

void BM_copy(benchmark::State& state, int64_t n) {
  if (skip_without_gpu(state)) return;
  const int64_t bytes = 14 * n;
  Tensor src = device_uniform(bytes / 4, DType::f32, -1, 1, 5), dst = device_uniform(bytes / 4, DType::f32, -1, 1, 6);
  time_op(state, 2.0 * double(bytes), [&] { copy(src, dst, bench_stream()); });
}

void BM_topk(benchmark::State& state, double ratio) {
  if (skip_without_gpu(state)) return;
  const int64_t n = kCompressN, k = kernels::topk_count(n, ratio);
  Tensor x = device_uniform(n, DType::f32, -1, 1, 7);
  const Stream& s = bench_stream();
  Tensor idx = Tensor::empty({k}, DType::i32, Device::cuda(0), AllocOptions{.stream = &s});
  Tensor val = Tensor::empty({k}, DType::f32, Device::cuda(0), AllocOptions{.stream = &s});
  time_op(state, 4.0 * double(n), [&] { kernels::topk_select(x, k, idx, val, s); });
  state.counters["k"] = double(k);
}

void BM_qsgd_quantize(benchmark::State& state, int bits) {
  if (skip_without_gpu(state)) return;
  const int64_t n = kCompressN;
  const Stream& s = bench_stream();
  Tensor x = device_uniform(n, DType::f32, -1, 1, 8), res = device_uniform(n, DType::f32, -1, 1, 9);
  Tensor packed =
      Tensor::empty({kernels::qsgd_packed_bytes(n, bits)}, DType::u8, Device::cuda(0), AllocOptions{.stream = &s});
  Tensor scales = Tensor::empty({kernels::qsgd_chunks(n)}, DType::f32, Device::cuda(0), AllocOptions{.stream = &s});
  const double bytes = 8.0 * double(n) + double(packed.nbytes() + scales.nbytes());
  time_op(state, bytes, [&] { kernels::qsgd_quantize(x, bits, {1, 2, 0}, packed, scales, &res, s); });
}

void BM_qsgd_dequantize(benchmark::State& state, int bits) {
  if (skip_without_gpu(state)) return;
  const int64_t n = kCompressN;
  const Stream& s = bench_stream();
  Tensor x = device_uniform(n, DType::f32, -1, 1, 8), out = device_uniform(n, DType::f32, -1, 1, 9);
  Tensor packed =
      Tensor::empty({kernels::qsgd_packed_bytes(n, bits)}, DType::u8, Device::cuda(0), AllocOptions{.stream = &s});
  Tensor scales = Tensor::empty({kernels::qsgd_chunks(n)}, DType::f32, Device::cuda(0), AllocOptions{.stream = &s});
  kernels::qsgd_quantize(x, bits, {1, 2, 0}, packed, scales, nullptr, s);
  const double bytes = 8.0 * double(n) + double(packed.nbytes() + scales.nbytes());
  time_op(state, bytes, [&] { kernels::qsgd_dequantize(packed, scales, bits, out, true, s); });
}

#define HPDT_ARENA_BENCH(fn)                                                                  \
  BENCHMARK_CAPTURE(fn, resnet50, kResNet50)->UseManualTime()->Unit(benchmark::kMicrosecond); \
  BENCHMARK_CAPTURE(fn, vit_b, kViTB)->UseManualTime()->Unit(benchmark::kMicrosecond)

HPDT_ARENA_BENCH(BM_fused_adamw);
HPDT_ARENA_BENCH(BM_grad_stats);
HPDT_ARENA_BENCH(BM_two_pass_adamw);
HPDT_ARENA_BENCH(BM_unfused_adamw);
HPDT_ARENA_BENCH(BM_copy);
BENCHMARK_CAPTURE(BM_topk, ratio_0_01, 0.01)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_topk, ratio_0_001, 0.001)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_qsgd_quantize, bits_4, 4)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_qsgd_quantize, bits_8, 8)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_qsgd_dequantize, bits_4, 4)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
