// Every CPU layer kernel: forward against a plain reference where one is short to write, and input and
// parameter gradients against central finite differences, all in double precision. The loss is
// L = sum(y * r) for a fixed random r, so dL/dy = r.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "grad_check.h"
#include "hpdt/kernels/cpu/activation.h"
#include "hpdt/kernels/cpu/attention.h"
#include "hpdt/kernels/cpu/conv.h"
#include "hpdt/kernels/cpu/embed.h"
#include "hpdt/kernels/cpu/gemm.h"
#include "hpdt/kernels/cpu/linear.h"
#include "hpdt/kernels/cpu/loss.h"
#include "hpdt/kernels/cpu/norm.h"
#include "hpdt/kernels/cpu/pool.h"

namespace {

using namespace hpdt;
using namespace hpdt::kernels;
using hpdt::test::dot;
using hpdt::test::expect_gradient;
using hpdt::test::random_vector;
using V = std::vector<double>;

// ---- conv2d ----------------------------------------------------------------------------------------

V naive_conv(const Conv2dShape& s, const V& x, const V& w, const V& b) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  V y(static_cast<size_t>(s.n * s.c_out * oh * ow), 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t co = 0; co < s.c_out; ++co)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = b.empty() ? 0.0 : b[size_t(co)];
          for (int64_t ci = 0; ci < s.c_in; ++ci)
            for (int64_t ky = 0; ky < s.kh; ++ky)
              for (int64_t kx = 0; kx < s.kw; ++kx) {
                const int64_t iy = oy * s.stride - s.pad + ky, ix = ox * s.stride - s.pad + kx;
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                acc += x[size_t(((n * s.c_in + ci) * s.h + iy) * s.w + ix)] *
                       w[size_t(((co * s.c_in + ci) * s.kh + ky) * s.kw + kx)];
              }
          y[size_t(((n * s.c_out + co) * oh + oy) * ow + ox)] = acc;
        }
  return y;
}

class Conv2dGrad : public ::testing::TestWithParam<Conv2dShape> {};

