// GPU batch norm and layer norm (kernels/cuda/norm.cu) against the CPU oracle (kernels/cpu/norm.cpp), the way
// cuda_oracle.h says: fresh Philox inputs, the oracle fed the inputs rounded through the storage dtype, GPU
// outputs poisoned (NaN) before each run, accumulated outputs (dgamma, dbeta) pre-filled with random values.
//
// Shapes: ResNet-20 (128x16x32x32), ResNet-50 stages (8x64x56x56, 16x256x14x14, 4x2048x7x7), odd ones
// (c = 1, 3, 17; h*w = 1 ([n, c]), 7^2, 28^2); layer norm rows of d = 1, 5, 17, 192 (ViT-Ti), 768 (ViT-B),
// 5000 and 12000 (the dgamma/dbeta accumulators beyond 48 KiB of shared memory), with 1, 17 and 197-token
// rows. Misaligned views take the scalar (non-vector) paths. SyncBN: a callback that doubles the sums (two
// identical ranks), compared with the CPU op given the same callback, buffer contents included; the device seam
// (doubled on the device, no host wait) against the host seam bit for bit, and in a CUDA graph.
// Determinism: two runs of every reduction give the same bits.
// NHWC batch norm ([n, h, w, c] or [n, c] with layout nhwc: the column statistics of the [n*h*w, c] matrix) runs
// the same checks against the CPU's NHWC path (kernels/cpu/norm.cpp on the matrix), on odd channel counts
// (1, 3, 17: one channel per thread) and vector-wide ones (16, 64, 256, 2048), aligned and misaligned.
//
// Tolerances, |got - want| <= atol + rtol |want|:
//   statistics (saved mean/invstd/rstd, running stats; f32 whatever the storage): rtol 2e-5, atol 1e-6:
//     the GPU merges f32 Welford summaries (then double across blocks); the CPU sums each plane in f32
//     (56^2 values with a mean of 1: ~1e-6 relative) and the planes in double;
//   y, dx: the dtype's default (one rounding to 16 bits: 2^-8 bf16, 2^-11 f16) with atol raised to 1e-5 for
//     f32 (y = x a + b with |x a| up to ~3: an FMA or not moves y by an ulp of 3, 2.4e-7; the statistics'
//     own 1e-6 relative difference);
//   dgamma, dbeta and the backward seam buffer: sums over n*h*w (batch norm) or rows (layer norm) values of
//     size ~1: atol 1e-5 sqrt(count) on top of the dtype's default (f32 partial sums in another order on
//     both sides: the CPU adds a whole plane in f32, the GPU a thread's share).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_oracle.h"
#include "hpdt/core/cuda_graph.h"
#include "hpdt/core/env.h"
#include "hpdt/kernels/accumulate.h"
#include "hpdt/kernels/norm.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
using kernels::AllReduceSum;
using kernels::BatchNormSaved;
using kernels::LayerNormSaved;
using kernels::Layout;
using test::Tolerance;

constexpr float kEps = 1e-5f, kMomentum = 0.1f;

Tolerance stat_tol() { return {2e-5, 1e-6}; }
Tolerance value_tol(DType dt) {
  Tolerance t = test::default_tolerance(dt);
  t.atol = std::max(t.atol, 1e-5);
  return t;
}
Tolerance sum_tol(DType dt, int64_t count) {
  Tolerance t = value_tol(dt);
  t.atol += 1e-5 * std::sqrt(double(count));
  return t;
}

std::string label(const Shape& s, DType dt) { return s.str() + " " + std::string(dtype_name(dt)); }

class NormCuda : public test::CudaOracleTest {
 protected:
  // A GPU copy of `host` (f32) stored as `dt`, optionally starting one element past a 16-byte boundary.
  Tensor gpu(const Tensor& host, DType dt, bool misaligned = false) {
    if (!misaligned) return to_gpu(host, dt);
    Tensor big = Tensor::empty({host.numel() + 8}, dt, Device::cuda(0), AllocOptions{.stream = &stream});
    Tensor v = big.flat(1, host.numel()).view(host.shape());
    Tensor narrow = host;
    if (dt != DType::f32) {
      narrow = Tensor::empty(host.shape(), dt);
      kernels::cpu::cast(host, narrow);
    }
    copy(narrow, v, stream);
    stream.synchronize();
    return v;
  }
  Tensor poison(const Shape& s, DType dt, bool misaligned = false) {
    if (!misaligned) return poisoned(s, dt);
    Tensor big = poisoned({s.numel() + 8}, dt);
    return big.flat(1, s.numel()).view(s);
  }
  static AllReduceSum doubling(std::vector<float>* seen) {
    return [seen](float* d, size_t n) {
      seen->assign(d, d + n);
      for (size_t i = 0; i < n; ++i) d[i] *= 2;  // two identical ranks
    };
  }
  static Tensor vec(const std::vector<float>& v) { return Tensor::from_vector(v, {int64_t(v.size())}); }

  void bn_train_case(const Shape& shape, DType dt, bool sync, bool misaligned = false, Layout layout = Layout::nchw);
  void bn_backward_case(const Shape& shape, DType dt, bool sync, bool misaligned = false, Layout layout = Layout::nchw);
  void ln_case(const Shape& shape, DType dt, bool misaligned = false);
  void bn_fused_case(const Shape& shape, DType dt, Layout layout, bool residual, bool misaligned = false);
  void bn_residual_bn_case(const Shape& shape, DType dt, Layout layout, bool misaligned = false);
  void bn_residual_sums_case(const Shape& shape, DType dt, Layout layout, bool misaligned = false, bool sync = false);
};

// Plane vectors (bf16 / f32): 28x28 8 / 4, 7x7 1 / 1, 2x7 2 / 2, 6x6 4 / 4, 14x14 4 / 4.
const Shape kBnShapes[] = {{2, 3, 28, 28},   {4, 1, 28, 28},  {3, 17, 7, 7},     {3, 5, 2, 7},   {7, 3, 6, 6},
                           {37, 17},         {5, 3},          {128, 16, 32, 32}, {8, 64, 56, 56}, {16, 256, 14, 14},
                           {4, 2048, 7, 7}};

// The channel count of a batch-norm input: [n, c, h, w], [n, h, w, c] (NHWC) or [n, c].
int64_t channels(const Shape& s, Layout layout) { return layout == Layout::nhwc ? s[-1] : s[1]; }

void NormCuda::bn_train_case(const Shape& shape, DType dt, bool sync, bool misaligned, Layout layout) {
  SCOPED_TRACE(label(shape, dt) + (sync ? " sync" : "") + (misaligned ? " misaligned" : "") + " " +
               kernels::layout_name(layout));
  const int64_t c = channels(shape, layout);
  const Tensor x = random(shape, -1, 3), g = random({c}, 0.5, 1.5), b = random({c}, -0.5, 0.5);
  const Tensor rm0 = random({c}, -0.2f, 0.2f), rv0 = random({c}, 0.5f, 2.0f);
  std::vector<float> cpu_seen, gpu_seen;
  // oracle
  Tensor rm = rm0.clone(cpu), rv = rv0.clone(cpu), y = Tensor::empty(shape, DType::f32);
  BatchNormSaved saved;
  kernels::batchnorm_forward_train(round_through(x, dt), round_through(g, dt), round_through(b, dt), rm, rv, kEps,
                                   kMomentum, saved, y, sync ? doubling(&cpu_seen) : AllReduceSum{}, cpu, layout);
  // GPU: saved statistics left undefined (the op allocates them on the device)
  Tensor rmg = to_gpu(rm0), rvg = to_gpu(rv0), yg = poison(shape, dt, misaligned);
  BatchNormSaved sg;
  kernels::batchnorm_forward_train(gpu(x, dt, misaligned), to_gpu(g, dt), to_gpu(b, dt), rmg, rvg, kEps, kMomentum, sg,
                                   yg, sync ? doubling(&gpu_seen) : AllReduceSum{}, stream, layout);
  ASSERT_TRUE(sg.mean.is_cuda() && sg.invstd.is_cuda());
  ASSERT_EQ(sg.mean.dtype(), DType::f32);
  EXPECT_TRUE(close(y, to_cpu_f32(yg), value_tol(dt))) << "y";
  EXPECT_TRUE(close(saved.mean, to_cpu_f32(sg.mean), stat_tol())) << "saved mean";
  EXPECT_TRUE(close(saved.invstd, to_cpu_f32(sg.invstd), stat_tol())) << "saved invstd";
  EXPECT_TRUE(close(rm, to_cpu_f32(rmg), stat_tol())) << "running mean";
  EXPECT_TRUE(close(rv, to_cpu_f32(rvg), stat_tol())) << "running var";
  if (sync) {  // the seam buffer: sum, sumsq, count, as the CPU lays it out
    ASSERT_EQ(gpu_seen.size(), size_t(2 * c + 1));
    ASSERT_EQ(cpu_seen.size(), gpu_seen.size());
    EXPECT_EQ(gpu_seen.back(), cpu_seen.back()) << "count";
    EXPECT_TRUE(close(vec(cpu_seen), vec(gpu_seen), {2e-5, 1e-6 * double(shape.numel() / c)})) << "seam buffer";
  }
}

void NormCuda::bn_backward_case(const Shape& shape, DType dt, bool sync, bool misaligned, Layout layout) {
  SCOPED_TRACE(label(shape, dt) + " backward" + (sync ? " sync" : "") + (misaligned ? " misaligned" : "") + " " +
               kernels::layout_name(layout));
  const int64_t c = channels(shape, layout), count = shape.numel() / c;
  const Tensor x = random(shape, -1, 3), dy = random(shape), g = random({c}, 0.5, 1.5), b = random({c});
  const Tensor dg0 = random({c}), db0 = random({c});
  const Tensor xr = round_through(x, dt), dyr = round_through(dy, dt), gr = round_through(g, dt);
  // oracle: forward for the saved statistics, then backward onto the rounded initial dgamma/dbeta
  Tensor rm = Tensor::zeros({c}, DType::f32), rv = Tensor::zeros({c}, DType::f32), y = Tensor::empty(shape, DType::f32);
  BatchNormSaved saved;
  std::vector<float> cpu_seen, gpu_seen;
  kernels::batchnorm_forward_train(xr, gr, round_through(b, dt), rm, rv, kEps, kMomentum, saved, y, {}, cpu, layout);
  Tensor dx = Tensor::empty(shape, DType::f32), dg = round_through(dg0, dt), db = round_through(db0, dt);
  kernels::batchnorm_backward_train(dyr, xr, gr, saved, dx, dg, db, sync ? doubling(&cpu_seen) : AllReduceSum{}, cpu,
                                    layout);
  // GPU, given the CPU's saved statistics so that only the backward is compared
  BatchNormSaved sg{to_gpu(saved.mean), to_gpu(saved.invstd)};
  Tensor dxg = poison(shape, dt, misaligned), dgg = to_gpu(dg0, dt), dbg = to_gpu(db0, dt);
  kernels::batchnorm_backward_train(gpu(dy, dt, misaligned), gpu(x, dt, misaligned), to_gpu(g, dt), sg, dxg, dgg, dbg,
                                    sync ? doubling(&gpu_seen) : AllReduceSum{}, stream, layout);
  EXPECT_TRUE(close(dx, to_cpu_f32(dxg), value_tol(dt))) << "dx";
  EXPECT_TRUE(close(dg, to_cpu_f32(dgg), sum_tol(dt, count))) << "dgamma";
  EXPECT_TRUE(close(db, to_cpu_f32(dbg), sum_tol(dt, count))) << "dbeta";
  if (sync) {
    ASSERT_EQ(gpu_seen.size(), size_t(2 * c + 1));
    EXPECT_EQ(gpu_seen.back(), cpu_seen.back()) << "count";
    EXPECT_TRUE(close(vec(cpu_seen), vec(gpu_seen), sum_tol(DType::f32, count))) << "seam buffer";
  }
}

