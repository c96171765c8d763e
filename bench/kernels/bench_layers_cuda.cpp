// GPU memory-bound layer ops (kernels/cuda/{norm,pool,activation,embed,loss}.cu) in GB/s, at ResNet-50 and
// ViT-B/16 training sizes (batch 64), bf16 and f32, each call timed on the GPU alone (manual time; gpu_timing.h).
//
// Counters:
//   GB/s       bytes / time, with bytes the traffic the op cannot avoid for its algorithm (listed per op below;
//              e.g. batch norm's training forward reads x twice, for the statistics and for y, and writes y);
//   peak_frac  GB/s over the device's peak DRAM bandwidth (2 x memory clock x bus width, from the driver;
//              3.35 TB/s on an H100 SXM);
//   x_cudnn    (batch norm) cuDNN's time / ours on the same shape, dtype and stream, cuDNN timed once per
//              shape in the same process (cudnnBatchNormalizationForwardTraining / ...Backward, SPATIAL mode,
//              f32 scale/bias/statistics as cuDNN wants), so the ratio reads off one run; cudnn_GB/s beside it.
//   x_unfused  (batch norm fused with ReLU, or with the residual add and ReLU: kernels::BatchNormFusion) the
//              time of the separate ops it replaces (batch norm, add, relu_forward; relu_backward, batch norm
//              backward; the residual's own batch norm as a pass that writes it, and its backward's own reduce
//              pass), timed in the same process / the fused op's time.
//   x_per_channel (batch norm on planes narrower than a 16-byte vector: 14x14 in bf16, 7x7) the time with
//              HPDT_BN_FLAT=off (the apply passes on the per-channel kernels, 2 or 8 bytes a load) / the time with
//              the flat apply kernels (16 bytes a load), same process.
//   x_scalar   (max pool) the time with HPDT_POOL_VECTOR=off (one value a thread) / the time with the vector
//              kernels (NHWC: 16 bytes of channels a thread, forward and backward; NCHW backward: 4 inputs of a row),
//              same process.
//
//   hpdt-bench-layers-cuda --benchmark_filter=bf16 --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu_timing.h"
#include "hpdt/core/check_cuda.h"
#include "hpdt/core/env.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/activation.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/embed.h"
#include "hpdt/kernels/loss.h"
#include "hpdt/kernels/norm.h"
#include "hpdt/kernels/pool.h"

namespace {

using namespace hpdt;
using namespace hpdt::bench;

double peak_bytes_per_s() {
  int khz = 0, bits = 0;
  HPDT_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0));
  HPDT_CUDA_CHECK(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, 0));
  return 2.0 * double(khz) * 1e3 * double(bits) / 8.0;
}

uint64_t g_seed = 1;
Tensor uniform(const Shape& s, DType dt, float lo = -1, float hi = 1) {
  const Stream& st = bench_stream();
  Tensor t = Tensor::empty(s, dt, Device::cuda(0), AllocOptions{.stream = &st});
  kernels::fill_uniform(t, lo, hi, g_seed++, 0, st);
  return t;
}
Tensor filled(const Shape& s, DType dt, float v) {
  const Stream& st = bench_stream();
  Tensor t = Tensor::empty(s, dt, Device::cuda(0), AllocOptions{.stream = &st});
  kernels::fill(t, v, st);
  return t;
}

// One benchmarked call: what to run, the bytes it must move, and optionally the cuDNN peer on the same data.
struct Op {
  std::function<void()> run;
  double bytes = 0;
  std::function<void()> peer;
  std::function<void()> unfused;  // our separate ops that the fused `run` replaces
  bool narrow_planes = false;     // NCHW batch norm whose planes take the flat apply kernels (x_per_channel)
  bool pool_vectors = false;      // max pool, whose vector kernels HPDT_POOL_VECTOR=off turns off (x_scalar)
  std::shared_ptr<void> keep;     // tensors and descriptors the calls use
};
using Factory = std::function<Op(DType)>;