TEST_P(Conv2dGrad, ForwardMatchesNaiveAndGradientsMatchFiniteDifferences) {
  const Conv2dShape s = GetParam();
  V x = random_vector(static_cast<size_t>(s.n * s.c_in * s.h * s.w), 1);
  V w = random_vector(static_cast<size_t>(s.c_out * s.c_in * s.kh * s.kw), 2);
  V b = random_vector(static_cast<size_t>(s.c_out), 3);
  const size_t ysize = size_t(s.n * s.c_out * s.out_h() * s.out_w());
  const V r = random_vector(ysize, 4);
  V y(ysize);
  cpu::conv2d_forward<double>(s, x.data(), w.data(), b.data(), y.data());
  const V ref = naive_conv(s, x, w, b);
  for (size_t i = 0; i < ysize; ++i) ASSERT_NEAR(y[i], ref[i], 1e-12) << s.str() << " at " << i;

  // float path (our SGEMM) against the double result
  std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end()), yf(ysize);
  cpu::conv2d_forward<float>(s, xf.data(), wf.data(), bf.data(), yf.data());
  for (size_t i = 0; i < ysize; ++i) ASSERT_NEAR(yf[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << s.str();

  V dx(x.size()), dw(w.size(), 0.0), db(b.size(), 0.0);
  cpu::conv2d_backward_data<double>(s, r.data(), w.data(), dx.data());
  cpu::conv2d_backward_filter<double>(s, x.data(), r.data(), dw.data(), db.data(), false);
  auto loss = [&] {
    V out(ysize);
    cpu::conv2d_forward<double>(s, x.data(), w.data(), b.data(), out.data());
    return dot(out, r);
  };
  expect_gradient("conv dx " + s.str(), x, dx, loss);
  expect_gradient("conv dw " + s.str(), w, dw, loss);
  expect_gradient("conv db " + s.str(), b, db, loss);

  // accumulate adds to what is there
  V dw2(w.size(), 1.0), db2(b.size(), 1.0);
  cpu::conv2d_backward_filter<double>(s, x.data(), r.data(), dw2.data(), db2.data(), true);
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(dw2[i], dw[i] + 1.0, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Conv2dGrad,
                         ::testing::Values(Conv2dShape{2, 3, 7, 6, 4, 3, 3, 1, 1},   // 3x3 same
                                           Conv2dShape{2, 3, 7, 7, 4, 3, 3, 2, 1},   // 3x3 stride 2
                                           Conv2dShape{3, 5, 4, 4, 6, 1, 1, 1, 0},   // 1x1 direct
                                           Conv2dShape{2, 4, 6, 6, 3, 1, 1, 2, 0},   // 1x1 stride 2 shortcut
                                           Conv2dShape{1, 2, 11, 11, 3, 7, 7, 2, 3}, // 7x7 stem
                                           Conv2dShape{2, 2, 8, 8, 5, 4, 4, 4, 0}),  // ViT patch conv
                         [](const ::testing::TestParamInfo<Conv2dShape>& p) { return "case" + std::to_string(p.index); });

// ---- gemm (float fast path) ------------------------------------------------------------------------

TEST(Gemm, FloatMatchesDoubleForAllTransposesEdgesAndBetas) {
  // 100 and 700 rows: column-chunk and row-block task splits; 700: B packed (tall product), 2 K blocks
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {17, 33, 9}, {64, 64, 64}, {100, 37, 300}, {13, 300, 260}, {700, 70, 300}};
  for (const auto& mnk : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (double beta : {0.0, 1.0, 0.5}) {
          const int64_t M = mnk[0], N = mnk[1], K = mnk[2], ldc = N + 3;
          const V a = random_vector(size_t(M * K), 10), b = random_vector(size_t(K * N), 11);
          V c = random_vector(static_cast<size_t>(M * ldc), 12);
          std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(c.begin(), c.end());
          const int64_t lda = ta ? M : K, ldb = tb ? K : N;
          cpu::gemm<double>(ta, tb, M, N, K, 1.5, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
          cpu::gemm<float>(ta, tb, M, N, K, 1.5f, af.data(), lda, bf.data(), ldb, float(beta), cf.data(), ldc);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < ldc; ++j)
              ASSERT_NEAR(cf[size_t(i * ldc + j)], c[size_t(i * ldc + j)], 2e-5 * std::sqrt(double(K)) * 4)
                  << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb << " beta " << beta;
          // reference double gemm against a plain triple loop
          if (beta == 0.0) {
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k)
                  s += (ta ? a[size_t(k * M + i)] : a[size_t(i * K + k)]) * (tb ? b[size_t(j * K + k)] : b[size_t(k * N + j)]);
                ASSERT_NEAR(c[size_t(i * ldc + j)], 1.5 * s, 1e-10);
              }
          }
        }
}

TEST(Gemm, BetaZeroIgnoresNaNInOutput) {
  std::vector<float> a(6 * 4, 1.0f), b(4 * 40, 1.0f), c(6 * 40, std::nanf(""));
  cpu::gemm<float>(false, false, 6, 40, 4, 1.0f, a.data(), 4, b.data(), 40, 0.0f, c.data(), 40);
  for (float v : c) ASSERT_EQ(v, 4.0f);
}

// ---- batch norm ------------------------------------------------------------------------------------

struct BnRun {
  int64_t n, c, hw;
  V mean, invstd;
  V forward(const V& x, const V& g, const V& b) {
    V sum(static_cast<size_t>(c)), sumsq(static_cast<size_t>(c));
    mean.assign(size_t(c), 0);
    invstd.assign(size_t(c), 0);
    cpu::batchnorm_stats<double>(n, c, hw, x.data(), sum.data(), sumsq.data());
    cpu::batchnorm_finalize<double>(c, double(n * hw), sum.data(), sumsq.data(), 1e-5, 0.1, mean.data(),
                                    invstd.data(), nullptr, nullptr);
    V y(x.size());
    cpu::batchnorm_apply<double>(n, c, hw, x.data(), mean.data(), invstd.data(), g.data(), b.data(), y.data());
    return y;
  }
};