// The fused epilogue y = relu(bn(x) [+ residual]) in training and eval, and its backward through the ReLU's mask
// (dz = y > 0 ? dy : 0, then batch norm's gradients from dz). The backward compares with both sides given the
// same mask: the CPU's y rounded through the storage dtype (exact zeros where the ReLU cut), so that dz must
// match exactly; a mask taken from each side's own forward could differ where bn(x) + residual is ~0.
void NormCuda::bn_fused_case(const Shape& shape, DType dt, Layout layout, bool residual, bool misaligned) {
  SCOPED_TRACE(label(shape, dt) + " fused relu" + (residual ? " + residual" : "") + (misaligned ? " misaligned" : "") +
               " " + kernels::layout_name(layout));
  const int64_t c = channels(shape, layout), count = shape.numel() / c;
  const Tensor x = random(shape, -1, 3), r = random(shape, -2, 2), g = random({c}, 0.5, 1.5), b = random({c}, -0.5, 0.5);
  const Tensor rm0 = random({c}, -0.2f, 0.2f), rv0 = random({c}, 0.5f, 2.0f);
  const Tensor xr = round_through(x, dt), gr = round_through(g, dt), br = round_through(b, dt);
  kernels::BatchNormFusion cpu_fusion, gpu_fusion;
  cpu_fusion.relu = gpu_fusion.relu = true;
  if (residual) cpu_fusion.residual = round_through(r, dt), gpu_fusion.residual = gpu(r, dt, misaligned);
  const Tensor xg = gpu(x, dt, misaligned), gg = to_gpu(g, dt), bg = to_gpu(b, dt);
  // training forward
  Tensor rm = rm0.clone(cpu), rv = rv0.clone(cpu), y = Tensor::empty(shape, DType::f32);
  BatchNormSaved saved;
  kernels::batchnorm_forward_train(xr, gr, br, rm, rv, kEps, kMomentum, saved, y, {}, cpu, layout, cpu_fusion);
  Tensor rmg = to_gpu(rm0), rvg = to_gpu(rv0), yg = poison(shape, dt, misaligned);
  BatchNormSaved sg;
  kernels::batchnorm_forward_train(xg, gg, bg, rmg, rvg, kEps, kMomentum, sg, yg, {}, stream, layout, gpu_fusion);
  EXPECT_TRUE(close(y, to_cpu_f32(yg), value_tol(dt))) << "y";
  EXPECT_TRUE(close(rv, to_cpu_f32(rvg), stat_tol())) << "running var";
  int64_t cut = 0;
  for (int64_t i = 0; i < y.numel(); ++i) cut += y.data<float>()[i] == 0.0f;
  EXPECT_GT(cut, 0) << "the ReLU cut nothing: the mask is untested";
  EXPECT_LT(cut, y.numel()) << "the ReLU cut everything";
  // eval forward
  Tensor ye = Tensor::empty(shape, DType::f32), yeg = poison(shape, dt, misaligned);
  kernels::batchnorm_forward_eval(xr, gr, br, rm0, rv0, kEps, ye, cpu, layout, cpu_fusion);
  kernels::batchnorm_forward_eval(xg, gg, bg, to_gpu(rm0), to_gpu(rv0), kEps, yeg, stream, layout, gpu_fusion);
  EXPECT_TRUE(close(ye, to_cpu_f32(yeg), value_tol(dt))) << "eval y";
  // backward, from the CPU's statistics and mask
  const Tensor dy = random(shape), dg0 = random({c}), db0 = random({c});
  const Tensor mask = round_through(y, dt);
  const kernels::BatchNormReluGrad cpu_relu{mask, Tensor::empty(shape, DType::f32)};
  Tensor dx = Tensor::empty(shape, DType::f32), dg = round_through(dg0, dt), db = round_through(db0, dt);
  kernels::batchnorm_backward_train(round_through(dy, dt), xr, gr, saved, dx, dg, db, {}, cpu, layout, &cpu_relu);
  const kernels::BatchNormReluGrad gpu_relu{gpu(y, dt, misaligned), poison(shape, dt, misaligned)};
  BatchNormSaved sc{to_gpu(saved.mean), to_gpu(saved.invstd)};
  Tensor dxg = poison(shape, dt, misaligned), dgg = to_gpu(dg0, dt), dbg = to_gpu(db0, dt);
  kernels::batchnorm_backward_train(gpu(dy, dt, misaligned), xg, gg, sc, dxg, dgg, dbg, {}, stream, layout, &gpu_relu);
  EXPECT_TRUE(close(cpu_relu.dz, to_cpu_f32(gpu_relu.dz), {0.0, 0.0})) << "dz (dy or 0: exact)";
  EXPECT_TRUE(close(dx, to_cpu_f32(dxg), value_tol(dt))) << "dx";
  EXPECT_TRUE(close(dg, to_cpu_f32(dgg), sum_tol(dt, count))) << "dgamma";
  EXPECT_TRUE(close(db, to_cpu_f32(dbg), sum_tol(dt, count))) << "dbeta";
  if (residual) return;
  // The mask from x (BatchNormReluGrad::beta; no y read, no dz written): what the mask from the GPU forward's own
  // output gives, from the GPU's own statistics. (Within the tolerances, not bit for bit: the dx passes are other
  // instances of their bodies, which the compiler may contract differently; a wrong mask at one value is off by
  // about dy there, far outside them.)
  const Tensor dyg = gpu(dy, dt, misaligned);
  auto backward = [&](const kernels::BatchNormReluGrad& relu) {
    Tensor dx_out = poison(shape, dt, misaligned), dg_out = to_gpu(dg0, dt), db_out = to_gpu(db0, dt);
    kernels::batchnorm_backward_train(dyg, xg, gg, sg, dx_out, dg_out, db_out, {}, stream, layout, &relu);
    return std::array<Tensor, 3>{to_cpu_f32(dx_out), to_cpu_f32(dg_out), to_cpu_f32(db_out)};
  };
  const int64_t r0 = test::emu_launches("bn_backward_reduce");
  const auto from_output = backward({yg, poison(shape, dt, misaligned)});
  kernels::BatchNormReluGrad mask_from_x;
  mask_from_x.beta = bg;
  const auto from_input = backward(mask_from_x);
  EXPECT_TRUE(close(from_output[0], from_input[0], value_tol(dt))) << "dx, the mask from x";
  EXPECT_TRUE(close(from_output[1], from_input[1], sum_tol(dt, count))) << "dgamma, the mask from x";
  EXPECT_TRUE(close(from_output[2], from_input[2], sum_tol(dt, count))) << "dbeta, the mask from x";
  if (r0 >= 0) {
    EXPECT_EQ(test::emu_launches("bn_backward_reduce") - r0, 2) << "a reduce pass each";
  }
}

TEST_F(NormCuda, FusedReluAndResidualMatchCpu) {
  for (DType dt : test::kCudaTestDtypes)
    for (bool residual : {false, true}) {
      for (const Shape& s : {Shape{2, 3, 28, 28}, Shape{3, 17, 7, 7}, Shape{3, 5, 2, 7}, Shape{7, 3, 6, 6},
                             Shape{37, 17}, Shape{4, 64, 14, 14}})
        bn_fused_case(s, dt, Layout::nchw, residual);
      for (const Shape& s : {Shape{2, 28, 28, 3}, Shape{3, 7, 7, 17}, Shape{37, 17}, Shape{4, 14, 14, 64},
                             Shape{2, 7, 7, 256}})
        bn_fused_case(s, dt, Layout::nhwc, residual);
      bn_fused_case({2, 3, 28, 28}, dt, Layout::nchw, residual, true);  // scalar paths
      bn_fused_case({4, 14, 14, 64}, dt, Layout::nhwc, residual, true);
    }
}

