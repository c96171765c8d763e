// CPU oracle of the gradient-compression kernels (hpdt/kernels/compress.h), and the per-element QSGD
// arithmetic shared with the CUDA kernels (kernels/cuda/compress.cu), written to give the bits of comm's
// CPU QSGD (comm/src/compression.cpp) as built with -march=native.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "hpdt/core/float16.h"
#include "hpdt/core/hostdev.h"
#include "hpdt/core/philox.h"

namespace hpdt::kernels {

inline constexpr int64_t kQsgdChunk = 512;  // values per QSGD scale, as comm's Qsgd::kChunk

// Element i of a QSGD message rounds with philox_u32(seed, stream, offset + i) (comm: stream =
// (bucket id << 20) ^ rank, offset = calls * round_up(n, 4)).
struct QsgdRandom {
  uint64_t seed = 0, stream = 0, offset = 0;
};

namespace qsgd {

// 2^(bits-1) - 1 levels each side of zero; bits 2..8, sign included.
HPDT_HD_INLINE int levels(int bits) { return (1 << (bits - 1)) - 1; }

// Keeps a value in a register as it is, so the host compiler cannot fuse the product that made it into a
// later add (GCC contracts a*b + c into an FMA under -march=native; comm's code rounds these products).
HPDT_HD_INLINE float rounded(float x) {
#if !HPDT_DEVICE_CODE && defined(__GNUC__) && defined(__x86_64__)
  __asm__("" : "+x"(x));
#elif !HPDT_DEVICE_CODE && defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(x));
#endif
  return x;
}

// The level of x in a chunk with scale s = max |x| > 0: sign(x) min(L, floor(|x| / s * L + u)), u uniform
// in [0, 1) from 24 random bits; |x| / s and its product with L each rounded to f32, then the (exact) u
// added with one rounding. Returns 0 when s is 0.
HPDT_HD_INLINE int level(float x, float s, int L, uint32_t random_bits) {
  if (!(s > 0.0f)) return 0;
#if HPDT_DEVICE_CODE
  const float a = __fmul_rn(__fdiv_rn(fabsf(x), s), float(L));
  const int q = min(L, int(floorf(__fadd_rn(a, u32_to_uniform(random_bits)))));
#else
  const float a = rounded(std::fabs(x) / s * float(L));
  const float t = rounded(a + u32_to_uniform(random_bits));
  const int q = std::min(L, int(std::floor(t)));
#endif
  return x < 0.0f ? -q : q;
}

// s / L: the value of one level.
HPDT_HD_INLINE float step(float s, int L) {
#if HPDT_DEVICE_CODE
  return __fdiv_rn(s, float(L));
#else
  return s / float(L);
#endif
}

// The value a level decodes to, q * (s / L), rounded once.
HPDT_HD_INLINE float decode(int q, float step_value) {
#if HPDT_DEVICE_CODE
  return __fmul_rn(float(q), step_value);
#else
  return rounded(float(q) * step_value);
#endif
}

// What error feedback keeps: x - decode(q), rounded once (the product rounded first).
HPDT_HD_INLINE float residual(float x, int q, float step_value) {
#if HPDT_DEVICE_CODE
  return __fsub_rn(x, __fmul_rn(float(q), step_value));
#else
  return x - decode(q, step_value);
#endif
}

// out + q * (s / L) with one rounding: comm's decoding sum (contracted to an FMA there).
HPDT_HD_INLINE float decode_add(float out, int q, float step_value) {
#if HPDT_DEVICE_CODE
  return __fmaf_rn(float(q), step_value, out);
#else
  return std::fma(float(q), step_value, out);
#endif
}

// The bit-packing of comm's Qsgd: value i (q + L, `bits` bits) at bit i * bits of a little-endian bit
// stream (bit b is bit b % 8 of byte b / 8); the last byte's unused high bits are 0. Eight values fill
// exactly `bits` bytes.
HPDT_HD_INLINE uint32_t get(const uint8_t* buf, int64_t i, int bits) {
  const int64_t bit = i * bits, b = bit >> 3;
  uint32_t w = buf[b];
  if ((bit & 7) + bits > 8) w |= uint32_t(buf[b + 1]) << 8;
  return (w >> (bit & 7)) & ((1u << bits) - 1);
}

}  // namespace qsgd

namespace cpu {
// The k largest |x[i]| (by the bits of |x|: NaN above inf, -0 == +0), ties to the lower index, written in
// increasing index order: indices[j] and values[j] = x[indices[j]]. k <= n < 2^31.
void topk_select(int64_t n, const float* x, int64_t k, int32_t* indices, float* values);
// Scales (one per kQsgdChunk values: max |x|) and the packed levels ((n * bits + 7) / 8 bytes, fully
// written); residual (may be null) = x - decoded. Finite x.
void qsgd_quantize(int64_t n, const float* x, int bits, const QsgdRandom& rng, uint8_t* packed, float* scales,
                   float* residual);
// out = decoded (accumulate false) or out + decoded with one rounding (accumulate true).
void qsgd_dequantize(int64_t n, const uint8_t* packed, const float* scales, int bits, float* out, bool accumulate);
// out[indices[j]] += values[j] (f32 add), j in order.
void sparse_accumulate(int64_t k, const int32_t* indices, const float* values, float* out);
// x[indices[j]] = value.
void sparse_fill(int64_t k, const int32_t* indices, float value, float* x);
}  // namespace cpu

}  // namespace hpdt::kernels
