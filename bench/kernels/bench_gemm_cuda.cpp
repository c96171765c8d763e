// GPU GEMM: hpdt's variants (v1 SIMT, v2 mma.sync tensor cores, v3 Hopper wgmma + TMA) beside cuBLAS
// (cublasGemmEx, f32 compute)
// on the same shapes, each call timed on the GPU alone (manual time; gpu_timing.h: the stream held while the host
// issues it, so the launch gap is not counted).
// Counters: TFLOP/s (2 M N K per call) and, for ours, x_cublas = our throughput / cuBLAS's on the same
// shape, dtypes and transposes (both 20 calls back to back, cuBLAS's right after ours), so the ratio reads off one
// run. The label is the variant that actually ran (v3 falls back to v2 off k-major x k-major
// layouts, v2 to v1 where it cannot take a layout).
//
// Shapes: square 4096^3 (bf16 NN and NT, f32), 8192^3 bf16 (NN and NT), and the GEMMs of a ViT-B/16 training step at
// batch 64 (rows = 64 * 197 tokens): qkv 768->2304, attention out 768->768, fc1 768->3072, fc2 3072->768, each as
// forward (y = x w^T: NT), data gradient (dx = dy w: NN) and weight gradient (dw += dy^T x: TN, beta 1). The MLP's GELU
// fused into fc1's forward GEMM (y = gelu(x w^T), keeping x w^T) and fc2's dx GEMM (dx times gelu'(h)): rows
// fc1_fwd_gelu and fc2_dx_gelu_grad, with x_unfused = (the plain GEMM + the separate GELU kernel, same run) / the fused
// GEMM. ksweep_* rows: fc1's forward shape at K = 64 .. 3072 (plain and GELU), for the line through time against K that
// splits a call into its fixed part and the k loop (summarize.py).
// ResNet-50's 1x1 convolutions at 56^2, batch 256, as the NHWC GEMMs --conv v3 runs on v3 (forward NT, backward-data
// NN), plain and with the batch norm's reduction in the epilogue (2026-11-28, sm90a/column_stats.cuh): rows
// ..._bn_stats (the forward's column statistics) and ..._bn_grad_sums (the backward-data's mask and sums), with
// x_plain = the plain GEMM's time / this row's (same run): what the reduction costs the GEMM, against the batch norm
// pass it saves (one read of C, or the reduce kernel's 4 passes, at the GPU's bandwidth); ..._bn_grad_sums_residual
// adds a residual (the skip connection's gradient, as in each block's first convolution).
// _tma_store rows (2026-11-30): v3's three pipelines with the TMA-store epilogue (HPDT_GEMM_V3_STORE=tma,
// sm90a/tma_store_epilogue.cuh) on the plain shapes whose time is most in their stores (the K sweep, ResNet-50's 1x1
// convolutions, ViT-B/16's forwards, 4096^3 NT), with x_direct = the direct stores' time / the TMA stores' (same run).
// x_no_prefetch (v3 rows whose epilogue reads inputs: C with beta != 0, the GELU gradient's input, batch norm's x and
// y, the residual) = the row's time with HPDT_EPILOGUE_PREFETCH=off / its time (same run): what prefetching the
// epilogue's inputs into L2 at each tile's start gains (band_epilogue.cuh, 2026-11-29). x_prefetch_unit (the same
// rows) = the row's time with HPDT_EPILOGUE_PREFETCH=unit / its time: what the persistent pipelines' lookahead gains
// (each block prefetches its next unit's inputs as a unit starts, prefetch.cuh, 2026-11-30; the barrier pipeline runs
// one unit a block and has none: ~1).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_timing.h"
#include "hpdt/core/env.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/activation.h"
#include "hpdt/kernels/channel_stats.h"
#include "hpdt/kernels/cuda/gemm.h"
#include "hpdt/kernels/elementwise.h"