// The fused ReLU's mask from x (BatchNormReluGrad::beta) is the mask of the output the forward stored: x * a + b
// rounded to the dtype, positive. Saved statistics (mean 0, invstd 1 + 2^-23), gamma 1 and channels' betas -1/8,
// -1/4, -1/2 place values at the edge on purpose: x = -beta gives x * a + b = 2^-26, 2^-25 (both stored as 0 in f16)
// and 2^-24 (f16's least positive), with dy 1 there. The mask of the unrounded value passed the first two; random f16
// data draws such a value now and then (FusedReluAndResidualMatchCpu failed once in CI on one). Against the mask from y
// = relu(x * a + b) rounded on the host; every dx kernel (per channel vectorised and scalar, flat, NHWC) and both
// reduce kernels.
TEST_F(NormCuda, FusedReluMaskFromXRoundsAsTheForwardStored) {
  struct Case {
    Shape shape;
    Layout layout;
    bool misaligned;
  };
  const Case cases[] = {{{2, 3, 28, 28}, Layout::nchw, false},
                        {{2, 3, 28, 28}, Layout::nchw, true},
                        {{3, 5, 7, 7}, Layout::nchw, false},
                        {{2, 28, 28, 16}, Layout::nhwc, false},
                        {{2, 7, 7, 3}, Layout::nhwc, false}};
  const float a = 1.0f + 0x1p-23f;
  for (DType dt : test::kCudaTestDtypes)
    for (const Case& k : cases) {
      SCOPED_TRACE(label(k.shape, dt) + " " + kernels::layout_name(k.layout) + (k.misaligned ? " misaligned" : ""));
      const int64_t c = channels(k.shape, k.layout), n = k.shape.numel(), count = n / c;
      Tensor x = random(k.shape, -1, 3), dy = random(k.shape);
      // channel j's beta -e_j, e_j = 1/8, 1/4, 1/2, ...; x = e_j at every 37th value
      const auto edge = [](int64_t j) { return std::ldexp(1.0f, -3 + int(j % 3)); };
      const auto channel_of = [&](int64_t i) {
        return k.layout == Layout::nhwc ? i % c : i / (n / k.shape[0] / c) % c;
      };
      for (int64_t i = 0; i < n; i += 37) x.data<float>()[i] = edge(channel_of(i)), dy.data<float>()[i] = 1.0f;
      x = round_through(x, dt);
      // the forward's output as it stored it: relu(x * a + b) (bn_coefficients: b = fma(-mean, a, beta)) rounded
      Tensor y = Tensor::empty(k.shape, DType::f32);
      std::vector<float> v(static_cast<size_t>(n));  // x * a + b before rounding
      for (int64_t i = 0; i < n; ++i) {
        v[size_t(i)] = std::fma(x.data<float>()[i], a, std::fma(-0.0f, a, -edge(channel_of(i))));
        y.data<float>()[i] = v[size_t(i)] > 0.0f ? v[size_t(i)] : 0.0f;
      }
      y = round_through(y, dt);
      int64_t stored_as_zero = 0, least_positive = 0;
      for (int64_t i = 0; i < n; ++i) {
        stored_as_zero += v[size_t(i)] > 0.0f && y.data<float>()[i] == 0.0f;
        least_positive += y.data<float>()[i] == 0x1p-24f;
      }
      if (dt == DType::f16) {
        EXPECT_GT(stored_as_zero, 0) << "no positive value stored as 0: the edge is untested";
        EXPECT_GT(least_positive, 0) << "no value stored as f16's least positive";
      }
      Tensor gamma = Tensor::empty({c}, DType::f32), betas = Tensor::empty({c}, DType::f32);
      Tensor invstd = Tensor::empty({c}, DType::f32), dg0 = random({c}), db0 = random({c});
      for (int64_t j = 0; j < c; ++j)
        gamma.data<float>()[j] = 1.0f, betas.data<float>()[j] = -edge(j), invstd.data<float>()[j] = a;
      const BatchNormSaved saved{Tensor::zeros({c}, DType::f32), invstd};
      // the oracle: the CPU's backward through the mask of the stored y
      const kernels::BatchNormReluGrad cpu_relu{y, Tensor::empty(k.shape, DType::f32)};
      Tensor dx = Tensor::empty(k.shape, DType::f32), dg = round_through(dg0, dt), db = round_through(db0, dt);
      kernels::batchnorm_backward_train(round_through(dy, dt), x, gamma, saved, dx, dg, db, {}, cpu, k.layout,
                                        &cpu_relu);
      // the GPU: the mask from x, and from the stored y
      const BatchNormSaved sg{to_gpu(saved.mean), to_gpu(saved.invstd)};
      const Tensor xg = gpu(x, dt, k.misaligned), dyg = gpu(dy, dt, k.misaligned), gg = to_gpu(gamma, dt);
      auto backward = [&](const kernels::BatchNormReluGrad& relu) {
        Tensor dx_out = poison(k.shape, dt, k.misaligned), dg_out = to_gpu(dg0, dt), db_out = to_gpu(db0, dt);
        kernels::batchnorm_backward_train(dyg, xg, gg, sg, dx_out, dg_out, db_out, {}, stream, k.layout, &relu);
        return std::array<Tensor, 3>{to_cpu_f32(dx_out), to_cpu_f32(dg_out), to_cpu_f32(db_out)};
      };
      kernels::BatchNormReluGrad mask_from_x;
      mask_from_x.beta = to_gpu(betas, dt);
      const auto from_input = backward(mask_from_x);
      const auto from_output = backward({gpu(y, dt, k.misaligned), poison(k.shape, dt, k.misaligned)});
      for (const auto* got : {&from_input, &from_output}) {
        const char* what = got == &from_input ? "the mask from x" : "the mask from y";
        EXPECT_TRUE(close(dx, (*got)[0], value_tol(dt))) << "dx, " << what;
        EXPECT_TRUE(close(dg, (*got)[1], sum_tol(dt, count))) << "dgamma, " << what;
        EXPECT_TRUE(close(db, (*got)[2], sum_tol(dt, count))) << "dbeta, " << what;
      }
    }
}

// A residual's own batch norm applied in the output pass (BatchNormFusion::residual_bn, ResNet's projection
// shortcut): y = relu(bn(x) + bn_r(r)) against the CPU, which applies bn_r as batchnorm_forward does and then adds
// it, in training (bn_r's statistics from batchnorm_statistics, against the CPU's, and bit for bit those of
// batchnorm_forward_train on the GPU) and in eval (bn_r's running statistics and its own eps). With
// HPDT_BN_RESIDUAL=separate, against the CPU's two passes with bn_r(r) rounded through the dtype in between; with
// HPDT_BN_FLAT=off (narrow NCHW planes), the per-channel kernels' bits. On the emulator, which kernels ran: one
// apply and the coefficients' kernel, or two applies (separate).
void NormCuda::bn_residual_bn_case(const Shape& shape, DType dt, Layout layout, bool misaligned) {
  SCOPED_TRACE(label(shape, dt) + " residual batch norm" + (misaligned ? " misaligned" : "") + " " +
               kernels::layout_name(layout));
  const int64_t c = channels(shape, layout);
  const Tensor x = random(shape, -1, 3), r = random(shape, -2, 4), g = random({c}, 0.5, 1.5),
               b = random({c}, -0.5, 0.5);
  const Tensor rg = random({c}, 0.5, 1.5), rbeta = random({c}, -1, 1);
  const Tensor rm0 = random({c}, -0.2f, 0.2f), rv0 = random({c}, 0.5f, 2.0f);
  const Tensor xr = round_through(x, dt), rr = round_through(r, dt), gr = round_through(g, dt),
               br = round_through(b, dt), rgr = round_through(rg, dt), rbr = round_through(rbeta, dt);
  const Tensor xg = gpu(x, dt, misaligned), rgpu = gpu(r, dt, misaligned), gg = to_gpu(g, dt), bg = to_gpu(b, dt);
  const Tensor rgg = to_gpu(rg, dt), rbg = to_gpu(rbeta, dt);
  // CPU: bn_r's statistics, then the output pass
  Tensor rrm = rm0.clone(cpu), rrv = rv0.clone(cpu), rm = rm0.clone(cpu), rv = rv0.clone(cpu);
  Tensor y = Tensor::empty(shape, DType::f32);
  BatchNormSaved rsaved, saved;
  kernels::batchnorm_statistics(rr, rrm, rrv, kEps, kMomentum, rsaved, {}, cpu, layout);
  const kernels::ResidualBatchNorm cpu_rb{rgr, rbr, rsaved.mean, rsaved.invstd};
  kernels::BatchNormFusion cpu_fusion;
  cpu_fusion.residual = rr, cpu_fusion.residual_bn = &cpu_rb, cpu_fusion.relu = true;
  kernels::batchnorm_forward_train(xr, gr, br, rm, rv, kEps, kMomentum, saved, y, {}, cpu, layout, cpu_fusion);
  // GPU
  Tensor rrmg = to_gpu(rm0), rrvg = to_gpu(rv0);
  BatchNormSaved rsg;
  kernels::batchnorm_statistics(rgpu, rrmg, rrvg, kEps, kMomentum, rsg, {}, stream, layout);
  EXPECT_TRUE(close(rsaved.mean, to_cpu_f32(rsg.mean), stat_tol())) << "bn_r's saved mean";
  EXPECT_TRUE(close(rsaved.invstd, to_cpu_f32(rsg.invstd), stat_tol())) << "bn_r's saved invstd";
  EXPECT_TRUE(close(rrm, to_cpu_f32(rrmg), stat_tol())) << "bn_r's running mean";
  EXPECT_TRUE(close(rrv, to_cpu_f32(rrvg), stat_tol())) << "bn_r's running var";
  {  // the statistics are batchnorm_forward_train's, bit for bit
    Tensor m2 = to_gpu(rm0), v2 = to_gpu(rv0), y2 = poison(shape, dt, misaligned);
    BatchNormSaved s2;
    kernels::batchnorm_forward_train(rgpu, rgg, rbg, m2, v2, kEps, kMomentum, s2, y2, {}, stream, layout);
    const std::pair<Tensor, Tensor> pairs[] = {{rsg.mean, s2.mean}, {rsg.invstd, s2.invstd}, {rrmg, m2}, {rrvg, v2}};
    for (const auto& [got, want] : pairs) {
      const Tensor a = to_cpu_f32(got), e = to_cpu_f32(want);
      for (int64_t i = 0; i < c; ++i)
        ASSERT_EQ(test::bits_of(a.data<float>()[i]), test::bits_of(e.data<float>()[i])) << "statistics " << i;
    }
  }
  const kernels::ResidualBatchNorm gpu_rb{rgg, rbg, rsg.mean, rsg.invstd};
  kernels::BatchNormFusion gpu_fusion;
  gpu_fusion.residual = rgpu, gpu_fusion.residual_bn = &gpu_rb, gpu_fusion.relu = true;
  auto train_gpu = [&] {
    Tensor m = to_gpu(rm0), v = to_gpu(rv0), yg = poison(shape, dt, misaligned);
    BatchNormSaved sg;
    kernels::batchnorm_forward_train(xg, gg, bg, m, v, kEps, kMomentum, sg, yg, {}, stream, layout, gpu_fusion);
    return to_cpu_f32(yg);
  };
  const int64_t applies0 = test::emu_launches("bn_apply"), affine0 = test::emu_launches("bn_affine");
  const Tensor yg = train_gpu();
  if (applies0 >= 0) {
    EXPECT_EQ(test::emu_launches("bn_apply") - applies0, 1) << "one output pass";
    EXPECT_EQ(test::emu_launches("bn_affine") - affine0, 1) << "bn_r's coefficients";
  }
  EXPECT_TRUE(close(y, yg, value_tol(dt))) << "y";
  int64_t cut = 0;
  for (int64_t i = 0; i < y.numel(); ++i) cut += y.data<float>()[i] == 0.0f;
  EXPECT_GT(cut, 0) << "the ReLU cut nothing";
  EXPECT_LT(cut, y.numel()) << "the ReLU cut everything";
  if (layout == Layout::nchw) {  // the flat apply (narrow planes) gives the per-channel kernels' bits
    const ScopedEnv per_channel("HPDT_BN_FLAT", "off");
    const Tensor off = train_gpu();
    for (int64_t i = 0; i < y.numel(); ++i)
      ASSERT_EQ(test::bits_of(off.data<float>()[i]), test::bits_of(yg.data<float>()[i])) << "HPDT_BN_FLAT=off " << i;
  }
  // eval: bn_r from its running statistics, with an eps of its own
  const kernels::ResidualBatchNorm cpu_rb_eval{rgr, rbr, rm0, rv0, 1e-3f};
  const kernels::ResidualBatchNorm gpu_rb_eval{rgg, rbg, to_gpu(rm0), to_gpu(rv0), 1e-3f};
  cpu_fusion.residual_bn = &cpu_rb_eval, gpu_fusion.residual_bn = &gpu_rb_eval;
  Tensor ye = Tensor::empty(shape, DType::f32), yeg = poison(shape, dt, misaligned);
  kernels::batchnorm_forward_eval(xr, gr, br, rm0, rv0, kEps, ye, cpu, layout, cpu_fusion);
  kernels::batchnorm_forward_eval(xg, gg, bg, to_gpu(rm0), to_gpu(rv0), kEps, yeg, stream, layout, gpu_fusion);
  EXPECT_TRUE(close(ye, to_cpu_f32(yeg), value_tol(dt))) << "eval y";
  // HPDT_BN_RESIDUAL=separate: bn_r's output written (rounded through the dtype), then added
  gpu_fusion.residual_bn = &gpu_rb;
  Tensor t = Tensor::empty(shape, DType::f32), m = rm0.clone(cpu), v = rv0.clone(cpu),
         ys = Tensor::empty(shape, DType::f32);
  BatchNormSaved st, ss;
  kernels::batchnorm_forward_train(rr, rgr, rbr, m, v, kEps, kMomentum, st, t, {}, cpu, layout);
  kernels::BatchNormFusion two_pass;
  two_pass.residual = round_through(t, dt), two_pass.relu = true;
  m = rm0.clone(cpu), v = rv0.clone(cpu);
  kernels::batchnorm_forward_train(xr, gr, br, m, v, kEps, kMomentum, ss, ys, {}, cpu, layout, two_pass);
  const ScopedEnv separate("HPDT_BN_RESIDUAL", "separate");
  const int64_t applies1 = test::emu_launches("bn_apply"), affine1 = test::emu_launches("bn_affine");
  const Tensor ysg = train_gpu();
  if (applies1 >= 0) {
    EXPECT_EQ(test::emu_launches("bn_apply") - applies1, 2) << "bn_r's pass and the output pass";
    EXPECT_EQ(test::emu_launches("bn_affine") - affine1, 0);
  }
  // bn_r(r) rounded on both sides from values an ulp apart (a x + b against the CPU's (x - mean) invstd gamma +
  // beta) can land a unit of the dtype apart: that much more absolute error, |bn_r(r)| times the dtype's rtol
  Tolerance two_pass_tol = value_tol(dt);
  float most = 0.0f;
  for (int64_t i = 0; i < t.numel(); ++i) most = std::max(most, std::abs(t.data<float>()[i]));
  two_pass_tol.atol += two_pass_tol.rtol * double(most);
  EXPECT_TRUE(close(ys, ysg, two_pass_tol)) << "y, HPDT_BN_RESIDUAL=separate";
}

