// math/float_fns.h against double libm: every 257th float bit pattern (17 million values, both signs,
// every exponent), error in ulps of the float result; and the special values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hpdt/kernels/math/float_fns.h"

namespace {

using hpdt::kernels::math::erf_f;
using hpdt::kernels::math::exp_f;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// |got - want| in units of the last place of the float nearest to want.
double ulps(float got, double want) {
  const float w = float(want);
  if (w == 0.0f) return got == 0.0f ? 0.0 : std::numeric_limits<double>::infinity();
  const double ulp = double(std::nextafter(std::fabs(w), std::numeric_limits<float>::infinity())) - std::fabs(double(w));
  return std::fabs(double(got) - want) / ulp;
}

TEST(FloatFns, ExpAndErfStayWithinTheirStatedUlps) {
  double worst_exp = 0, worst_erf = 0;
  float at_exp = 0, at_erf = 0;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 257) {
    const float x = from_bits(uint32_t(u));
    if (std::isnan(x)) continue;
    const double e = std::exp(double(x));
    if (e >= double(std::numeric_limits<float>::min()) && e <= double(std::numeric_limits<float>::max())) {
      const double err = ulps(exp_f(x), e);
      if (err > worst_exp) worst_exp = err, at_exp = x;
    }
    const double err = ulps(erf_f(x), std::erf(double(x)));
    if (err > worst_erf) worst_erf = err, at_erf = x;
  }
  EXPECT_LE(worst_exp, 1.02) << "exp_f at " << at_exp;
  EXPECT_LE(worst_erf, 2.0) << "erf_f at " << at_erf;
}

TEST(FloatFns, SpecialValues) {
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(exp_f(nan)));
  EXPECT_TRUE(std::isnan(erf_f(nan)));
  EXPECT_EQ(exp_f(-inf), 0.0f);
  EXPECT_EQ(exp_f(inf), inf);
  EXPECT_EQ(exp_f(-100.0f), 0.0f);  // below FLT_MIN: flushed
  EXPECT_EQ(exp_f(100.0f), inf);
  EXPECT_TRUE(std::isfinite(exp_f(88.7f)));  // 2^128 scale split in two factors
  EXPECT_EQ(exp_f(0.0f), 1.0f);
  EXPECT_EQ(erf_f(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(erf_f(-0.0f)));
  EXPECT_EQ(erf_f(inf), 1.0f);
  EXPECT_EQ(erf_f(-inf), -1.0f);
  EXPECT_EQ(erf_f(5.0f), 1.0f);
  EXPECT_EQ(erf_f(-5.0f), -1.0f);
  // tiny: x * 2/sqrt(pi) in one rounding, the correctly rounded value (libm's erff may be an ulp off,
  // and a Release build folds std::erf of a constant at compile time, a Debug build does not)
  EXPECT_EQ(erf_f(1e-30f), float(std::erf(double(1e-30f))));
}

}  // namespace
