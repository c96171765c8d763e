// GPU self-attention: hpdt's flash-style kernels (v1 SIMT, v2 mma.sync tensor cores; forward and
// backward; v3, v2 with the one-pass backward: backward rows only) beside an unfused reference in the same run,
// each call timed on the GPU alone (manual time; gpu_timing.h), the x_unfused counter's both sides back to back.
//
// Reference ("unfused"): cuBLAS batched GEMMs (cublasGemmBatchedEx, f32 compute, one pointer per
// (batch, head), reading q, k, v in place from the packed qkv rows as our kernels do) for S = scale QK^T
// and out = P V with cuDNN's softmax (cudnnSoftmaxForward, accurate, per row) between, S and P
// materialised in the storage dtype. Its backward: dV = P^T dO, dP = dO V^T (GEMMs), dS =
// cudnnSoftmaxBackward(P, dP), dQ = scale dS K, dK = scale dS^T Q (GEMMs). Pointer-array batching
// instead of strided batching because the packed layout's batch and head strides differ. (PyTorch SDPA,
// i.e. cuDNN's fused attention, is compared by a separate peer script.)
//
// FLOPs: forward 4 b h t^2 dh (QK^T and PV), backward 2.5x that (the usual count; v1's and v2's deterministic
// backward actually does 3.5x, recomputing QK^T and dO V^T in the dQ pass; v3's does 2.5x).
// Counters: TFLOP/s; x_unfused = our throughput / the reference's on the same shape, dtype and direction
// (the reference timed once per process); ref_max_abs_diff (reference rows) = max |out_ref - out_ours|,
// a check that the reference computes the same attention.
// Shapes: ViT-B/16 at 224 (b 64, 12 heads, t 197, dh 64) and long sequences (b 8, 16 heads, t 1024 and
// 4096, dh 64 and 128); dtypes bf16, f16 (v1, v2) and f32 (v1 only).
// A/B rows of v2 under a switch, beside its default rows: v2_narrow (HPDT_ATTENTION_V2_TILES=narrow), v2_step64
// (HPDT_ATTENTION_V2_DKDV_STEP=64: the dK/dV pass at dh 128 with 64 queries a step; backward rows, dh 128); and of
// v3: v3_keys (HPDT_ATTENTION_V3_ORDER=keys, its dQ adds in key order, as measured on 2026-11-29) beside v3, rotated
// where the GPU holds a head's key blocks at once. v3's rows carry `rotated` (1: the rotated order ran).
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_timing.h"
#include "hpdt/core/env.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cpu/elementwise.h"
#include "hpdt/kernels/cuda/attention.h"
#include "hpdt/kernels/elementwise.h"

