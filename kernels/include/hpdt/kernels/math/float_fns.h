// exp and erf in float for the CPU, written without branches or library calls so that a loop over them
// vectorises (GCC needs -fno-trapping-math to turn the selects into blends; hpdt_kernels builds with
// it). libm's expf/erff are scalar calls: the erf-GELU of ViT-Ti spent 15 % of its CPU training step in
// them. Accuracy against double libm, over every 3rd float bit pattern while developing them and every
// 257th in tests/kernels/test_float_fns.cpp: exp_f within 1.01 ulp, erf_f within 2 ulp (libm's erff:
// 1 ulp; PyTorch's vectorised erf, Abramowitz-Stegun 7.1.26, 1.5e-7 absolute). Both propagate NaN; exp_f flushes results below
// FLT_MIN (x < -87.34) to 0 and gives +inf above 88.72.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace hpdt::kernels::math {

inline float float_from_bits(int32_t i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}

// e^x: x = n ln2 + r (Cody-Waite, |r| <= ln2/2), e^r by the degree-6 polynomial of Cephes' expf, times 2^n
// built in the exponent bits (as two factors, so n = 128 just below the overflow stays finite).
inline float exp_f(float x) {
  float xc = x > -87.33654f ? x : -87.33654f;  // NaN lands here too (a defined conversion below); replaced at the end
  xc = xc < 88.72284f ? xc : 88.72284f;
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
  float r = std::fma(n, -0.693359375f, xc);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r) + 1.0f;
  const int32_t ni = int32_t(n), n1 = ni >> 1;
  const float scaled = p * float_from_bits((n1 + 127) << 23) * float_from_bits((ni - n1 + 127) << 23);
  const float result = x < -87.33654f ? 0.0f : scaled;
  return x != x ? x : result;
}

// erf: |x| < 1.25: x + x P(x^2) (P fits erf(x)/x - 1 to 4e-11); 1.25 <= |x| < 4: 1 - e^R(|x| - 2.625)
// (R fits log erfc to 9e-9); beyond: +-1. Coefficients: near-minimax fits by
// scripts/dev/fit_float_fns.py.
inline float erf_f(float x) {
  const float t = std::fabs(x), s = x * x;
  float a = 8.382193709e-07f;
  a = std::fma(a, s, -1.286935137e-05f);
  a = std::fma(a, s, 1.175587277e-04f);
  a = std::fma(a, s, -8.522364345e-04f);
  a = std::fma(a, s, 5.222647695e-03f);
  a = std::fma(a, s, -2.686578980e-02f);
  a = std::fma(a, s, 1.128378631e-01f);
  a = std::fma(a, s, -3.761263863e-01f);
  a = std::fma(a, s, 1.283791671e-01f);
  const float small = std::fma(a, x, x);
  const float u = (t < 4.0f ? t : 4.0f) - 2.625f;
  float b = 1.544522334e-06f;
  b = std::fma(b, u, -1.167297474e-05f);
  b = std::fma(b, u, 6.671215231e-05f);
  b = std::fma(b, u, -3.663630646e-04f);
  b = std::fma(b, u, 1.919533518e-03f);
  b = std::fma(b, u, -9.838604134e-03f);
  b = std::fma(b, u, -9.477704263e-01f);
  b = std::fma(b, u, -5.589146683e+00f);
  b = std::fma(b, u, -8.490669398e+00f);
  const float big = std::copysign(1.0f - exp_f(b), x);
  const float result = t < 1.25f ? small : t < 4.0f ? big : std::copysign(1.0f, x);
  return x != x ? x : result;
}

}  // namespace hpdt::kernels::math