TEST(BatchNorm, TrainGradientsMatchFiniteDifferences) {
  BnRun bn{3, 4, 5, {}, {}};
  V x = random_vector(static_cast<size_t>(bn.n * bn.c * bn.hw), 20, -2, 3);
  V g = random_vector(static_cast<size_t>(bn.c), 21, 0.5, 1.5), b = random_vector(static_cast<size_t>(bn.c), 22);
  const V r = random_vector(x.size(), 23);
  const V y = bn.forward(x, g, b);
  // normalised output has zero mean and unit (biased) variance per channel before the affine part
  for (int64_t ch = 0; ch < bn.c; ++ch) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < bn.n; ++i)
      for (int64_t j = 0; j < bn.hw; ++j) {
        const double v = (y[size_t((i * bn.c + ch) * bn.hw + j)] - b[size_t(ch)]) / g[size_t(ch)];
        s += v;
        s2 += v * v;
      }
    EXPECT_NEAR(s / double(bn.n * bn.hw), 0.0, 1e-12);
    EXPECT_NEAR(s2 / double(bn.n * bn.hw), 1.0, 1e-4);  // eps = 1e-5 shifts it slightly
  }
  V sdy(static_cast<size_t>(bn.c)), sdyx(static_cast<size_t>(bn.c)), dx(x.size());
  cpu::batchnorm_backward_reduce<double>(bn.n, bn.c, bn.hw, r.data(), x.data(), bn.mean.data(), bn.invstd.data(),
                                         sdy.data(), sdyx.data());
  cpu::batchnorm_backward_apply<double>(bn.n, bn.c, bn.hw, r.data(), x.data(), bn.mean.data(), bn.invstd.data(),
                                        g.data(), sdy.data(), sdyx.data(), double(bn.n * bn.hw), dx.data());
  auto loss = [&] { BnRun t{bn.n, bn.c, bn.hw, {}, {}}; return dot(t.forward(x, g, b), r); };
  expect_gradient("bn dx", x, dx, loss);
  expect_gradient("bn dgamma", g, sdyx, loss);
  expect_gradient("bn dbeta", b, sdy, loss);
}

TEST(BatchNorm, RunningStatsFollowPyTorchMomentumAndUnbiasedVariance) {
  const V x = {1, 2, 3, 4, 10, 20, 30, 40};  // n=2, c=2, hw=2: channel 0 = {1,2,10,20}? no: planes
  V sum(2), sumsq(2), mean(2), invstd(2), rm = {0, 0}, rv = {1, 1};
  cpu::batchnorm_stats<double>(2, 2, 2, x.data(), sum.data(), sumsq.data());
  cpu::batchnorm_finalize<double>(2, 4, sum.data(), sumsq.data(), 1e-5, 0.1, mean.data(), invstd.data(), rm.data(),
                                  rv.data());
  // channel 0 holds x[0..1] and x[4..5] = {1, 2, 10, 20}
  const double m0 = 33.0 / 4, var0 = ((1 - m0) * (1 - m0) + (2 - m0) * (2 - m0) + (10 - m0) * (10 - m0) + (20 - m0) * (20 - m0)) / 4;
  EXPECT_NEAR(mean[0], m0, 1e-12);
  EXPECT_NEAR(invstd[0], 1 / std::sqrt(var0 + 1e-5), 1e-12);
  EXPECT_NEAR(rm[0], 0.1 * m0, 1e-12);
  EXPECT_NEAR(rv[0], 0.9 + 0.1 * var0 * 4 / 3, 1e-12);
}

// ---- layer norm ------------------------------------------------------------------------------------

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  const int64_t rows = 5, d = 7;
  V x = random_vector(static_cast<size_t>(rows * d), 30, -2, 2), g = random_vector(static_cast<size_t>(d), 31), b = random_vector(static_cast<size_t>(d), 32);
  const V r = random_vector(x.size(), 33);
  auto fwd = [&](V& mean, V& rstd) {
    V y(x.size());
    mean.resize(size_t(rows));
    rstd.resize(size_t(rows));
    cpu::layernorm_forward<double>(rows, d, x.data(), g.data(), b.data(), 1e-5, y.data(), mean.data(), rstd.data());
    return y;
  };
  V mean, rstd;
  fwd(mean, rstd);
  V dx(x.size()), dg(g.size(), 0.0), db(b.size(), 0.0);
  cpu::layernorm_backward<double>(rows, d, r.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), dg.data(),
                                  db.data());
  auto loss = [&] { V m, s; return dot(fwd(m, s), r); };
  expect_gradient("ln dx", x, dx, loss);
  expect_gradient("ln dgamma", g, dg, loss);
  expect_gradient("ln dbeta", b, db, loss);
}

