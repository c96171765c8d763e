// conv2d on the GPU: hpdt's implicit-GEMM kernels (v1 SIMT, v2 tensor cores, v3 wgmma + TMA) beside cuDNN, in TFLOP/s,
// on ResNet-50's convolutions at 224 x 224, batch 256, bf16 and f32, forward / backward-data / backward-filter, in both
// activation layouts: conv/... NCHW (kernels/cuda/conv.cu, cuDNN with NCHW descriptors), conv_nhwc/... NHWC
// (kernels/cuda/conv_nhwc.cu, cuDNN with NHWC descriptors and its NHWC filter layout). Rows of one layout, shape,
// dtype and direction are consecutive (v1, v2, v3, cudnn), and every row of ours carries vs_cudnn = cuDNN time / our
// time in the same layout (> 1: faster than cuDNN), so the ratio reads off one run. Every row also carries per_step,
// how many times a ResNet-50 step runs that convolution (resnet50_convs.h): the 23 distinct shapes of the step's 53
// convolutions are all here, six of them (the spotlight) with every variant and dtype, the rest in bf16 with v2, v3
// and cuDNN.
// v2_scalar_epilogue rows (spotlight, bf16): v2 with HPDT_CONV_V2_EPILOGUE=scalar, one output per store instead of
// 4 (the default since 2026-11-28; the same bits): what the 4-wide epilogue gains.
// v3_wgmma rows (NHWC, bf16): what `--conv v3` runs, ConvVariant::automatic with kernels::conv_choice() v3 — the
// forward, the backward-data phases and the backward-filter on conv v3 (kernels/cuda/conv_v3.cuh) where the
// reduced channels are whole 64-wide k tiles, 1x1 stride-1 convolutions on GEMM v3; registered only where one of
// those takes the row. v3_wgmma_ws rows: the same with HPDT_GEMM_V3_PIPELINE=ws (wgmma.cuh's warp-specialised
// pipeline in conv v3 and GEMM v3); v3_wgmma_pingpong rows with HPDT_GEMM_V3_PIPELINE=pingpong (its backward-filter
// on ws); v3_wgmma_im2col rows with HPDT_CONV_V3_LOAD=im2col (conv v3's pixels by TMA's im2col mode, runs of 128
// output pixels a tile, 64 a backward-filter k tile; since 2026-11-30), for the directions conv v3 runs (not the 1x1
// stride-1 GEMMs), with x_box: the time loading by boxes (the default) / this time, same run; v3_wgmma_tma_store rows
// (forward and backward-data) with HPDT_CONV_V3_STORE=tma and HPDT_GEMM_V3_STORE=tma (the TMA-store epilogue of conv
// v3 and, on the 1x1 stride-1 convolutions, of GEMM v3; since 2026-11-30, fourth session), with x_direct: the time
// with the direct stores (the default) / this time, same run (not registered where they cannot apply: a strided
// backward-data, the backward-filter).
// x_direct (v2 rows of a strided convolution of fewer than 16 channels, the stem: every direction, both layouts; the
// backward-data on space-to-depth since 2026-11-29, second session): the time
// with HPDT_CONV_SPACE_TO_DEPTH=off (the direct gathers) / the time on space-to-depth (the default since 2026-11-29;
// kernels/cuda/space_to_depth.cuh), same run.
// cudnn rows: the vendor backend's default, the first deterministic algorithm cuDNN's v7 heuristics rank;
// cudnn_find rows (bf16): --cudnn-algo find's, the fastest cuDNN's Find times (deterministic or not: PyTorch's
// cudnn.benchmark, as the PyTorch peer runs). Our bf16 rows carry vs_cudnn_find beside vs_cudnn; the summary
// compares against the faster of the two. On the H200 (2026-11-27) the heuristic's pick ran the 1x1 256->64 at 56^2
// NCHW forward at 19 TFLOP/s, so vs_cudnn alone flatters us.
// Every row also carries flop and bytes, one call's FLOPs and least traffic (summarize.py's roofline).
// Time: each call on the GPU alone (manual time; gpu_timing.h: the stream held while the host issues the call, so
// the launch gap, larger for cuDNN's calls than ours, is not counted), after a warm-up call (where Find runs); the
// vs_cudnn and x_* counters: 10 calls back to back each side. No TF32 for f32 (see kernels/cuda/conv_vendor.cu).
//   hpdt-bench-conv-cuda --benchmark_filter=bf16
#include <benchmark/benchmark.h>