TEST_F(NormCuda, ResidualBatchNormAppliedInTheOutputPassMatchesCpu) {
  for (DType dt : test::kCudaTestDtypes) {
    for (const Shape& s :
         {Shape{2, 8, 28, 28}, Shape{3, 17, 7, 7}, Shape{4, 64, 14, 14}, Shape{3, 5, 2, 7}, Shape{37, 17}})
      bn_residual_bn_case(s, dt, Layout::nchw);
    for (const Shape& s : {Shape{2, 7, 7, 256}, Shape{3, 7, 7, 17}, Shape{4, 14, 14, 64}})
      bn_residual_bn_case(s, dt, Layout::nhwc);
    bn_residual_bn_case({2, 3, 28, 28}, dt, Layout::nchw, true);  // scalar paths
    bn_residual_bn_case({4, 14, 14, 64}, dt, Layout::nhwc, true);
  }
  const ScopedEnv bad("HPDT_BN_RESIDUAL", "yes");
  const Tensor x = to_gpu(random({2, 3, 4, 4}), DType::f32), g = to_gpu(random({3}), DType::f32);
  const Tensor rm = to_gpu(Tensor::zeros({3}, DType::f32)), rv = to_gpu(random({3}, 0.5, 2));
  Tensor y = poison({2, 3, 4, 4}, DType::f32);
  const kernels::ResidualBatchNorm rb{g, g, rm, rv};
  kernels::BatchNormFusion f;
  f.residual = x, f.residual_bn = &rb;
  HPDT_EXPECT_THROW_MSG(kernels::batchnorm_forward_eval(x, g, g, rm, rv, kEps, y, stream, Layout::nchw, f),
                        "HPDT_BN_RESIDUAL=yes: expected fused or separate");
}

// The residual's batch norm's backward sums from the apply pass of the batch norm that added the residual
// (batchnorm_backward_train's residual_sums, ResNet's projection shortcut): out_bn's backward through its ReLU's mask
// also reads r and hands bn_r the sums of dz and dz (r - mean_r), and bn_r's backward from them skips its reduce
// pass. Against the CPU's two backwards (dz exact, dx, dr, both dgamma and dbeta; the partials' totals against the
// CPU's sums in double); against the same two backwards on the GPU without the request (out_bn's dz bit for bit,
// its dx within a rounding: the same formula, FMA contraction aside). Where the flat kernel applies (narrow NCHW planes) or with HPDT_BN_RESIDUAL=separate
// none are computed, the request comes back cleared and bn_r runs its own reduce; HPDT_BN_FLAT=off takes the
// per-channel kernels with the sums. On the emulator, which kernels ran. SyncBN (sync: bn_r's backward with a
// callback that doubles the sums, on both sides): the given sums go through the seam as its own would.
void NormCuda::bn_residual_sums_case(const Shape& shape, DType dt, Layout layout, bool misaligned, bool sync) {
  SCOPED_TRACE(label(shape, dt) + " residual batch norm's backward sums" + (misaligned ? " misaligned" : "") +
               (sync ? " sync" : "") + " " + kernels::layout_name(layout));
  const int64_t c = channels(shape, layout), count = shape.numel() / c;
  const Tensor x = random(shape, -1, 3), r = random(shape, -2, 4), dy = random(shape), ymask = random(shape, -1, 1);
  const Tensor g = random({c}, 0.5, 1.5), rg = random({c}, 0.5, 1.5);
  const Tensor mean = random({c}, 0, 1), invstd = random({c}, 0.5, 2), rmean = random({c}, 0, 2),
               rinvstd = random({c}, 0.3, 1.5);
  const Tensor dg0 = random({c}), db0 = random({c}), rdg0 = random({c}), rdb0 = random({c});
  const Tensor xr = round_through(x, dt), rr = round_through(r, dt), gr = round_through(g, dt),
               rgr = round_through(rg, dt), mask = round_through(ymask, dt);
  // CPU: out_bn's backward through the mask, then bn_r's from dz; a residual_sums request comes back cleared
  const BatchNormSaved saved{mean, invstd}, rsaved{rmean, rinvstd};
  const kernels::BatchNormReluGrad cpu_relu{mask, Tensor::empty(shape, DType::f32)};
  Tensor dx = Tensor::empty(shape, DType::f32), dg = round_through(dg0, dt), db = round_through(db0, dt);
  kernels::ChannelGradSums cpu_request;
  cpu_request.x = rr, cpu_request.mean = rmean;
  cpu_request.partial = Tensor::zeros({2}, DType::f32);
  kernels::batchnorm_backward_train(round_through(dy, dt), xr, gr, saved, dx, dg, db, {}, cpu, layout, &cpu_relu,
                                    nullptr, &cpu_request);
  EXPECT_FALSE(cpu_request.partial.defined()) << "the CPU computes no residual sums";
  Tensor dr = Tensor::empty(shape, DType::f32), rdg = round_through(rdg0, dt), rdb = round_through(rdb0, dt);
  // SyncBN (bn_r's backward only): a callback that doubles the sums, as two identical ranks
  std::vector<float> cpu_seen;
  kernels::batchnorm_backward_train(cpu_relu.dz, rr, rgr, rsaved, dr, rdg, rdb,
                                    sync ? doubling(&cpu_seen) : AllReduceSum{}, cpu, layout);
  // the sums bn_r's reduce would compute, in double
  const int64_t hw = layout == Layout::nhwc ? 1 : shape.numel() / shape[0] / c;  // NCHW: values per plane
  std::vector<double> want_dz(size_t(c), 0.0), want_dzr(size_t(c), 0.0);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    const int64_t ch = (i / hw) % c;
    const double z = cpu_relu.dz.data<float>()[i];
    want_dz[size_t(ch)] += z;
    want_dzr[size_t(ch)] += z * (double(rr.data<float>()[i]) - double(rmean.data<float>()[ch]));
  }
  // GPU: both backwards, with the request or without it
  const Tensor dyg = gpu(dy, dt, misaligned), xg = gpu(x, dt, misaligned), rgpu = gpu(r, dt, misaligned);
  const Tensor yg = gpu(ymask, dt, misaligned), gg = to_gpu(g, dt), rgg = to_gpu(rg, dt);
  const BatchNormSaved sg{to_gpu(mean), to_gpu(invstd)}, rsg{to_gpu(rmean), to_gpu(rinvstd)};
  struct Out {
    Tensor dz, dx, dg, db, dr, rdg, rdb;
    Tensor dz_gpu;  // what the sums describe
    kernels::ChannelGradSums sums;
    int64_t reduces = 0, sum_applies = 0;
    std::vector<float> seen;  // bn_r's seam buffer (sync)
  };
  auto run = [&](bool request) {
    Out o;
    const int64_t r0 = test::emu_launches("bn_backward_reduce"), s0 = test::emu_launches("apply_sums");
    const kernels::BatchNormReluGrad relu{yg, poison(shape, dt, misaligned)};
    Tensor dxg = poison(shape, dt, misaligned), dgg = to_gpu(dg0, dt), dbg = to_gpu(db0, dt);
    o.sums.x = rgpu, o.sums.mean = rsg.mean;
    kernels::batchnorm_backward_train(dyg, xg, gg, sg, dxg, dgg, dbg, {}, stream, layout, &relu, nullptr,
                                      request ? &o.sums : nullptr);
    Tensor drg = poison(shape, dt, misaligned), rdgg = to_gpu(rdg0, dt), rdbg = to_gpu(rdb0, dt);
    kernels::batchnorm_backward_train(relu.dz, rgpu, rgg, rsg, drg, rdgg, rdbg,
                                      sync ? doubling(&o.seen) : AllReduceSum{}, stream, layout, nullptr,
                                      request ? &o.sums : nullptr);
    if (r0 >= 0) {
      o.reduces = test::emu_launches("bn_backward_reduce") - r0;
      o.sum_applies = test::emu_launches("apply_sums") - s0;
    }
    o.dz_gpu = relu.dz;
    o.dz = to_cpu_f32(relu.dz), o.dx = to_cpu_f32(dxg), o.dg = to_cpu_f32(dgg), o.db = to_cpu_f32(dbg);
    o.dr = to_cpu_f32(drg), o.rdg = to_cpu_f32(rdgg), o.rdb = to_cpu_f32(rdbg);
    return o;
  };
  auto expect_against_cpu = [&](const Out& o) {
    EXPECT_TRUE(close(cpu_relu.dz, o.dz, {0.0, 0.0})) << "dz (dy or 0: exact)";
    EXPECT_TRUE(close(dx, o.dx, value_tol(dt))) << "dx";
    EXPECT_TRUE(close(dg, o.dg, sum_tol(dt, count))) << "dgamma";
    EXPECT_TRUE(close(db, o.db, sum_tol(dt, count))) << "dbeta";
    EXPECT_TRUE(close(dr, o.dr, value_tol(dt))) << "the residual's dx";
    EXPECT_TRUE(close(rdg, o.rdg, sum_tol(dt, count))) << "the residual's dgamma";
    EXPECT_TRUE(close(rdb, o.rdb, sum_tol(dt, count))) << "the residual's dbeta";
    if (sync) {
      ASSERT_EQ(o.seen.size(), size_t(2 * c + 1));
      EXPECT_EQ(o.seen.back(), cpu_seen.back()) << "count";
      EXPECT_TRUE(close(vec(cpu_seen), vec(o.seen), sum_tol(DType::f32, count))) << "the residual's seam buffer";
    }
  };
  const Out plain = run(false);
  expect_against_cpu(plain);
  // bn_dims: the flat apply where a plane is no whole number of 16-byte vectors (and every pointer is aligned)
  const bool flat = layout == Layout::nchw && !misaligned && hw % int64_t(16 / dtype_size(dt)) != 0;
  auto check_fused = [&](const Out& o, bool computed) {
    expect_against_cpu(o);
    EXPECT_EQ(o.sums.partial.defined(), computed) << "the residual sums computed";
    if (plain.reduces >= 0 && o.reduces >= 0 && test::emu_launches("apply_sums") >= 0) {
      EXPECT_EQ(plain.reduces, 2) << "out_bn's and bn_r's reduce passes";
      EXPECT_EQ(o.reduces, computed ? 1 : 2) << "bn_r's reduce pass skipped";
      EXPECT_EQ(o.sum_applies, computed ? 1 : 0) << "out_bn's apply with the sums";
    }
    // out_bn's dz: the same pass, bit for bit; its dx: the same formula in another instance of the body, where the
    // compiler may contract other products into FMAs (the emulator's build does: for some inputs, f16 at 28², one
    // unit apart at a few elements, the same ones for the same seed)
    for (int64_t i = 0; i < shape.numel(); ++i)
      ASSERT_EQ(test::bits_of(o.dz.data<float>()[i]), test::bits_of(plain.dz.data<float>()[i])) << "dz " << i;
    EXPECT_TRUE(close(plain.dx, o.dx, value_tol(dt))) << "dx against the plain apply";
    if (!computed) return;
    EXPECT_TRUE(o.sums.describe(o.dz_gpu, c)) << "the sums describe dz, the residual's batch norm's dy";
    EXPECT_EQ(o.sums.count, count);
    const Tensor part = to_cpu_f32(o.sums.partial);
    ASSERT_EQ(part.numel(), c * o.sums.splits * 2);
    std::vector<double> got_dz(size_t(c), 0.0), got_dzr(size_t(c), 0.0);
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t sp = 0; sp < o.sums.splits; ++sp) {
        got_dz[size_t(ch)] += part.data<float>()[(ch * o.sums.splits + sp) * 2];
        got_dzr[size_t(ch)] += part.data<float>()[(ch * o.sums.splits + sp) * 2 + 1];
      }
    const Tolerance t = sum_tol(DType::f32, count);
    for (int64_t ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(got_dz[size_t(ch)], want_dz[size_t(ch)], t.atol + t.rtol * std::abs(want_dz[size_t(ch)]))
          << "sum dz, channel " << ch;
      EXPECT_NEAR(got_dzr[size_t(ch)], want_dzr[size_t(ch)], 4 * t.atol + t.rtol * std::abs(want_dzr[size_t(ch)]))
          << "sum dz (r - mean_r), channel " << ch;
    }
  };
  check_fused(run(true), !flat);
  if (flat) {
    const ScopedEnv per_channel("HPDT_BN_FLAT", "off");
    check_fused(run(true), true);
  }
  const ScopedEnv separate("HPDT_BN_RESIDUAL", "separate");
  check_fused(run(true), false);
}

