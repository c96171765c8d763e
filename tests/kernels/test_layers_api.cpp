// The public (Tensor) layer entry points: shape/dtype checks that name the op and shapes, the SyncBN
// seam, optimizer steps against torch.optim's formulas, gradient clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "hpdt/kernels/activation.h"
#include "hpdt/kernels/attention.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/conv.h"
#include "hpdt/kernels/embed.h"
#include "hpdt/kernels/gemm.h"
#include "hpdt/kernels/linear.h"
#include "hpdt/kernels/loss.h"
#include "hpdt/kernels/norm.h"
#include "hpdt/kernels/optim.h"
#include "hpdt/kernels/pool.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
using namespace hpdt::kernels;
const Stream kCpu;

Tensor filled(const Shape& s, float seed_offset) {
  Tensor t = Tensor::empty(s, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::sin(0.37f * float(i) + seed_offset);
  return t;
}

TEST(LayerApi, BadShapesAndDtypesNameTheOpAndShapes) {
  Tensor x = filled({2, 3, 8, 8}, 0), w = filled({4, 5, 3, 3}, 1), y = Tensor::empty({2, 4, 8, 8}, DType::f32);
  HPDT_EXPECT_THROW_MSG(conv2d_forward(x, w, nullptr, y, 1, 1, kCpu), "conv2d_forward: input channels of x [2, 3, 8, 8]");
  Tensor w3 = filled({4, 3, 3, 3}, 1), ybad = Tensor::empty({2, 4, 7, 8}, DType::f32);
  HPDT_EXPECT_THROW_MSG(conv2d_forward(x, w3, nullptr, ybad, 1, 1, kCpu), "y has shape [2, 4, 7, 8], expected [2, 4, 8, 8]");
  Tensor xh = Tensor::zeros({2, 3, 8, 8}, DType::f16);
  HPDT_EXPECT_THROW_MSG(conv2d_forward(xh, w3, nullptr, y, 1, 1, kCpu), "has dtype f16");
  Tensor lw = filled({10, 6}, 2), lx = filled({4, 5}, 3), ly = Tensor::empty({4, 10}, DType::f32);
  HPDT_EXPECT_THROW_MSG(linear_forward(lx, lw, nullptr, ly, kCpu), "linear_forward: x [4, 5] does not match weight [10, 6]");
  Tensor qkv = filled({2, 5, 12}, 4), out = Tensor::empty({2, 5, 4}, DType::f32);
  AttentionSaved saved;
  HPDT_EXPECT_THROW_MSG(attention_forward(qkv, 3, saved, out, kCpu), "divisible by 3 heads, got [2, 5, 12]");
  Tensor logits = filled({4, 10}, 5), labels = Tensor::from_vector<int32_t>({1, 2, 3, 10}, {4});
  HPDT_EXPECT_THROW_MSG(softmax_cross_entropy(logits, labels, 0.0, nullptr, 1.0, kCpu), "label 10 of sample 3");
  Tensor mp_y = Tensor::empty({2, 3, 3, 4}, DType::f32), am;
  HPDT_EXPECT_THROW_MSG(maxpool2d_forward(x, 3, 2, 1, mp_y, am, kCpu), "maxpool2d_forward: y has shape [2, 3, 3, 4], expected [2, 3, 4, 4]");
}

// Top-1's count: ties go to the first class, NaNs are never the largest, a row of NaNs and an out-of-range label
// count nothing; the hpdt-train CPU step's accuracy and the oracle of the GPU's queued count (test_loss_cuda).
TEST(LayerApi, CountCorrectTakesTheFirstLargestLogit) {
  const float nan = std::nanf("");
  const Tensor logits =
      Tensor::from_vector<float>({0, 3, 3,                                         // tie: class 1
                                  nan, 1, 0,                                       // NaN skipped: class 1
                                  2, nan, 2,                                       // tie around a NaN: class 0
                                  nan, nan, nan, -INFINITY, -INFINITY, -INFINITY,  // all -inf: class 0
                                  1, 2, 5},
                                 {6, 3});
  EXPECT_EQ(count_correct(logits, Tensor::from_vector<int32_t>({1, 1, 0, 0, 0, 2}, {6})), 6 - 1);  // the NaN row
  EXPECT_EQ(count_correct(logits, Tensor::from_vector<int32_t>({2, 0, 2, 1, 1, 2}, {6})), 1);
  EXPECT_EQ(count_correct(logits, Tensor::from_vector<int32_t>({1, 1, 0, 3, -1, 7}, {6})), 3);
  EXPECT_EQ(count_correct(logits.slice(0, 0), Tensor::empty({0}, DType::i32)), 0);
  HPDT_EXPECT_THROW_MSG(count_correct(logits, Tensor::from_vector<int32_t>({1, 1}, {2})),
                        "count_correct: labels has shape [2], expected [6]");
  HPDT_EXPECT_THROW_MSG(count_correct(Tensor::zeros({6, 3}, DType::f16), Tensor::zeros({6}, DType::i32)),
                        "has dtype f16");
}

TEST(LayerApi, LinearAndMatmulAgree) {
  Tensor x = filled({6, 5}, 0), w = filled({3, 5}, 1), b = filled({3}, 2), y = Tensor::empty({6, 3}, DType::f32);
  linear_forward(x, w, &b, y, kCpu);
  Tensor y2 = Tensor::empty({6, 3}, DType::f32);
  matmul(x, false, w, true, y2, 1.0f, 0.0f, kCpu);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_NEAR(y.data<float>()[i * 3 + j], y2.data<float>()[i * 3 + j] + b.data<float>()[j], 1e-5);
}

TEST(LayerApi, BatchNormStatisticsKeepTheirDigitsWhenTheMeanDominates) {
  // mean 30, spread 0.05: E[x^2] - E[x]^2 needs the squares' sums in double (float sums gave invstd
  // 20 % off before they were)
  for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
    const Shape s{8, 4, 14, 14};
    Tensor x = Tensor::empty(s, DType::f32);
    float* p = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = 30.0f + 0.05f * std::sin(1.7f * float(i) + 0.3f);
    const int64_t c = layout == Layout::nhwc ? s[3] : s[1];
    Tensor g = filled({c}, 1), b = filled({c}, 2), rm = Tensor::zeros({c}, DType::f32), rv = Tensor::zeros({c}, DType::f32);
    Tensor y = Tensor::empty(s, DType::f32);
    BatchNormSaved saved;
    batchnorm_forward_train(x, g, b, rm, rv, 1e-5f, 0.1f, saved, y, nullptr, kCpu, layout);
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum = 0, n = 0;
      const auto at = [&](int64_t i) { return layout == Layout::nhwc ? i * c + ch : (i / 196 * c + ch) * 196 + i % 196; };
      for (int64_t i = 0; i < x.numel() / c; ++i) sum += p[at(i)], ++n;
      const double mean = sum / n;
      double var = 0;
      for (int64_t i = 0; i < x.numel() / c; ++i) var += (p[at(i)] - mean) * (p[at(i)] - mean);
      var /= n;
      EXPECT_NEAR(saved.mean.data<float>()[ch], mean, 1e-6 * mean) << layout_name(layout);
      EXPECT_NEAR(saved.invstd.data<float>()[ch], 1.0 / std::sqrt(var + 1e-5), 1e-4 / std::sqrt(var + 1e-5))
          << layout_name(layout) << " channel " << ch;
    }
  }
}

