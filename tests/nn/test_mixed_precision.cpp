// Mixed precision on the CPU: f16/bf16 model copies with f32 master weights, the LossScaler's
// GradScaler semantics (skip on overflow and back off, grow after the interval), static and off modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "hpdt/core/philox.h"
#include "hpdt/kernels/loss.h"
#include "hpdt/nn/model.h"
#include "hpdt/nn/optim.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
using namespace hpdt::nn;

ModelConfig tiny(DType dt) {
  ModelConfig c;
  c.in_channels = 1;
  c.image_size = 8;
  c.classes = 4;
  c.seed = 11;
  c.dtype = dt;
  return c;
}

struct Batch {
  Tensor x, labels;
};
Batch batch() {
  Batch b{Tensor::empty({4, 1, 8, 8}, DType::f32), Tensor::from_vector<int32_t>({0, 1, 2, 3}, {4})};
  Rng rng(3);
  for (int64_t i = 0; i < b.x.numel(); ++i) b.x.data<float>()[i] = rng.normal();
  return b;
}

// Like GradScaler's first iterations: back off until the scaled gradients fit the model dtype (f16
// overflows above 65504, so gradients above 1 overflow at the initial 2^16). Returns the skipped count.
int backward_until_finite(Model& m, const Batch& b, LossScaler& scaler);

// forward + scaled backward; returns the loss
double forward_backward(Model& m, const Batch& b, float scale) {
  Tensor logits = m.forward(b.x);
  Tensor dl = Tensor::empty(logits.shape(), DType::f32);
  const double loss = kernels::softmax_cross_entropy(logits, b.labels, 0.0, &dl, scale, Stream());
  m.backward(dl);
  return loss;
}

int backward_until_finite(Model& m, const Batch& b, LossScaler& scaler) {
  int skipped = 0;
  for (;;) {
    forward_backward(m, b, scaler.scale());
    const bool ok = scaler.unscale(m.arena());
    if (ok) return skipped;
    scaler.update(true);
    if (++skipped > 30) return skipped;
  }
}

TEST(MixedPrecision, ModelCopyIsTheRoundedMasterAndFollowsTheOptimizer) {
  for (DType dt : {DType::f16, DType::bf16}) {
    auto m = make_model("resnet20", tiny(dt));
    ParameterArena& a = m->arena();
    ASSERT_EQ(a.model_params().dtype(), dt);
    ASSERT_EQ(a.comm_grads().dtype(), dt);
    const float* master = a.master_params().data<float>();
    for (int id : {0, a.count() - 1}) {
      const Tensor p = a.param(id);
      for (int64_t i = 0; i < p.numel(); ++i) {
        const float r = dt == DType::f16 ? to_f32(from_f32<f16_t>(master[a.info(id).offset + i]))
                                         : to_f32(from_f32<bf16_t>(master[a.info(id).offset + i]));
        ASSERT_EQ(p.data<float>()[i], r);
      }
    }
    Sgd opt(a, {0.1f, 0.9f, 0.0f, 0.0f, false});
    LossScaler scaler = LossScaler::for_dtype(dt);
    EXPECT_EQ(scaler.mode(), dt == DType::f16 ? LossScaler::Mode::dynamic : LossScaler::Mode::off);
    const Batch b = batch();
    const float scale0 = scaler.scale();
    const int skipped = backward_until_finite(*m, b, scaler);
    ASSERT_LE(skipped, 30);
    EXPECT_EQ(scaler.scale(), scale0 * std::pow(0.5f, float(skipped))) << "each overflow halves the scale";
    opt.step();
    scaler.update(false);
    const Tensor p = a.param(0);
    const float r = dt == DType::f16 ? to_f32(from_f32<f16_t>(master[a.info(0).offset]))
                                     : to_f32(from_f32<bf16_t>(master[a.info(0).offset]));
    EXPECT_EQ(p.data<float>()[0], r) << "model copy refreshed after the step";
  }
}