TEST_F(NormCuda, ResidualBatchNormBackwardSumsFromTheApplyPass) {
  for (DType dt : test::kCudaTestDtypes) {
    // (2x6: the per-channel kernels' 4-wide vectors in 16 bits under HPDT_BN_FLAT=off, reached since 2026-12-01)
    for (const Shape& s : {Shape{2, 8, 28, 28}, Shape{3, 17, 7, 7}, Shape{3, 5, 2, 7}, Shape{37, 17}, Shape{3, 5, 2, 6}})
      bn_residual_sums_case(s, dt, Layout::nchw);
    for (const Shape& s : {Shape{2, 7, 7, 256}, Shape{3, 7, 7, 17}, Shape{4, 14, 14, 64}})
      bn_residual_sums_case(s, dt, Layout::nhwc);
    bn_residual_sums_case({2, 3, 28, 28}, dt, Layout::nchw, true);  // scalar paths
    bn_residual_sums_case({4, 14, 14, 64}, dt, Layout::nhwc, true);
    bn_residual_sums_case({2, 8, 28, 28}, dt, Layout::nchw, false, true);  // SyncBN: the given sums all-reduced
    bn_residual_sums_case({2, 7, 7, 256}, dt, Layout::nhwc, false, true);
  }
  // a request that does not describe the residual's batch norm
  const Device dev = Device::cuda(0);
  const AllocOptions o{.stream = &stream};
  const Tensor x = to_gpu(random({2, 3, 4, 4}), DType::f32), g = to_gpu(random({3}), DType::f32);
  const BatchNormSaved sg{to_gpu(random({3})), to_gpu(random({3}, 0.5, 2))};
  Tensor dx = poison({2, 3, 4, 4}, DType::f32), dg = to_gpu(random({3})), db = to_gpu(random({3}));
  kernels::ChannelGradSums bad;
  bad.x = Tensor::zeros({2, 3, 4, 5}, DType::f32, dev, o), bad.mean = sg.mean;
  HPDT_EXPECT_THROW_MSG(
      kernels::batchnorm_backward_train(x, x, g, sg, dx, dg, db, {}, stream, Layout::nchw, nullptr, nullptr, &bad),
      "batchnorm_backward_train: residual_sums' residual has shape [2, 3, 4, 5], expected [2, 3, 4, 4]");
  bad.x = x, bad.mean = Tensor::zeros({3}, DType::bf16, dev, o);
  HPDT_EXPECT_THROW_MSG(
      kernels::batchnorm_backward_train(x, x, g, sg, dx, dg, db, {}, stream, Layout::nchw, nullptr, nullptr, &bad),
      "residual_sums' mean has dtype bf16, expected f32");
  bad.mean = sg.mean, bad.y = x;
  HPDT_EXPECT_THROW_MSG(
      kernels::batchnorm_backward_train(x, x, g, sg, dx, dg, db, {}, stream, Layout::nchw, nullptr, nullptr, &bad),
      "the residual's batch norm has no ReLU");
}

TEST_F(NormCuda, BatchNormTrainForward) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : kBnShapes) bn_train_case(s, dt, false);
}

TEST_F(NormCuda, BatchNormTrainBackward) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : kBnShapes) bn_backward_case(s, dt, false);
}

TEST_F(NormCuda, SyncBatchNormDoublingCallbackMatchesCpu) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : {Shape{2, 3, 28, 28}, Shape{37, 17}, Shape{8, 64, 56, 56}}) {
      bn_train_case(s, dt, true);
      bn_backward_case(s, dt, true);
    }
}

TEST_F(NormCuda, MisalignedViewsTakeTheScalarPath) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : {Shape{2, 3, 28, 28}, Shape{8, 64, 56, 56}}) {
      bn_train_case(s, dt, false, true);
      bn_backward_case(s, dt, false, true);
    }
}

TEST_F(NormCuda, BatchNormEval) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : kBnShapes) {
      SCOPED_TRACE(label(s, dt) + " eval");
      const int64_t c = s[1];
      const Tensor x = random(s, -1, 3), g = random({c}, 0.5, 1.5), b = random({c});
      const Tensor rm = random({c}, -0.5, 0.5), rv = random({c}, 0.5, 2.0);
      Tensor y = Tensor::empty(s, DType::f32);
      kernels::batchnorm_forward_eval(round_through(x, dt), round_through(g, dt), round_through(b, dt), rm, rv, kEps, y,
                                      cpu);
      Tensor yg = poisoned(s, dt);
      kernels::batchnorm_forward_eval(to_gpu(x, dt), to_gpu(g, dt), to_gpu(b, dt), to_gpu(rm), to_gpu(rv), kEps, yg,
                                      stream);
      EXPECT_TRUE(close(y, to_cpu_f32(yg), value_tol(dt)));
    }
}