TEST(LayerApi, SyncBatchNormHookSeesSumsAndCount) {
  Tensor x = filled({4, 3, 5, 5}, 0), g = filled({3}, 1), b = filled({3}, 2);
  Tensor rm = Tensor::zeros({3}, DType::f32), rv = Tensor::zeros({3}, DType::f32);
  Tensor rm2 = Tensor::zeros({3}, DType::f32), rv2 = Tensor::zeros({3}, DType::f32);
  Tensor y1 = Tensor::empty(x.shape(), DType::f32), y2 = Tensor::empty(x.shape(), DType::f32);
  BatchNormSaved s1, s2;
  batchnorm_forward_train(x, g, b, rm, rv, 1e-5f, 0.1f, s1, y1, nullptr, kCpu);
  size_t seen = 0;
  float count = 0;
  // two identical "ranks": the all-reduced sums are doubled, the statistics must not change
  AllReduceSum twice = [&](float* d, size_t n) {
    seen = n;
    for (size_t i = 0; i < n; ++i) d[i] *= 2;
    count = d[n - 1];
  };
  batchnorm_forward_train(x, g, b, rm2, rv2, 1e-5f, 0.1f, s2, y2, twice, kCpu);
  EXPECT_EQ(seen, 7u);
  EXPECT_EQ(count, 200.0f);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_NEAR(y1.data<float>()[i], y2.data<float>()[i], 1e-5);
  // unbiased variance uses the global count: 100 vs 200 samples
  for (int64_t c = 0; c < 3; ++c) {
    const double var = double(rv.data<float>()[c]) / 0.1 * 99 / 100;
    EXPECT_NEAR(rv2.data<float>()[c], 0.1 * var * 200 / 199, 1e-5);
  }
  // eval uses the running stats
  Tensor ye = Tensor::empty(x.shape(), DType::f32);
  batchnorm_forward_eval(x, g, b, rm, rv, 1e-5f, ye, kCpu);
  const float v0 = x.data<float>()[0];
  EXPECT_NEAR(ye.data<float>()[0], (v0 - rm.data<float>()[0]) / std::sqrt(rv.data<float>()[0] + 1e-5f) * g.data<float>()[0] + b.data<float>()[0], 1e-4);
  // backward through the hook too
  Tensor dy = filled(x.shape(), 3), dx1 = Tensor::empty(x.shape(), DType::f32), dx2 = Tensor::empty(x.shape(), DType::f32);
  Tensor dg1 = Tensor::zeros({3}, DType::f32), db1 = Tensor::zeros({3}, DType::f32);
  Tensor dg2 = Tensor::zeros({3}, DType::f32), db2 = Tensor::zeros({3}, DType::f32);
  batchnorm_backward_train(dy, x, g, s1, dx1, dg1, db1, nullptr, kCpu);
  batchnorm_backward_train(dy, x, g, s2, dx2, dg2, db2, twice, kCpu);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_NEAR(dx1.data<float>()[i], dx2.data<float>()[i], 1e-5);
  for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(dg1.data<float>()[c], dg2.data<float>()[c]);  // local sums
  // the CPU sums on the host: a hook with only the device seam is refused, naming it, and calls nothing
  AllReduceSum device_only;
  bool called = false;
  device_only.device = [&](float*, size_t, const Stream&) { called = true; };
  HPDT_EXPECT_THROW_MSG(batchnorm_forward_train(x, g, b, rm2, rv2, 1e-5f, 0.1f, s2, y2, device_only, kCpu),
                        "only a device all-reduce");
  HPDT_EXPECT_THROW_MSG(batchnorm_backward_train(dy, x, g, s2, dx2, dg2, db2, device_only, kCpu),
                        "only a device all-reduce");
  EXPECT_FALSE(called);
}

