// Per-element optimizer arithmetic, one copy for the CPU oracle (kernels/cpu/optim.cpp) and the CUDA
// kernels (kernels/cuda/optim.cu), so both do the same f32 operations in the same order.
//
// Why every multiply-add is spelled out: GCC with -march=native contracts a*b + c into an FMA wherever
// it likes (even with -std=c++20), and nvcc does the same by default, each choosing differently. Here
// each product that feeds an add is an explicit fma (one rounding on both sides), every other product
// is a plain multiply whose result feeds no add, and division and square root are the correctly rounded
// IEEE operations (__fdiv_rn / __fsqrt_rn on the device). No compiler is left a choice, so an x86 host
// and an H100 produce the same bits. Step-dependent scalars (bias corrections, decay) are computed once
// on the host (sgd_scalars / adamw_scalars) and handed to both sides.
//
// The operation order follows torch.optim (1.13): SGD d = g + wd p; buf = mu buf + (1 - dampening) d;
// d = nesterov ? d + mu buf : buf; p -= lr d. AdamW p *= 1 - lr wd; m = b1 m + (1 - b1) g;
// v = b2 v + ((1 - b2) g) g; p -= step_size (m / (sqrt(v) / sqrt(bc2) + eps)).
#pragma once

#include <cmath>
#include <cstdint>

#include "hpdt/core/float16.h"
#include "hpdt/core/hostdev.h"
#include "hpdt/kernels/cpu/optim.h"

namespace hpdt::kernels::math {

// ---- IEEE f32 operations, never contracted -------------------------------------------------------------

HPDT_HD_INLINE float optim_fma(float a, float b, float c) {  // a*b + c, one rounding
#if HPDT_DEVICE_CODE
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
HPDT_HD_INLINE float optim_mul(float a, float b) {
#if HPDT_DEVICE_CODE
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
HPDT_HD_INLINE float optim_div(float a, float b) {
#if HPDT_DEVICE_CODE
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
HPDT_HD_INLINE float optim_add(float a, float b) {
#if HPDT_DEVICE_CODE
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
HPDT_HD_INLINE float optim_sqrt(float a) {
#if HPDT_DEVICE_CODE
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
// inf or NaN, by the exponent bits (independent of -ffinite-math-only and of the device).
HPDT_HD_INLINE bool optim_nonfinite(float x) { return (f32_bits(x) & 0x7f800000u) == 0x7f800000u; }

// ---- scalars, computed once per step on the host ---------------------------------------------------------

struct SgdScalars {
  float lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first_step;
};

inline SgdScalars sgd_scalars(const SgdOptions& o, bool first_step) {
  return {o.lr, o.momentum, 1.0f - o.dampening, o.weight_decay, o.nesterov, first_step};
}

struct AdamWScalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, step_size, bc2_sqrt;
};

// step counts from 1. bc1 = 1 - b1^step, bc2 = 1 - b2^step in double (as PyTorch's Python floats);
// step_size = lr / bc1 and sqrt(bc2) rounded once to f32; decay = 1 - lr wd rounded once (an fma).
inline AdamWScalars adamw_scalars(const AdamWOptions& o, int64_t step) {
  const double bc1 = 1.0 - std::pow(double(o.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(o.beta2), double(step));
  return {optim_fma(-o.lr, o.weight_decay, 1.0f),
          o.beta1,
          1.0f - o.beta1,  // exact for beta in [0.5, 1] (Sterbenz)
          o.beta2,
          1.0f - o.beta2,
          o.eps,
          float(double(o.lr) / bc1),
          float(std::sqrt(bc2))};
}

// ---- per-element updates ------------------------------------------------------------------------------

// One SGD update of parameter p with gradient g; buf is the momentum buffer (untouched without momentum).
HPDT_HD_INLINE void sgd_update(float& p, float& buf, float g, const SgdScalars& c) {
  float d = c.weight_decay != 0.0f ? optim_fma(c.weight_decay, p, g) : g;
  if (c.momentum != 0.0f) {
    buf = c.first_step ? d : optim_fma(c.momentum, buf, optim_mul(c.one_minus_dampening, d));
    d = c.nesterov ? optim_fma(c.momentum, buf, d) : buf;
  }
  p = optim_fma(-c.lr, d, p);
}

// One AdamW update of parameter p with gradient g and moments m, v.
HPDT_HD_INLINE void adamw_update(float& p, float& m, float& v, float g, const AdamWScalars& c) {
  p = optim_mul(p, c.decay);
  m = optim_fma(c.beta1, m, optim_mul(c.one_minus_beta1, g));
  v = optim_fma(c.beta2, v, optim_mul(optim_mul(c.one_minus_beta2, g), g));
  const float denom = optim_add(optim_div(optim_sqrt(v), c.bc2_sqrt), c.eps);
  p = optim_fma(-c.step_size, optim_div(m, denom), p);
}

// ---- mixed precision: loss-scale unscale and clipping --------------------------------------------------

// The gradient the optimizer sees: (g * inv_scale) * clip, two f32 roundings, as the unfused sequence
// scale(g, inv_scale) then clip_grad_norm's scale(g, coef) does (clip = 1 when not clipping: exact).
HPDT_HD_INLINE float unscale_clip(float g, float inv_scale, float clip) {
  return optim_mul(optim_mul(g, inv_scale), clip);
}

// clip_grad_norm_'s coefficient from the sum of squares of the unscaled gradients, in double (IEEE sqrt
// and division on both sides): max_norm / (norm + 1e-6) when that is < 1, else 1. max_norm <= 0: no clipping.
HPDT_HD_INLINE float clip_coefficient(double sum_squares, double max_norm) {
  if (!(max_norm > 0)) return 1.0f;
#if HPDT_DEVICE_CODE
  const double norm = __dsqrt_rn(sum_squares);
#else
  const double norm = std::sqrt(sum_squares);
#endif
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? float(coef) : 1.0f;
}

// sum += x^2 in double, one rounding per element.
HPDT_HD_INLINE double add_square(double sum, float x) {
#if HPDT_DEVICE_CODE
  return __fma_rn(double(x), double(x), sum);
#else
  return std::fma(double(x), double(x), sum);
#endif
}

}  // namespace hpdt::kernels::math