// ---- pointwise -------------------------------------------------------------------------------------

TEST(Activations, ReluGeluSoftmaxGradientsMatchFiniteDifferences) {
  const int64_t n = 60;
  V x = random_vector(static_cast<size_t>(n), 40, -3, 3);
  for (auto& v : x)
    if (std::abs(v) < 0.05) v += 0.1;  // keep away from the ReLU kink
  const V r = random_vector(size_t(n), 41);
  {
    V y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
    cpu::relu_forward<double>(n, x.data(), y.data());
    cpu::relu_backward<double>(n, y.data(), r.data(), dx.data());
    expect_gradient("relu", x, dx, [&] { V t(static_cast<size_t>(n)); cpu::relu_forward<double>(n, x.data(), t.data()); return dot(t, r); });
  }
  for (GeluForm form : {GeluForm::erf, GeluForm::tanh}) {
    V dx(static_cast<size_t>(n));
    cpu::gelu_backward<double>(n, form, x.data(), r.data(), dx.data());
    expect_gradient(form == GeluForm::erf ? "gelu erf" : "gelu tanh", x, dx,
                    [&] { V t(static_cast<size_t>(n)); cpu::gelu_forward<double>(n, form, x.data(), t.data()); return dot(t, r); });
  }
  V ge(1), gt(1);
  const double one = 1.0;
  cpu::gelu_forward<double>(1, GeluForm::erf, &one, ge.data());
  cpu::gelu_forward<double>(1, GeluForm::tanh, &one, gt.data());
  EXPECT_NEAR(ge[0], 0.8413447460685429, 1e-12);  // x * Phi(x) at 1
  EXPECT_NEAR(gt[0], 0.8411919906082768, 1e-12);  // PyTorch approximate='tanh' at 1
  {
    const int64_t rows = 6, d = 10;
    V y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
    cpu::softmax_forward<double>(rows, d, x.data(), y.data());
    for (int64_t i = 0; i < rows; ++i) {
      double s = 0;
      for (int64_t j = 0; j < d; ++j) s += y[size_t(i * d + j)];
      EXPECT_NEAR(s, 1.0, 1e-14);
    }
    cpu::softmax_backward<double>(rows, d, y.data(), r.data(), dx.data());
    expect_gradient("softmax", x, dx,
                    [&] { V t(static_cast<size_t>(n)); cpu::softmax_forward<double>(rows, d, x.data(), t.data()); return dot(t, r); });
    // numerically safe: huge logits do not overflow
    V big = {1000.0, 1001.0}, out(2);
    cpu::softmax_forward<double>(1, 2, big.data(), out.data());
    EXPECT_NEAR(out[1], 1 / (1 + std::exp(-1.0)), 1e-14);
  }
}

TEST(Dropout, SeededMaskRateScaleAndGradient) {
  const int64_t n = 20000;
  V x(static_cast<size_t>(n), 1.0), y(static_cast<size_t>(n));
  cpu::dropout_forward<double>(n, 0.25f, 7, 3, x.data(), y.data());
  int64_t dropped = 0;
  for (double v : y) {
    if (v == 0.0) ++dropped;
    else ASSERT_NEAR(v, 1.0 / 0.75, 1e-15);
  }
  EXPECT_NEAR(double(dropped) / double(n), 0.25, 0.015);
  V y2(static_cast<size_t>(n));
  cpu::dropout_forward<double>(n, 0.25f, 7, 3, x.data(), y2.data());
  EXPECT_EQ(y, y2);  // same seed, same mask
  cpu::dropout_forward<double>(n, 0.25f, 8, 3, x.data(), y2.data());
  EXPECT_NE(y, y2);
  V xs = random_vector(50, 42), r = random_vector(50, 43), dx(50);
  cpu::dropout_backward<double>(50, 0.5f, 1, 0, r.data(), dx.data());
  expect_gradient("dropout", xs, dx, [&] { V t(50); cpu::dropout_forward<double>(50, 0.5f, 1, 0, xs.data(), t.data()); return dot(t, r); });
  cpu::dropout_forward<double>(50, 0.0f, 1, 0, xs.data(), dx.data());
  EXPECT_EQ(dx, xs);  // p = 0: identity
  // A tensor cut in pieces, each given its first element's index, gets the whole tensor's mask.
  for (int64_t cut : {int64_t(1), int64_t(4), int64_t(7777)}) {
    V pieces(static_cast<size_t>(n));
    cpu::dropout_forward<double>(cut, 0.25f, 7, 3, x.data(), pieces.data(), 0);
    cpu::dropout_forward<double>(n - cut, 0.25f, 7, 3, x.data() + cut, pieces.data() + cut, uint64_t(cut));
    EXPECT_EQ(pieces, y) << "cut at " << cut;
    cpu::dropout_forward<double>(n - cut, 0.25f, 7, 3, x.data() + cut, pieces.data() + cut, 0);
    EXPECT_NE(pieces, y) << "cut at " << cut << " without the offset: other masks";
  }
}