// The fused epilogue (BatchNormFusion) and its backward (BatchNormReluGrad) are, on the CPU, exactly the ops they
// replace: batch norm, add, relu_forward; relu_backward, batch norm backward. Same bits, train and eval, both
// layouts, with and without a residual.
TEST(LayerApi, FusedBatchNormReluIsBnThenAddThenRelu) {
  for (const Layout layout : {Layout::nchw, Layout::nhwc})
    for (const bool with_residual : {false, true}) {
      SCOPED_TRACE(std::string(layout_name(layout)) + (with_residual ? " residual" : ""));
      const Shape s{3, 5, 6, 7};
      const int64_t c = layout == Layout::nhwc ? s[3] : s[1];
      const Tensor x = filled(s, 0), r = filled(s, 4), dy = filled(s, 5), g = filled({c}, 1), b = filled({c}, 2);
      auto fresh = [&] { return Tensor::empty(s, DType::f32); };
      auto zeros_c = [&] { return Tensor::zeros({c}, DType::f32); };
      // unfused
      Tensor rm1 = zeros_c(), rv1 = zeros_c(), t = fresh(), y1 = fresh();
      BatchNormSaved s1;
      batchnorm_forward_train(x, g, b, rm1, rv1, 1e-5f, 0.1f, s1, t, nullptr, kCpu, layout);
      if (with_residual) add(t, r, t, kCpu);
      relu_forward(t, y1, kCpu);
      Tensor dz1 = fresh(), dx1 = fresh(), dg1 = zeros_c(), db1 = zeros_c();
      relu_backward(y1, dy, dz1, kCpu);
      batchnorm_backward_train(dz1, x, g, s1, dx1, dg1, db1, nullptr, kCpu, layout);
      // fused
      Tensor rm2 = zeros_c(), rv2 = zeros_c(), y2 = fresh();
      BatchNormSaved s2;
      BatchNormFusion fusion;
      if (with_residual) fusion.residual = r;
      fusion.relu = true;
      batchnorm_forward_train(x, g, b, rm2, rv2, 1e-5f, 0.1f, s2, y2, nullptr, kCpu, layout, fusion);
      Tensor dx2 = fresh(), dg2 = zeros_c(), db2 = zeros_c();
      const BatchNormReluGrad relu{y2, fresh()};
      batchnorm_backward_train(dy, x, g, s2, dx2, dg2, db2, nullptr, kCpu, layout, &relu);
      int64_t zeros = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        ASSERT_EQ(y1.data<float>()[i], y2.data<float>()[i]) << i;
        ASSERT_EQ(dz1.data<float>()[i], relu.dz.data<float>()[i]) << i;
        ASSERT_EQ(dx1.data<float>()[i], dx2.data<float>()[i]) << i;
        zeros += y2.data<float>()[i] == 0.0f;
      }
      EXPECT_GT(zeros, x.numel() / 5) << "the ReLU must cut something for the mask to be tested";
      EXPECT_LT(zeros, x.numel() * 4 / 5);
      for (int64_t ch = 0; ch < c; ++ch) {
        EXPECT_EQ(dg1.data<float>()[ch], dg2.data<float>()[ch]);
        EXPECT_EQ(db1.data<float>()[ch], db2.data<float>()[ch]);
      }
      if (!with_residual) {  // the mask from x (no residual): the same bits again, and no dz
        Tensor dx3 = fresh(), dg3 = zeros_c(), db3 = zeros_c();
        BatchNormReluGrad from_x;
        from_x.beta = b;
        batchnorm_backward_train(dy, x, g, s2, dx3, dg3, db3, nullptr, kCpu, layout, &from_x);
        for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(dx1.data<float>()[i], dx3.data<float>()[i]) << i;
        for (int64_t ch = 0; ch < c; ++ch) {
          EXPECT_EQ(dg1.data<float>()[ch], dg3.data<float>()[ch]);
          EXPECT_EQ(db1.data<float>()[ch], db3.data<float>()[ch]);
        }
        EXPECT_FALSE(from_x.dz.defined());
      }
      // eval: running statistics, the same epilogue
      Tensor te = fresh(), ye1 = fresh(), ye2 = fresh();
      batchnorm_forward_eval(x, g, b, rm1, rv1, 1e-5f, te, kCpu, layout);
      if (with_residual) add(te, r, te, kCpu);
      relu_forward(te, ye1, kCpu);
      batchnorm_forward_eval(x, g, b, rm1, rv1, 1e-5f, ye2, kCpu, layout, fusion);
      for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(ye1.data<float>()[i], ye2.data<float>()[i]) << i;
    }
  // a residual or a ReLU-gradient tensor of another shape is named
  const Shape s{2, 3, 4, 4};
  const Tensor x = filled(s, 0), g = filled({3}, 1), b = filled({3}, 2);
  Tensor rm = Tensor::zeros({3}, DType::f32), rv = Tensor::zeros({3}, DType::f32), y = Tensor::empty(s, DType::f32);
  BatchNormSaved saved;
  BatchNormFusion bad;
  bad.residual = filled({2, 3, 4, 5}, 3);
  HPDT_EXPECT_THROW_MSG(batchnorm_forward_train(x, g, b, rm, rv, 1e-5f, 0.1f, saved, y, nullptr, kCpu, Layout::nchw, bad),
                        "batchnorm_forward_train: residual has shape [2, 3, 4, 5], expected [2, 3, 4, 4]");
  batchnorm_forward_train(x, g, b, rm, rv, 1e-5f, 0.1f, saved, y, nullptr, kCpu);
  Tensor dx = Tensor::empty(s, DType::f32), dg = Tensor::zeros({3}, DType::f32), db = Tensor::zeros({3}, DType::f32);
  const BatchNormReluGrad short_dz{y, Tensor::empty({2, 3, 4, 3}, DType::f32)};
  HPDT_EXPECT_THROW_MSG(batchnorm_backward_train(y, x, g, saved, dx, dg, db, nullptr, kCpu, Layout::nchw, &short_dz),
                        "batchnorm_backward_train: dz has shape [2, 3, 4, 3], expected [2, 3, 4, 4]");
  // the mask from x: beta of the channels, no y or dz beside it, no residual sums (they are of dz)
  BatchNormReluGrad short_beta;
  short_beta.beta = filled({2}, 2);
  HPDT_EXPECT_THROW_MSG(batchnorm_backward_train(y, x, g, saved, dx, dg, db, nullptr, kCpu, Layout::nchw, &short_beta),
                        "batchnorm_backward_train: relu's beta has shape [2], expected [3]");
  BatchNormReluGrad both{y, Tensor::empty(s, DType::f32)};
  both.beta = b;
  HPDT_EXPECT_THROW_MSG(batchnorm_backward_train(y, x, g, saved, dx, dg, db, nullptr, kCpu, Layout::nchw, &both),
                        "the ReLU's mask from x (relu.beta given) takes no relu output y and writes no dz");
  BatchNormReluGrad from_x;
  from_x.beta = b;
  ChannelGradSums residual_sums;
  residual_sums.x = filled(s, 3), residual_sums.mean = Tensor::zeros({3}, DType::f32);
  HPDT_EXPECT_THROW_MSG(batchnorm_backward_train(y, x, g, saved, dx, dg, db, nullptr, kCpu, Layout::nchw, &from_x,
                                                 nullptr, &residual_sums),
                        "the residual's batch norm's sums (residual_sums) are of dz");
}