// The reduced-precision path against an f32 model holding the same (rounded) weights: what differs is
// the rounding of the scaled gradients into the model dtype and the unscale. (Against the unrounded f32
// weights a tiny BN+ReLU net's gradient moves by 10-25%: units flip across the ReLU kink.)
TEST(MixedPrecision, UnscaledReducedPrecisionGradientsMatchF32) {
  const Batch b = batch();
  for (DType dt : {DType::f16, DType::bf16}) {
    auto m = make_model("resnet20", tiny(dt));
    auto m32 = make_model("resnet20", tiny(DType::f32));
    ParameterArena& a = m->arena();
    float* p32 = m32->arena().master_params().data<float>();
    for (int id = 0; id < a.count(); ++id) {
      const Tensor p = a.param(id);
      std::copy(p.data<float>(), p.data<float>() + p.numel(), p32 + a.info(id).offset);
    }
    const double l32 = forward_backward(*m32, b, 1.0f);
    const std::vector<float> g32 = m32->arena().grads().to_vector<float>();
    LossScaler scaler = LossScaler::for_dtype(dt);
    ASSERT_LE(backward_until_finite(*m, b, scaler), 30);
    const double l = forward_backward(*m, b, scaler.scale());
    EXPECT_NEAR(l, l32, 1e-5 * l32);
    ASSERT_TRUE(scaler.unscale(a));
    const std::vector<float> g = a.grads().to_vector<float>();
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      num += (double(g[i]) - g32[i]) * (double(g[i]) - g32[i]);
      den += double(g32[i]) * g32[i];
    }
    // relative L2 error: one rounding of each gradient (f16: 2^-11, bf16: 2^-8)
    EXPECT_LT(std::sqrt(num / den), dt == DType::f16 ? 1e-3 : 8e-3) << dtype_name(dt);
    EXPECT_GT(std::sqrt(num / den), 0.0) << "the gradients did go through the model dtype";
  }
}

TEST(LossScaler, OverflowSkipsTheStepAndHalvesTheScale) {
  auto m = make_model("resnet20", tiny(DType::f16));
  ParameterArena& a = m->arena();
  Sgd opt(a, {0.1f, 0.0f, 0.0f, 0.0f, false});
  LossScalerOptions o;
  o.init_scale = 1e30f;  // scaled gradients overflow f16 (max 65504)
  LossScaler scaler = LossScaler::dynamic(o);
  const std::vector<float> before = a.master_params().to_vector<float>();
  forward_backward(*m, batch(), scaler.scale());
  const bool ok = scaler.unscale(a);
  EXPECT_FALSE(ok);
  if (ok) opt.step();
  scaler.update(!ok);
  EXPECT_EQ(scaler.scale(), 5e29f);
  EXPECT_EQ(a.master_params().to_vector<float>(), before) << "skipped step leaves the weights alone";
}

TEST(LossScaler, GrowsAfterTheIntervalOfCleanStepsAndResetsOnOverflow) {
  LossScalerOptions o;
  o.growth_interval = 3;
  LossScaler s = LossScaler::dynamic(o);
  EXPECT_EQ(s.scale(), 65536.0f);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  // default interval is GradScaler's 2000
  LossScaler d = LossScaler::dynamic();
  for (int i = 0; i < 1999; ++i) d.update(false);
  EXPECT_EQ(d.scale(), 65536.0f);
  d.update(false);
  EXPECT_EQ(d.scale(), 131072.0f);
}

TEST(LossScaler, StaticModeKeepsItsScaleButSkipsOverflowOffModeNeverChecks) {
  auto m = make_model("resnet20", tiny(DType::f16));
  LossScaler fixed = LossScaler::fixed(1e30f);
  forward_backward(*m, batch(), fixed.scale());
  EXPECT_FALSE(fixed.unscale(m->arena()));
  fixed.update(true);
  EXPECT_EQ(fixed.scale(), 1e30f);
  LossScaler off = LossScaler::off();
  EXPECT_EQ(off.scale(), 1.0f);
  forward_backward(*m, batch(), 1e30f);  // overflowing gradients, but off mode does not look
  EXPECT_TRUE(off.unscale(m->arena()));
}

