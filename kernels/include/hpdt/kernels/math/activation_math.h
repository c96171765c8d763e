// Scalar activation math shared by the CPU oracle (kernels/cpu/activation.cpp, float and double) and
// the CUDA kernels (kernels/cuda/activation.cu, float): one formula, so the two sides differ only by
// the last-bit rounding of erf/tanh/exp: CUDA's on the device; on the host libm's for double and tanh,
// and for float erf/exp the vectorisable float_fns.h (within 2 ulp; libm's are scalar calls).
#pragma once

#include <cmath>

#include "hpdt/core/hostdev.h"
#include "hpdt/kernels/math/float_fns.h"

namespace hpdt::kernels::math {

inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
inline constexpr double kInvSqrt2 = 0.70710678118654752440;     // 1/sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi)
inline constexpr double kGeluTanhCubic = 0.044715;

// erf, tanh, exp in the precision of the argument, on the host (libm) and on the device (CUDA math).
HPDT_HD_INLINE float hd_erf(float x) {
#if HPDT_DEVICE_CODE
  return erff(x);
#else
  return erf_f(x);
#endif
}
HPDT_HD_INLINE double hd_erf(double x) {
#if HPDT_DEVICE_CODE
  return ::erf(x);
#else
  return std::erf(x);
#endif
}
HPDT_HD_INLINE float hd_tanh(float x) {
#if HPDT_DEVICE_CODE
  return tanhf(x);
#else
  return std::tanh(x);
#endif
}
HPDT_HD_INLINE double hd_tanh(double x) {
#if HPDT_DEVICE_CODE
  return ::tanh(x);
#else
  return std::tanh(x);
#endif
}
HPDT_HD_INLINE float hd_exp(float x) {
#if HPDT_DEVICE_CODE
  return expf(x);
#else
  return exp_f(x);
#endif
}
HPDT_HD_INLINE double hd_exp(double x) {
#if HPDT_DEVICE_CODE
  return ::exp(x);
#else
  return std::exp(x);
#endif
}

// a * b + c with one rounding, on the host and on the device. The GELU functions below spell out each product that
// feeds an add as act_fma, and no other product feeds one: left to the compilers, GCC (-march=native) and nvcc
// contract a * b + c into an FMA where they like, differently from one inlining site to the next, and near GELU's
// zero gradient (x ~ -0.75, where Phi(x) + x phi(x) cancels) the two roundings differ in every bit that is left.
// So each function gives the same bits wherever it is inlined: the fused GELU of the GEMM epilogue and the
// elementwise GELU kernel agree (test_gemm_cuda's FusedGeluIsThePlainGemmThenTheGeluKernel).
template <class T>
HPDT_HD_INLINE T act_fma(T a, T b, T c) {
#if HPDT_DEVICE_CODE
  if constexpr (sizeof(T) == 4)
    return __fmaf_rn(a, b, c);
  else
    return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// GELU, exact form (PyTorch approximate='none'): x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
template <class T>
HPDT_HD_INLINE T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + hd_erf(x * T(kInvSqrt2)));
}
// d/dx: Phi(x) + x phi(x).
template <class T>
HPDT_HD_INLINE T gelu_erf_grad(T x) {
  const T cdf = T(0.5) * (T(1) + hd_erf(x * T(kInvSqrt2)));
  const T pdf = T(kInvSqrt2Pi) * hd_exp(T(-0.5) * x * x);
  return act_fma(x, pdf, cdf);
}

// GELU, tanh form (approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
HPDT_HD_INLINE T gelu_tanh(T x) {
  const T u = T(kSqrt2OverPi) * act_fma(T(kGeluTanhCubic) * x * x, x, x);
  return T(0.5) * x * (T(1) + hd_tanh(u));
}
template <class T>
HPDT_HD_INLINE T gelu_tanh_grad(T x) {
  const T u = T(kSqrt2OverPi) * act_fma(T(kGeluTanhCubic) * x * x, x, x);
  const T t = hd_tanh(u);
  const T du = T(kSqrt2OverPi) * act_fma(T(3 * kGeluTanhCubic) * x, x, T(1));
  return act_fma(T(0.5) * x * act_fma(-t, t, T(1)), du, T(0.5) * (T(1) + t));
}

}  // namespace hpdt::kernels::math