TEST_F(NormCuda, BatchNormIsDeterministic) {
  for (DType dt : test::kCudaTestDtypes)
    for (bool sync : {false, true}) {
      const Shape s{128, 16, 32, 32};  // 32 blocks per channel
      const int64_t c = s[1];
      const Tensor x = to_gpu(random(s, -1, 3), dt), dy = to_gpu(random(s), dt), g = to_gpu(random({c}), dt),
                   b = to_gpu(random({c}), dt);
      const Tensor rm0 = random({c}), rv0 = random({c}, 0.5, 2), dg0 = random({c}), db0 = random({c});
      std::vector<float> seen;
      const AllReduceSum cb = sync ? doubling(&seen) : AllReduceSum{};
      Tensor out[2][7];
      for (auto& o : out) {
        Tensor rm = to_gpu(rm0), rv = to_gpu(rv0), y = poisoned(s, dt), dx = poisoned(s, dt);
        Tensor dg = to_gpu(dg0, dt), db = to_gpu(db0, dt);
        BatchNormSaved saved;
        kernels::batchnorm_forward_train(x, g, b, rm, rv, kEps, kMomentum, saved, y, cb, stream);
        kernels::batchnorm_backward_train(dy, x, g, saved, dx, dg, db, cb, stream);
        const Tensor all[7] = {y, saved.mean, saved.invstd, rv, dx, dg, db};
        for (int i = 0; i < 7; ++i) o[i] = to_cpu_f32(all[i]);
      }
      for (int i = 0; i < 7; ++i)
        for (int64_t j = 0; j < out[0][i].numel(); ++j)
          ASSERT_EQ(test::bits_of(out[0][i].data<float>()[j]), test::bits_of(out[1][i].data<float>()[j]))
              << dtype_name(dt) << " output " << i << " element " << j << (sync ? " sync" : "");
    }
}

#if HPDT_HAVE_CUDA
// SyncBN's device seam (AllReduceSum::device: hpdt-train's NCCL on the compute stream with a GPU per rank). Handed
// the seam buffer in device memory and the op's stream, with the sums doubled there (two identical ranks), the
// training forward and backward give the host seam's bits (NCHW and NHWC, f32 and bf16). It waits for nothing on
// the host, so a CUDA graph holds it: captured, the ops replay onto poisoned outputs with the eager bits; the host
// seam's round trip (a stream wait) fails the capture instead.
TEST_F(NormCuda, SyncBatchNormDeviceSeamGivesTheHostSeamsBitsAndAGraphHoldsIt) {
  for (Layout layout : {Layout::nchw, Layout::nhwc})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::string(kernels::layout_name(layout)));
      constexpr int64_t c = 17;
      const Shape s = layout == Layout::nhwc ? Shape{4, 7, 7, c} : Shape{4, c, 7, 7};
      const Tensor x = to_gpu(random(s, -1, 3), dt), dy = to_gpu(random(s), dt), g = to_gpu(random({c}, 0.5, 1.5), dt),
                   b = to_gpu(random({c}), dt);
      const Tensor rm0 = random({c}), rv0 = random({c}, 0.5, 2), dg0 = random({c}), db0 = random({c});
      std::vector<float> seen;
      int device_calls = 0;
      AllReduceSum on_device;
      on_device.device = [&](float* data, size_t n, const Stream& st) {
        ++device_calls;
        EXPECT_EQ(n, size_t(2 * c + 1));
        EXPECT_EQ(st.handle(), stream.handle()) << "the seam was not handed the op's stream";
        kernels::cuda::divide_f32(data, n, 0.5f, st.handle());  // x / 0.5: doubled exactly
      };
      struct Out {
        Tensor rm, rv, y, dx, dg, db;
        BatchNormSaved saved;
      };
      auto fresh = [&] {
        return Out{to_gpu(rm0), to_gpu(rv0), poisoned(s, dt), poisoned(s, dt), to_gpu(dg0, dt), to_gpu(db0, dt), {}};
      };
      auto run = [&](Out& o, const AllReduceSum& sync) {
        kernels::batchnorm_forward_train(x, g, b, o.rm, o.rv, kEps, kMomentum, o.saved, o.y, sync, stream, layout);
        kernels::batchnorm_backward_train(dy, x, g, o.saved, o.dx, o.dg, o.db, sync, stream, layout);
      };
      auto expect_same_bits = [&](const Out& want, const Out& got, const char* what) {
        const Tensor w[8] = {want.y, want.saved.mean, want.saved.invstd, want.rm, want.rv, want.dx, want.dg, want.db};
        const Tensor h[8] = {got.y, got.saved.mean, got.saved.invstd, got.rm, got.rv, got.dx, got.dg, got.db};
        const char* names[8] = {"y",           "saved mean", "saved invstd", "running mean",
                                "running var", "dx",         "dgamma",       "dbeta"};
        for (int i = 0; i < 8; ++i) {
          const Tensor a = to_cpu_f32(w[i]), bb = to_cpu_f32(h[i]);
          EXPECT_EQ(std::memcmp(a.data(), bb.data(), a.nbytes()), 0) << what << ": " << names[i] << " differs";
        }
      };
      Out host = fresh();
      run(host, doubling(&seen));
      ASSERT_EQ(seen.size(), size_t(2 * c + 1)) << "the host seam was not called";
      // (the capture allocates only from the cache: the replay's outputs made first, then the eager run, whose
      // temporaries the capture takes)
      Out dev = fresh(), replayed = fresh();
      replayed.saved = {to_gpu(dg0), to_gpu(db0)};
      run(dev, on_device);
      EXPECT_EQ(device_calls, 2) << "the device seam: once in the forward, once in the backward";
      expect_same_bits(host, dev, "the device seam");
      const CudaGraph graph = CudaGraph::capture(stream, [&] { run(replayed, on_device); });
      EXPECT_EQ(device_calls, 4);
      graph.launch(stream);
      expect_same_bits(host, replayed, "the graph's replay");
      Out refused = fresh();
      EXPECT_THROW(CudaGraph::capture(stream, [&] { run(refused, doubling(&seen)); }), Error)
          << "the host seam's round trip should fail a capture";
      Out after = fresh();  // the stream works after the failed capture
      run(after, on_device);
      expect_same_bits(host, after, "after the failed capture");
    }
}
#endif

// ---- batch norm, NHWC ----------------------------------------------------------------------------------------

// ResNet-20's first stage and ResNet-50's (smaller batches than the NCHW list: the emulator runs these too), odd
// channel counts, [n, c] in the NHWC layout.
// {16, 28, 28, 64}: 98 row blocks, so each lane of the finalize warp merges several partials.
const Shape kBnNhwcShapes[] = {{2, 28, 28, 3},   {4, 28, 28, 1},  {3, 7, 7, 17},    {37, 17},       {5, 3},
                               {16, 16, 16, 16}, {4, 28, 28, 64}, {4, 14, 14, 256}, {2, 7, 7, 2048}, {16, 28, 28, 64}};

TEST_F(NormCuda, BatchNormNhwcTrainForwardBackward) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : kBnNhwcShapes) {
      bn_train_case(s, dt, false, false, Layout::nhwc);
      bn_backward_case(s, dt, false, false, Layout::nhwc);
    }
}

TEST_F(NormCuda, BatchNormNhwcSyncMisalignedAndEval) {
  for (DType dt : test::kCudaTestDtypes) {
    for (const Shape& s : {Shape{2, 28, 28, 3}, Shape{37, 17}, Shape{4, 14, 14, 64}}) {
      bn_train_case(s, dt, true, false, Layout::nhwc);
      bn_backward_case(s, dt, true, false, Layout::nhwc);
    }
    bn_train_case({4, 14, 14, 64}, dt, false, true, Layout::nhwc);  // c % 8 == 0, but not 16-byte aligned
    bn_backward_case({4, 14, 14, 64}, dt, false, true, Layout::nhwc);
    for (const Shape& s : kBnNhwcShapes) {
      SCOPED_TRACE(label(s, dt) + " eval nhwc");
      const int64_t c = s[-1];
      const Tensor x = random(s, -1, 3), g = random({c}, 0.5, 1.5), b = random({c});
      const Tensor rm = random({c}, -0.5, 0.5), rv = random({c}, 0.5, 2.0);
      Tensor y = Tensor::empty(s, DType::f32);
      kernels::batchnorm_forward_eval(round_through(x, dt), round_through(g, dt), round_through(b, dt), rm, rv, kEps, y,
                                      cpu, Layout::nhwc);
      Tensor yg = poisoned(s, dt);
      kernels::batchnorm_forward_eval(to_gpu(x, dt), to_gpu(g, dt), to_gpu(b, dt), to_gpu(rm), to_gpu(rv), kEps, yg,
                                      stream, Layout::nhwc);
      EXPECT_TRUE(close(y, to_cpu_f32(yg), value_tol(dt)));
    }
  }
}

// Data far from zero with a small spread (100 +- 0.1, f32): the NHWC statistics kernel sums each thread's rows shifted
// by its first row's values (no Welford update per step since 2026-11-29); a plain f32 sum of squares would lose
// the variance (1e4 against 3e-3) to cancellation. Mean, invstd and the running variance against the CPU's.
TEST_F(NormCuda, BatchNormNhwcStatisticsOfDataFarFromZero) {
  for (const Shape& s : {Shape{16, 28, 28, 64}, Shape{3, 7, 7, 17}, Shape{2, 7, 7, 2048}}) {
    SCOPED_TRACE(label(s, DType::f32) + " 100 +- 0.1");
    const int64_t c = s[-1];
    const Tensor x = random(s, 99.9f, 100.1f), g = random({c}, 0.5, 1.5), b = random({c});
    const Tensor rv0 = random({c}, 0.5f, 2.0f);
    Tensor rm = Tensor::zeros({c}, DType::f32), rv = rv0.clone(cpu), y = Tensor::empty(s, DType::f32);
    BatchNormSaved saved, sg;
    kernels::batchnorm_forward_train(x, g, b, rm, rv, kEps, kMomentum, saved, y, {}, cpu, Layout::nhwc);
    Tensor rmg = to_gpu(Tensor::zeros({c}, DType::f32)), rvg = to_gpu(rv0);
    Tensor yg = poisoned(s, DType::f32);
    kernels::batchnorm_forward_train(to_gpu(x), to_gpu(g), to_gpu(b), rmg, rvg, kEps, kMomentum, sg, yg, {}, stream,
                                     Layout::nhwc);
    EXPECT_TRUE(close(saved.mean, to_cpu_f32(sg.mean), stat_tol())) << "saved mean";
    EXPECT_TRUE(close(saved.invstd, to_cpu_f32(sg.invstd), {1e-3, 0.0})) << "saved invstd (about 17)";
    EXPECT_TRUE(close(rv, to_cpu_f32(rvg), {1e-5, 1e-6})) << "running var";
    EXPECT_TRUE(close(y, to_cpu_f32(yg), {2e-3, 1e-3})) << "y";
  }
}

