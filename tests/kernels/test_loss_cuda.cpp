// GPU softmax cross-entropy (kernels/cuda/loss.cu) against the CPU oracle (kernels/cpu/loss.cpp, double math):
// fresh Philox logits rounded through the storage dtype for the oracle, random labels, dlogits poisoned first.
//
// Shapes [b, classes]: 1x1, 1x10, 3x2, 17x10 (odd batch), 128x10 (Fashion-MNIST/CIFAR), 256x1000 (ImageNet),
// 17x5000 (long rows); label smoothing 0, 0.1 and 1; grad_scale 1 and 65536 (a loss scale); dlogits omitted;
// logits offset by 50 (the maximum must be subtracted). Out-of-range labels: the CPU's message, the first
// bad sample. Determinism: the loss and dlogits bit for bit across runs.
//
// Tolerances:
//   loss: |got - want| <= 1e-5 (1 + |want|) in every dtype: the GPU works in f32 per row (log-sum-exp of
//     up to 5000 terms) and adds the rows in double, the CPU is double throughout;
//   dlogits, which are (softmax - q) * grad_scale / b: relative to k = grad_scale / b, f32 rtol 1e-4,
//     atol 1e-6 k (expf of z - lse with lse in f32: ~1e-6 relative); f16/bf16 the dtype's default with
//     atol scaled by k.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_oracle.h"
#include "hpdt/kernels/loss.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
using test::Tolerance;

struct Case {
  int64_t b, classes;
  double smoothing = 0.0, grad_scale = 1.0;
  float offset = 0.0f;
};

const Case kCases[] = {{1, 1},           {1, 10},
                       {3, 2, 0.1},      {17, 10, 0.1},
                       {128, 10},        {128, 10, 0.1, 65536.0},
                       {256, 1000, 0.1}, {17, 5000},
                       {5, 7, 1.0},      {64, 100, 0.0, 1.0, 50.0f}};

class LossCuda : public test::CudaOracleTest {
 protected:
  Tensor labels_for(int64_t b, int64_t classes) {
    std::vector<int32_t> l(static_cast<size_t>(b));
    Rng rng(seed, 99);
    for (auto& v : l) v = int32_t(rng.below(uint32_t(classes)));
    return Tensor::from_vector(l, {b});
  }
};

TEST_F(LossCuda, MatchesCpu) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Case& c : kCases)
      for (bool with_grad : {true, false}) {
        SCOPED_TRACE(std::to_string(c.b) + "x" + std::to_string(c.classes) + " smoothing " +
                     std::to_string(c.smoothing) + " scale " + std::to_string(c.grad_scale) + " " +
                     std::string(dtype_name(dt)) + (with_grad ? "" : " no dlogits"));
        const Tensor z = random({c.b, c.classes}, -4 + c.offset, 4 + c.offset), labels = labels_for(c.b, c.classes);
        Tensor dl = Tensor::empty({c.b, c.classes}, DType::f32);
        const double want = kernels::softmax_cross_entropy(round_through(z, dt), labels, c.smoothing,
                                                           with_grad ? &dl : nullptr, c.grad_scale, cpu);
        Tensor dlg = poisoned({c.b, c.classes}, dt);
        const double got =
            kernels::softmax_cross_entropy(to_gpu(z, dt), labels.to(Device::cuda(0), stream), c.smoothing,
                                           with_grad ? &dlg : nullptr, c.grad_scale, stream);
        EXPECT_NEAR(got, want, 1e-5 * (1 + std::fabs(want)));
        if (!with_grad) continue;
        const double k = c.grad_scale / double(c.b);
        Tolerance t = dt == DType::f32 ? Tolerance{1e-4, 1e-6} : test::default_tolerance(dt);
        t.atol *= k;
        EXPECT_TRUE(close(dl, to_cpu_f32(dlg), t)) << "dlogits";
      }
}

TEST_F(LossCuda, IsDeterministic) {
  for (DType dt : test::kCudaTestDtypes) {
    const int64_t b = 4096, classes = 1000;
    const Tensor z = to_gpu(random({b, classes}, -4, 4), dt),
                 labels = labels_for(b, classes).to(Device::cuda(0), stream);
    Tensor d1 = poisoned({b, classes}, dt), d2 = poisoned({b, classes}, dt);
    const double l1 = kernels::softmax_cross_entropy(z, labels, 0.1, &d1, 1.0, stream);
    const double l2 = kernels::softmax_cross_entropy(z, labels, 0.1, &d2, 1.0, stream);
    uint64_t b1, b2;
    std::memcpy(&b1, &l1, 8);
    std::memcpy(&b2, &l2, 8);
    EXPECT_EQ(b1, b2) << dtype_name(dt) << ": " << l1 << " vs " << l2;
    EXPECT_TRUE(close(to_cpu_f32(d1), to_cpu_f32(d2), {0, 0})) << dtype_name(dt);
  }
}