// ---- pooling ---------------------------------------------------------------------------------------

TEST(Pool, MaxPoolAndGlobalAvgPoolGradients) {
  const int64_t n = 2, c = 3, h = 7, w = 6, k = 3, s = 2, p = 1;
  const int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
  V x(static_cast<size_t>(n * c * h * w));
  // distinct values (no ties), shuffled deterministically
  for (size_t i = 0; i < x.size(); ++i) x[i] = double((i * 37) % x.size()) * 0.01 - 1.0;
  const V r = random_vector(size_t(n * c * oh * ow), 50);
  V y(r.size()), dx(x.size());
  std::vector<int32_t> am(r.size());
  cpu::maxpool2d_forward<double>(n, c, h, w, k, s, p, x.data(), y.data(), am.data());
  cpu::maxpool2d_backward<double>(n, c, h, w, oh, ow, r.data(), am.data(), dx.data());
  expect_gradient("maxpool", x, dx, [&] {
    V t(r.size());
    std::vector<int32_t> a(r.size());
    cpu::maxpool2d_forward<double>(n, c, h, w, k, s, p, x.data(), t.data(), a.data());
    return dot(t, r);
  }, 1e-6, 1e-8, 64, 1e-4);
  const V rg = random_vector(size_t(n * c), 51);
  V dg(x.size());
  cpu::global_avgpool_backward<double>(n, c, h * w, rg.data(), dg.data());
  expect_gradient("gap", x, dg, [&] { V t(static_cast<size_t>(n * c)); cpu::global_avgpool_forward<double>(n, c, h * w, x.data(), t.data()); return dot(t, rg); });
}

// ---- linear, attention, tokens, loss ---------------------------------------------------------------

TEST(Linear, GradientsMatchFiniteDifferences) {
  const int64_t rows = 5, in = 7, out = 4;
  V x = random_vector(static_cast<size_t>(rows * in), 60), w = random_vector(static_cast<size_t>(out * in), 61), b = random_vector(static_cast<size_t>(out), 62);
  const V r = random_vector(size_t(rows * out), 63);
  V dx(x.size()), dw(w.size(), 0.0), db(b.size(), 0.0);
  cpu::linear_backward<double>(rows, in, out, r.data(), x.data(), w.data(), dx.data(), dw.data(), db.data());
  auto loss = [&] { V y(r.size()); cpu::linear_forward<double>(rows, in, out, x.data(), w.data(), b.data(), y.data()); return dot(y, r); };
  expect_gradient("linear dx", x, dx, loss);
  expect_gradient("linear dw", w, dw, loss);
  expect_gradient("linear db", b, db, loss);
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  const int64_t b = 2, t = 5, heads = 2, dh = 3, d = heads * dh;
  V qkv = random_vector(static_cast<size_t>(b * t * 3 * d), 70, -1.5, 1.5);
  const V r = random_vector(size_t(b * t * d), 71);
  V probs(static_cast<size_t>(b * heads * t * t)), out(r.size()), dqkv(qkv.size());
  cpu::attention_forward<double>(b, t, heads, dh, qkv.data(), probs.data(), out.data());
  // reference for one (batch 1, head 1, query 2) output
  {
    const int64_t bi = 1, h = 1, i = 2;
    V s(static_cast<size_t>(t));
    double mx = -1e300;
    for (int64_t j = 0; j < t; ++j) {
      double acc = 0;
      for (int64_t e = 0; e < dh; ++e)
        acc += qkv[size_t((bi * t + i) * 3 * d + h * dh + e)] * qkv[size_t((bi * t + j) * 3 * d + d + h * dh + e)];
      s[size_t(j)] = acc / std::sqrt(double(dh));
      mx = std::max(mx, s[size_t(j)]);
    }
    double z = 0;
    for (auto& v : s) z += (v = std::exp(v - mx));
    for (int64_t e = 0; e < dh; ++e) {
      double o = 0;
      for (int64_t j = 0; j < t; ++j) o += s[size_t(j)] / z * qkv[size_t((bi * t + j) * 3 * d + 2 * d + h * dh + e)];
      EXPECT_NEAR(out[size_t((bi * t + i) * d + h * dh + e)], o, 1e-12);
    }
  }
  cpu::attention_backward<double>(b, t, heads, dh, qkv.data(), probs.data(), r.data(), dqkv.data());
  expect_gradient("attention dqkv", qkv, dqkv, [&] {
    V p(probs.size()), o(r.size());
    cpu::attention_forward<double>(b, t, heads, dh, qkv.data(), p.data(), o.data());
    return dot(o, r);
  }, 1e-6, 1e-8, 200);
}

