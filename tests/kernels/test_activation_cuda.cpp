// GPU activations (kernels/cuda/activation.cu) against the CPU oracle (kernels/cpu/activation.cpp): fresh
// Philox inputs rounded through the storage dtype for the oracle, GPU outputs poisoned first.
//
// Sizes: 1, 3, 7, 8, 17, 4099, 1000003 and a ViT-B MLP activation (8 x 197 x 3072); aligned (16-byte vectors
// plus a scalar tail) and misaligned views (element by element); in place where the API allows it.
// Softmax rows: d = 1, 5, 8, 10, 197 (ViT attention, 2 x 3 heads x 197 rows), 1000, 1024 (the longest warp
// row), 1025 and 5000 (a block per row), 16384; rows partly or wholly -inf (masks), rows offset by 1000.
//
// Tolerances:
//   relu forward/backward: exact in every dtype (a selection);
//   add, dropout: f32 exact (the same f32 operation; dropout's mask bits are the CPU's), f16/bf16 the
//     dtype's default (one rounding); dropout's zeros are compared exactly in every dtype;
//   gelu (both forms, forward/backward): f32 rtol 1e-5, atol 2e-6 (CUDA's erff/tanhf/expf and the host's
//     differ by up to 2 ulp; 1 + erf(x / sqrt 2) near x = -4 turns that into ~5e-7 absolute), else default;
//   softmax forward/backward: f32 rtol 1e-5, atol 1e-6 (expf within 2 ulp, another summation order; the
//     forward rescales an online sum), else the default.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "cuda_oracle.h"
#include "hpdt/kernels/activation.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
using kernels::GeluForm;
using test::Tolerance;

const int64_t kSizes[] = {1, 3, 7, 8, 17, 4099, 1000003, 8 * 197 * 3072};

Tolerance exact() { return {0, 0}; }
Tolerance f32_or_default(DType dt, Tolerance f32) { return dt == DType::f32 ? f32 : test::default_tolerance(dt); }

using Unary = std::function<void(const Tensor& x, Tensor& y, const Stream& s)>;
using Binary = std::function<void(const Tensor& a, const Tensor& b, Tensor& y, const Stream& s)>;

class ActivationCuda : public test::CudaOracleTest {
 protected:
  // A GPU copy of `host` as `dt`; misaligned: one element past a 16-byte boundary.
  Tensor gpu(const Tensor& host, DType dt, bool misaligned) {
    if (!misaligned) return to_gpu(host, dt);
    Tensor big = Tensor::empty({host.numel() + 8}, dt, Device::cuda(0), AllocOptions{.stream = &stream});
    Tensor v = big.flat(1, host.numel()).view(host.shape());
    Tensor narrow = Tensor::empty(host.shape(), dt);
    kernels::cpu::cast(host, narrow);
    copy(narrow, v, stream);
    stream.synchronize();
    return v;
  }
  Tensor poison(const Shape& s, DType dt, bool misaligned) {
    if (!misaligned) return poisoned(s, dt);
    return poisoned({s.numel() + 8}, dt).flat(1, s.numel()).view(s);
  }