// A residual's own batch norm (BatchNormFusion::residual_bn, ResNet's projection shortcut) is, on the CPU, exactly
// that batch norm's forward into a tensor and then the plain residual fusion: same bits, train (its statistics from
// batchnorm_statistics, which are batchnorm_forward_train's bit for bit, running statistics included) and eval
// (its running statistics), both layouts. Bad inputs are named.
TEST(LayerApi, ResidualBatchNormIsItsForwardThenTheResidualFusion) {
  for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
    SCOPED_TRACE(layout_name(layout));
    const Shape s{3, 5, 6, 7};
    const int64_t c = layout == Layout::nhwc ? s[3] : s[1];
    const Tensor x = filled(s, 0), r = filled(s, 4), g = filled({c}, 1), b = filled({c}, 2);
    const Tensor rg = filled({c}, 6), rb = filled({c}, 7);
    auto fresh = [&] { return Tensor::empty(s, DType::f32); };
    auto zeros_c = [&] { return Tensor::zeros({c}, DType::f32); };
    auto same_bits = [](const Tensor& a, const Tensor& e, const char* what) {
      ASSERT_EQ(a.numel(), e.numel()) << what;
      for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], e.data<float>()[i]) << what << " " << i;
    };
    // two passes: the residual's batch norm written out, then added
    Tensor rrm1 = zeros_c(), rrv1 = zeros_c(), t = fresh(), rm1 = zeros_c(), rv1 = zeros_c(), y1 = fresh();
    BatchNormSaved rs1, s1;
    batchnorm_forward_train(r, rg, rb, rrm1, rrv1, 1e-5f, 0.1f, rs1, t, nullptr, kCpu, layout);
    BatchNormFusion plain;
    plain.residual = t;
    plain.relu = true;
    batchnorm_forward_train(x, g, b, rm1, rv1, 1e-5f, 0.1f, s1, y1, nullptr, kCpu, layout, plain);
    // one pass: the residual's statistics only, its batch norm applied in the output pass
    Tensor rrm2 = zeros_c(), rrv2 = zeros_c(), rm2 = zeros_c(), rv2 = zeros_c(), y2 = fresh();
    BatchNormSaved rs2, s2;
    batchnorm_statistics(r, rrm2, rrv2, 1e-5f, 0.1f, rs2, nullptr, kCpu, layout);
    same_bits(rs2.mean, rs1.mean, "saved mean");
    same_bits(rs2.invstd, rs1.invstd, "saved invstd");
    same_bits(rrm2, rrm1, "running mean");
    same_bits(rrv2, rrv1, "running var");
    const ResidualBatchNorm train_rb{rg, rb, rs2.mean, rs2.invstd};
    BatchNormFusion fused;
    fused.residual = r;
    fused.residual_bn = &train_rb;
    fused.relu = true;
    batchnorm_forward_train(x, g, b, rm2, rv2, 1e-5f, 0.1f, s2, y2, nullptr, kCpu, layout, fused);
    same_bits(y2, y1, "y");
    int64_t zeros = 0;
    for (int64_t i = 0; i < y2.numel(); ++i) zeros += y2.data<float>()[i] == 0.0f;
    EXPECT_GT(zeros, 0) << "the ReLU cut nothing";
    EXPECT_LT(zeros, y2.numel());
    // eval: the residual's batch norm from its running statistics (and its own eps)
    Tensor te = fresh(), ye1 = fresh(), ye2 = fresh();
    batchnorm_forward_eval(r, rg, rb, rrm1, rrv1, 1e-3f, te, kCpu, layout);
    plain.residual = te;
    batchnorm_forward_eval(x, g, b, rm1, rv1, 1e-5f, ye1, kCpu, layout, plain);
    const ResidualBatchNorm eval_rb{rg, rb, rrm1, rrv1, 1e-3f};
    fused.residual_bn = &eval_rb;
    batchnorm_forward_eval(x, g, b, rm1, rv1, 1e-5f, ye2, kCpu, layout, fused);
    same_bits(ye2, ye1, "eval y");
  }
  const Shape s{2, 3, 4, 4};
  const Tensor x = filled(s, 0), g = filled({3}, 1), b = filled({3}, 2);
  Tensor rm = Tensor::zeros({3}, DType::f32), rv = Tensor::zeros({3}, DType::f32), y = Tensor::empty(s, DType::f32);
  BatchNormSaved saved;
  const ResidualBatchNorm rb{g, b, rm, Tensor::zeros({4}, DType::f32)};
  BatchNormFusion bad;
  bad.residual_bn = &rb;
  HPDT_EXPECT_THROW_MSG(
      batchnorm_forward_train(x, g, b, rm, rv, 1e-5f, 0.1f, saved, y, nullptr, kCpu, Layout::nchw, bad),
      "batchnorm_forward_train: a residual batch norm needs a residual");
  bad.residual = filled(s, 3);
  HPDT_EXPECT_THROW_MSG(batchnorm_forward_eval(x, g, b, rm, rv, 1e-5f, y, kCpu, Layout::nchw, bad),
                        "batchnorm_forward_eval: residual batch norm's scale has shape [4], expected [3]");
  const ResidualBatchNorm half_stats{g, b, Tensor::zeros({3}, DType::f16), rv};
  bad.residual_bn = &half_stats;
  HPDT_EXPECT_THROW_MSG(batchnorm_forward_eval(x, g, b, rm, rv, 1e-5f, y, kCpu, Layout::nchw, bad),
                        "batchnorm_forward_eval: residual batch norm's mean");
  Tensor rv2 = Tensor::zeros({2}, DType::f32);
  HPDT_EXPECT_THROW_MSG(batchnorm_statistics(x, rm, rv2, 1e-5f, 0.1f, saved, nullptr, kCpu),
                        "batchnorm_statistics: running_var has shape [2], expected [3]");
}