// The finalize kernels with many partials (conv v3's and GEMM v3's epilogues hand over one per 64 rows: 12,544 a
// channel at 56x56, batch 256): given here by hand, one per row with an empty one every 7th (3,428 a channel, so each
// of the finalize's 256 threads takes several batches of its 4 loads), of data far from zero (100 +- 0.1: the sums
// are shifted by the first partial's mean). Batch norm given them computes the CPU oracle's statistics, running
// variance and output; the backward given the sums as ChannelGradSums the oracle's dgamma, dbeta and dx.
TEST_F(NormCuda, BatchNormFinalizesManyPartials) {
  const int64_t rows = 3000, c = 5, splits = rows + (rows + 5) / 6;
  const Shape s{rows, 1, 1, c};
  const Tensor x = random(s, 99.9f, 100.1f), dy = random(s), g = random({c}, 0.5, 1.5), b = random({c});
  const Tensor rv0 = random({c}, 0.5f, 2.0f), dg0 = random({c}), db0 = random({c});
  // CPU oracle
  Tensor rm = Tensor::zeros({c}, DType::f32), rv = rv0.clone(cpu), y = Tensor::empty(s, DType::f32);
  BatchNormSaved saved;
  kernels::batchnorm_forward_train(x, g, b, rm, rv, kEps, kMomentum, saved, y, {}, cpu, Layout::nhwc);
  Tensor dx = Tensor::empty(s, DType::f32), dg = dg0.clone(cpu), db = db0.clone(cpu);
  kernels::batchnorm_backward_train(dy, x, g, saved, dx, dg, db, {}, cpu, Layout::nhwc);
  // the partials: split k of channel ch is row r (count 1, mean x, M2 0), or empty where k % 7 == 6
  const float* xv = x.data<float>();
  const float* dyv = dy.data<float>();
  const float* mv = saved.mean.data<float>();
  std::vector<float> stats(size_t(c * splits * 3), 0.0f), sums(size_t(c * splits * 2), 0.0f);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t k = 0, r = 0; k < splits; ++k) {
      if (k % 7 == 6 || r == rows) continue;
      const float v = xv[r * c + ch], d = dyv[r * c + ch];
      float* st = &stats[size_t((ch * splits + k) * 3)];
      st[0] = 1.0f, st[1] = v;
      float* sm = &sums[size_t((ch * splits + k) * 2)];
      sm[0] = d, sm[1] = d * (v - mv[ch]);
      ++r;
    }
  const auto on_gpu = [&](const std::vector<float>& v) {
    Tensor t = Tensor::empty({int64_t(v.size())}, DType::f32);
    std::copy(v.begin(), v.end(), t.data<float>());
    return to_gpu(t);
  };
  const Tensor xg = to_gpu(x), gg = to_gpu(g), dyg = to_gpu(dy);
  kernels::ChannelStats st;
  st.partial = on_gpu(stats), st.splits = splits, st.of = xg.data(), st.count = rows;
  Tensor rmg = to_gpu(Tensor::zeros({c}, DType::f32)), rvg = to_gpu(rv0), yg = poisoned(s, DType::f32);
  BatchNormSaved sg;
  kernels::BatchNormFusion fusion;
  fusion.stats = &st;
  kernels::batchnorm_forward_train(xg, gg, to_gpu(b), rmg, rvg, kEps, kMomentum, sg, yg, {}, stream, Layout::nhwc,
                                   fusion);
  EXPECT_TRUE(close(saved.mean, to_cpu_f32(sg.mean), stat_tol())) << "saved mean";
  EXPECT_TRUE(close(saved.invstd, to_cpu_f32(sg.invstd), {1e-4, 0.0})) << "saved invstd (about 17)";
  EXPECT_TRUE(close(rm, to_cpu_f32(rmg), stat_tol())) << "running mean";
  EXPECT_TRUE(close(rv, to_cpu_f32(rvg), {1e-5, 1e-7})) << "running var";
  EXPECT_TRUE(close(y, to_cpu_f32(yg), {2e-3, 1e-3})) << "y";
  // the backward, its sums handed over (about the oracle's mean, as the batch norm's own would be about the GPU's)
  kernels::ChannelGradSums gs;
  gs.partial = on_gpu(sums), gs.splits = splits, gs.of = dyg.data(), gs.count = rows;
  gs.x = xg, gs.mean = to_gpu(saved.mean);
  const BatchNormSaved oracle_saved{to_gpu(saved.mean), to_gpu(saved.invstd)};
  Tensor dxg = poisoned(s, DType::f32), dgg = to_gpu(dg0), dbg = to_gpu(db0);
  kernels::batchnorm_backward_train(dyg, xg, gg, oracle_saved, dxg, dgg, dbg, {}, stream, Layout::nhwc, nullptr, &gs);
  EXPECT_TRUE(close(dg, to_cpu_f32(dgg), sum_tol(DType::f32, rows))) << "dgamma";
  EXPECT_TRUE(close(db, to_cpu_f32(dbg), sum_tol(DType::f32, rows))) << "dbeta";
  EXPECT_TRUE(close(dx, to_cpu_f32(dxg), {1e-3, 1e-4})) << "dx";
}

TEST_F(NormCuda, BatchNormNhwcIsDeterministic) {
  for (DType dt : test::kCudaTestDtypes) {
    const Shape s{32, 16, 16, 16};  // 8192 rows: 16 row chunks of blocks
    const int64_t c = s[-1];
    const Tensor x = to_gpu(random(s, -1, 3), dt), dy = to_gpu(random(s), dt), g = to_gpu(random({c}), dt),
                 b = to_gpu(random({c}), dt);
    const Tensor rm0 = random({c}), rv0 = random({c}, 0.5, 2), dg0 = random({c}), db0 = random({c});
    Tensor out[2][7];
    for (auto& o : out) {
      Tensor rm = to_gpu(rm0), rv = to_gpu(rv0), y = poisoned(s, dt), dx = poisoned(s, dt);
      Tensor dg = to_gpu(dg0, dt), db = to_gpu(db0, dt);
      BatchNormSaved saved;
      kernels::batchnorm_forward_train(x, g, b, rm, rv, kEps, kMomentum, saved, y, {}, stream, Layout::nhwc);
      kernels::batchnorm_backward_train(dy, x, g, saved, dx, dg, db, {}, stream, Layout::nhwc);
      const Tensor all[7] = {y, saved.mean, saved.invstd, rv, dx, dg, db};
      for (int i = 0; i < 7; ++i) o[i] = to_cpu_f32(all[i]);
    }
    for (int i = 0; i < 7; ++i)
      for (int64_t j = 0; j < out[0][i].numel(); ++j)
        ASSERT_EQ(test::bits_of(out[0][i].data<float>()[j]), test::bits_of(out[1][i].data<float>()[j]))
            << dtype_name(dt) << " output " << i << " element " << j;
  }
}

// ---- layer norm ----------------------------------------------------------------------------------------

const Shape kLnShapes[] = {{1, 5},        {17, 5},      {3, 17},       {4, 1},    {1, 197, 192},
                           {2, 197, 192}, {3, 17, 768}, {8, 197, 768}, {3, 5000}, {2, 12000}};

void NormCuda::ln_case(const Shape& shape, DType dt, bool misaligned) {
  SCOPED_TRACE(label(shape, dt) + (misaligned ? " misaligned" : ""));
  const int64_t d = shape[-1], rows = shape.numel() / d;
  const Tensor x = random(shape), g = random({d}, 0.5, 1.5), b = random({d}), dy = random(shape);
  const Tensor dg0 = random({d}), db0 = random({d});
  const Tensor xr = round_through(x, dt), gr = round_through(g, dt);
  // forward
  Tensor y = Tensor::empty(shape, DType::f32);
  LayerNormSaved saved;
  kernels::layernorm_forward(xr, gr, round_through(b, dt), kEps, saved, y, cpu);
  Tensor yg = poison(shape, dt, misaligned);
  LayerNormSaved sg;
  const Tensor xg = gpu(x, dt, misaligned);
  kernels::layernorm_forward(xg, to_gpu(g, dt), to_gpu(b, dt), kEps, sg, yg, stream);
  ASSERT_TRUE(sg.mean.is_cuda() && sg.rstd.is_cuda());
  EXPECT_TRUE(close(y, to_cpu_f32(yg), value_tol(dt))) << "y";
  EXPECT_TRUE(close(saved.mean, to_cpu_f32(sg.mean), stat_tol())) << "mean";
  EXPECT_TRUE(close(saved.rstd, to_cpu_f32(sg.rstd), stat_tol())) << "rstd";
  // backward, given the CPU's saved statistics
  Tensor dx = Tensor::empty(shape, DType::f32), dg = round_through(dg0, dt), db = round_through(db0, dt);
  kernels::layernorm_backward(round_through(dy, dt), xr, gr, saved, dx, dg, db, cpu);
  LayerNormSaved sc{to_gpu(saved.mean), to_gpu(saved.rstd)};
  Tensor dxg = poison(shape, dt, misaligned), dgg = to_gpu(dg0, dt), dbg = to_gpu(db0, dt);
  kernels::layernorm_backward(gpu(dy, dt, misaligned), xg, to_gpu(g, dt), sc, dxg, dgg, dbg, stream);
  // dx = rstd (g dy - mean(g dy) - xhat mean(g dy xhat)) cancels terms of size rstd |g dy|: with a
  // short row rstd is large (D = 1: x - mean = 0, rstd = 1/sqrt(eps) = 316, dx exactly 0, which the
  // GPU gave and the CPU missed by 1.8e-5 on an H100), so the absolute error scales with that size.
  Tolerance dx_tol = value_tol(dt);
  {
    const Tensor gdy = round_through(dy, dt);
    double scale = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < d; ++j)
        scale = std::max(scale, double(saved.rstd.data<float>()[r]) * std::abs(double(gr.data<float>()[j]) *
                                                                         gdy.data<float>()[r * d + j]));
    dx_tol.atol = std::max(dx_tol.atol, 8.0 * scale * 0x1p-24);
  }
  EXPECT_TRUE(close(dx, to_cpu_f32(dxg), dx_tol)) << "dx";
  EXPECT_TRUE(close(dg, to_cpu_f32(dgg), sum_tol(dt, rows))) << "dgamma";
  EXPECT_TRUE(close(db, to_cpu_f32(dbg), sum_tol(dt, rows))) << "dbeta";
  // dx + a residual (a pre-norm block's skip connection) in the same store
  const Tensor res = random(shape), resr = round_through(res, dt);
  Tensor want_r = Tensor::empty(shape, DType::f32), dg2 = round_through(dg0, dt), db2 = round_through(db0, dt);
  kernels::layernorm_backward(round_through(dy, dt), xr, gr, saved, want_r, dg2, db2, cpu, &resr);
  Tensor dxr = poison(shape, dt, misaligned), dgr = to_gpu(dg0, dt), dbr = to_gpu(db0, dt);
  const Tensor resg = gpu(res, dt, misaligned);
  kernels::layernorm_backward(gpu(dy, dt, misaligned), xg, to_gpu(g, dt), sc, dxr, dgr, dbr, stream, &resg);
  EXPECT_TRUE(close(want_r, to_cpu_f32(dxr), dx_tol)) << "dx + residual";
}

