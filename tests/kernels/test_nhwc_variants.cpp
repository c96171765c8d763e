// The NHWC direct convolution built the ways this machine's native build does not exercise: portable
// (x86-64 without AVX: 4-lane vectors) and with the AVX-512 tile shapes (up to 4 channel vectors per
// tile: HPDT_CONV_NV_MAX=4). Each is built from the kernel sources with its own flags (CMakeLists) and
// checked against the NCHW oracle built the same way, on fresh random inputs with NaN-poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "hpdt/kernels/cpu/conv.h"

namespace {

using namespace hpdt::kernels;

std::vector<float> random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(g);
  return v;
}
// [n, c, hw] <-> [n, hw, c]
std::vector<float> transpose(const std::vector<float>& a, int64_t n, int64_t rows, int64_t cols) {
  std::vector<float> b(a.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) b[size_t((i * cols + c) * rows + r)] = a[size_t((i * rows + r) * cols + c)];
  return b;
}
void expect_close(const char* what, const Conv2dShape& s, const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " " << s.str() << ": element " << i << " not written";
    scale = std::max(scale, double(std::abs(want[i])));
    err = std::max(err, double(std::abs(got[i] - want[i])));
  }
  EXPECT_LE(err, 2e-6 * scale) << what << " " << s.str();
}

TEST(NhwcVariant, MatchesTheNchwOracle) {
  const Conv2dShape shapes[] = {{2, 16, 12, 12, 64, 3, 3, 1, 1}, {3, 64, 7, 7, 64, 3, 3, 1, 1},  {2, 32, 14, 14, 64, 3, 3, 2, 1},
                                {2, 32, 8, 8, 64, 1, 1, 2, 0},   {2, 5, 13, 7, 70, 3, 3, 2, 1},  {1, 3, 9, 9, 33, 7, 7, 2, 3},
                                {1, 64, 5, 5, 17, 3, 3, 1, 1},   {2, 1, 28, 28, 48, 4, 4, 4, 0}, {4, 16, 2, 2, 16, 3, 3, 1, 1}};
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Conv2dShape& s : shapes) {
    const int64_t oh = s.out_h(), ow = s.out_w();
    const auto x = random(size_t(s.n * s.c_in * s.h * s.w), 1), w = random(size_t(s.c_out * s.c_in * s.kh * s.kw), 2);
    const auto dy = random(size_t(s.n * s.c_out * oh * ow), 3), b = random(size_t(s.c_out), 4);
    const auto xh = transpose(x, s.n, s.c_in, s.h * s.w), dyh = transpose(dy, s.n, s.c_out, oh * ow);
    std::vector<float> y(dy.size(), nan), yh(dy.size(), nan), dx(x.size(), nan), dxh(x.size(), nan);
    std::vector<float> dw(w.size(), 0.5f), dwh(w.size(), 0.5f), db(b.size(), 0.5f), dbh(b.size(), 0.5f);
    cpu::conv2d_forward<float>(s, x.data(), w.data(), b.data(), y.data());
    cpu::conv2d_forward_nhwc(s, xh.data(), w.data(), b.data(), yh.data());
    expect_close("forward", s, transpose(yh, s.n, oh * ow, s.c_out), y);
    cpu::conv2d_backward_data<float>(s, dy.data(), w.data(), dx.data());
    cpu::conv2d_backward_data_nhwc(s, dyh.data(), w.data(), dxh.data());
    expect_close("backward-data", s, transpose(dxh, s.n, s.h * s.w, s.c_in), dx);
    cpu::conv2d_backward_filter<float>(s, x.data(), dy.data(), dw.data(), db.data(), true);
    cpu::conv2d_backward_filter_nhwc(s, xh.data(), dyh.data(), dwh.data(), dbh.data(), true);
    expect_close("backward-filter", s, dwh, dw);
    expect_close("backward-filter bias", s, dbh, db);
  }
}

}  // namespace