void bench(benchmark::State& state, const Factory& make, DType dt) {
  if (skip_without_gpu(state)) return;
  try {
    Op op = make(dt);
    const Stream& s = bench_stream();
    op.run();  // warm-up
    s.synchronize();
    const double per_call = time_row(state, op.run);
    state.counters["GB/s"] = op.bytes / per_call / 1e9;
    state.counters["peak_frac"] = op.bytes / per_call / peak_bytes_per_s();
    // The x_* counters time both sides alike, 20 calls back to back (seconds_per_call), against `own`, this op's time
    // the same way: set against per_call (each call timed alone, its launch gap included) they leaned toward the other
    // side, most on the short kernels (H200, 2026-11-29). Timed only for a row that has such a counter.
    const double own =
        op.peer || op.unfused || op.narrow_planes || op.pool_vectors ? seconds_back_to_back(op.run, 20) : 0.0;
    if (op.peer) {
      try {
        const double peer = seconds_back_to_back(op.peer, 20);
        state.counters["cudnn_GB/s"] = op.bytes / peer / 1e9;
        state.counters["x_cudnn"] = peer / own;
      } catch (const std::exception& e) {  // e.g. a dtype this cuDNN API does not take: ours still counts
        state.SetLabel(std::string("cuDNN peer failed: ") + e.what());
      }
    }
    if (op.unfused) state.counters["x_unfused"] = seconds_back_to_back(op.unfused, 20) / own;
    if (op.narrow_planes) {
      const ScopedEnv per_channel("HPDT_BN_FLAT", "off");
      state.counters["x_per_channel"] = seconds_back_to_back(op.run, 20) / own;
    }
    if (op.pool_vectors) {
      const ScopedEnv scalar("HPDT_POOL_VECTOR", "off");
      state.counters["x_scalar"] = seconds_back_to_back(op.run, 20) / own;
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// ---- cuDNN batch norm (the peer) ----------------------------------------------------------------------

#define BENCH_CUDNN(expr)                                                                                           \
  do {                                                                                                              \
    const cudnnStatus_t st_ = (expr);                                                                               \
    if (st_ != CUDNN_STATUS_SUCCESS) throw Error(std::string("cuDNN: ") + cudnnGetErrorString(st_) + " in " #expr); \
  } while (0)

cudnnHandle_t cudnn() {
  static cudnnHandle_t h = [] {
    cudnnHandle_t made = nullptr;
    BENCH_CUDNN(cudnnCreate(&made));  // never destroyed, like the stream
    return made;
  }();
  BENCH_CUDNN(cudnnSetStream(h, static_cast<cudaStream_t>(bench_stream().handle())));
  return h;
}

struct CudnnBn {
  cudnnTensorDescriptor_t x = nullptr, bn = nullptr;
  Tensor scale, bias, rmean, rvar, smean, sinv, dscale, dbias;
  CudnnBn(const Shape& s, DType dt) {
    const cudnnDataType_t t = dt == DType::f32   ? CUDNN_DATA_FLOAT
                              : dt == DType::f16 ? CUDNN_DATA_HALF
                                                 : CUDNN_DATA_BFLOAT16;
    BENCH_CUDNN(cudnnCreateTensorDescriptor(&x));
    BENCH_CUDNN(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, t, int(s[0]), int(s[1]), int(s[2]), int(s[3])));
    BENCH_CUDNN(cudnnCreateTensorDescriptor(&bn));
    BENCH_CUDNN(cudnnDeriveBNTensorDescriptor(bn, x, CUDNN_BATCHNORM_SPATIAL));
    const int64_t c = s[1];
    scale = uniform({c}, DType::f32, 0.5, 1.5), bias = uniform({c}, DType::f32), rmean = filled({c}, DType::f32, 0);
    rvar = filled({c}, DType::f32, 1), smean = filled({c}, DType::f32, 0), sinv = filled({c}, DType::f32, 1);
    dscale = filled({c}, DType::f32, 0), dbias = filled({c}, DType::f32, 0);
  }
  ~CudnnBn() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(bn);
  }
  void forward(const Tensor& in, Tensor& out) {
    const float one = 1, zero = 0;
    BENCH_CUDNN(cudnnBatchNormalizationForwardTraining(cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x, in.data(), x,
                                                       out.data(), bn, scale.data(), bias.data(), 0.1, rmean.data(),
                                                       rvar.data(), 1e-5, smean.data(), sinv.data()));
  }
  void backward(const Tensor& in, const Tensor& dy, Tensor& dx) {
    const float one = 1, zero = 0;
    BENCH_CUDNN(cudnnBatchNormalizationBackward(cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &one, x, in.data(),
                                                x, dy.data(), x, dx.data(), bn, scale.data(), dscale.data(),
                                                dbias.data(), 1e-5, smean.data(), sinv.data()));
  }
};

// ---- the ops ------------------------------------------------------------------------------------------

double es(DType dt) { return double(dtype_size(dt)); }

// An NCHW plane (h*w values) that is no whole number of 16-byte vectors: the flat apply kernels' case.
bool narrow_planes(const Shape& s, DType dt) { return s[2] * s[3] % (16 / int64_t(dtype_size(dt))) != 0; }

Factory bn_train_forward(Shape s) {
  return [s](DType dt) {
    struct K {
      Tensor x, g, b, rm, rv, y, y2;
      kernels::BatchNormSaved saved;
      std::unique_ptr<CudnnBn> peer;
    };
    auto k = std::make_shared<K>();
    const int64_t c = s[1];
    k->x = uniform(s, dt), k->g = uniform({c}, dt, 0.5, 1.5), k->b = uniform({c}, dt), k->y = uniform(s, dt);
    k->rm = filled({c}, DType::f32, 0), k->rv = filled({c}, DType::f32, 1), k->y2 = uniform(s, dt);
    Op op;
    op.run = [k] {
      kernels::batchnorm_forward_train(k->x, k->g, k->b, k->rm, k->rv, 1e-5f, 0.1f, k->saved, k->y, {}, bench_stream());
    };
    op.peer = [k, s, dt] {
      if (!k->peer) k->peer = std::make_unique<CudnnBn>(s, dt);
      k->peer->forward(k->x, k->y2);
    };
    op.bytes = 3.0 * double(s.numel()) * es(dt);  // x read twice, y written
    op.narrow_planes = narrow_planes(s, dt);
    op.keep = k;
    return op;
  };
}

Factory bn_train_backward(Shape s) {
  return [s](DType dt) {
    struct K {
      Tensor x, dy, g, b, rm, rv, y, dx, dg, db, dx2;
      kernels::BatchNormSaved saved;
      std::unique_ptr<CudnnBn> peer;
    };
    auto k = std::make_shared<K>();
    const int64_t c = s[1];
    k->x = uniform(s, dt), k->dy = uniform(s, dt), k->g = uniform({c}, dt, 0.5, 1.5), k->b = uniform({c}, dt);
    k->rm = filled({c}, DType::f32, 0), k->rv = filled({c}, DType::f32, 1), k->y = uniform(s, dt);
    k->dx = uniform(s, dt), k->dx2 = uniform(s, dt), k->dg = filled({c}, dt, 0), k->db = filled({c}, dt, 0);
    kernels::batchnorm_forward_train(k->x, k->g, k->b, k->rm, k->rv, 1e-5f, 0.1f, k->saved, k->y, {}, bench_stream());
    Op op;
    op.run = [k] {
      kernels::batchnorm_backward_train(k->dy, k->x, k->g, k->saved, k->dx, k->dg, k->db, {}, bench_stream());
    };
    op.peer = [k, s, dt] {
      if (!k->peer) {
        k->peer = std::make_unique<CudnnBn>(s, dt);
        k->peer->forward(k->x, k->dx2);  // cuDNN's own saved statistics
      }
      k->peer->backward(k->x, k->dy, k->dx2);
    };
    op.bytes = 5.0 * double(s.numel()) * es(dt);  // dy, x read twice (sums, then dx), dx written
    op.narrow_planes = narrow_planes(s, dt);
    op.keep = k;
    return op;
  };
}

Factory bn_eval(Shape s) {
  return [s](DType dt) {
    struct K {
      Tensor x, g, b, rm, rv, y;
    };
    auto k = std::make_shared<K>();
    const int64_t c = s[1];
    k->x = uniform(s, dt), k->g = uniform({c}, dt), k->b = uniform({c}, dt), k->y = uniform(s, dt);
    k->rm = uniform({c}, DType::f32), k->rv = uniform({c}, DType::f32, 0.5, 2);
    Op op;
    op.run = [k] { kernels::batchnorm_forward_eval(k->x, k->g, k->b, k->rm, k->rv, 1e-5f, k->y, bench_stream()); };
    op.bytes = 2.0 * double(s.numel()) * es(dt);
    op.narrow_planes = narrow_planes(s, dt);
    op.keep = k;
    return op;
  };
}

Factory layernorm(Shape s, bool backward) {
  return [s, backward](DType dt) {
    struct K {
      Tensor x, dy, g, b, y, dx, dg, db;
      kernels::LayerNormSaved saved;
    };
    auto k = std::make_shared<K>();
    const int64_t d = s[-1];
    k->x = uniform(s, dt), k->dy = uniform(s, dt), k->g = uniform({d}, dt), k->b = uniform({d}, dt);
    k->y = uniform(s, dt), k->dx = uniform(s, dt), k->dg = filled({d}, dt, 0), k->db = filled({d}, dt, 0);
    kernels::layernorm_forward(k->x, k->g, k->b, 1e-6f, k->saved, k->y, bench_stream());
    Op op;
    if (backward)
      op.run = [k] { kernels::layernorm_backward(k->dy, k->x, k->g, k->saved, k->dx, k->dg, k->db, bench_stream()); };
    else
      op.run = [k] { kernels::layernorm_forward(k->x, k->g, k->b, 1e-6f, k->saved, k->y, bench_stream()); };
    op.bytes = (backward ? 3.0 : 2.0) * double(s.numel()) * es(dt);  // fwd: x -> y; bwd: dy, x -> dx
    op.keep = k;
    return op;
  };
}

// Pointwise and row ops of `arity` inputs and one output of shape s.
Factory pointwise(Shape s, int arity, std::function<void(const Tensor&, const Tensor&, Tensor&)> f) {
  return [s, arity, f](DType dt) {
    struct K {
      Tensor a, b, y;
    };
    auto k = std::make_shared<K>();
    k->a = uniform(s, dt), k->b = uniform(s, dt), k->y = uniform(s, dt);
    Op op;
    op.run = [k, f] { f(k->a, k->b, k->y); };
    op.bytes = double(arity + 1) * double(s.numel()) * es(dt);
    op.keep = k;
    return op;
  };
}

// k3 s2 p1 on s = [n, c, h, w], stored in `layout`.
Factory maxpool(Shape s, bool backward, kernels::Layout layout = kernels::Layout::nchw) {
  return [s, backward, layout](DType dt) {
    struct K {
      Tensor x, y, am, dy, dx;
    };
    auto k = std::make_shared<K>();
    const int64_t oh = (s[2] + 2 - 3) / 2 + 1, ow = (s[3] + 2 - 3) / 2 + 1;
    const bool nhwc = layout == kernels::Layout::nhwc;
    const Shape xs = nhwc ? Shape{s[0], s[2], s[3], s[1]} : s;
    const Shape ys = nhwc ? Shape{s[0], oh, ow, s[1]} : Shape{s[0], s[1], oh, ow};
    k->x = uniform(xs, dt), k->y = uniform(ys, dt), k->dy = uniform(ys, dt), k->dx = uniform(xs, dt);
    kernels::maxpool2d_forward(k->x, 3, 2, 1, k->y, k->am, bench_stream(), layout);
    Op op;
    if (backward)
      op.run = [k, layout] { kernels::maxpool2d_backward(k->dy, k->am, 3, 2, 1, k->dx, bench_stream(), layout); };
    else
      op.run = [k, layout] { kernels::maxpool2d_forward(k->x, 3, 2, 1, k->y, k->am, bench_stream(), layout); };
    op.pool_vectors = true;
    // x (or dx) once, y (or dy) once, the i32 argmax once
    op.bytes = double(s.numel()) * es(dt) + double(ys.numel()) * (es(dt) + 4.0);
    op.keep = k;
    return op;
  };
}

Factory avgpool(Shape s, bool backward) {
  return [s, backward](DType dt) {
    struct K {
      Tensor x, y;
    };
    auto k = std::make_shared<K>();
    k->x = uniform(s, dt), k->y = uniform({s[0], s[1]}, dt);
    Op op;
    if (backward)
      op.run = [k] { kernels::global_avgpool_backward(k->y, k->x, bench_stream()); };
    else
      op.run = [k] { kernels::global_avgpool_forward(k->x, k->y, bench_stream()); };
    op.bytes = double(s.numel() + s[0] * s[1]) * es(dt);
    op.keep = k;
    return op;
  };
}

Factory tokens(Shape s, bool backward) {  // s = patches [b, d, gh, gw]
  return [s, backward](DType dt) {
    struct K {
      Tensor x, cls, pos, y, dcls, dpos;
    };
    auto k = std::make_shared<K>();
    const int64_t b = s[0], d = s[1], p = s[2] * s[3];
    k->x = uniform(s, dt), k->cls = uniform({d}, dt), k->pos = uniform({p + 1, d}, dt),
    k->y = uniform({b, p + 1, d}, dt);
    k->dcls = filled({d}, dt, 0), k->dpos = filled({p + 1, d}, dt, 0);
    Op op;
    if (backward)
      op.run = [k] { kernels::tokens_backward(k->y, k->x, k->dcls, k->dpos, bench_stream()); };
    else
      op.run = [k] { kernels::tokens_forward(k->x, k->cls, k->pos, k->y, bench_stream()); };
    op.bytes = double(s.numel() + b * (p + 1) * d + (p + 1) * d) * es(dt);  // patches, tokens, pos (read or +=)
    op.keep = k;
    return op;
  };
}

Factory cls_select(Shape s, bool backward) {  // s = tokens [b, t, d]
  return [s, backward](DType dt) {
    struct K {
      Tensor x, y;
    };
    auto k = std::make_shared<K>();
    k->x = uniform(s, dt), k->y = uniform({s[0], s[2]}, dt);
    Op op;
    if (backward)
      op.run = [k] { kernels::cls_select_backward(k->y, k->x, bench_stream()); };
    else
      op.run = [k] { kernels::cls_select_forward(k->x, k->y, bench_stream()); };
    op.bytes = double(backward ? s.numel() + s[0] * s[2] : 2 * s[0] * s[2]) * es(dt);
    op.keep = k;
    return op;
  };
}

Factory cross_entropy(int64_t b, int64_t classes) {
  return [b, classes](DType dt) {
    struct K {
      Tensor z, labels, dz;
    };
    auto k = std::make_shared<K>();
    k->z = uniform({b, classes}, dt, -4, 4), k->dz = uniform({b, classes}, dt);
    std::vector<int32_t> l(static_cast<size_t>(b));
    for (size_t i = 0; i < l.size(); ++i) l[i] = int32_t(i * 7919 % size_t(classes));
    k->labels = Tensor::from_vector(l, {b}).to(Device::cuda(0), bench_stream());
    Op op;  // returns the loss: includes the copy to the host and the synchronisation
    op.run = [k] { kernels::softmax_cross_entropy(k->z, k->labels, 0.1, &k->dz, 1.0, bench_stream()); };
    op.bytes = 2.0 * double(b * classes) * es(dt);
    op.keep = k;
    return op;
  };
}

// Batch norm with the fused epilogue (relu(bn(x) [+ residual])), training forward or backward, beside the
// separate ops it replaces. Bytes: forward x twice, the residual, y; backward dy, x and the mask y in the sums
// pass (which writes dz), then dz and x read and dx written.
Factory bn_fused(Shape s, bool residual, bool backward) {
  return [s, residual, backward](DType dt) {
    struct K {
      Tensor x, r, g, b, rm, rv, y, t, dy, dz, dx, dg, db;
      kernels::BatchNormSaved saved;
    };
    auto k = std::make_shared<K>();
    const int64_t c = s[1];
    k->x = uniform(s, dt), k->g = uniform({c}, dt, 0.5, 1.5), k->b = uniform({c}, dt), k->y = uniform(s, dt);
    k->rm = filled({c}, DType::f32, 0), k->rv = filled({c}, DType::f32, 1), k->t = uniform(s, dt);
    if (residual) k->r = uniform(s, dt);
    k->dy = uniform(s, dt), k->dz = uniform(s, dt), k->dx = uniform(s, dt);
    k->dg = filled({c}, dt, 0), k->db = filled({c}, dt, 0);
    kernels::BatchNormFusion fusion;
    fusion.residual = k->r;
    fusion.relu = true;
    const Stream& st = bench_stream();
    kernels::batchnorm_forward_train(k->x, k->g, k->b, k->rm, k->rv, 1e-5f, 0.1f, k->saved, k->y, {}, st,
                                     kernels::Layout::nchw, fusion);
    Op op;
    const double n = double(s.numel()) * es(dt);
    if (!backward) {
      op.run = [k, fusion] {
        kernels::batchnorm_forward_train(k->x, k->g, k->b, k->rm, k->rv, 1e-5f, 0.1f, k->saved, k->y, {},
                                         bench_stream(), kernels::Layout::nchw, fusion);
      };
      op.unfused = [k, residual] {
        const Stream& bs = bench_stream();
        kernels::batchnorm_forward_train(k->x, k->g, k->b, k->rm, k->rv, 1e-5f, 0.1f, k->saved, k->t, {}, bs);
        if (residual) kernels::add(k->t, k->r, k->t, bs);
        kernels::relu_forward(k->t, k->y, bs);
      };
      op.bytes = (residual ? 4.0 : 3.0) * n;
    } else {
      op.run = [k] {
        const kernels::BatchNormReluGrad relu{k->y, k->dz};
        kernels::batchnorm_backward_train(k->dy, k->x, k->g, k->saved, k->dx, k->dg, k->db, {}, bench_stream(),
                                          kernels::Layout::nchw, &relu);
      };
      op.unfused = [k] {
        const Stream& bs = bench_stream();
        kernels::relu_backward(k->y, k->dy, k->dz, bs);
        kernels::batchnorm_backward_train(k->dz, k->x, k->g, k->saved, k->dx, k->dg, k->db, {}, bs);
      };
      op.bytes = 7.0 * n;
    }
    op.narrow_planes = narrow_planes(s, dt);
    op.keep = k;
    return op;
  };
}

// A projection block's output, relu(bn(x) + bn_r(r)), training forward: bn_r's statistics and the output pass with
// bn_r applied on the fly (BatchNormFusion::residual_bn), beside bn_r's own forward into a tensor and the output pass
// adding it (x_unfused; what HPDT_BN_RESIDUAL=separate runs). Bytes: r read twice (statistics, output pass), x twice,
// y written. (In the ResNet step the convolutions' epilogues hand both batch norms their statistics.)
Factory bn_projection_output(Shape s) {
  return [s](DType dt) {
    struct K {
      Tensor x, r, g, b, rg, rb, rm, rv, rrm, rrv, y, t;
      kernels::BatchNormSaved saved, rsaved;
    };
    auto k = std::make_shared<K>();
    const int64_t c = s[1];
    k->x = uniform(s, dt), k->r = uniform(s, dt), k->g = uniform({c}, dt, 0.5, 1.5), k->b = uniform({c}, dt);
    k->rg = uniform({c}, dt, 0.5, 1.5), k->rb = uniform({c}, dt), k->y = uniform(s, dt), k->t = uniform(s, dt);
    k->rm = filled({c}, DType::f32, 0), k->rv = filled({c}, DType::f32, 1);
    k->rrm = filled({c}, DType::f32, 0), k->rrv = filled({c}, DType::f32, 1);
    Op op;
    op.run = [k] {
      const Stream& bs = bench_stream();
      kernels::batchnorm_statistics(k->r, k->rrm, k->rrv, 1e-5f, 0.1f, k->rsaved, {}, bs);
      const kernels::ResidualBatchNorm rbn{k->rg, k->rb, k->rsaved.mean, k->rsaved.invstd};
      kernels::BatchNormFusion fusion;
      fusion.residual = k->r, fusion.residual_bn = &rbn, fusion.relu = true;
      kernels::batchnorm_forward_train(k->x, k->g, k->b, k->rm, k->rv, 1e-5f, 0.1f, k->saved, k->y, {}, bs,
                                       kernels::Layout::nchw, fusion);
    };
    op.unfused = [k] {
      const Stream& bs = bench_stream();
      kernels::batchnorm_forward_train(k->r, k->rg, k->rb, k->rrm, k->rrv, 1e-5f, 0.1f, k->rsaved, k->t, {}, bs);
      kernels::BatchNormFusion fusion;
      fusion.residual = k->t, fusion.relu = true;
      kernels::batchnorm_forward_train(k->x, k->g, k->b, k->rm, k->rv, 1e-5f, 0.1f, k->saved, k->y, {}, bs,
                                       kernels::Layout::nchw, fusion);
    };
    op.bytes = 5.0 * double(s.numel()) * es(dt);
    op.narrow_planes = narrow_planes(s, dt);
    op.keep = k;
    return op;
  };
}

// The same block's two batch norms, backward: the output batch norm's through its ReLU's mask, which also reads r
// and hands bn_r its sums (batchnorm_backward_train's residual_sums), then bn_r's from them, beside the two plain
// backwards (x_unfused: bn_r's own reduce pass over dz and r, what HPDT_BN_RESIDUAL=separate runs). Bytes: the
// output batch norm's reduce (dy, x, y read, dz written) and apply (dz, x, r read, dx written), bn_r's apply (dz, r
// read, dr written). (In the step the next block's backward-data hands the output batch norm its sums.) The flat
// apply kernels (narrow planes) compute no sums: there both run the same passes.
Factory bn_projection_backward(Shape s) {
  return [s](DType dt) {
    struct K {
      Tensor x, r, y, dy, dz, dx, dr, g, rg, dg, db, rdg, rdb;
      kernels::BatchNormSaved saved, rsaved;
      kernels::ChannelGradSums sums;
    };
    auto k = std::make_shared<K>();
    const int64_t c = s[1];
    k->x = uniform(s, dt), k->r = uniform(s, dt), k->y = uniform(s, dt), k->dy = uniform(s, dt);
    k->dz = uniform(s, dt), k->dx = uniform(s, dt), k->dr = uniform(s, dt);
    k->g = uniform({c}, dt, 0.5, 1.5), k->rg = uniform({c}, dt, 0.5, 1.5);
    k->dg = filled({c}, dt, 0), k->db = filled({c}, dt, 0), k->rdg = filled({c}, dt, 0), k->rdb = filled({c}, dt, 0);
    k->saved = {uniform({c}, DType::f32), uniform({c}, DType::f32, 0.5, 1.5)};
    k->rsaved = {uniform({c}, DType::f32), uniform({c}, DType::f32, 0.5, 1.5)};
    k->sums.x = k->r, k->sums.mean = k->rsaved.mean;
    auto both = [k](bool fed) {
      const Stream& bs = bench_stream();
      const kernels::BatchNormReluGrad relu{k->y, k->dz};
      kernels::batchnorm_backward_train(k->dy, k->x, k->g, k->saved, k->dx, k->dg, k->db, {}, bs, kernels::Layout::nchw,
                                        &relu, nullptr, fed ? &k->sums : nullptr);
      kernels::batchnorm_backward_train(k->dz, k->r, k->rg, k->rsaved, k->dr, k->rdg, k->rdb, {}, bs,
                                        kernels::Layout::nchw, nullptr, fed ? &k->sums : nullptr);
    };
    Op op;
    op.run = [both] { both(true); };
    op.unfused = [both] { both(false); };
    op.bytes = 11.0 * double(s.numel()) * es(dt);
    op.narrow_planes = narrow_planes(s, dt);
    op.keep = k;
    return op;
  };
}

void add(const std::string& name, const Factory& f) {
  for (DType dt : {DType::bf16, DType::f32}) {
    const std::string full = "layers/" + std::string(dtype_name(dt)) + "/" + name;
    benchmark::RegisterBenchmark(full.c_str(), bench, f, dt)->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
}

void register_all() {
  // ResNet-50 at 224, batch 64: the stem and one BN of each stage, pools, the residual add/ReLU, the loss.
  const Shape r50[] = {{64, 64, 112, 112}, {64, 256, 56, 56}, {64, 512, 28, 28}, {64, 1024, 14, 14}, {64, 2048, 7, 7}};
  for (const Shape& s : r50) {
    const std::string dims =
        std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]) + "x" + std::to_string(s[3]);
    add("resnet50_bn_train_fwd_" + dims, bn_train_forward(s));
    add("resnet50_bn_train_bwd_" + dims, bn_train_backward(s));
  }
  // The eval forward is the apply pass alone: what the training step's forward runs where the convolution handed
  // over the statistics (the 14x14 and 7x7 ones on the flat apply kernels).
  for (const Shape& s : {r50[1], r50[3], r50[4]}) {
    add("resnet50_bn_eval_" + std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]) + "x" +
            std::to_string(s[3]),
        bn_eval(s));
  }
  // What the ResNet blocks run (nn::BatchNorm with then_relu; the block output with the residual).
  for (const Shape& s : {r50[1], r50[3], r50[4]}) {
    const std::string dims =
        std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]) + "x" + std::to_string(s[3]);
    add("resnet50_bn_relu_train_fwd_" + dims, bn_fused(s, false, false));
    add("resnet50_bn_relu_train_bwd_" + dims, bn_fused(s, false, true));
    add("resnet50_bn_add_relu_train_fwd_" + dims, bn_fused(s, true, false));
    add("resnet50_bn_add_relu_train_bwd_" + dims, bn_fused(s, true, true));
    add("resnet50_bn_add_bn_relu_train_fwd_" + dims, bn_projection_output(s));
    add("resnet50_bn_add_bn_relu_train_bwd_" + dims, bn_projection_backward(s));
  }
  const Shape act{64, 256, 56, 56};
  add("resnet50_relu_fwd_64x256x56x56", pointwise(act, 1, [](const Tensor& a, const Tensor&, Tensor& y) {
        kernels::relu_forward(a, y, bench_stream());
      }));
  add("resnet50_relu_bwd_64x256x56x56", pointwise(act, 2, [](const Tensor& a, const Tensor& b, Tensor& y) {
        kernels::relu_backward(a, b, y, bench_stream());
      }));
  add("resnet50_add_64x256x56x56",
      pointwise(act, 2, [](const Tensor& a, const Tensor& b, Tensor& y) { kernels::add(a, b, y, bench_stream()); }));
  add("resnet50_maxpool_fwd_64x64x112x112_k3s2p1", maxpool(r50[0], false));
  add("resnet50_maxpool_bwd_64x64x112x112_k3s2p1", maxpool(r50[0], true));
  add("resnet50_maxpool_fwd_nhwc_64x112x112x64_k3s2p1", maxpool(r50[0], false, kernels::Layout::nhwc));
  add("resnet50_maxpool_bwd_nhwc_64x112x112x64_k3s2p1", maxpool(r50[0], true, kernels::Layout::nhwc));
  add("resnet50_avgpool_fwd_64x2048x7x7", avgpool(r50[4], false));
  add("resnet50_avgpool_bwd_64x2048x7x7", avgpool(r50[4], true));
  add("resnet50_cross_entropy_64x1000", cross_entropy(64, 1000));

  // ViT-B/16 at 224, batch 64: 197 tokens of 768, MLP 3072, 12 heads.
  const Shape tok{64, 197, 768}, mlp{64, 197, 3072}, att{64, 12, 197, 197};
  add("vitb16_layernorm_fwd_64x197x768", layernorm(tok, false));
  add("vitb16_layernorm_bwd_64x197x768", layernorm(tok, true));
  add("vitb16_gelu_erf_fwd_64x197x3072", pointwise(mlp, 1, [](const Tensor& a, const Tensor&, Tensor& y) {
        kernels::gelu_forward(a, kernels::GeluForm::erf, y, bench_stream());
      }));
  add("vitb16_gelu_erf_bwd_64x197x3072", pointwise(mlp, 2, [](const Tensor& a, const Tensor& b, Tensor& y) {
        kernels::gelu_backward(a, b, kernels::GeluForm::erf, y, bench_stream());
      }));
  add("vitb16_gelu_tanh_fwd_64x197x3072", pointwise(mlp, 1, [](const Tensor& a, const Tensor&, Tensor& y) {
        kernels::gelu_forward(a, kernels::GeluForm::tanh, y, bench_stream());
      }));
  add("vitb16_gelu_tanh_bwd_64x197x3072", pointwise(mlp, 2, [](const Tensor& a, const Tensor& b, Tensor& y) {
        kernels::gelu_backward(a, b, kernels::GeluForm::tanh, y, bench_stream());
      }));
  add("vitb16_softmax_fwd_64x12x197x197", pointwise(att, 1, [](const Tensor& a, const Tensor&, Tensor& y) {
        kernels::softmax_forward(a, y, bench_stream());
      }));
  add("vitb16_softmax_bwd_64x12x197x197", pointwise(att, 2, [](const Tensor& a, const Tensor& b, Tensor& y) {
        kernels::softmax_backward(a, b, y, bench_stream());
      }));
  add("vitb16_dropout_fwd_64x197x768_p0.1", pointwise(tok, 1, [](const Tensor& a, const Tensor&, Tensor& y) {
        kernels::dropout_forward(a, 0.1f, 1234, 5, y, bench_stream());
      }));
  add("vitb16_add_64x197x768",
      pointwise(tok, 2, [](const Tensor& a, const Tensor& b, Tensor& y) { kernels::add(a, b, y, bench_stream()); }));
  add("vitb16_tokens_fwd_64x768x14x14", tokens({64, 768, 14, 14}, false));
  add("vitb16_tokens_bwd_64x768x14x14", tokens({64, 768, 14, 14}, true));
  add("vitb16_cls_select_fwd_64x197x768", cls_select(tok, false));
  add("vitb16_cls_select_bwd_64x197x768", cls_select(tok, true));
  add("vitb16_softmax_long_rows_fwd_1024x5000",
      pointwise({1024, 5000}, 1,
                [](const Tensor& a, const Tensor&, Tensor& y) { kernels::softmax_forward(a, y, bench_stream()); }));
}

}  // namespace

int main(int argc, char** argv) { return hpdt::bench::run_benchmarks(argc, argv, register_all); }