TEST_F(NormCuda, LayerNormForwardBackward) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : kLnShapes) ln_case(s, dt);
}

TEST_F(NormCuda, LayerNormMisalignedViews) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : {Shape{17, 5}, Shape{2, 197, 192}, Shape{3, 17, 768}}) ln_case(s, dt, true);
}

TEST_F(NormCuda, LayerNormIsDeterministic) {
  for (DType dt : test::kCudaTestDtypes) {
    const Shape s{16, 197, 768};  // many blocks, several rows each
    const int64_t d = s[-1];
    const Tensor x = to_gpu(random(s), dt), dy = to_gpu(random(s), dt), g = to_gpu(random({d}), dt),
                 b = to_gpu(random({d}), dt), dg0 = random({d}), db0 = random({d});
    Tensor out[2][5];
    for (auto& o : out) {
      Tensor y = poisoned(s, dt), dx = poisoned(s, dt), dg = to_gpu(dg0, dt), db = to_gpu(db0, dt);
      LayerNormSaved saved;
      kernels::layernorm_forward(x, g, b, kEps, saved, y, stream);
      kernels::layernorm_backward(dy, x, g, saved, dx, dg, db, stream);
      const Tensor all[5] = {y, saved.rstd, dx, dg, db};
      for (int i = 0; i < 5; ++i) o[i] = to_cpu_f32(all[i]);
    }
    for (int i = 0; i < 5; ++i)
      for (int64_t j = 0; j < out[0][i].numel(); ++j)
        ASSERT_EQ(test::bits_of(out[0][i].data<float>()[j]), test::bits_of(out[1][i].data<float>()[j]))
            << dtype_name(dt) << " output " << i << " element " << j;
  }
}

// Planes narrower than a 16-byte vector (7x7; 14x14 and 6x6 in 2-byte types; 2x2 and [n, c], where a vector spans
// several planes) take the apply passes over the flat tensor (norm.cu: bn_apply_flat_kernel,
// bn_backward_apply_flat_kernel): the same bits as the per-channel kernels (HPDT_BN_FLAT=off) in the training
// forward with the residual and ReLU, the eval forward, in place (y = x), and the backward through the ReLU's mask
// from y and from x; odd totals end in a partial vector, {4, 2048, 7, 7} runs 25 blocks of 334 planes (bf16); 3x6
// planes (18 values) run the per-channel kernels on 2-wide vectors (which, with the mask from x on narrow planes, no
// test reached before 2026-12-01). On the emulator, which kernels ran.
TEST_F(NormCuda, NarrowPlanesTakeTheFlatApplyWithTheSameBits) {
  struct Out {
    std::vector<Tensor> t;
  };
  auto run = [&](const Shape& s, DType dt, const char* flat) {
    const ScopedEnv env("HPDT_BN_FLAT", flat);
    const int64_t c = s[1];
    Out o;
    const Tensor x = random(s, -1, 3), r = random(s, -2, 2), g = random({c}, 0.5, 1.5), b = random({c}, -0.5, 0.5);
    const Tensor rm0 = random({c}, -0.2f, 0.2f), rv0 = random({c}, 0.5f, 2.0f), dy = random(s), dg0 = random({c});
    kernels::BatchNormFusion fusion;
    fusion.relu = true;
    fusion.residual = to_gpu(r, dt);
    const Tensor xg = to_gpu(x, dt), gg = to_gpu(g, dt), bg = to_gpu(b, dt);
    Tensor rmg = to_gpu(rm0), rvg = to_gpu(rv0), yg = poison(s, dt);
    BatchNormSaved sg;
    kernels::batchnorm_forward_train(xg, gg, bg, rmg, rvg, kEps, kMomentum, sg, yg, {}, stream, Layout::nchw, fusion);
    Tensor yeg = poison(s, dt), xin = to_gpu(x, dt);
    kernels::batchnorm_forward_eval(xg, gg, bg, rmg, rvg, kEps, yeg, stream, Layout::nchw, fusion);
    kernels::batchnorm_forward_eval(xin, gg, bg, rmg, rvg, kEps, xin, stream);  // in place
    const kernels::BatchNormReluGrad relu{yg, poison(s, dt)};
    Tensor dxg = poison(s, dt), dgg = to_gpu(dg0, dt), dbg = to_gpu(dg0, dt);
    kernels::batchnorm_backward_train(to_gpu(dy, dt), xg, gg, sg, dxg, dgg, dbg, {}, stream, Layout::nchw, &relu);
    // the ReLU's mask from x (and beta), as the batch norms without a residual take it
    const kernels::BatchNormReluGrad relu_x{Tensor(), Tensor(), bg};
    Tensor dxg_x = poison(s, dt), dgg_x = to_gpu(dg0, dt), dbg_x = to_gpu(dg0, dt);
    kernels::batchnorm_backward_train(to_gpu(dy, dt), xg, gg, sg, dxg_x, dgg_x, dbg_x, {}, stream, Layout::nchw,
                                      &relu_x);
    for (const Tensor& t : {yg, yeg, xin, relu.dz, dxg, dgg, dbg, dxg_x, dgg_x, dbg_x}) o.t.push_back(to_cpu_f32(t));
    return o;
  };
  const char* names[] = {"y",
                         "eval y",
                         "eval y in place",
                         "dz",
                         "dx",
                         "dgamma",
                         "dbeta",
                         "dx (mask from x)",
                         "dgamma (mask from x)",
                         "dbeta (mask from x)"};
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : {Shape{3, 17, 7, 7}, Shape{4, 2048, 7, 7}, Shape{16, 256, 14, 14}, Shape{7, 3, 6, 6},
                           Shape{5, 3, 2, 2}, Shape{37, 17}, Shape{2, 8, 28, 28}, Shape{3, 5, 3, 6}}) {
      SCOPED_TRACE(label(s, dt));
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      const int64_t hw = s.numel() / (s[0] * s[1]);
      const bool narrow = hw % (16 / int64_t(dtype_size(dt))) != 0;
      const unsigned long long flat0 = cuda_emu::launches_named("_flat_kernel");
#endif
      const uint64_t inputs = draw_position();
      const Out on = run(s, dt, "on");
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      // per run: the training forward, two evals and the two backwards
      EXPECT_EQ(cuda_emu::launches_named("_flat_kernel") - flat0, narrow ? 5u : 0u) << "flat apply kernels";
      const unsigned long long flat1 = cuda_emu::launches_named("_flat_kernel");
#endif
      rewind(inputs);  // the same inputs
      const Out off = run(s, dt, "off");
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      EXPECT_EQ(cuda_emu::launches_named("_flat_kernel"), flat1) << "HPDT_BN_FLAT=off";
#endif
      for (size_t i = 0; i < on.t.size(); ++i)
        for (int64_t j = 0; j < on.t[i].numel(); ++j)
          ASSERT_EQ(test::bits_of(on.t[i].data<float>()[j]), test::bits_of(off.t[i].data<float>()[j]))
              << names[i] << " element " << j;
      EXPECT_NE(test::bits_of(on.t[0].data<float>()[0]), test::bits_of(std::nanf(""))) << "y written";
    }
  const Tensor x = to_gpu(random({2, 3, 7, 7}), DType::bf16), g = to_gpu(random({3}), DType::bf16);
  Tensor y = poison({2, 3, 7, 7}, DType::bf16), rm = to_gpu(Tensor::zeros({3}, DType::f32)),
         rv = to_gpu(random({3}, 0.5, 2));
  const ScopedEnv bad("HPDT_BN_FLAT", "yes");
  HPDT_EXPECT_THROW_MSG(kernels::batchnorm_forward_eval(x, g, g, rm, rv, kEps, y, stream),
                        "HPDT_BN_FLAT=yes: expected on or off");
}

TEST_F(NormCuda, BadInputsNameTheOp) {
  const Device dev = Device::cuda(0);
  const AllocOptions o{.stream = &stream};
  Tensor x = Tensor::zeros({2, 3, 4, 4}, DType::bf16, dev, o), y = Tensor::zeros({2, 3, 4, 4}, DType::bf16, dev, o);
  Tensor g = Tensor::zeros({3}, DType::bf16, dev, o), gf = Tensor::zeros({3}, DType::f32, dev, o);
  Tensor rm = Tensor::zeros({3}, DType::f32, dev, o), rv = Tensor::zeros({3}, DType::f32, dev, o);
  Tensor rm16 = Tensor::zeros({3}, DType::bf16, dev, o), g4 = Tensor::zeros({4}, DType::bf16, dev, o);
  BatchNormSaved saved;
  HPDT_EXPECT_THROW_MSG(kernels::batchnorm_forward_train(x, gf, g, rm, rv, kEps, kMomentum, saved, y, {}, stream),
                        "batchnorm_forward_train: tensor");
  HPDT_EXPECT_THROW_MSG(kernels::batchnorm_forward_train(x, gf, g, rm, rv, kEps, kMomentum, saved, y, {}, stream),
                        "on CUDA all tensors of this op share");
  HPDT_EXPECT_THROW_MSG(kernels::batchnorm_forward_train(x, g, g, rm16, rv, kEps, kMomentum, saved, y, {}, stream),
                        "running_mean has dtype bf16, expected f32");
  HPDT_EXPECT_THROW_MSG(kernels::batchnorm_forward_train(x, g4, g4, rm, rv, kEps, kMomentum, saved, y, {}, stream),
                        "gamma has shape [4], expected [3]");
  Tensor xc = Tensor::zeros({2, 3, 4, 4}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::batchnorm_forward_eval(xc, g, g, rm, rv, kEps, y, stream), "different devices");
  LayerNormSaved ls;
  Tensor lx = Tensor::zeros({5, 8}, DType::f16, dev, o), ly = Tensor::zeros({5, 8}, DType::f16, dev, o);
  Tensor lg = Tensor::zeros({8}, DType::f16, dev, o), lg7 = Tensor::zeros({7}, DType::f16, dev, o);
  HPDT_EXPECT_THROW_MSG(kernels::layernorm_forward(lx, lg7, lg, kEps, ls, ly, stream),
                        "layernorm_forward: gamma has shape [7]");
  Tensor lgf = Tensor::zeros({8}, DType::f32, dev, o);
  HPDT_EXPECT_THROW_MSG(kernels::layernorm_forward(lx, lgf, lg, kEps, ls, ly, stream), "has dtype f32");
  HPDT_EXPECT_THROW_MSG(kernels::layernorm_forward(lx, lg, lg, kEps, ls, ly, cpu), "need a CUDA stream");
}

}  // namespace