// Optimizer::fused_step (what hpdt-train runs on the GPU) against the unfused sequence the CPU trainer runs,
// on the CPU: the same f32 operations, so the same bits (kernels/include/hpdt/kernels/optim.h), for SGD and
// AdamW, with and without clipping; and an overflowing step is skipped with nothing changed.
TEST(MixedPrecision, FusedStepEqualsUnscaleClipStep) {
  const Batch b = batch();
  for (DType dt : {DType::f16, DType::bf16}) {
    for (bool adam : {false, true}) {
      for (double max_norm : {0.0, 0.05}) {
        auto m1 = make_model("resnet20", tiny(dt));
        auto m2 = make_model("resnet20", tiny(dt));
        std::unique_ptr<Optimizer> o1, o2;
        if (adam) {
          o1 = std::make_unique<AdamW>(m1->arena(), kernels::AdamWOptions{});
          o2 = std::make_unique<AdamW>(m2->arena(), kernels::AdamWOptions{});
        } else {
          o1 = std::make_unique<Sgd>(m1->arena(), kernels::SgdOptions{0.1f, 0.9f, 0.0f, 5e-4f, true});
          o2 = std::make_unique<Sgd>(m2->arena(), kernels::SgdOptions{0.1f, 0.9f, 0.0f, 5e-4f, true});
        }
        const float scale = 256.0f;
        for (int step = 0; step < 2; ++step) {
          forward_backward(*m1, b, scale);
          forward_backward(*m2, b, scale);
          LossScaler s1 = LossScaler::fixed(scale);
          ASSERT_TRUE(s1.unscale(m1->arena()));
          if (max_norm > 0) clip_grad_norm(m1->arena(), max_norm);
          o1->step();
          ASSERT_TRUE(o2->fused_step(m2->arena().comm_grads(), scale, max_norm));
          const std::string what = std::string(dtype_name(dt)) + (adam ? " adamw" : " sgd") + " clip " +
                                   std::to_string(max_norm) + " step " + std::to_string(step);
          EXPECT_EQ(m2->arena().master_params().to_vector<float>(), m1->arena().master_params().to_vector<float>())
              << what;
          const Tensor p1 = m1->arena().param(3), p2 = m2->arena().param(3);
          EXPECT_EQ(p2.to_vector<float>(), p1.to_vector<float>()) << what << ": the compute copy follows";
          EXPECT_EQ(o2->steps(), o1->steps());
        }
      }
    }
  }
  auto m = make_model("resnet20", tiny(DType::f16));
  Sgd opt(m->arena(), {0.1f, 0.0f, 0.0f, 0.0f, false});
  forward_backward(*m, b, 1e30f);  // overflows f16
  const std::vector<float> before = m->arena().master_params().to_vector<float>();
  EXPECT_FALSE(opt.fused_step(m->arena().comm_grads(), 1e30f, 0.0));
  EXPECT_EQ(m->arena().master_params().to_vector<float>(), before) << "a skipped fused step changes nothing";
  EXPECT_EQ(opt.steps(), 0);
  // Queued, then finished after the rest of the step was queued (finish_fused_step): the same skip, the same count.
  opt.queue_fused_step(m->arena().comm_grads(), 1e30f, 0.0);
  EXPECT_FALSE(opt.finish_fused_step());
  EXPECT_EQ(m->arena().master_params().to_vector<float>(), before);
  EXPECT_EQ(opt.steps(), 0) << "a skipped step is taken back from the count";
}

// fused_step in two halves (queue_fused_step, then finish_fused_step), as a step queued whole and read back at its
// end runs it: the same bits, step count and compute copy as fused_step.
TEST(MixedPrecision, QueuedThenFinishedFusedStepIsTheFusedStep) {
  const Batch b = batch();
  auto m1 = make_model("resnet20", tiny(DType::bf16));
  auto m2 = make_model("resnet20", tiny(DType::bf16));
  AdamW o1(m1->arena(), kernels::AdamWOptions{}), o2(m2->arena(), kernels::AdamWOptions{});
  for (int step = 0; step < 2; ++step) {
    forward_backward(*m1, b, 1.0f);
    forward_backward(*m2, b, 1.0f);
    ASSERT_TRUE(o1.fused_step(m1->arena().comm_grads(), 1.0f, 0.05));
    o2.queue_fused_step(m2->arena().comm_grads(), 1.0f, 0.05);
    ASSERT_TRUE(o2.finish_fused_step());
    EXPECT_EQ(m2->arena().master_params().to_vector<float>(), m1->arena().master_params().to_vector<float>());
    EXPECT_EQ(m2->arena().param(3).to_vector<float>(), m1->arena().param(3).to_vector<float>())
        << "step " << step << ": the compute copy follows";
    EXPECT_EQ(o2.steps(), o1.steps());
  }
}

TEST(MixedPrecision, Bf16TrainsWithoutScaling) {
  auto m = make_model("resnet20", tiny(DType::bf16));
  Sgd opt(m->arena(), {0.05f, 0.9f, 0.0f, 0.0f, false});
  LossScaler scaler = LossScaler::for_dtype(DType::bf16);
  const Batch b = batch();
  double first = 0, last = 0;
  for (int step = 0; step < 15; ++step) {
    const double l = forward_backward(*m, b, scaler.scale());
    if (step == 0) first = l;
    last = l;
    ASSERT_TRUE(scaler.unscale(m->arena()));
    opt.step();
  }
  EXPECT_LT(last, 0.5 * first) << "memorising one batch in bf16";
}

}  // namespace