// layernorm_backward with a residual is layernorm_backward then kernels::add, bit for bit.
TEST(LayerApi, LayerNormBackwardWithResidualIsBackwardThenAdd) {
  const Shape s{5, 3, 12};
  const Tensor x = filled(s, 0), g = filled({12}, 1), b = filled({12}, 2), dy = filled(s, 3), r = filled(s, 4);
  Tensor y = Tensor::empty(s, DType::f32);
  LayerNormSaved saved;
  layernorm_forward(x, g, b, 1e-5f, saved, y, kCpu);
  Tensor dx1 = Tensor::empty(s, DType::f32), dx2 = Tensor::empty(s, DType::f32);
  Tensor dg1 = Tensor::zeros({12}, DType::f32), db1 = Tensor::zeros({12}, DType::f32);
  Tensor dg2 = Tensor::zeros({12}, DType::f32), db2 = Tensor::zeros({12}, DType::f32);
  layernorm_backward(dy, x, g, saved, dx1, dg1, db1, kCpu);
  add(dx1, r, dx1, kCpu);
  layernorm_backward(dy, x, g, saved, dx2, dg2, db2, kCpu, &r);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(dx1.data<float>()[i], dx2.data<float>()[i]) << i;
  for (int64_t j = 0; j < 12; ++j) EXPECT_EQ(dg1.data<float>()[j], dg2.data<float>()[j]);
  const Tensor bad = filled({5, 3, 11}, 5);
  HPDT_EXPECT_THROW_MSG(layernorm_backward(dy, x, g, saved, dx2, dg2, db2, kCpu, &bad),
                        "layernorm_backward: residual has shape [5, 3, 11], expected [5, 3, 12]");
  HPDT_EXPECT_THROW_MSG(layernorm_backward(dy, x, g, saved, dx2, dg2, db2, kCpu, &dx2),
                        "layernorm_backward: the residual must be a tensor other than dx");
}

