// IEEE binary16 (f16) and bfloat16 (bf16) storage types and their conversions to and from f32.
//
// One header for host and device, so CPU and CUDA code round the same way: round-to-nearest-even,
// overflow to +-Inf, subnormals kept (f16) and NaN kept a NaN of the same sign. On the host the
// conversions are portable integer code; in device code they use the hardware cvt instructions,
// which round identically (NaN payload bits may differ, the value stays a NaN).
#pragma once

#include <cstdint>
#include <cstring>

#include "hpdt/core/hostdev.h"

namespace hpdt {

HPDT_HD_INLINE uint32_t f32_bits(float f) {
#if HPDT_DEVICE_CODE
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

HPDT_HD_INLINE float f32_from_bits(uint32_t u) {
#if HPDT_DEVICE_CODE
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// ---- f16 ------------------------------------------------------------------------------------------

HPDT_HD_INLINE float f16_bits_to_f32(uint16_t h) {
#if HPDT_DEVICE_CODE
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // Inf, or NaN (made quiet, payload kept, as the hardware does)
    return f32_from_bits(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  }
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // subnormal: value = mant * 2^-24; normalise the mantissa into an f32 normal number
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    return f32_from_bits(sign | uint32_t(112 - e) << 23 | (mant & 0x3ffu) << 13);
  }
  return f32_from_bits(sign | (exp + 112u) << 23 | mant << 13);
#endif
}

HPDT_HD_INLINE uint16_t f32_to_f16_bits(float f) {
#if HPDT_DEVICE_CODE
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  uint32_t x = f32_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {  // Inf or NaN
    if (x == 0x7f800000u) return sign | 0x7c00u;
    return uint16_t(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // quiet NaN, top payload bits kept
  }
  const uint32_t e = x >> 23;  // biased f32 exponent
  if (e < 113) {               // below 2^-14: an f16 subnormal or zero
    if (e < 102) return sign;  // < 2^-25: rounds to zero
    const uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // value = m * 2^(e-150) = (m >> shift) * 2^-24
    uint32_t k = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (k & 1u))) ++k;
    return uint16_t(sign | k);  // k == 0x400 is the smallest normal, which is right
  }
  if (e > 142) return sign | 0x7c00u;  // >= 2^16: overflow
  uint32_t r = ((e - 112) << 10) | ((x >> 13) & 0x3ffu);
  const uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // a carry into the exponent is right, up to Inf
  return uint16_t(sign | r);
#endif
}

// ---- bf16 -----------------------------------------------------------------------------------------

HPDT_HD_INLINE float bf16_bits_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

HPDT_HD_INLINE uint16_t f32_to_bf16_bits(float f) {
#if HPDT_DEVICE_CODE && __CUDA_ARCH__ >= 800
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // NaN: quiet, sign kept
  const uint32_t bias = 0x7fffu + ((x >> 16) & 1u);                            // ties to even
  return uint16_t((x + bias) >> 16);
#endif
}

// ---- storage types --------------------------------------------------------------------------------
// Two-byte trivially copyable types; arithmetic is done in f32 after an explicit conversion.

struct f16_t {
  uint16_t bits = 0;
  f16_t() = default;
  HPDT_HD_INLINE explicit f16_t(float f) : bits(f32_to_f16_bits(f)) {}
  HPDT_HD_INLINE static f16_t from_bits(uint16_t b) {
    f16_t h;
    h.bits = b;
    return h;
  }
  HPDT_HD_INLINE explicit operator float() const { return f16_bits_to_f32(bits); }
};

struct bf16_t {
  uint16_t bits = 0;
  bf16_t() = default;
  HPDT_HD_INLINE explicit bf16_t(float f) : bits(f32_to_bf16_bits(f)) {}
  HPDT_HD_INLINE static bf16_t from_bits(uint16_t b) {
    bf16_t h;
    h.bits = b;
    return h;
  }
  HPDT_HD_INLINE explicit operator float() const { return bf16_bits_to_f32(bits); }
};

static_assert(sizeof(f16_t) == 2 && sizeof(bf16_t) == 2);

// Load any storage type as f32 and store f32 into any storage type: the one way kernels convert.
HPDT_HD_INLINE float to_f32(float x) { return x; }
HPDT_HD_INLINE float to_f32(f16_t x) { return f16_bits_to_f32(x.bits); }
HPDT_HD_INLINE float to_f32(bf16_t x) { return bf16_bits_to_f32(x.bits); }

template <class T>
HPDT_HD_INLINE T from_f32(float x);
template <>
HPDT_HD_INLINE float from_f32<float>(float x) { return x; }
template <>
HPDT_HD_INLINE f16_t from_f32<f16_t>(float x) { return f16_t::from_bits(f32_to_f16_bits(x)); }
template <>
HPDT_HD_INLINE bf16_t from_f32<bf16_t>(float x) { return bf16_t::from_bits(f32_to_bf16_bits(x)); }

// The largest f32 that T stores as +0: to_f32(from_f32<T>(x)) > 0 exactly when x > largest_stored_as_zero<T>() (NaN
// neither). One compare where the round trip would take several instructions (or, on the CUDA emulator, the portable
// integer conversion). f16: 2^-25, half its least positive value 2^-24 (the tie rounds to even: 0); bf16: 2^-134.
template <class T>
HPDT_HD_INLINE constexpr float largest_stored_as_zero();
template <>
HPDT_HD_INLINE constexpr float largest_stored_as_zero<float>() { return 0.0f; }
template <>
HPDT_HD_INLINE constexpr float largest_stored_as_zero<f16_t>() { return 0x1p-25f; }
template <>
HPDT_HD_INLINE constexpr float largest_stored_as_zero<bf16_t>() { return 0x1p-134f; }

}  // namespace hpdt
