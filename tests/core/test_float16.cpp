// f16 and bf16 conversions, exhaustively: every one of the 65,536 bit patterns of each type is
// converted to f32 and back, and every rounding boundary between neighbouring values (the midpoint,
// and the f32 numbers just below and above it) is rounded, each against two independent references:
// exact double arithmetic (nearest candidate, ties to even), and for f16 the compiler's _Float16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "hpdt/core/float16.h"
#include "hpdt/core/philox.h"
#include "hpdt_test.h"

namespace {

using hpdt::test::bits_of;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f); }

// Exact value of a 16-bit pattern in double arithmetic (reference decoder, independent of the code under test).
double f16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}
double bf16_value(uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
  double v = e == 0 ? std::ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : std::ldexp(128 + m, e - 134);
  return s ? -v : v;
}

// Reference rounding of a finite f32 to a 16-bit format: take the two representable neighbours of |x|
// (treating the value just past the largest finite one as 2^(emax+1), which rounds to Inf), pick the
// nearer in exact double arithmetic, and on a tie the one with an even last mantissa bit.
template <class Value>
uint16_t round_reference(float x, Value value, uint16_t max_finite, uint16_t inf) {
  const double ax = std::fabs(double(x));
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  // Binary search for the largest magnitude pattern whose value <= ax (patterns are ordered).
  uint16_t lo = 0, hi = max_finite;
  if (ax >= value(max_finite)) {
    lo = max_finite;
  } else {
    while (lo < hi) {
      const uint16_t mid = uint16_t((lo + hi + 1) / 2);
      if (value(mid) <= ax) lo = mid;
      else hi = uint16_t(mid - 1);
    }
  }
  const double vlo = value(lo);
  const double vhi = lo == max_finite ? 2 * value(max_finite) - value(uint16_t(max_finite - 1)) : value(uint16_t(lo + 1));
  const uint16_t up = lo == max_finite ? inf : uint16_t(lo + 1);
  const double dlo = ax - vlo, dhi = vhi - ax;
  uint16_t r;
  if (dlo < dhi) r = lo;
  else if (dhi < dlo) r = up;
  else r = (lo & 1) ? up : lo;
  return uint16_t(sign | r);
}

uint16_t f16_reference(float x) { return round_reference(x, f16_value, 0x7bff, 0x7c00); }
uint16_t bf16_reference(float x) { return round_reference(x, bf16_value, 0x7f7f, 0x7f80); }

uint16_t f16_compiler(float x) {
  _Float16 h = static_cast<_Float16>(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// f32 numbers at and around every rounding boundary of a 16-bit format.
template <class Decode>
std::vector<float> boundary_inputs(Decode to_f32, uint16_t max_finite) {
  std::vector<float> xs;
  for (uint32_t h = 0; h < max_finite; ++h) {
    const double a = double(to_f32(uint16_t(h))), b = double(to_f32(uint16_t(h + 1)));
    const float mid = float((a + b) / 2);  // exact: the midpoint has at most 12 (f16) / 9 (bf16) significant bits
    for (float m : {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)}) {
      xs.push_back(m);
      xs.push_back(-m);
    }
  }
  return xs;
}

TEST(Float16, F16ToF32AllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = hpdt::f16_bits_to_f32(uint16_t(h));
    if (f16_is_nan(uint16_t(h))) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(std::signbit(f), bool(h & 0x8000)) << std::hex << h;
      _Float16 hh;
      const uint16_t hb = uint16_t(h);
      std::memcpy(&hh, &hb, 2);
      EXPECT_EQ(bits_of(f), bits_of(float(hh))) << "NaN payload vs compiler, pattern " << std::hex << h;
      continue;
    }
    ASSERT_EQ(double(f), f16_value(uint16_t(h))) << std::hex << h;
    ASSERT_EQ(std::signbit(f), bool(h & 0x8000)) << std::hex << h;
  }
}