  void unary(const std::string& name, const Unary& op, float lo, float hi, Tolerance f32_tol) {
    for (DType dt : test::kCudaTestDtypes)
      for (int64_t n : kSizes)
        for (bool mis : {false, true}) {
          if (mis && n > 5000) continue;
          SCOPED_TRACE(name + " " + std::string(dtype_name(dt)) + " n=" + std::to_string(n) +
                       (mis ? " misaligned" : ""));
          const Tensor x = random({n}, lo, hi);
          Tensor y = Tensor::empty({n}, DType::f32), yg = poison({n}, dt, mis);
          op(round_through(x, dt), y, cpu);
          op(gpu(x, dt, mis), yg, stream);
          ASSERT_TRUE(close(y, to_cpu_f32(yg), f32_or_default(dt, f32_tol)));
        }
  }
  void binary(const std::string& name, const Binary& op, float lo, float hi, Tolerance f32_tol,
              Tolerance dt_tol = {-1, -1}) {
    for (DType dt : test::kCudaTestDtypes)
      for (int64_t n : kSizes)
        for (bool mis : {false, true}) {
          if (mis && n > 5000) continue;
          SCOPED_TRACE(name + " " + std::string(dtype_name(dt)) + " n=" + std::to_string(n) +
                       (mis ? " misaligned" : ""));
          const Tensor a = random({n}, lo, hi), b = random({n});
          Tensor y = Tensor::empty({n}, DType::f32), yg = poison({n}, dt, mis);
          op(round_through(a, dt), round_through(b, dt), y, cpu);
          op(gpu(a, dt, false), gpu(b, dt, mis), yg, stream);
          const Tolerance t = dt == DType::f32 ? f32_tol : dt_tol.rtol >= 0 ? dt_tol : test::default_tolerance(dt);
          ASSERT_TRUE(close(y, to_cpu_f32(yg), t));
        }
  }
};

TEST_F(ActivationCuda, Relu) {
  unary(
      "relu_forward", [](const Tensor& x, Tensor& y, const Stream& s) { kernels::relu_forward(x, y, s); }, -1, 1,
      exact());
  binary(
      "relu_backward",
      [](const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& s) { kernels::relu_backward(y, dy, dx, s); }, -1,
      1, exact(), exact());
}

TEST_F(ActivationCuda, Add) {
  binary(
      "add", [](const Tensor& a, const Tensor& b, Tensor& y, const Stream& s) { kernels::add(a, b, y, s); }, -1, 1,
      exact());
}

TEST_F(ActivationCuda, Gelu) {
  for (GeluForm form : {GeluForm::erf, GeluForm::tanh}) {
    const std::string f = form == GeluForm::erf ? " erf" : " tanh";
    unary("gelu_forward" + f,
          [form](const Tensor& x, Tensor& y, const Stream& s) { kernels::gelu_forward(x, form, y, s); }, -4, 4,
          {1e-5, 2e-6});
    binary("gelu_backward" + f,
           [form](const Tensor& x, const Tensor& dy, Tensor& dx, const Stream& s) {
             kernels::gelu_backward(x, dy, form, dx, s);
           },
           -4, 4, {1e-5, 2e-6});
  }
}

TEST_F(ActivationCuda, InPlace) {
  for (DType dt : test::kCudaTestDtypes) {
    const int64_t n = 4099;
    const Tensor a = random({n}), b = random({n});
    // relu_backward with dx = dy
    Tensor dx = Tensor::empty({n}, DType::f32);
    kernels::relu_backward(round_through(a, dt), round_through(b, dt), dx, cpu);
    Tensor ag = to_gpu(a, dt), bg = to_gpu(b, dt);
    kernels::relu_backward(ag, bg, bg, stream);
    EXPECT_TRUE(close(dx, to_cpu_f32(bg), exact())) << "relu_backward in place " << dtype_name(dt);
    // add with y = a
    Tensor y = Tensor::empty({n}, DType::f32);
    kernels::add(round_through(a, dt), round_through(b, dt), y, cpu);
    Tensor ag2 = to_gpu(a, dt), bg2 = to_gpu(b, dt);
    kernels::add(ag2, bg2, ag2, stream);
    EXPECT_TRUE(close(y, to_cpu_f32(ag2), f32_or_default(dt, exact()))) << "add in place " << dtype_name(dt);
  }
}