TEST_F(LossCuda, BadLabelsAndSmoothingThrowTheCpuMessage) {
  const Tensor z = to_gpu(random({8, 10}), DType::bf16);
  Tensor dl = poisoned({8, 10}, DType::bf16);
  // the first bad sample is named, as the CPU names it
  const Tensor l1 = Tensor::from_vector<int32_t>({1, 2, 3, 10, 4, 5, -1, 0}, {8});
  HPDT_EXPECT_THROW_MSG(kernels::softmax_cross_entropy(z, l1.to(Device::cuda(0), stream), 0.0, &dl, 1.0, stream),
                        "softmax_cross_entropy: label 10 of sample 3 is outside [0, 10)");
  HPDT_EXPECT_THROW_MSG(kernels::softmax_cross_entropy(to_cpu_f32(z), l1, 0.0, nullptr, 1.0, cpu),
                        "softmax_cross_entropy: label 10 of sample 3 is outside [0, 10)");
  const Tensor l2 = Tensor::from_vector<int32_t>({1, -1, 3, 10, 4, 5, 6, 0}, {8});
  HPDT_EXPECT_THROW_MSG(kernels::softmax_cross_entropy(z, l2.to(Device::cuda(0), stream), 0.0, nullptr, 1.0, stream),
                        "label -1 of sample 1 is outside [0, 10)");
  // the stream is still usable afterwards, and good labels give a finite loss
  const Tensor good = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 0}, {8});
  EXPECT_TRUE(
      std::isfinite(kernels::softmax_cross_entropy(z, good.to(Device::cuda(0), stream), 0.0, &dl, 1.0, stream)));
  const Tensor lg = good.to(Device::cuda(0), stream);
  HPDT_EXPECT_THROW_MSG(kernels::softmax_cross_entropy(z, lg, 1.5, nullptr, 1.0, stream),
                        "label smoothing 1.5 is not in [0, 1]");
  HPDT_EXPECT_THROW_MSG(kernels::softmax_cross_entropy(z, good, 0.0, nullptr, 1.0, stream), "different devices");
  Tensor dl_f = poisoned({8, 10}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::softmax_cross_entropy(z, lg, 0.0, &dl_f, 1.0, stream), "has dtype f32");
  Tensor dl_bad = poisoned({8, 9}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::softmax_cross_entropy(z, lg, 0.0, &dl_bad, 1.0, stream),
                        "dlogits has shape [8, 9], expected [8, 10]");
}

// The queued form (for CUDA graph capture): the same loss and dlogits bits as the waiting form, read
// after the stream; NaN before anything was queued; a bad label reported by read_loss; CUDA tensors only.
TEST_F(LossCuda, QueuedFormEqualsTheWaitingOne) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t b = 37, classes = 1000;
    const Tensor z = to_gpu(random({b, classes}), dt), labels = labels_for(b, classes).to(Device::cuda(0), stream);
    Tensor d1 = poisoned({b, classes}, dt), d2 = poisoned({b, classes}, dt);
    const double want = kernels::softmax_cross_entropy(z, labels, 0.1, &d1, 128.0, stream);
    Tensor state = kernels::make_loss_state(Device::cuda(0), stream);
    EXPECT_TRUE(std::isnan(kernels::read_loss(state, stream)));
    kernels::softmax_cross_entropy_queued(z, labels, 0.1, &d2, 128.0, state, stream);
    EXPECT_EQ(kernels::read_loss(state, stream), want);
    const Tensor h1 = d1.to(Device::cpu(), stream), h2 = d2.to(Device::cpu(), stream);
    stream.synchronize();
    EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.nbytes()), 0) << "dlogits";
  }
  const Tensor z = to_gpu(random({8, 10}), DType::bf16);
  Tensor state = kernels::make_loss_state(Device::cuda(0), stream);
  const Tensor bad = Tensor::from_vector<int32_t>({1, 2, 3, 10, 4, 5, -1, 0}, {8});
  kernels::softmax_cross_entropy_queued(z, bad.to(Device::cuda(0), stream), 0.0, nullptr, 1.0, state, stream);
  HPDT_EXPECT_THROW_MSG(kernels::read_loss(state, stream), "softmax_cross_entropy: label 10 of sample 3 is outside [0, 10)");
  HPDT_EXPECT_THROW_MSG(kernels::make_loss_state(Device::cpu(), cpu), "CUDA tensors only");
  Tensor small = Tensor::empty({4}, DType::u8, Device::cuda(0), AllocOptions{.stream = &stream});
  const Tensor good = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 0}, {8}).to(Device::cuda(0), stream);
  HPDT_EXPECT_THROW_MSG(kernels::softmax_cross_entropy_queued(z, good, 0.0, nullptr, 1.0, small, stream),
                        "not one of make_loss_state");
}