TEST(Tokens, ClassTokenPositionEmbeddingAndSelectGradients) {
  const int64_t b = 2, d = 3, p = 4;
  V x = random_vector(static_cast<size_t>(b * d * p), 80), cls = random_vector(static_cast<size_t>(d), 81), pos = random_vector(static_cast<size_t>((p + 1) * d), 82);
  const V r = random_vector(size_t(b * (p + 1) * d), 83);
  V dx(x.size()), dcls(cls.size(), 0.0), dpos(pos.size(), 0.0);
  cpu::tokens_backward<double>(b, d, p, r.data(), dx.data(), dcls.data(), dpos.data());
  auto loss = [&] { V y(r.size()); cpu::tokens_forward<double>(b, d, p, x.data(), cls.data(), pos.data(), y.data()); return dot(y, r); };
  expect_gradient("tokens dx", x, dx, loss);
  expect_gradient("tokens dcls", cls, dcls, loss);
  expect_gradient("tokens dpos", pos, dpos, loss);
  V seq = random_vector(static_cast<size_t>(b * (p + 1) * d), 84), rs = random_vector(static_cast<size_t>(b * d), 85), dseq(seq.size());
  cpu::cls_select_backward<double>(b, p + 1, d, rs.data(), dseq.data());
  expect_gradient("cls select", seq, dseq, [&] { V y(rs.size()); cpu::cls_select_forward<double>(b, p + 1, d, seq.data(), y.data()); return dot(y, rs); });
}

TEST(Loss, CrossEntropyWithLabelSmoothing) {
  const int64_t b = 4, c = 5;
  V z = random_vector(static_cast<size_t>(b * c), 90, -3, 3);
  const std::vector<int32_t> labels = {0, 4, 2, 2};
  for (double eps : {0.0, 0.1}) {
    V dz(z.size());
    const double l = cpu::softmax_cross_entropy<double>(b, c, z.data(), labels.data(), eps, dz.data(), 1.0);
    // reference
    double ref = 0;
    for (int64_t i = 0; i < b; ++i) {
      double mx = -1e300, s = 0;
      for (int64_t j = 0; j < c; ++j) mx = std::max(mx, z[size_t(i * c + j)]);
      for (int64_t j = 0; j < c; ++j) s += std::exp(z[size_t(i * c + j)] - mx);
      for (int64_t j = 0; j < c; ++j) {
        const double logp = z[size_t(i * c + j)] - mx - std::log(s);
        ref -= ((j == labels[size_t(i)] ? 1 - eps : 0) + eps / double(c)) * logp;
      }
    }
    EXPECT_NEAR(l, ref / double(b), 1e-12);
    expect_gradient("cross entropy", z, dz, [&] { return cpu::softmax_cross_entropy<double>(b, c, z.data(), labels.data(), eps, nullptr, 1.0); });
  }
  const std::vector<int32_t> bad = {0, 5, 1, 1};
  V dz(z.size());
  EXPECT_THROW(cpu::softmax_cross_entropy<double>(b, c, z.data(), bad.data(), 0.0, dz.data(), 1.0), std::exception);
}

}  // namespace