#include <string>

#include "gpu_timing.h"
#include "hpdt/core/env.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/conv.h"
#include "hpdt/kernels/cuda/conv.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/layout.h"
#include "resnet50_convs.h"

namespace {

using namespace hpdt;
using namespace hpdt::bench;
using kernels::Conv2dEpilogue;
using kernels::Conv2dShape;
using kernels::Layout;

// The convolutions of a ResNet-50 step (resnet50_convs.h): the spotlight shapes (the stem, a 3x3 and a 1x1 of stage 1,
// a 3x3 and a 1x1 of stage 3 -- 14 x 14 planes: NCHW's 1x1 loads 8-byte chunks there, kDirect4 --, the strided 1x1
// projection into stage 4) with every variant, f32 too; the other 17 in bf16 with v2, v3 and cuDNN, so that
// summarize.py can add up a whole step's convolutions (the per_step counter).
const auto& kCases = bench::kResNet50Convs;
constexpr int64_t kBatch = 256;

enum class Dir { forward, backward_data, backward_filter };
enum class Impl { v1, v2, v2scalar, v3, v3ws, v3pingpong, v3im2col, v3tma, cudnn, cudnn_find };
const char* dir_name(Dir d) { return d == Dir::forward ? "fwd" : d == Dir::backward_data ? "bwd_data" : "bwd_filter"; }
const char* impl_name(Impl i) {
  return i == Impl::v1           ? "v1_simt"
         : i == Impl::v2         ? "v2_tensor_core"
         : i == Impl::v2scalar   ? "v2_scalar_epilogue"
         : i == Impl::v3         ? "v3_wgmma"
         : i == Impl::v3ws       ? "v3_wgmma_ws"
         : i == Impl::v3pingpong ? "v3_wgmma_pingpong"
         : i == Impl::v3im2col   ? "v3_wgmma_im2col"
         : i == Impl::v3tma      ? "v3_wgmma_tma_store"
         : i == Impl::cudnn      ? "cudnn"
                                 : "cudnn_find";
}
bool is_cudnn(Impl i) { return i == Impl::cudnn || i == Impl::cudnn_find; }
bool is_v3(Impl i) {
  return i == Impl::v3 || i == Impl::v3ws || i == Impl::v3pingpong || i == Impl::v3im2col || i == Impl::v3tma;
}
// Whether `--conv v3` runs (case, direction) on a wgmma kernel (NHWC, 16-bit): 1x1 stride-1 unpadded convolutions
// on GEMM v3; otherwise conv v3 for a forward with c_in % 64 == 0, a backward-data with c_out % 64 == 0 and a
// backward-filter with c_in % 64 == 0, c_out % 8 == 0 (strides up to 8).
bool v3_takes(const Conv2dShape& s, Dir d) {
  if (s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0) return true;
  if (d == Dir::forward) return s.c_in % 64 == 0;
  if (d == Dir::backward_data) return s.c_out % 64 == 0;
  return s.c_in % 64 == 0 && s.c_out % 8 == 0;
}
// Whether conv v3 itself (not GEMM v3) runs (case, direction): where its pixels can come by im2col.
bool conv_v3_loads_pixels(const Conv2dShape& s, Dir d) {
  return !(s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0) && v3_takes(s, d);
}

struct Buffers {
  Tensor x, w, y, dx, dw;
};

Buffers make_buffers(const Conv2dShape& s, DType dt, Layout layout, const Stream& stream) {
  const Device d = Device::cuda(0);
  const AllocOptions o{.stream = &stream};
  const bool nhwc = layout == Layout::nhwc;
  const Shape xs = nhwc ? Shape{s.n, s.h, s.w, s.c_in} : Shape{s.n, s.c_in, s.h, s.w};
  const Shape ys = nhwc ? Shape{s.n, s.out_h(), s.out_w(), s.c_out} : Shape{s.n, s.c_out, s.out_h(), s.out_w()};
  Buffers b;
  b.x = Tensor::empty(xs, dt, d, o);
  b.w = Tensor::empty({s.c_out, s.c_in, s.kh, s.kw}, dt, d, o);
  b.y = Tensor::empty(ys, dt, d, o);
  b.dx = Tensor::empty(xs, dt, d, o);
  b.dw = Tensor::empty({s.c_out, s.c_in, s.kh, s.kw}, dt, d, o);
  kernels::fill_uniform(b.x, -1, 1, 1, 0, stream);
  kernels::fill_uniform(b.w, -1, 1, 2, 0, stream);
  kernels::fill_uniform(b.y, -1, 1, 3, 0, stream);  // also dy
  kernels::fill(b.dw, 0, stream);
  return b;
}

void run_once(const Conv2dShape& s, Buffers& b, Dir d, Impl impl, Layout layout, const Stream& stream) {
  namespace kc = kernels::cuda;
  const bool v3 = is_v3(impl);
  const kc::ConvVariant v = v3                                           ? kc::ConvVariant::automatic
                            : impl == Impl::v2 || impl == Impl::v2scalar ? kc::ConvVariant::v2_tensor_core
                                                                         : kc::ConvVariant::v1_simt;
  // v2scalar: v2 writing one output per store (its 4-wide epilogue off), the A/B of that epilogue
  const ScopedEnv epilogue("HPDT_CONV_V2_EPILOGUE", impl == Impl::v2scalar ? "scalar" : nullptr);
  // v3: the automatic variant under --conv v3's setting, for this call; v3ws, v3pingpong: on those pipelines
  const kernels::ScopedConvChoice choice(v3 ? kernels::ConvChoice::v3 : kernels::conv_choice());
  const ScopedEnv pipeline("HPDT_GEMM_V3_PIPELINE", impl == Impl::v3ws         ? "ws"
                                                    : impl == Impl::v3pingpong ? "pingpong"
                                                                               : nullptr);
  // v3im2col: A tiles by im2col; the others conv v3's default (boxes)
  const ScopedEnv load("HPDT_CONV_V3_LOAD", impl == Impl::v3im2col ? "im2col" : nullptr);
  // v3tma: conv v3's and GEMM v3's epilogues by TMA stores where they apply; the others their default (direct)
  const ScopedEnv conv_store("HPDT_CONV_V3_STORE", impl == Impl::v3tma ? "tma" : nullptr),
      gemm_store("HPDT_GEMM_V3_STORE", impl == Impl::v3tma ? "tma" : nullptr);
  const kernels::ScopedCudnnAlgo how(impl == Impl::cudnn_find ? kernels::CudnnAlgo::find : kernels::CudnnAlgo::heuristic);
  const bool nhwc = layout == Layout::nhwc;
  switch (d) {
    case Dir::forward:
      if (is_cudnn(impl))
        kc::conv2d_forward_vendor(s, b.x, b.w, Conv2dEpilogue{}, b.y, stream, layout);
      else if (nhwc)
        kc::conv2d_forward_nhwc(s, b.x, b.w, Conv2dEpilogue{}, b.y, stream, v);
      else
        kc::conv2d_forward(s, b.x, b.w, Conv2dEpilogue{}, b.y, stream, v);
      break;
    case Dir::backward_data:
      if (is_cudnn(impl))
        kc::conv2d_backward_data_vendor(s, b.y, b.w, b.dx, stream, layout);
      else if (nhwc)
        kc::conv2d_backward_data_nhwc(s, b.y, b.w, b.dx, stream, v);
      else
        kc::conv2d_backward_data(s, b.y, b.w, b.dx, stream, v);
      break;
    case Dir::backward_filter:
      if (is_cudnn(impl))
        kc::conv2d_backward_filter_vendor(s, b.x, b.y, b.dw, nullptr, stream, layout);
      else if (nhwc)
        kc::conv2d_backward_filter_nhwc(s, b.x, b.y, b.dw, nullptr, stream, v);
      else
        kc::conv2d_backward_filter(s, b.x, b.y, b.dw, nullptr, stream, v);
      break;
  }
}

void BM_conv(benchmark::State& state, int case_index, DType dt, Dir d, Impl impl, Layout layout) {
  if (skip_without_gpu(state)) return;
  const Conv2dShape s = kCases[case_index].shape(kBatch);
  // One stream for the process (bench_stream): the caching allocator reuses a block only on the stream it was freed
  // on, so a stream per benchmark would keep every benchmark's ~1 GB of buffers cached.
  const Stream& stream = bench_stream();
  Buffers b = make_buffers(s, dt, layout, stream);
  run_once(s, b, d, impl, layout, stream);  // warm-up: cuDNN's heuristics or Find, caching allocator
  stream.synchronize();
  time_row(state, [&] { run_once(s, b, d, impl, layout, stream); });
  const double flops = 2.0 * double(s.n * s.out_h() * s.out_w()) * double(s.c_out) * double(s.c_in * s.kh * s.kw);
  state.counters["TFLOP/s"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  // One call's FLOPs and least traffic (input, weights and output once each; the same in every direction), for
  // summarize.py's roofline of a step's convolutions
  state.counters["flop"] = flops;
  state.counters["bytes"] = double(b.x.nbytes() + b.w.nbytes() + b.y.nbytes());
  // times a ResNet-50 step runs this (the stem's backward-data: never)
  state.counters["per_step"] = kCases[case_index].stem() && d == Dir::backward_data ? 0 : kCases[case_index].per_step;
  if (!is_cudnn(impl)) {
    // (the ratio counters: 10 calls back to back each side, gpu_timing.h)
    auto back_to_back = [&](Impl which) {
      return seconds_back_to_back([&] { run_once(s, b, d, which, layout, stream); }, 10);
    };
    const double ours = back_to_back(impl);
    // cuDNN right after ours (until 2026-11-30 once a process, at the case's first row)
    state.counters["vs_cudnn"] = back_to_back(Impl::cudnn) / ours;
    if (dt == DType::bf16) state.counters["vs_cudnn_find"] = back_to_back(Impl::cudnn_find) / ours;
    if (impl == Impl::v2 && s.stride >= 2 && s.c_in < 16 && s.kh >= s.stride &&
        s.kw >= s.stride) {  // where kernels/cuda/space_to_depth.cuh applies (the backward-data: no residual here)
      const ScopedEnv direct("HPDT_CONV_SPACE_TO_DEPTH", "off");
      state.counters["x_direct"] = back_to_back(impl) / ours;
    }
    if (impl == Impl::v3im2col) state.counters["x_box"] = back_to_back(Impl::v3) / ours;
    if (impl == Impl::v3tma) state.counters["x_direct"] = back_to_back(Impl::v3) / ours;
  }
}

const bool registered = [] {
  for (Layout layout : {Layout::nchw, Layout::nhwc})
    for (DType dt : {DType::bf16, DType::f32})
      for (int c = 0; c < int(std::size(kCases)); ++c)
        for (Dir d : {Dir::forward, Dir::backward_data, Dir::backward_filter})
          for (Impl impl : {Impl::v1, Impl::v2, Impl::v2scalar, Impl::v3, Impl::v3ws, Impl::v3pingpong, Impl::v3im2col,
                            Impl::v3tma, Impl::cudnn, Impl::cudnn_find}) {
            const bool v3 = is_v3(impl);
            if (impl == Impl::cudnn_find && dt != DType::bf16) continue;  // the targets' dtype
            if (impl == Impl::v2scalar && (dt != DType::bf16 || !kCases[c].spotlight)) continue;
            if ((impl == Impl::v2 || v3) && dt == DType::f32) continue;  // tensor cores: f16/bf16 only
            if (v3 && (layout != Layout::nhwc || !v3_takes(kCases[c].shape(kBatch), d))) continue;
            if (impl == Impl::v3im2col && !conv_v3_loads_pixels(kCases[c].shape(kBatch), d)) continue;
            // TMA stores: the forwards and the stride-1 backward-datas (a strided one's phases store directly; the
            // backward-filter has dw's own stores)
            if (impl == Impl::v3tma && (d == Dir::backward_filter || (d == Dir::backward_data && kCases[c].stride > 1)))
              continue;
            // the other shapes of the step: bf16, v2, v3 (the automatic choice) and cuDNN
            if (!kCases[c].spotlight && (dt != DType::bf16 || impl == Impl::v1 || impl == Impl::v3ws ||
                                         impl == Impl::v3pingpong))
              continue;
            const std::string name = std::string(layout == Layout::nhwc ? "conv_nhwc/" : "conv/") + kCases[c].name +
                                     "/" + std::string(dtype_name(dt)) + "/" + dir_name(d) + "/" + impl_name(impl);
            benchmark::RegisterBenchmark(name.c_str(), BM_conv, c, dt, d, impl, layout)
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond);  // --benchmark_min_time sets the time a row (benchmarks.txt: 0.05 s)
          }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