// The correct count the queued form keeps (hpdt-train's accuracy without a host copy of the logits) against the
// CPU's count_correct on the logits as stored: Philox logits, and logits of 4 values so that most rows tie (the
// first class wins), a NaN in some rows (never the largest) and a row of NaNs (none); odd batches, 1000 classes.
TEST_F(LossCuda, QueuedFormCountsTheCorrectSamples) {
  const float nan = std::nanf("");
  for (DType dt : test::kCudaTestDtypes)
    for (const Case& c : {Case{1, 1}, Case{17, 10}, Case{256, 1000, 0.1}, Case{33, 4}})
      for (bool ties : {false, true}) {
        SCOPED_TRACE(std::to_string(c.b) + "x" + std::to_string(c.classes) + " " + std::string(dtype_name(dt)) +
                     (ties ? " ties" : ""));
        Tensor z = random({c.b, c.classes}, -4, 4);
        float* p = z.data<float>();
        if (ties) {
          for (int64_t i = 0; i < z.numel(); ++i) p[i] = std::floor(p[i] / 2.0f);  // -2, -1, 0 or 1
          for (int64_t r = 0; r < c.b; r += 3) p[r * c.classes + (r % c.classes)] = nan;
          if (c.b > 1)
            for (int64_t k = 0; k < c.classes; ++k) p[(c.b - 1) * c.classes + k] = nan;
        }
        // labels: Philox, and on every other row the oracle's own answer, so that the count is not near 0
        Tensor labels = labels_for(c.b, c.classes);
        const Tensor zr = round_through(z, dt);
        for (int64_t r = 0; r < c.b; r += 2) {
          const Tensor row = zr.slice(r, r + 1);
          for (int32_t k = 0; k < int32_t(c.classes); ++k) {
            labels.data<int32_t>()[r] = k;
            if (kernels::count_correct(row, labels.slice(r, r + 1)) == 1) break;
          }
        }
        const int64_t want = kernels::count_correct(zr, labels);
        Tensor state = kernels::make_loss_state(Device::cuda(0), stream);
        Tensor dl = poisoned({c.b, c.classes}, dt);
        kernels::softmax_cross_entropy_queued(to_gpu(z, dt), labels.to(Device::cuda(0), stream), c.smoothing, &dl, 1.0,
                                              state, stream);
        const kernels::LossValues got = kernels::read_loss_values(state, stream);
        EXPECT_EQ(got.correct, want);
        EXPECT_EQ(got.batch, c.b);
        EXPECT_GE(want, c.b / 4) << "the oracle's own labels on every other row";
        if (!ties) {
          EXPECT_NEAR(got.mean_loss, kernels::softmax_cross_entropy(zr, labels, c.smoothing, nullptr, 1.0, cpu),
                      1e-5 * (1 + std::fabs(got.mean_loss)));
        }
      }
  // Each call counts afresh: a second call on the same state does not add to the first's count.
  const Tensor z = to_gpu(random({64, 10}), DType::bf16);
  const Tensor labels = labels_for(64, 10);
  const int64_t want = kernels::count_correct(to_cpu_f32(z), labels);
  Tensor state = kernels::make_loss_state(Device::cuda(0), stream);
  for (int i = 0; i < 2; ++i)
    kernels::softmax_cross_entropy_queued(z, labels.to(Device::cuda(0), stream), 0.0, nullptr, 1.0, state, stream);
  EXPECT_EQ(kernels::read_loss_values(state, stream).correct, want);
  HPDT_EXPECT_THROW_MSG(kernels::count_correct(to_cpu_f32(z).to(Device::cuda(0), stream), labels),
                        "count_correct: CPU tensors only");
}

}  // namespace