// The fused linear + GELU entry points are the separate ops on the CPU, bit for bit: forward linear then GELU;
// backward-through-GELU the linear backward then gelu_backward on dx (dw and dbias untouched by the GELU); and
// linear_forward with a residual is linear_forward then add.
TEST(LayerApi, LinearGeluIsLinearThenGelu) {
  for (const GeluForm form : {GeluForm::erf, GeluForm::tanh}) {
    const Tensor x = filled({2, 3, 5}, 0), w = filled({7, 5}, 1), b = filled({7}, 2);
    Tensor pre1 = Tensor::empty({2, 3, 7}, DType::f32), y1 = Tensor::empty({2, 3, 7}, DType::f32);
    Tensor pre2 = Tensor::empty({2, 3, 7}, DType::f32), y2 = Tensor::empty({2, 3, 7}, DType::f32);
    linear_forward(x, w, &b, pre1, kCpu);
    gelu_forward(pre1, form, y1, kCpu);
    linear_gelu_forward(x, w, &b, form, pre2, y2, kCpu);
    for (int64_t i = 0; i < y1.numel(); ++i) {
      ASSERT_EQ(pre1.data<float>()[i], pre2.data<float>()[i]) << i;
      ASSERT_EQ(y1.data<float>()[i], y2.data<float>()[i]) << i;
    }
    // the next layer, w2 [4, 7], on x2 = y (its gelu_input h = pre)
    const Tensor w2 = filled({4, 7}, 3), dy = filled({2, 3, 4}, 4);
    Tensor dx1 = Tensor::empty({2, 3, 7}, DType::f32), dx2 = Tensor::empty({2, 3, 7}, DType::f32);
    Tensor dw1 = filled({4, 7}, 5), dw2 = filled({4, 7}, 5), db1 = filled({4}, 6), db2 = filled({4}, 6);
    linear_backward(dy, y1, w2, &dx1, dw1, &db1, kCpu);
    gelu_backward(pre1, dx1, form, dx1, kCpu);
    linear_backward_through_gelu(dy, y1, w2, pre1, form, dx2, dw2, &db2, kCpu);
    for (int64_t i = 0; i < dx1.numel(); ++i) ASSERT_EQ(dx1.data<float>()[i], dx2.data<float>()[i]) << i;
    for (int64_t i = 0; i < dw1.numel(); ++i) ASSERT_EQ(dw1.data<float>()[i], dw2.data<float>()[i]) << i;
    for (int64_t i = 0; i < db1.numel(); ++i) ASSERT_EQ(db1.data<float>()[i], db2.data<float>()[i]) << i;
  }
  // linear_forward with a residual is linear_forward then add
  {
    const Tensor x = filled({2, 3, 5}, 7), w = filled({4, 5}, 8), b = filled({4}, 9), r = filled({2, 3, 4}, 10);
    Tensor y1 = Tensor::empty({2, 3, 4}, DType::f32), y2 = Tensor::empty({2, 3, 4}, DType::f32);
    linear_forward(x, w, &b, y1, kCpu);
    add(y1, r, y1, kCpu);
    linear_forward(x, w, &b, y2, kCpu, &r);
    for (int64_t i = 0; i < y1.numel(); ++i) ASSERT_EQ(y1.data<float>()[i], y2.data<float>()[i]) << i;
    const Tensor bad_r = filled({2, 3, 5}, 11);
    HPDT_EXPECT_THROW_MSG(linear_forward(x, w, &b, y2, kCpu, &bad_r),
                          "linear_forward: residual has shape [2, 3, 5], expected [2, 3, 4]");
    HPDT_EXPECT_THROW_MSG(linear_forward(x, w, &b, y2, kCpu, &y2),
                          "linear_forward: the residual must be a tensor other than y");
  }
  const Tensor x = filled({6, 5}, 0), w = filled({7, 5}, 1);
  Tensor y = Tensor::empty({6, 7}, DType::f32), bad = Tensor::empty({6, 8}, DType::f32);
  HPDT_EXPECT_THROW_MSG(linear_gelu_forward(x, w, nullptr, GeluForm::erf, bad, y, kCpu),
                        "linear_gelu_forward: pre has shape [6, 8], expected [6, 7]");
  HPDT_EXPECT_THROW_MSG(linear_gelu_forward(x, w, nullptr, GeluForm::erf, y, y, kCpu),
                        "linear_gelu_forward: pre and y must be different tensors");
  const Tensor dy = filled({6, 7}, 2), h = filled({6, 4}, 3);
  Tensor dx = Tensor::empty({6, 5}, DType::f32), dw = Tensor::zeros({7, 5}, DType::f32);
  HPDT_EXPECT_THROW_MSG(linear_backward_through_gelu(dy, x, w, h, GeluForm::erf, dx, dw, nullptr, kCpu),
                        "linear_backward_through_gelu: gelu_input has shape [6, 4], expected [6, 5]");
  HPDT_EXPECT_THROW_MSG(linear_backward_through_gelu(dy, x, w, dx, GeluForm::erf, dx, dw, nullptr, kCpu),
                        "dx and gelu_input must be different tensors");
}