namespace {

using namespace hpdt;
using namespace hpdt::bench;
using kernels::cuda::GemmVariant;

struct GemmShape {
  std::string name;
  int64_t M, N, K;
  bool ta, tb;
  float beta;
  int act = 0;  // the epilogue: 1 GELU (erf) keeping its input, 2 the GELU's gradient
  int bn = 0;   // batch norm's reduction in the epilogue: 1 the column statistics, 2 the backward sums with a mask
  bool residual = false;  // a residual [M, N] added in the epilogue
};

// A, B, C of one shape on the GPU, uniform in [-1, 1).
struct Operands {
  Tensor A, B, C, H, G;  // H: the GELU's input (kept, or read for the gradient), G: the unfused GELU's output
  Tensor X, Y, Mean;     // bn 2: the batch norm's input and output, [M, N] in C's dtype, and its mean
  Tensor R;              // the residual
  int64_t lda, ldb, ldc;
};

Operands make_operands(const GemmShape& sh, DType ab, DType c) {
  const Stream& s = bench_stream();
  const Device dev = Device::cuda(0);
  Operands o;
  o.lda = sh.ta ? sh.M : sh.K;
  o.ldb = sh.tb ? sh.K : sh.N;
  o.ldc = sh.N;
  o.A = Tensor::empty({sh.ta ? sh.K : sh.M, o.lda}, ab, dev, AllocOptions{.stream = &s});
  o.B = Tensor::empty({sh.tb ? sh.N : sh.K, o.ldb}, ab, dev, AllocOptions{.stream = &s});
  o.C = Tensor::empty({sh.M, sh.N}, c, dev, AllocOptions{.stream = &s});
  kernels::fill_uniform(o.A, -1, 1, 1, 0, s);
  kernels::fill_uniform(o.B, -1, 1, 2, 0, s);
  kernels::fill_uniform(o.C, -1, 1, 3, 0, s);
  if (sh.act) {
    o.H = Tensor::empty({sh.M, sh.N}, c, dev, AllocOptions{.stream = &s});
    o.G = Tensor::empty({sh.M, sh.N}, c, dev, AllocOptions{.stream = &s});
    kernels::fill_uniform(o.H, -1, 1, 4, 0, s);
  }
  if (sh.bn == 2) {
    o.X = Tensor::empty({sh.M, sh.N}, c, dev, AllocOptions{.stream = &s});
    o.Y = Tensor::empty({sh.M, sh.N}, c, dev, AllocOptions{.stream = &s});
    o.Mean = Tensor::empty({sh.N}, DType::f32, dev, AllocOptions{.stream = &s});
    kernels::fill_uniform(o.X, -1, 1, 5, 0, s);
    kernels::fill_uniform(o.Y, -1, 1, 6, 0, s);
    kernels::fill_uniform(o.Mean, -0.1f, 0.1f, 7, 0, s);
  }
  if (sh.residual) {
    o.R = Tensor::empty({sh.M, sh.N}, c, dev, AllocOptions{.stream = &s});
    kernels::fill_uniform(o.R, -1, 1, 8, 0, s);
  }
  return o;
}

void run_gemm(const GemmShape& sh, const Operands& o, DType ab, DType c, GemmVariant v) {
  kernels::cuda::GemmEpilogue epi;
  epi.gelu = sh.act == 1;
  epi.pre_activation = sh.act == 1 ? o.H.data() : nullptr;
  epi.gelu_grad_input = sh.act == 2 ? o.H.data() : nullptr;
  epi.residual = sh.residual ? o.R.data() : nullptr;
  kernels::ChannelStats stats;
  kernels::ChannelGradSums sums;
  if (sh.bn == 1) epi.column_stats = &stats;
  if (sh.bn == 2) {
    sums.x = o.X, sums.y = o.Y, sums.mean = o.Mean;
    epi.column_grad_sums = &sums;
  }
  kernels::cuda::gemm(sh.ta, sh.tb, sh.M, sh.N, sh.K, 1.0f, o.A.data(), o.lda, o.B.data(), o.ldb, sh.beta, o.C.data(),
                      o.ldc, ab, c, epi, bench_stream(), v);
}

// The same GEMM without the activation, then the activation as its own kernel (what the fusion saves).
void run_unfused(const GemmShape& sh, Operands& o, DType ab, DType c, GemmVariant v) {
  GemmShape plain = sh;
  plain.act = 0;
  run_gemm(plain, o, ab, c, v);
  if (sh.act == 1) kernels::gelu_forward(o.C, kernels::GeluForm::erf, o.G, bench_stream());
  if (sh.act == 2) kernels::gelu_backward(o.H, o.C, kernels::GeluForm::erf, o.G, bench_stream());
}

// v3_pipeline: HPDT_GEMM_V3_PIPELINE for this row (v3's "ws" and "pingpong" rows), or null for the default; v3_blocks:
// HPDT_GEMM_V3_CTAS (the ws pipeline's block cap), or null for one block per SM; v3_tile: HPDT_GEMM_V3_TILE, or null
// for the tile v3 chooses; v3_store: HPDT_GEMM_V3_STORE ("tma": the _tma_store rows), or null for the default
void bench_gemm(benchmark::State& state, GemmShape sh, DType ab, DType c, GemmVariant v, const char* v3_pipeline,
                const char* v3_blocks, const char* v3_tile, const char* v3_store) {
  if (skip_without_gpu(state)) return;
  const ScopedEnv scope("HPDT_GEMM_V3_PIPELINE", v3_pipeline), blocks("HPDT_GEMM_V3_CTAS", v3_blocks),
      tile("HPDT_GEMM_V3_TILE", v3_tile), store("HPDT_GEMM_V3_STORE", v3_store);
  try {
    Operands o = make_operands(sh, ab, c);
    const Stream& s = bench_stream();
    run_gemm(sh, o, ab, c, v);  // warm-up: shared-memory attributes, cuBLAS handle and heuristics
    s.synchronize();
    const double per_call = time_row(state, [&] { run_gemm(sh, o, ab, c, v); });
    const double flop = 2.0 * double(sh.M) * double(sh.N) * double(sh.K);
    state.counters["TFLOP/s"] = flop / per_call / 1e12;
    // The x_* counters time both sides alike: 20 calls back to back (seconds_back_to_back). Set against the loop's
    // per_call (until 2026-11-30 each call timed with its launch gap) they leaned toward the other side: on the H200
    // (2026-11-29) x_no_prefetch read 0.86-0.95 on weight gradients whose split-K units prefetch nothing. Timed only
    // for a row that has such a counter (every one but a plain cuBLAS row).
    const double own = v != GemmVariant::vendor || sh.act || sh.bn
                           ? seconds_back_to_back([&] { run_gemm(sh, o, ab, c, v); }, 20)
                           : 0.0;
    // cuBLAS right after ours (until 2026-11-30 once a process, at the shape's first row: 8192^3 NN read 1.04 by the
    // rows and 0.85 by this counter on the H200, 2026-11-29, on 1.6 ms calls that no launch gap explains)
    if (v != GemmVariant::vendor)
      state.counters["x_cublas"] = seconds_back_to_back([&] { run_gemm(sh, o, ab, c, GemmVariant::vendor); }, 20) / own;
    if (v3_store) {  // the same row with the direct stores, back to back
      const ScopedEnv direct("HPDT_GEMM_V3_STORE", "direct");
      state.counters["x_direct"] = seconds_back_to_back([&] { run_gemm(sh, o, ab, c, v); }, 20) / own;
    }
    if (sh.act) state.counters["x_unfused"] = seconds_back_to_back([&] { run_unfused(sh, o, ab, c, v); }, 20) / own;
    if (sh.bn) {
      GemmShape plain = sh;
      plain.bn = 0;
      state.counters["x_plain"] = seconds_back_to_back([&] { run_gemm(plain, o, ab, c, v); }, 20) / own;
    }
    if (v == GemmVariant::v3_wgmma && (sh.beta != 0.0f || sh.act == 2 || sh.bn == 2 || sh.residual)) {
      const ScopedEnv off("HPDT_EPILOGUE_PREFETCH", "off");
      state.counters["x_no_prefetch"] = seconds_back_to_back([&] { run_gemm(sh, o, ab, c, v); }, 20) / own;
      const ScopedEnv unit("HPDT_EPILOGUE_PREFETCH", "unit");
      state.counters["x_prefetch_unit"] = seconds_back_to_back([&] { run_gemm(sh, o, ab, c, v); }, 20) / own;
    }
    state.SetLabel(std::string(
        kernels::cuda::gemm_variant_name(kernels::cuda::gemm_resolve(v, sh.ta, sh.tb, o.lda, o.ldb, o.A.data(),
                                                                     o.B.data(), ab, bench_stream()))));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// One row per variant; v3 three times: its default pipeline ("barrier", row v3_wgmma), the warp-specialised one,
// persistent (row v3_wgmma_ws), and "pingpong" (row v3_wgmma_pingpong: ws's producer, each consumer warpgroup a
// whole 128 x 128 tile in turns, one's epilogue under the other's MMAs); with v3_ablation three more: the ws
// pipeline with a block per tile (row v3_wgmma_ws_per_tile: HPDT_GEMM_V3_CTAS above any tile count), which tells
// what the persistence gains, and the default pipeline on each block tile (rows v3_wgmma_wide, v3_wgmma_narrow:
// HPDT_GEMM_V3_TILE), which tells whether the tile's wave model (split_k.cuh: wide_tile_by_waves) chose right.
// v3_pipelines false: v3's default pipeline only. v3_stores: each pipeline's row again with the TMA-store epilogue
// (rows v3_wgmma_tma_store, v3_wgmma_ws_tma_store, v3_wgmma_pingpong_tma_store: HPDT_GEMM_V3_STORE=tma, 2026-11-30),
// with x_direct = the same row's time with the direct stores / its time (same run, back to back).
void add(const GemmShape& sh, DType ab, DType c, std::initializer_list<GemmVariant> variants, bool v3_ablation = false,
         bool v3_pipelines = true, bool v3_stores = false) {
  struct Row {
    const char* suffix;
    const char* pipeline;
    const char* blocks;
    const char* tile;
    const char* store;
    bool ablation;
  };
  const Row rows[] = {{"", nullptr, nullptr, nullptr, nullptr, false},
                      {"_ws", "ws", nullptr, nullptr, nullptr, false},
                      {"_pingpong", "pingpong", nullptr, nullptr, nullptr, false},
                      {"_ws_per_tile", "ws", "2147483647", nullptr, nullptr, true},
                      {"_wide", nullptr, nullptr, "wide", nullptr, true},
                      {"_narrow", nullptr, nullptr, "narrow", nullptr, true},
                      {"_tma_store", nullptr, nullptr, nullptr, "tma", false},
                      {"_ws_tma_store", "ws", nullptr, nullptr, "tma", false},
                      {"_pingpong_tma_store", "pingpong", nullptr, nullptr, "tma", false}};
  for (GemmVariant v : variants)
    for (const Row& r : rows) {
      if ((r.pipeline || r.tile || r.store) && v != GemmVariant::v3_wgmma) continue;
      if (r.ablation && !v3_ablation) continue;
      if (r.pipeline && !v3_pipelines) continue;
      if (r.store && !v3_stores) continue;
      const std::string name = "gemm/" + std::string(dtype_name(ab)) + "->" + std::string(dtype_name(c)) + "/" +
                               sh.name + "/" + std::string(kernels::cuda::gemm_variant_name(v)) + r.suffix;
      benchmark::RegisterBenchmark(name.c_str(), bench_gemm, sh, ab, c, v, r.pipeline, r.blocks, r.tile, r.store)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
}

void register_all() {
  const auto all = {GemmVariant::v1_simt, GemmVariant::v2_mma, GemmVariant::v3_wgmma, GemmVariant::vendor};
  const auto tensor_cores = {GemmVariant::v2_mma, GemmVariant::v3_wgmma, GemmVariant::vendor};
  const GemmShape sq4096{"4096x4096x4096_NN", 4096, 4096, 4096, false, false, 0.0f};
  add(sq4096, DType::bf16, DType::bf16, all);
  add({"4096x4096x4096_NT", 4096, 4096, 4096, false, true, 0.0f}, DType::bf16, DType::bf16, tensor_cores, true, true,
      true);
  add({"4096x4096x4096_TN", 4096, 4096, 4096, true, false, 0.0f}, DType::bf16, DType::bf16, tensor_cores);
  add(sq4096, DType::f32, DType::f32, {GemmVariant::v1_simt, GemmVariant::vendor});
  add({"8192x8192x8192_NN", 8192, 8192, 8192, false, false, 0.0f}, DType::bf16, DType::bf16, tensor_cores);
  add({"8192x8192x8192_NT", 8192, 8192, 8192, false, true, 0.0f}, DType::bf16, DType::bf16, tensor_cores);

  // ViT-B/16 training step, batch 64: forward, data gradient and weight gradient of every linear layer.
  const int64_t rows = 64 * 197;
  struct Layer {
    const char* name;
    int64_t in, out;
  };
  const Layer layers[] = {{"qkv", 768, 2304}, {"proj", 768, 768}, {"fc1", 768, 3072}, {"fc2", 3072, 768}};
  for (const Layer& l : layers) {
    const std::string base = std::string("vitb16_b64_") + l.name + "_";
    const std::string dims = std::to_string(rows) + "x" + std::to_string(l.in) + "->" + std::to_string(l.out);
    // the persistent ws pipeline against a block per tile where k is short (768): the forwards
    add({base + "fwd_" + dims, rows, l.out, l.in, false, true, 0.0f}, DType::bf16, DType::bf16, all, l.in == 768, true,
        true);
    add({base + "dx_" + dims, rows, l.in, l.out, false, false, 0.0f}, DType::bf16, DType::bf16, all);
    add({base + "dw_" + dims, l.out, l.in, rows, true, false, 1.0f}, DType::bf16, DType::bf16, all);
  }
  add({"vitb16_b64_fc1_fwd_gelu_" + std::to_string(rows) + "x768->3072", rows, 3072, 768, false, true, 0.0f, 1},
      DType::bf16, DType::bf16, tensor_cores);
  add({"vitb16_b64_fc2_dx_gelu_grad_" + std::to_string(rows) + "x3072->768", rows, 3072, 768, false, false, 0.0f, 2},
      DType::bf16, DType::bf16, tensor_cores);

  // The time of a GEMM against K (2026-11-29): fc1's forward (12,608 x 3072, NT) at K = 64, 256, 768, 3072, plain on
  // v3's three pipelines, with the fused GELU on v3's default one, and cuBLAS (its GELU a pass of our own): 24 rows,
  // ~12 s of a lease. Neither v3's tiles nor its split (none: 1188 wide tiles are 9 waves) change with K, so the line
  // t = t0 + K / rate through a variant's rows splits its calls into the part no k tile pays for (t0: launch,
  // prologue, pipeline fill, the epilogue) and the k loop's rate: what the 2026-11-27 rows could only infer (~25 us a
  // tile outside the MMAs at K = 768). summarize.py's "GEMM time against K" table fits it.
  for (const int64_t k : {int64_t(64), int64_t(256), int64_t(768), int64_t(3072)}) {
    const std::string dims = std::to_string(rows) + "x3072_k" + std::to_string(k);
    add({"ksweep_" + dims, rows, 3072, k, false, true, 0.0f}, DType::bf16, DType::bf16,
        {GemmVariant::v3_wgmma, GemmVariant::vendor}, false, true, true);
    add({"ksweep_gelu_" + dims, rows, 3072, k, false, true, 0.0f, 1}, DType::bf16, DType::bf16,
        {GemmVariant::v3_wgmma, GemmVariant::vendor}, false, false);
  }

  // ResNet-50's 1x1 convolutions at 56^2, batch 256, as NHWC GEMMs: forward y [P, co] = x [P, ci] w [co, ci]^T,
  // backward-data dx [P, ci] = dy [P, co] w [co, ci]; with the batch norm's reduction and without
  const int64_t pixels = 256 * 56 * 56;
  for (const auto& [ci, co] : {std::pair<int64_t, int64_t>{64, 256}, {256, 64}}) {
    const std::string conv = "resnet50_b256_1x1_" + std::to_string(ci) + "to" + std::to_string(co) + "_56_";
    for (const auto& [suffix, bn] : {std::pair<const char*, int>{"", 0}, {"_bn_stats", 1}})
      add({conv + "fwd" + suffix, pixels, co, ci, false, true, 0.0f, 0, bn}, DType::bf16, DType::bf16,
          {GemmVariant::v3_wgmma}, false, true, bn == 0);
    for (const auto& [suffix, bn] : {std::pair<const char*, int>{"", 0}, {"_bn_grad_sums", 2}})
      add({conv + "dgrad" + suffix, pixels, ci, co, false, false, 0.0f, 0, bn}, DType::bf16, DType::bf16,
          {GemmVariant::v3_wgmma}, false, true, bn == 0);
    add({conv + "dgrad_bn_grad_sums_residual", pixels, ci, co, false, false, 0.0f, 0, 2, true}, DType::bf16,
        DType::bf16, {GemmVariant::v3_wgmma});
  }
}

}  // namespace

int main(int argc, char** argv) { return hpdt::bench::run_benchmarks(argc, argv, register_all); }