TEST(Float16, F32ToF16RoundTripsAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = hpdt::f32_to_f16_bits(hpdt::f16_bits_to_f32(uint16_t(h)));
    if (f16_is_nan(uint16_t(h))) {
      EXPECT_TRUE(f16_is_nan(back)) << std::hex << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(Float16, F32ToF16EveryRoundingBoundary) {
  const auto xs = boundary_inputs(hpdt::f16_bits_to_f32, 0x7bff);
  ASSERT_EQ(xs.size(), 6u * 0x7bff);  // 3 inputs x 2 signs per pair of neighbours
  for (float x : xs) {
    const uint16_t got = hpdt::f32_to_f16_bits(x);
    ASSERT_EQ(got, f16_reference(x)) << "x=" << x << " bits " << std::hex << bits_of(x);
    ASSERT_EQ(got, f16_compiler(x)) << "x=" << x << " bits " << std::hex << bits_of(x);
  }
}

TEST(Float16, F32ToF16SpecialsAndRandom) {
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f,
                            std::numeric_limits<float>::denorm_min(), std::ldexp(1.0f, -25), std::ldexp(1.0f, -24),
                            std::ldexp(1.5f, -25), std::ldexp(1.0f, -14), std::numeric_limits<float>::max()};
  for (float x : specials) {
    EXPECT_EQ(hpdt::f32_to_f16_bits(x), f16_reference(x)) << x;
    EXPECT_EQ(hpdt::f32_to_f16_bits(x), f16_compiler(x)) << x;
  }
  EXPECT_TRUE(f16_is_nan(hpdt::f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(f16_is_nan(hpdt::f32_to_f16_bits(std::numeric_limits<float>::signaling_NaN())));
  EXPECT_TRUE(f16_is_nan(hpdt::f32_to_f16_bits(from_bits(0xff800001u))));  // NaN whose payload is in the low bits only
  hpdt::Rng rng(2024);
  for (int i = 0; i < 1000000; ++i) {
    const float x = from_bits(rng.next_u32());
    if (std::isnan(x)) continue;
    ASSERT_EQ(hpdt::f32_to_f16_bits(x), f16_compiler(x)) << std::hex << bits_of(x);
  }
}

TEST(BFloat16, Bf16ToF32AllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = hpdt::bf16_bits_to_f32(uint16_t(b));
    EXPECT_EQ(bits_of(f), b << 16) << std::hex << b;  // bf16 is the top half of an f32, NaNs included
    if (!bf16_is_nan(uint16_t(b))) {
      ASSERT_EQ(double(f), bf16_value(uint16_t(b))) << std::hex << b;
    }
  }
}

TEST(BFloat16, F32ToBf16RoundTripsAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t back = hpdt::f32_to_bf16_bits(hpdt::bf16_bits_to_f32(uint16_t(b)));
    if (bf16_is_nan(uint16_t(b))) {
      EXPECT_TRUE(bf16_is_nan(back)) << std::hex << b;
      EXPECT_EQ(back & 0x8000, b & 0x8000) << std::hex << b;
    } else {
      ASSERT_EQ(back, b) << std::hex << b;
    }
  }
}

TEST(BFloat16, F32ToBf16EveryRoundingBoundary) {
  const auto xs = boundary_inputs(hpdt::bf16_bits_to_f32, 0x7f7f);
  ASSERT_EQ(xs.size(), 6u * 0x7f7f);
  for (float x : xs) ASSERT_EQ(hpdt::f32_to_bf16_bits(x), bf16_reference(x)) << "x=" << x << " bits " << std::hex << bits_of(x);
}

TEST(BFloat16, F32ToBf16SpecialsAndRandom) {
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()})
    EXPECT_EQ(hpdt::f32_to_bf16_bits(x), bf16_reference(x)) << x;
  EXPECT_EQ(hpdt::f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up past the largest bf16
  // The last boundary: halfway between the largest bf16 (0x7f7f) and 2^128 ties to even, i.e. to Inf.
  for (uint32_t u : {0x7f7f7fffu, 0x7f7f8000u, 0x7f7f8001u, 0xff7f8000u}) EXPECT_EQ(hpdt::f32_to_bf16_bits(from_bits(u)), bf16_reference(from_bits(u))) << std::hex << u;
  EXPECT_EQ(hpdt::f32_to_bf16_bits(from_bits(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(hpdt::f32_to_bf16_bits(from_bits(0x7f7f8000u)), 0x7f80);
  EXPECT_TRUE(bf16_is_nan(hpdt::f32_to_bf16_bits(from_bits(0x7f800001u))));  // payload only in bits that are dropped
  EXPECT_TRUE(bf16_is_nan(hpdt::f32_to_bf16_bits(from_bits(0xffc00000u))));
  hpdt::Rng rng(99);
  for (int i = 0; i < 200000; ++i) {
    const float x = from_bits(rng.next_u32());
    if (std::isnan(x)) continue;
    ASSERT_EQ(hpdt::f32_to_bf16_bits(x), bf16_reference(x)) << std::hex << bits_of(x);
  }
}

// largest_stored_as_zero<T>: x > it exactly when x rounded to T is positive (the fused ReLU's mask in the batch norm
// backward, kernels/cuda/norm.cu, reads it so): every f32 pattern within 2^20 of its pattern and of +0, the specials,
// and a million random ones (both signs, NaN included).
template <class T>
void expect_stored_positive_iff_above_threshold() {
  const float t = hpdt::largest_stored_as_zero<T>();
  const auto check = [&](float x) { return (hpdt::to_f32(hpdt::from_f32<T>(x)) > 0.0f) == (x > t); };
  EXPECT_EQ(hpdt::to_f32(hpdt::from_f32<T>(t)), 0.0f);
  EXPECT_GT(hpdt::to_f32(hpdt::from_f32<T>(std::nextafter(t, 1.0f))), 0.0f);
  const uint32_t tb = bits_of(t);
  for (uint32_t u = tb > (1u << 20) ? tb - (1u << 20) : 0; u <= tb + (1u << 20); ++u)
    ASSERT_TRUE(check(from_bits(u))) << std::hex << u;
  for (uint32_t u = 0; u <= (1u << 20); ++u) {
    ASSERT_TRUE(check(from_bits(u))) << std::hex << u;
    ASSERT_TRUE(check(from_bits(u | 0x80000000u))) << std::hex << u;
  }
  for (float x : {INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max()})
    EXPECT_TRUE(check(x)) << x;
  hpdt::Rng rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = rng.next_u32();
    ASSERT_TRUE(check(from_bits(u))) << std::hex << u;
  }
}

TEST(Float16, StoredPositiveExactlyAboveLargestStoredAsZero) {
  EXPECT_EQ(hpdt::largest_stored_as_zero<hpdt::f16_t>(), std::ldexp(1.0f, -25));
  EXPECT_EQ(hpdt::largest_stored_as_zero<hpdt::bf16_t>(), std::ldexp(1.0f, -134));
  EXPECT_EQ(hpdt::largest_stored_as_zero<float>(), 0.0f);
  expect_stored_positive_iff_above_threshold<hpdt::f16_t>();
  expect_stored_positive_iff_above_threshold<hpdt::bf16_t>();
  expect_stored_positive_iff_above_threshold<float>();
}

TEST(Float16, StorageTypes) {
  EXPECT_EQ(float(hpdt::f16_t(1.0f)), 1.0f);
  EXPECT_EQ(hpdt::f16_t(1.0f).bits, 0x3c00);
  EXPECT_EQ(hpdt::bf16_t(1.0f).bits, 0x3f80);
  EXPECT_EQ(hpdt::to_f32(hpdt::from_f32<hpdt::bf16_t>(3.0f)), 3.0f);
  EXPECT_EQ(hpdt::to_f32(hpdt::from_f32<hpdt::f16_t>(0.1f)), 0.0999755859375f);
}

}  // namespace