// conv2d_backward_data with a residual is backward-data then kernels::add, bit for bit, in both layouts (the
// stride-2 1x1 case has dx pixels that no tap reaches: they must be the residual's).
TEST(LayerApi, ConvBackwardDataWithResidualIsBackwardDataThenAdd) {
  for (const Layout layout : {Layout::nchw, Layout::nhwc})
    for (const int64_t k : {1, 3}) {
      const int64_t stride = 2, pad = k / 2;
      const bool nhwc = layout == Layout::nhwc;
      const Shape xs = nhwc ? Shape{2, 9, 9, 5} : Shape{2, 5, 9, 9}, ys = nhwc ? Shape{2, 5, 5, 7} : Shape{2, 7, 5, 5};
      const Tensor w = filled({7, 5, k, k}, 1), dy = filled(ys, 2), r = filled(xs, 3);
      Tensor dx1 = Tensor::empty(xs, DType::f32), dx2 = Tensor::empty(xs, DType::f32);
      conv2d_backward_data(dy, w, dx1, stride, pad, kCpu, layout);
      add(dx1, r, dx1, kCpu);
      conv2d_backward_data(dy, w, dx2, stride, pad, kCpu, layout, &r);
      for (int64_t i = 0; i < dx1.numel(); ++i)
        ASSERT_EQ(dx1.data<float>()[i], dx2.data<float>()[i]) << layout_name(layout) << " k" << k << " element " << i;
    }
  const Tensor w = filled({7, 5, 3, 3}, 1), dy = filled({2, 7, 5, 5}, 2), r = filled({2, 5, 9, 8}, 3);
  Tensor dx = Tensor::empty({2, 5, 9, 9}, DType::f32);
  HPDT_EXPECT_THROW_MSG(conv2d_backward_data(dy, w, dx, 2, 1, kCpu, Layout::nchw, &r),
                        "conv2d_backward_data: residual has shape [2, 5, 9, 8], expected [2, 5, 9, 9]");
  HPDT_EXPECT_THROW_MSG(conv2d_backward_data(dy, w, dx, 2, 1, kCpu, Layout::nchw, &dx),
                        "the residual must be a tensor other than dx");
}

TEST(Optim, SgdMomentumNesterovWeightDecayMatchTorchFormula) {
  for (bool nesterov : {false, true}) {
    SgdOptions o{0.1f, 0.9f, 0.0f, 1e-2f, nesterov};
    Tensor p = Tensor::from_vector<float>({1.0f, -2.0f}, {2}), buf = Tensor::zeros({2}, DType::f32);
    const std::vector<std::vector<float>> grads = {{0.5f, 0.25f}, {-1.0f, 2.0f}};
    double pr[2] = {1.0, -2.0}, br[2] = {0, 0};
    for (size_t step = 0; step < grads.size(); ++step) {
      Tensor g = Tensor::from_vector<float>(grads[step], {2});
      sgd_step(p, g, buf, o, step == 0, kCpu);
      for (int i = 0; i < 2; ++i) {
        double d = grads[step][size_t(i)] + 1e-2 * pr[i];
        br[i] = step == 0 ? d : 0.9 * br[i] + d;
        d = nesterov ? d + 0.9 * br[i] : br[i];
        pr[i] -= 0.1 * d;
        EXPECT_NEAR(p.data<float>()[i], pr[i], 1e-6) << "nesterov " << nesterov << " step " << step;
      }
    }
  }
}