namespace {

using namespace hpdt;
using namespace hpdt::bench;

struct AttnShape {
  int64_t b, heads, t, dh;
  std::string str() const {
    std::string s = "b";  // appended piece by piece: GCC 12's -Wrestrict misfires on "lit" + to_string(...)
    s += std::to_string(b);
    s += "_h";
    s += std::to_string(heads);
    s += "_t";
    s += std::to_string(t);
    s += "_d";
    s += std::to_string(dh);
    return s;
  }
  double fwd_flops() const { return 4.0 * double(b) * double(heads) * double(t) * double(t) * double(dh); }
};

const AttnShape kShapes[] = {
    {64, 12, 197, 64}, {8, 16, 1024, 64}, {8, 16, 1024, 128}, {8, 16, 4096, 64}, {8, 16, 4096, 128}};

// Inputs and outputs of one shape and dtype on the GPU (q, k uniform in [-1, 1): realistic scores).
struct Problem {
  AttnShape sh;
  DType dt;
  Tensor qkv, out, lse, dout, dqkv;
};

Problem make_problem(const AttnShape& sh, DType dt) {
  const Stream& s = bench_stream();
  const Device dev = Device::cuda(0);
  const AllocOptions on{.stream = &s};
  const int64_t d = sh.heads * sh.dh;
  Problem p{sh, dt, {}, {}, {}, {}, {}};
  p.qkv = Tensor::empty({sh.b, sh.t, 3 * d}, dt, dev, on);
  p.out = Tensor::empty({sh.b, sh.t, d}, dt, dev, on);
  p.lse = Tensor::empty({sh.b, sh.heads, sh.t}, DType::f32, dev, on);
  p.dout = Tensor::empty({sh.b, sh.t, d}, dt, dev, on);
  p.dqkv = Tensor::empty({sh.b, sh.t, 3 * d}, dt, dev, on);
  kernels::fill_uniform(p.qkv, -1, 1, 11, 0, s);
  kernels::fill_uniform(p.dout, -1, 1, 12, 0, s);
  return p;
}

int reps_for(const AttnShape& sh) { return sh.t >= 4096 ? 3 : 10; }

// ---- the unfused reference ------------------------------------------------------------------------

#define BENCH_CUBLAS(expr)                                                              \
  do {                                                                                  \
    const cublasStatus_t st_ = (expr);                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                   \
      throw std::runtime_error(std::string(#expr) + ": " + cublasGetStatusString(st_)); \
  } while (0)
#define BENCH_CUDNN(expr)                                                                                            \
  do {                                                                                                               \
    const cudnnStatus_t st_ = (expr);                                                                                \
    if (st_ != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(#expr) + ": " + cudnnGetErrorString(st_)); \
  } while (0)

cudaDataType_t cuda_type(DType dt) {
  return dt == DType::f32 ? CUDA_R_32F : dt == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}
cudnnDataType_t cudnn_type(DType dt) {
  return dt == DType::f32 ? CUDNN_DATA_FLOAT : dt == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

struct Handles {
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  Handles() {
    BENCH_CUBLAS(cublasCreate(&blas));
    BENCH_CUBLAS(cublasSetStream(blas, static_cast<cudaStream_t>(bench_stream().handle())));
    BENCH_CUDNN(cudnnCreate(&dnn));
    BENCH_CUDNN(cudnnSetStream(dnn, static_cast<cudaStream_t>(bench_stream().handle())));
  }
};
Handles& handles() {
  static Handles* h = new Handles();  // never destroyed, like the stream
  return *h;
}

// Pointer arrays (one entry per (batch, head)) and the t x t buffers of the unfused computation.
struct Unfused {
  Tensor S, P, dP, dS;                     // [b, heads, t, t] in the storage dtype
  Tensor ptrs;                             // device array of pointers, 12 blocks of b * heads
  int64_t n = 0;                           // b * heads
  cudnnTensorDescriptor_t rows = nullptr;  // [b heads t, t, 1, 1]: softmax over each row
  enum { Q, K, V, O, GO, GQ, GK, GV, S_, P_, DP, DS, kArrays };
  const void* const* arr(int which) const { return static_cast<const void* const*>(ptrs.data()) + which * n; }
  void* const* mut(int which) const { return static_cast<void* const*>(ptrs.data()) + which * n; }
};

std::unique_ptr<Unfused> make_unfused(const Problem& p, bool backward) {
  const AttnShape& sh = p.sh;
  const Stream& s = bench_stream();
  const AllocOptions on{.stream = &s};
  auto u = std::make_unique<Unfused>();
  u->n = sh.b * sh.heads;
  const Shape tt{sh.b, sh.heads, sh.t, sh.t};
  u->S = Tensor::empty(tt, p.dt, Device::cuda(0), on);
  u->P = Tensor::empty(tt, p.dt, Device::cuda(0), on);
  if (backward) {
    u->dP = Tensor::empty(tt, p.dt, Device::cuda(0), on);
    u->dS = Tensor::empty(tt, p.dt, Device::cuda(0), on);
  }
  const int64_t d = sh.heads * sh.dh, ld = 3 * d, es = int64_t(dtype_size(p.dt));
  std::vector<uintptr_t> host(size_t(Unfused::kArrays * u->n), 0);
  auto base = [](const Tensor& x) { return reinterpret_cast<uintptr_t>(x.data()); };
  for (int64_t bi = 0; bi < sh.b; ++bi)
    for (int64_t h = 0; h < sh.heads; ++h) {
      const int64_t i = bi * sh.heads + h;
      const uintptr_t row = uintptr_t((bi * sh.t * ld + h * sh.dh) * es);  // packed qkv / dqkv
      const uintptr_t orow = uintptr_t((bi * sh.t * d + h * sh.dh) * es);  // out / dout
      const uintptr_t tile = uintptr_t(i * sh.t * sh.t * es);              // S, P, dP, dS
      host[size_t(Unfused::Q * u->n + i)] = base(p.qkv) + row;
      host[size_t(Unfused::K * u->n + i)] = base(p.qkv) + row + uintptr_t(d * es);
      host[size_t(Unfused::V * u->n + i)] = base(p.qkv) + row + uintptr_t(2 * d * es);
      host[size_t(Unfused::O * u->n + i)] = base(p.out) + orow;
      host[size_t(Unfused::GO * u->n + i)] = base(p.dout) + orow;
      host[size_t(Unfused::GQ * u->n + i)] = base(p.dqkv) + row;
      host[size_t(Unfused::GK * u->n + i)] = base(p.dqkv) + row + uintptr_t(d * es);
      host[size_t(Unfused::GV * u->n + i)] = base(p.dqkv) + row + uintptr_t(2 * d * es);
      host[size_t(Unfused::S_ * u->n + i)] = base(u->S) + tile;
      host[size_t(Unfused::P_ * u->n + i)] = base(u->P) + tile;
      if (backward) {
        host[size_t(Unfused::DP * u->n + i)] = base(u->dP) + tile;
        host[size_t(Unfused::DS * u->n + i)] = base(u->dS) + tile;
      }
    }
  Tensor h = Tensor::empty({int64_t(host.size() * sizeof(uintptr_t))}, DType::u8);
  std::memcpy(h.data(), host.data(), host.size() * sizeof(uintptr_t));
  u->ptrs = h.to(Device::cuda(0), s);
  s.synchronize();  // the host copy goes out of scope
  BENCH_CUDNN(cudnnCreateTensorDescriptor(&u->rows));
  BENCH_CUDNN(
      cudnnSetTensor4dDescriptor(u->rows, CUDNN_TENSOR_NCHW, cudnn_type(p.dt), int(u->n * sh.t), int(sh.t), 1, 1));
  return u;
}

// Column-major cuBLAS view of row-major operands: a row-major [r][c] matrix with row stride ld is a
// column-major c x r matrix with leading dimension ld.
void batched_gemm(const Problem& p, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                  float alpha, const void* const* A, int64_t lda, const void* const* B, int64_t ldb, void* const* C,
                  int64_t ldc, int64_t batch) {
  const float beta = 0.0f;
  const cudaDataType_t t = cuda_type(p.dt);
  BENCH_CUBLAS(cublasGemmBatchedEx(handles().blas, ta, tb, int(m), int(n), int(k), &alpha, A, t, int(lda), B, t,
                                   int(ldb), &beta, C, t, int(ldc), int(batch), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

void unfused_forward(const Problem& p, const Unfused& u) {
  const AttnShape& sh = p.sh;
  const int64_t d = sh.heads * sh.dh, ld = 3 * d;
  const float scale = 1.0f / std::sqrt(float(sh.dh)), one = 1.0f, zero = 0.0f;
  // S[i][j] = scale q_i . k_j: column-major S^T (t x t) = K (op T of the dh x t view) x Q^T (dh x t view)
  batched_gemm(p, CUBLAS_OP_T, CUBLAS_OP_N, sh.t, sh.t, sh.dh, scale, u.arr(Unfused::K), ld, u.arr(Unfused::Q), ld,
               u.mut(Unfused::S_), sh.t, u.n);
  BENCH_CUDNN(cudnnSoftmaxForward(handles().dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, u.rows,
                                  u.S.data(), &zero, u.rows, u.P.data()));
  // out[i][c] = sum_j P[i][j] v_j[c]: column-major out^T (dh x t) = V^T (dh x t view) x P^T (t x t view)
  batched_gemm(p, CUBLAS_OP_N, CUBLAS_OP_N, sh.dh, sh.t, sh.t, 1.0f, u.arr(Unfused::V), ld, u.arr(Unfused::P_), sh.t,
               u.mut(Unfused::O), d, u.n);
}

void unfused_backward(const Problem& p, const Unfused& u) {
  const AttnShape& sh = p.sh;
  const int64_t d = sh.heads * sh.dh, ld = 3 * d;
  const float scale = 1.0f / std::sqrt(float(sh.dh)), one = 1.0f, zero = 0.0f;
  // dV[j][c] = sum_i P[i][j] dO[i][c]: dV^T (dh x t) = dO^T (dh x t view) x (P^T view)^T
  batched_gemm(p, CUBLAS_OP_N, CUBLAS_OP_T, sh.dh, sh.t, sh.t, 1.0f, u.arr(Unfused::GO), d, u.arr(Unfused::P_), sh.t,
               u.mut(Unfused::GV), ld, u.n);
  // dP[i][j] = dO_i . v_j: like S
  batched_gemm(p, CUBLAS_OP_T, CUBLAS_OP_N, sh.t, sh.t, sh.dh, 1.0f, u.arr(Unfused::V), ld, u.arr(Unfused::GO), d,
               u.mut(Unfused::DP), sh.t, u.n);
  BENCH_CUDNN(cudnnSoftmaxBackward(handles().dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, u.rows,
                                   u.P.data(), u.rows, u.dP.data(), &zero, u.rows, u.dS.data()));
  // dQ[i][c] = scale sum_j dS[i][j] k_j[c]: dQ^T (dh x t) = K^T view (dh x t) x dS^T view (t x t)
  batched_gemm(p, CUBLAS_OP_N, CUBLAS_OP_N, sh.dh, sh.t, sh.t, scale, u.arr(Unfused::K), ld, u.arr(Unfused::DS), sh.t,
               u.mut(Unfused::GQ), ld, u.n);
  // dK[j][c] = scale sum_i dS[i][j] q_i[c]: dK^T = Q^T view x (dS^T view)^T
  batched_gemm(p, CUBLAS_OP_N, CUBLAS_OP_T, sh.dh, sh.t, sh.t, scale, u.arr(Unfused::Q), ld, u.arr(Unfused::DS), sh.t,
               u.mut(Unfused::GK), ld, u.n);
}

// max |a - b| over two GPU tensors of one dtype (copied to the host, widened to f32).
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const Stream& s = bench_stream();
  Tensor ha = a.to(Device::cpu(), s), hb = b.to(Device::cpu(), s);
  s.synchronize();
  Tensor fa = Tensor::empty(a.shape(), DType::f32), fb = Tensor::empty(b.shape(), DType::f32);
  kernels::cpu::cast(ha, fa);
  kernels::cpu::cast(hb, fb);
  double m = 0;
  for (int64_t i = 0; i < fa.numel(); ++i)
    m = std::max(m, double(std::fabs(fa.data<float>()[i] - fb.data<float>()[i])));
  return m;
}

// The reference's seconds per call of (shape, dtype, backward), measured once per process.
double reference_seconds(const AttnShape& sh, DType dt, bool backward) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, int, bool>, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(sh.str(), int(dt), backward);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Problem p = make_problem(sh, dt);
  auto u = make_unfused(p, backward);
  unfused_forward(p, *u);
  const double sec = backward ? seconds_back_to_back([&] { unfused_backward(p, *u); }, reps_for(sh))
                              : seconds_back_to_back([&] { unfused_forward(p, *u); }, reps_for(sh));
  BENCH_CUDNN(cudnnDestroyTensorDescriptor(u->rows));
  cache[key] = sec;
  return sec;
}

void report(benchmark::State& state, double flops, double sec, double ref_sec) {
  state.counters["TFLOP/s"] = benchmark::Counter(flops / sec / 1e12);
  if (ref_sec > 0) state.counters["x_unfused"] = benchmark::Counter(ref_sec / sec);
}

// Ours: variant 1, 2 or 3, forward or backward. Each iteration is one call, on the GPU alone (gpu_timing.h).
// pin: an environment variable and its value for this row, or {} ("v2_narrow" rows: HPDT_ATTENTION_V2_TILES=narrow,
// v2's one-m-tile-a-warp tiles; "v2_step64": HPDT_ATTENTION_V2_DKDV_STEP=64, the dh-128 dK/dV pass's tall step;
// "v3_keys": HPDT_ATTENTION_V3_ORDER=keys).
struct EnvPin {
  const char* name = nullptr;
  const char* value = nullptr;
};
void BM_flash(benchmark::State& state, AttnShape sh, DType dt, int variant, bool backward, EnvPin pin) {
  if (skip_without_gpu(state)) return;
  const ScopedEnv scope(pin.name ? pin.name : "HPDT_ATTENTION_V2_TILES", pin.value);
  try {
    Problem p = make_problem(sh, dt);
    const Stream& s = bench_stream();
    if (!kernels::cuda::attention_variant_supported(variant, p.qkv, sh.heads)) {
      state.SkipWithError("variant does not apply to this dtype / head dim");
      return;
    }
    double ref_sec = -1;  // a reference that cannot run (say cuDNN refusing a dtype) leaves ours timed
    try {
      ref_sec = reference_seconds(sh, dt, backward);
    } catch (const std::exception& e) {
      state.SetLabel(std::string("no unfused reference: ") + e.what());
    }
    kernels::cuda::attention_forward(p.qkv, sh.heads, p.lse, p.out, s, variant);
    auto call = [&] {
      if (backward)
        kernels::cuda::attention_backward(p.qkv, p.lse, p.out, p.dout, sh.heads, p.dqkv, s, variant);
      else
        kernels::cuda::attention_forward(p.qkv, sh.heads, p.lse, p.out, s, variant);
    };
    call();
    const double flops = sh.fwd_flops() * (backward ? 2.5 : 1.0);
    report(state, flops, time_row(state, call), ref_sec);
    if (variant == kernels::cuda::kAttentionFusedBackward)
      state.counters["rotated"] = benchmark::Counter(kernels::cuda::attention_v3_rotated(p.qkv, sh.heads) ? 1 : 0);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// The unfused reference itself, with a check of its output against ours (auto variant).
void BM_unfused(benchmark::State& state, AttnShape sh, DType dt, bool backward) {
  if (skip_without_gpu(state)) return;
  try {
    Problem p = make_problem(sh, dt);
    const Stream& s = bench_stream();
    auto u = make_unfused(p, backward);
    kernels::cuda::attention_forward(p.qkv, sh.heads, p.lse, p.out, s);
    Tensor ours = p.out.clone(s);
    unfused_forward(p, *u);
    state.counters["ref_max_abs_diff"] = benchmark::Counter(max_abs_diff(ours, p.out));
    if (backward) {
      kernels::cuda::attention_forward(p.qkv, sh.heads, p.lse, p.out, s);
      kernels::cuda::attention_backward(p.qkv, p.lse, p.out, p.dout, sh.heads, p.dqkv, s);
      Tensor ours_grad = p.dqkv.clone(s);
      unfused_forward(p, *u);
      unfused_backward(p, *u);
      state.counters["ref_grad_max_abs_diff"] = benchmark::Counter(max_abs_diff(ours_grad, p.dqkv));
    }
    const double sec = time_row(state, [&] {
      if (backward)
        unfused_backward(p, *u);
      else
        unfused_forward(p, *u);
    });
    BENCH_CUDNN(cudnnDestroyTensorDescriptor(u->rows));
    report(state, sh.fwd_flops() * (backward ? 2.5 : 1.0), sec, 0);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_all() {
  for (bool backward : {false, true})
    for (DType dt : {DType::bf16, DType::f16, DType::f32})
      for (const AttnShape& sh : kShapes) {
        const std::string dir = backward ? "attention_bwd/" : "attention_fwd/";
        const std::string tail = std::string(dtype_name(dt)) + "/" + sh.str();
        benchmark::RegisterBenchmark((dir + "unfused/" + tail).c_str(), BM_unfused, sh, dt, backward)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
        for (int v : {1, 2, 3}) {
          if (v >= 2 && dt == DType::f32) continue;
          if (v == 3 && !backward) continue;  // v3's forward is v2's
          benchmark::RegisterBenchmark((dir + "v" + std::to_string(v) + "/" + tail).c_str(), BM_flash, sh, dt, v,
                                       backward, EnvPin{})
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
        }
        // v2's narrow tiles (one m-tile a warp; the defaults before 2026-11-27) beside the default wide ones, where
        // they differ: the forward above dh 64 (padded to 128), the backward above dh 16 (at dh 128 its dQ pass)
        const bool differs = backward ? sh.dh > 16 : sh.dh > 64;
        if (dt != DType::f32 && differs)
          benchmark::RegisterBenchmark((dir + "v2_narrow/" + tail).c_str(), BM_flash, sh, dt, 2, backward,
                                       EnvPin{"HPDT_ATTENTION_V2_TILES", "narrow"})
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
        // the dh-128 dK/dV pass with 64 queries a step (2026-11-30) beside its default 32 (the v2 rows): the backward
        // at dh 128, t = 4096 is the one attention row short of 0.8x SDPA (0.76x, H200, 2026-11-29)
        if (dt != DType::f32 && backward && sh.dh > 64)
          benchmark::RegisterBenchmark((dir + "v2_step64/" + tail).c_str(), BM_flash, sh, dt, 2, backward,
                                       EnvPin{"HPDT_ATTENTION_V2_DKDV_STEP", "64"})
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
        // v3's dQ adds in key order (2026-11-29: 0.50-0.86x SDPA) beside its rotated default (2026-11-30)
        if (dt != DType::f32 && backward)
          benchmark::RegisterBenchmark((dir + "v3_keys/" + tail).c_str(), BM_flash, sh, dt, 3, backward,
                                       EnvPin{"HPDT_ATTENTION_V3_ORDER", "keys"})
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
      }
}

}  // namespace

int main(int argc, char** argv) { return hpdt::bench::run_benchmarks(argc, argv, register_all); }
