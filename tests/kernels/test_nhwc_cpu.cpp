// The NHWC ("channels last") CPU path against its oracle, the NCHW ops: direct convolution (forward,
// backward-data, backward-filter, with and without bias, every stride phase), batch norm (train, eval,
// backward, SyncBN seam), max pool, global average pool and the layout transposes. Inputs are fresh
// random numbers (never zeros), outputs are NaN-poisoned before each call, and the shapes include odd
// channel counts, odd image sizes, strides larger than the kernel and n smaller than the threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hpdt/kernels/conv.h"
#include "hpdt/kernels/layout.h"
#include "hpdt/kernels/norm.h"
#include "hpdt/kernels/pool.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
using namespace hpdt::kernels;
const Stream kCpu;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor random(const Shape& s, uint32_t seed) {
  Tensor t = Tensor::empty(s, DType::f32);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(g);
  return t;
}
Tensor poisoned(const Shape& s) {
  Tensor t = Tensor::empty(s, DType::f32);
  std::fill(t.data<float>(), t.data<float>() + t.numel(), kNaN);
  return t;
}
Tensor to_nhwc(const Tensor& x) {
  Tensor y = poisoned({x.size(0), x.size(2), x.size(3), x.size(1)});
  nchw_to_nhwc(x, y, kCpu);
  return y;
}
Tensor to_nchw(const Tensor& x) {
  Tensor y = poisoned({x.size(0), x.size(3), x.size(1), x.size(2)});
  nhwc_to_nchw(x, y, kCpu);
  return y;
}
// max |got - want| <= tol * max |want| (and no NaN anywhere in got).
void expect_close(const std::string& what, const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  double scale = 0, err = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    ASSERT_FALSE(std::isnan(g[i])) << what << ": NaN at " << i << " (an element the kernel did not write)";
    scale = std::max(scale, double(std::abs(w[i])));
    err = std::max(err, double(std::abs(g[i] - w[i])));
  }
  EXPECT_LE(err, tol * scale + 1e-30) << what << ": max error " << err << " against max |value| " << scale;
}
// i32 [n, h, w, c] -> [n, c, h, w]
Tensor argmax_to_nchw(const Tensor& a) {
  const int64_t n = a.size(0), h = a.size(1), w = a.size(2), c = a.size(3);
  Tensor t = Tensor::empty({n, c, h, w}, DType::i32);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < h * w; ++p)
      for (int64_t ch = 0; ch < c; ++ch) t.data<int32_t>()[(i * c + ch) * h * w + p] = a.data<int32_t>()[(i * h * w + p) * c + ch];
  return t;
}
void expect_equal(const std::string& what, const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), size_t(got.nbytes())), 0) << what << ": not bit-identical";
}

struct ConvCase {
  int64_t n, ci, h, w, co, k, stride, pad;
};
std::string name(const ConvCase& c) {
  return "x [" + std::to_string(c.n) + ", " + std::to_string(c.ci) + ", " + std::to_string(c.h) + ", " +
         std::to_string(c.w) + "] co " + std::to_string(c.co) + " k " + std::to_string(c.k) + " stride " +
         std::to_string(c.stride) + " pad " + std::to_string(c.pad);
}

class NhwcConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(NhwcConv, MatchesTheNchwOracle) {
  const ConvCase c = GetParam();
  const int64_t oh = (c.h + 2 * c.pad - c.k) / c.stride + 1, ow = (c.w + 2 * c.pad - c.k) / c.stride + 1;
  const Tensor x = random({c.n, c.ci, c.h, c.w}, 1), w = random({c.co, c.ci, c.k, c.k}, 2), b = random({c.co}, 3);
  const Tensor dy = random({c.n, c.co, oh, ow}, 4);
  const Tensor xh = to_nhwc(x), dyh = to_nhwc(dy);
  for (const bool bias : {false, true}) {
    const std::string what = name(c) + (bias ? " bias" : "");
    Tensor y = poisoned({c.n, c.co, oh, ow}), yh = poisoned({c.n, oh, ow, c.co});
    conv2d_forward(x, w, bias ? &b : nullptr, y, c.stride, c.pad, kCpu);
    conv2d_forward(xh, w, bias ? &b : nullptr, yh, c.stride, c.pad, kCpu, Layout::nhwc);
    expect_close(what + " forward", to_nchw(yh), y, 2e-6);

    Tensor dx = poisoned(x.shape()), dxh = poisoned(xh.shape());
    conv2d_backward_data(dy, w, dx, c.stride, c.pad, kCpu);
    conv2d_backward_data(dyh, w, dxh, c.stride, c.pad, kCpu, Layout::nhwc);
    expect_close(what + " backward-data", to_nchw(dxh), dx, 2e-6);

    // backward-filter accumulates (+=) into what is there: start both from the same random values
    Tensor dw = random(w.shape(), 5), dwh = random(w.shape(), 5), db = random({c.co}, 6), dbh = random({c.co}, 6);
    conv2d_backward_filter(x, dy, dw, bias ? &db : nullptr, c.stride, c.pad, kCpu);
    conv2d_backward_filter(xh, dyh, dwh, bias ? &dbh : nullptr, c.stride, c.pad, kCpu, Layout::nhwc);
    expect_close(what + " backward-filter", dwh, dw, 2e-6);
    if (bias) expect_close(what + " backward-filter bias", dbh, db, 2e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NhwcConv,
    ::testing::Values(ConvCase{2, 16, 28, 28, 16, 3, 1, 1},   // ResNet-20 stage 1
                      ConvCase{3, 16, 14, 14, 32, 3, 2, 1},   // stride-2 stage entry
                      ConvCase{2, 16, 14, 14, 32, 1, 2, 0},   // 1x1 stride-2 shortcut: 3 of 4 phases get no tap
                      ConvCase{5, 64, 7, 7, 64, 3, 1, 1},     // stage 3: 49 pixels, tiles cross rows
                      ConvCase{4, 64, 2, 2, 64, 3, 1, 1},     // image smaller than a tile
                      ConvCase{1, 1, 28, 28, 16, 3, 1, 1},    // stem, one image (split over the threads)
                      ConvCase{2, 3, 11, 9, 5, 3, 1, 1},      // odd everything, fewer channels than a vector
                      ConvCase{2, 5, 13, 7, 17, 3, 2, 1},     // channels one past a vector
                      ConvCase{1, 7, 9, 9, 9, 7, 2, 3},       // 7x7 stride 2 (ImageNet stem shape)
                      ConvCase{2, 1, 28, 28, 24, 4, 4, 0},    // ViT-style patch conv
                      ConvCase{3, 6, 8, 8, 33, 1, 1, 0},      // 1x1 stride 1
                      ConvCase{1, 2, 5, 5, 3, 5, 1, 2},       // kernel as large as the image
                      ConvCase{2, 17, 9, 10, 40, 3, 3, 0},    // stride 3: phases of one tap
                      ConvCase{1, 4, 6, 6, 70, 2, 2, 1}),     // even kernel, padding
    [](const ::testing::TestParamInfo<ConvCase>& p) { return "case" + std::to_string(p.index); });

TEST(NhwcConvThreads, ForwardAndBackwardDataDoNotDependOnTheThreadCount) {
  // each output element is one register tile's sum in a fixed order, whoever computes it
  const ConvCase c{3, 16, 14, 13, 32, 3, 2, 1};
  const int64_t oh = 7, ow = 7;
  const Tensor xh = random({c.n, c.h, c.w, c.ci}, 7), w = random({c.co, c.ci, 3, 3}, 8);
  const Tensor dyh = random({c.n, oh, ow, c.co}, 9);
  const int saved = omp_get_max_threads();
  std::vector<Tensor> y, dx, dw;
  for (const int threads : {1, 2, 5}) {
    omp_set_num_threads(threads);
    y.push_back(poisoned({c.n, oh, ow, c.co}));
    dx.push_back(poisoned(xh.shape()));
    dw.push_back(Tensor::zeros(w.shape(), DType::f32));
    conv2d_forward(xh, w, nullptr, y.back(), 2, 1, kCpu, Layout::nhwc);
    conv2d_backward_data(dyh, w, dx.back(), 2, 1, kCpu, Layout::nhwc);
    conv2d_backward_filter(xh, dyh, dw.back(), nullptr, 2, 1, kCpu, Layout::nhwc);
  }
  omp_set_num_threads(saved);
  for (size_t i = 1; i < y.size(); ++i) {
    expect_equal("forward", y[i], y[0]);
    expect_equal("backward-data", dx[i], dx[0]);
    expect_close("backward-filter (per-thread partial sums)", dw[i], dw[0], 1e-6);
  }
  // and again with the same thread count: bit-identical, filter gradient included
  Tensor dw2 = Tensor::zeros(w.shape(), DType::f32);
  conv2d_backward_filter(xh, dyh, dw2, nullptr, 2, 1, kCpu, Layout::nhwc);
  Tensor dw3 = Tensor::zeros(w.shape(), DType::f32);
  conv2d_backward_filter(xh, dyh, dw3, nullptr, 2, 1, kCpu, Layout::nhwc);
  expect_equal("backward-filter, two runs", dw3, dw2);
}

TEST(NhwcConvApi, ShapesAreCheckedInTheLayoutTheCallNames) {
  const Tensor xh = random({2, 8, 8, 3}, 1), w = random({4, 3, 3, 3}, 2);
  Tensor y_nchw_shape = poisoned({2, 4, 8, 8});
  HPDT_EXPECT_THROW_MSG(conv2d_forward(xh, w, nullptr, y_nchw_shape, 1, 1, kCpu, Layout::nhwc),
                        "y has shape [2, 4, 8, 8], expected [2, 8, 8, 4]");
  Tensor x_nchw = random({2, 3, 8, 8}, 3), y = poisoned({2, 8, 8, 4});
  HPDT_EXPECT_THROW_MSG(conv2d_forward(x_nchw, w, nullptr, y, 1, 1, kCpu, Layout::nhwc),
                        "input channels of x [2, 3, 8, 8] (nhwc) and w [4, 3, 3, 3] differ");
  Tensor bn_y = poisoned({2, 8, 8, 3}), rm = Tensor::zeros({4}, DType::f32), rv = Tensor::zeros({4}, DType::f32);
  Tensor g = random({4}, 4), b = random({4}, 5);
  BatchNormSaved saved;
  HPDT_EXPECT_THROW_MSG(batchnorm_forward_train(xh, g, b, rm, rv, 1e-5f, 0.1f, saved, bn_y, nullptr, kCpu, Layout::nhwc),
                        "gamma has shape [4], expected [3]");
  Tensor pool_y = poisoned({2, 3});
  HPDT_EXPECT_THROW_MSG(global_avgpool_forward(random({2, 8, 8}, 6), pool_y, kCpu, Layout::nhwc),
                        "x must be [n, h, w, c]");
  Tensor t = poisoned({2, 8, 8, 3});
  HPDT_EXPECT_THROW_MSG(nchw_to_nhwc(x_nchw, x_nchw, kCpu), "y must not alias x");
  HPDT_EXPECT_THROW_MSG(nchw_to_nhwc(xh, t, kCpu), "y has shape [2, 8, 8, 3], expected [2, 8, 3, 8]");
}

TEST(NhwcBatchNorm, TrainEvalAndBackwardMatchTheNchwOracle) {
  for (const Shape& s : {Shape{8, 16, 14, 14}, Shape{3, 5, 7, 9}, Shape{128, 64, 2, 2}}) {
    const int64_t c = s[1];
    // a large mean beside a small spread: the statistics must not cancel digits away
    Tensor x = random(s, 11);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 30.0f + 0.05f * x.data<float>()[i];
    const Tensor xh = to_nhwc(x), g = random({c}, 12), b = random({c}, 13), dy = random(s, 14), dyh = to_nhwc(dy);
    Tensor rm = random({c}, 15), rv = random({c}, 16), rmh = rm.clone(kCpu), rvh = rv.clone(kCpu);
    for (Tensor* t : {&rv, &rvh})
      for (int64_t i = 0; i < c; ++i) t->data<float>()[i] = 1.5f + t->data<float>()[i];
    int sync_calls = 0;
    const AllReduceSum sync = [&](float*, size_t n) {
      ++sync_calls;
      EXPECT_EQ(n, size_t(2 * c + 1));
    };
    BatchNormSaved sv, svh;
    Tensor y = poisoned(s), yh = poisoned(xh.shape());
    batchnorm_forward_train(x, g, b, rm, rv, 1e-5f, 0.1f, sv, y, sync, kCpu);
    batchnorm_forward_train(xh, g, b, rmh, rvh, 1e-5f, 0.1f, svh, yh, sync, kCpu, Layout::nhwc);
    EXPECT_EQ(sync_calls, 2);
    const std::string what = s.str();
    expect_close(what + " y", to_nchw(yh), y, 2e-5);
    expect_close(what + " running mean", rmh, rm, 1e-6);
    expect_close(what + " running var", rvh, rv, 1e-5);
    expect_close(what + " saved mean", svh.mean, sv.mean, 1e-6);
    expect_close(what + " saved invstd", svh.invstd, sv.invstd, 1e-4);

    Tensor dx = poisoned(s), dxh = poisoned(xh.shape());
    Tensor dg = random({c}, 17), db = random({c}, 18), dgh = dg.clone(kCpu), dbh = db.clone(kCpu);
    batchnorm_backward_train(dy, x, g, sv, dx, dg, db, nullptr, kCpu);
    batchnorm_backward_train(dyh, xh, g, svh, dxh, dgh, dbh, nullptr, kCpu, Layout::nhwc);
    expect_close(what + " dx", to_nchw(dxh), dx, 2e-4);
    expect_close(what + " dgamma", dgh, dg, 1e-4);
    expect_close(what + " dbeta", dbh, db, 1e-5);

    Tensor ye = poisoned(s), yeh = poisoned(xh.shape());
    batchnorm_forward_eval(x, g, b, rm, rv, 1e-5f, ye, kCpu);
    batchnorm_forward_eval(xh, g, b, rm, rv, 1e-5f, yeh, kCpu, Layout::nhwc);
    expect_close(what + " eval y", to_nchw(yeh), ye, 1e-6);
  }
}

TEST(NhwcBatchNorm, StatisticsDoNotDependOnTheThreadCount) {
  const Tensor xh = random({16, 9, 9, 24}, 21), g = random({24}, 22), b = random({24}, 23);
  const int saved = omp_get_max_threads();
  std::vector<Tensor> ys;
  for (const int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Tensor rm = Tensor::zeros({24}, DType::f32), rv = Tensor::zeros({24}, DType::f32);
    BatchNormSaved sv;
    ys.push_back(poisoned(xh.shape()));
    batchnorm_forward_train(xh, g, b, rm, rv, 1e-5f, 0.1f, sv, ys.back(), nullptr, kCpu, Layout::nhwc);
  }
  omp_set_num_threads(saved);
  expect_equal("2 threads", ys[1], ys[0]);
  expect_equal("3 threads", ys[2], ys[0]);
}

TEST(NhwcPool, MaxAndAveragePoolMatchTheNchwOracleExactly) {
  // same comparisons, same sums in the same order per channel: bit-identical, argmax included
  for (const Shape& s : {Shape{2, 64, 16, 16}, Shape{3, 5, 7, 9}}) {
    Tensor x = random(s, 31);
    x.data<float>()[5] = kNaN;  // NaN propagates like PyTorch, in both layouts
    const Tensor xh = to_nhwc(x);
    const int64_t oh = (s[2] + 2 - 3) / 2 + 1, ow = (s[3] + 2 - 3) / 2 + 1;
    Tensor y = poisoned({s[0], s[1], oh, ow}), yh = poisoned({s[0], oh, ow, s[1]}), am, amh;
    maxpool2d_forward(x, 3, 2, 1, y, am, kCpu);
    maxpool2d_forward(xh, 3, 2, 1, yh, amh, kCpu, Layout::nhwc);
    expect_equal(s.str() + " max pool y", to_nchw(yh), y);
    expect_equal(s.str() + " argmax", argmax_to_nchw(amh), am);
    const Tensor dy = random(y.shape(), 32), dyh = to_nhwc(dy);
    Tensor dx = poisoned(s), dxh = poisoned(xh.shape());
    maxpool2d_backward(dy, am, 3, 2, 1, dx, kCpu);
    maxpool2d_backward(dyh, amh, 3, 2, 1, dxh, kCpu, Layout::nhwc);
    expect_equal(s.str() + " max pool dx", to_nchw(dxh), dx);

    Tensor g = poisoned({s[0], s[1]}), gh = poisoned({s[0], s[1]});
    const Tensor xf = random(s, 33), xfh = to_nhwc(xf);
    global_avgpool_forward(xf, g, kCpu);
    global_avgpool_forward(xfh, gh, kCpu, Layout::nhwc);
    expect_equal(s.str() + " average pool y", gh, g);
    const Tensor dg = random({s[0], s[1]}, 34);
    Tensor gx = poisoned(s), gxh = poisoned(xh.shape());
    global_avgpool_backward(dg, gx, kCpu);
    global_avgpool_backward(dg, gxh, kCpu, Layout::nhwc);
    expect_equal(s.str() + " average pool dx", to_nchw(gxh), gx);
  }
}

TEST(NhwcLayout, TransposesRoundTrip) {
  for (const Shape& s : {Shape{2, 3, 5, 7}, Shape{1, 64, 33, 31}, Shape{3, 1, 4, 4}}) {
    const Tensor x = random(s, 41);
    const Tensor xh = to_nhwc(x);
    EXPECT_EQ(xh.data<float>()[((1 % s[0]) * s[2] * s[3] + 2) * s[1] + s[1] - 1],
              x.data<float>()[(((1 % s[0]) * s[1] + s[1] - 1) * s[2]) * s[3] + 2])
        << s.str();
    expect_equal(s.str() + " round trip", to_nchw(xh), x);
  }
}

}  // namespace