TEST(Optim, AdamWMatchesTorchFormula) {
  AdamWOptions o{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f};
  Tensor p = Tensor::from_vector<float>({1.0f, -0.5f}, {2}), m = Tensor::zeros({2}, DType::f32), v = Tensor::zeros({2}, DType::f32);
  double pr[2] = {1.0, -0.5}, mr[2] = {0, 0}, vr[2] = {0, 0};
  const std::vector<std::vector<float>> grads = {{0.3f, -0.2f}, {0.1f, 0.4f}, {-0.5f, 0.0f}};
  for (size_t t = 1; t <= grads.size(); ++t) {
    Tensor g = Tensor::from_vector<float>(grads[t - 1], {2});
    adamw_step(p, g, m, v, o, int64_t(t), kCpu);
    for (int i = 0; i < 2; ++i) {
      const double gi = grads[t - 1][size_t(i)];
      pr[i] *= 1 - 1e-2 * 0.1;
      mr[i] = 0.9 * mr[i] + 0.1 * gi;
      vr[i] = 0.999 * vr[i] + 0.001 * gi * gi;
      const double bc1 = 1 - std::pow(0.9, double(t)), bc2 = 1 - std::pow(0.999, double(t));
      pr[i] -= 1e-2 / bc1 * mr[i] / (std::sqrt(vr[i]) / std::sqrt(bc2) + 1e-8);
      EXPECT_NEAR(p.data<float>()[i], pr[i], 1e-6) << "step " << t;
    }
  }
  HPDT_EXPECT_THROW_MSG(adamw_step(p, p, m, v, o, 0, kCpu), "must count from 1");
}

TEST(Optim, ClipByGlobalNormAndNonFinite) {
  std::vector<Tensor> g = {Tensor::from_vector<float>({3.0f, 0.0f}, {2}), Tensor::from_vector<float>({4.0f}, {1})};
  EXPECT_NEAR(global_norm(g, kCpu), 5.0, 1e-12);
  EXPECT_NEAR(clip_grad_norm(g, 1.0, kCpu), 5.0, 1e-12);
  EXPECT_NEAR(g[0].data<float>()[0], 3.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(g[1].data<float>()[0], 4.0 / (5.0 + 1e-6), 1e-6);
  clip_grad_norm(g, 10.0, kCpu);  // below the limit: unchanged
  EXPECT_NEAR(g[1].data<float>()[0], 4.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_FALSE(has_nonfinite(g[0], kCpu));
  g[0].data<float>()[1] = INFINITY;
  EXPECT_TRUE(has_nonfinite(g[0], kCpu));
}

// The GEMM and convolution choices by name and back; other names are an error naming the choice.
TEST(KernelChoices, NamesRoundTripAndBadNamesAreErrors) {
  for (GemmChoice c : {GemmChoice::v2, GemmChoice::v3}) EXPECT_EQ(parse_gemm_choice(gemm_choice_name(c)), c);
  for (ConvChoice c : {ConvChoice::v2, ConvChoice::v3, ConvChoice::find})
    EXPECT_EQ(parse_conv_choice(conv_choice_name(c)), c);
  EXPECT_EQ(conv_choice_name(ConvChoice::find), "find");
  EXPECT_EQ(gemm_choice_name(GemmChoice::v3), "v3");
  EXPECT_EQ(conv_choice_name(ConvChoice::v2), "v2");
  HPDT_EXPECT_THROW_MSG(parse_gemm_choice("v4"), "GEMM choice must be 'v2' or 'v3', got 'v4'");
  HPDT_EXPECT_THROW_MSG(parse_conv_choice("V3"), "convolution choice must be 'v2', 'v3' or 'find', got 'V3'");
  HPDT_EXPECT_THROW_MSG(parse_gemm_choice("find"), "GEMM choice must be 'v2' or 'v3', got 'find'");
}

// The cuDNN algorithm choice: heuristic by default, by name and back, scoped, bad names an error.
TEST(KernelChoices, CudnnAlgoDefaultsToHeuristicAndScopes) {
  EXPECT_EQ(cudnn_algo(), CudnnAlgo::heuristic);
  for (CudnnAlgo a : {CudnnAlgo::heuristic, CudnnAlgo::find}) EXPECT_EQ(parse_cudnn_algo(cudnn_algo_name(a)), a);
  EXPECT_EQ(cudnn_algo_name(CudnnAlgo::find), "find");
  {
    const ScopedCudnnAlgo find(CudnnAlgo::find);
    EXPECT_EQ(cudnn_algo(), CudnnAlgo::find);
  }
  EXPECT_EQ(cudnn_algo(), CudnnAlgo::heuristic);
  HPDT_EXPECT_THROW_MSG(parse_cudnn_algo("benchmark"),
                        "cuDNN algorithm choice must be 'heuristic' or 'find', got 'benchmark'");
}

// GEMM v3's tuning: heuristic by default, by name and back, scoped, bad names an error.
TEST(KernelChoices, GemmTuningDefaultsToHeuristicAndScopes) {
  EXPECT_EQ(gemm_tuning(), GemmTuning::heuristic);
  for (GemmTuning t : {GemmTuning::heuristic, GemmTuning::find}) EXPECT_EQ(parse_gemm_tuning(gemm_tuning_name(t)), t);
  EXPECT_EQ(gemm_tuning_name(GemmTuning::find), "find");
  {
    const ScopedGemmTuning find(GemmTuning::find);
    EXPECT_EQ(gemm_tuning(), GemmTuning::find);
  }
  EXPECT_EQ(gemm_tuning(), GemmTuning::heuristic);
  HPDT_EXPECT_THROW_MSG(parse_gemm_tuning("autotune"), "GEMM tuning must be 'heuristic' or 'find', got 'autotune'");
}

}  // namespace