TEST_F(ActivationCuda, DropoutSameMaskAsCpu) {
  for (DType dt : test::kCudaTestDtypes)
    for (float p : {0.0f, 0.1f, 0.5f})
      for (int64_t n : kSizes)
        for (bool mis : {false, true}) {
          if (mis && n > 5000) continue;
          SCOPED_TRACE(std::string(dtype_name(dt)) + " p=" + std::to_string(p) + " n=" + std::to_string(n) +
                       (mis ? " misaligned" : ""));
          const uint64_t sid = 3 + uint64_t(n);
          const Tensor x = random({n}), dy = random({n});
          Tensor y = Tensor::empty({n}, DType::f32), dx = Tensor::empty({n}, DType::f32);
          kernels::dropout_forward(round_through(x, dt), p, seed, sid, y, cpu);
          kernels::dropout_backward(round_through(dy, dt), p, seed, sid, dx, cpu);
          Tensor yg = poison({n}, dt, mis), dxg = poison({n}, dt, mis);
          kernels::dropout_forward(gpu(x, dt, mis), p, seed, sid, yg, stream);
          kernels::dropout_backward(gpu(dy, dt, mis), p, seed, sid, dxg, stream);
          const Tensor yc = to_cpu_f32(yg), dxc = to_cpu_f32(dxg);
          ASSERT_TRUE(close(y, yc, f32_or_default(dt, exact()))) << "forward";
          ASSERT_TRUE(close(dx, dxc, f32_or_default(dt, exact()))) << "backward";
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(y.data<float>()[i] == 0.0f, yc.data<float>()[i] == 0.0f) << "mask differs at " << i;
        }
  // an offset into a larger tensor's mask (the layers pass a rank's first element): multiples of 4 take
  // the vector path, others the scalar one
  for (DType dt : test::kCudaTestDtypes)
    for (uint64_t first : {uint64_t(4), uint64_t(7), uint64_t(3264) * 5, uint64_t(1) << 33}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " first=" + std::to_string(first));
      const int64_t n = 1029;
      const Tensor x = random({n});
      Tensor y = Tensor::empty({n}, DType::f32);
      kernels::dropout_forward(round_through(x, dt), 0.3f, seed, 11, y, cpu, first);
      Tensor yg = poison({n}, dt, false);
      kernels::dropout_forward(gpu(x, dt, false), 0.3f, seed, 11, yg, stream, first);
      ASSERT_TRUE(close(y, to_cpu_f32(yg), f32_or_default(dt, exact()))) << "forward with an offset";
      Tensor dxg = poison({n}, dt, false);
      kernels::dropout_backward(gpu(x, dt, false), 0.3f, seed, 11, dxg, stream, first);
      ASSERT_TRUE(close(y, to_cpu_f32(dxg), f32_or_default(dt, exact()))) << "backward with an offset";
    }
  // in place, as the layers may call it
  const int64_t n = 1000003;
  const Tensor x = random({n});
  Tensor y = Tensor::empty({n}, DType::f32);
  kernels::dropout_forward(x, 0.25f, seed, 7, y, cpu);
  Tensor xg = to_gpu(x);
  kernels::dropout_forward(xg, 0.25f, seed, 7, xg, stream);
  EXPECT_TRUE(close(y, to_cpu_f32(xg), exact())) << "in place";
}

// ---- softmax -----------------------------------------------------------------------------------------

struct SoftmaxCase {
  Shape shape;
  float offset = 0;     // added to every input
  bool masked = false;  // about a third of the inputs -inf, and one whole row
};

const SoftmaxCase kSoftmaxCases[] = {{{1, 1}},
                                     {{3, 5}},
                                     {{17, 10}},
                                     {{3, 8}},
                                     {{2, 3, 197, 197}},
                                     {{64, 1000}},
                                     {{4, 1024}},
                                     {{4, 1025}},
                                     {{5, 5000}},
                                     {{2, 16384}},
                                     {{17, 10}, 1000},
                                     {{5, 5000}, 1000},
                                     {{6, 197}, 0, true},
                                     {{3, 2048}, 0, true}};

TEST_F(ActivationCuda, Softmax) {
  for (DType dt : test::kCudaTestDtypes)
    for (const SoftmaxCase& c : kSoftmaxCases)
      for (bool mis : {false, true}) {
        if (mis && c.shape.numel() > 100000) continue;
        SCOPED_TRACE(c.shape.str() + " " + std::string(dtype_name(dt)) + (c.offset != 0 ? " offset" : "") +
                     (c.masked ? " masked" : "") + (mis ? " misaligned" : ""));
        Tensor x = random(c.shape, -3 + c.offset, 3 + c.offset);
        if (c.masked) {
          float* p = x.data<float>();
          const int64_t d = c.shape[-1];
          for (int64_t i = 0; i < x.numel(); ++i)
            if (i % 3 == 1 || i / d == 1) p[i] = -std::numeric_limits<float>::infinity();
        }
        const Tensor dy = random(c.shape);
        Tensor y = Tensor::empty(c.shape, DType::f32);
        kernels::softmax_forward(round_through(x, dt), y, cpu);
        Tensor yg = poison(c.shape, dt, mis);
        kernels::softmax_forward(gpu(x, dt, mis), yg, stream);
        const Tolerance tol = f32_or_default(dt, {1e-5, 1e-6});
        EXPECT_TRUE(close(y, to_cpu_f32(yg), tol)) << "forward";
        // backward from the oracle's output stored as dt
        const Tensor yr = round_through(y, dt);
        Tensor dx = Tensor::empty(c.shape, DType::f32);
        kernels::softmax_backward(yr, round_through(dy, dt), dx, cpu);
        Tensor dxg = poison(c.shape, dt, mis);
        kernels::softmax_backward(gpu(yr, dt, mis), gpu(dy, dt, mis), dxg, stream);
        EXPECT_TRUE(close(dx, to_cpu_f32(dxg), tol)) << "backward";
        // backward in place (dx = dy)
        Tensor dyg = gpu(dy, dt, mis);
        kernels::softmax_backward(gpu(yr, dt, mis), dyg, dyg, stream);
        EXPECT_TRUE(close(dx, to_cpu_f32(dyg), tol)) << "backward in place";
      }
}

TEST_F(ActivationCuda, SoftmaxIsDeterministic) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : {Shape{4096, 197}, Shape{64, 5000}}) {
      const Tensor x = to_gpu(random(s, -5, 5), dt), dy = to_gpu(random(s), dt);
      Tensor y1 = poisoned(s, dt), y2 = poisoned(s, dt), d1 = poisoned(s, dt), d2 = poisoned(s, dt);
      kernels::softmax_forward(x, y1, stream);
      kernels::softmax_forward(x, y2, stream);
      kernels::softmax_backward(y1, dy, d1, stream);
      kernels::softmax_backward(y1, dy, d2, stream);
      EXPECT_TRUE(close(to_cpu_f32(y1), to_cpu_f32(y2), exact())) << s.str() << " " << dtype_name(dt);
      EXPECT_TRUE(close(to_cpu_f32(d1), to_cpu_f32(d2), exact())) << s.str() << " " << dtype_name(dt);
    }
}

TEST_F(ActivationCuda, BadInputsNameTheOp) {
  const Device dev = Device::cuda(0);
  const AllocOptions o{.stream = &stream};
  Tensor a = Tensor::zeros({4, 5}, DType::bf16, dev, o), b = Tensor::zeros({4, 5}, DType::f32, dev, o);
  Tensor c = Tensor::zeros({5, 4}, DType::bf16, dev, o), y = Tensor::zeros({4, 5}, DType::bf16, dev, o);
  HPDT_EXPECT_THROW_MSG(kernels::add(a, b, y, stream), "add: tensor");
  HPDT_EXPECT_THROW_MSG(kernels::add(a, c, y, stream), "add: operands [4, 5] and [5, 4] differ");
  HPDT_EXPECT_THROW_MSG(kernels::relu_forward(a, c, stream), "relu_forward: output has shape [5, 4], expected [4, 5]");
  HPDT_EXPECT_THROW_MSG(kernels::dropout_forward(a, 1.0f, 1, 0, y, stream), "dropout: probability 1 is not in [0, 1)");
  HPDT_EXPECT_THROW_MSG(kernels::softmax_forward(a, b, stream), "softmax_forward: tensor");
  Tensor h = Tensor::zeros({4, 5}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::gelu_forward(h, GeluForm::erf, b, stream), "different devices");
}

}  // namespace
