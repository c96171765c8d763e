// Philox4x32-10 (Salmon et al., SC'11): a counter-based generator. The n-th random number of a
// (seed, stream) pair is a pure function of (seed, stream, n), so a CUDA thread and a CPU loop that
// ask for the same offsets get the same bits, and a run resumes from a single 64-bit offset.
//
// Mapping used everywhere in hpdt: key = seed (low word, high word); counter = (n/4 low, n/4 high,
// stream low, stream high); the n-th 32-bit output is lane n%4 of that block.
//
// Uniform floats are bit-identical on CPU and GPU. Normals use logf/cosf/sqrtf, whose last-bit
// rounding can differ between the host libm and CUDA (within 2 ulp); tests compare them with a tolerance.
#pragma once

#include <cmath>
#include <cstdint>

#include "hpdt/core/hostdev.h"

namespace hpdt {

struct Philox4x32 {
  uint32_t v[4];
};

HPDT_HD_INLINE uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  return uint32_t(p);
}

// The raw bijection: 10 rounds of Philox4x32 on `ctr` with key (k0, k1).
HPDT_HD_INLINE Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = philox_mulhilo(M0, ctr.v[0], &hi0);
    const uint32_t lo1 = philox_mulhilo(M1, ctr.v[2], &hi1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += W0;
    k1 += W1;
  }
  return ctr;
}

// Four consecutive 32-bit outputs: offsets 4*block .. 4*block+3 of (seed, stream).
HPDT_HD_INLINE Philox4x32 philox_block(uint64_t seed, uint64_t stream, uint64_t block) {
  return philox4x32_10(
      Philox4x32{{uint32_t(block), uint32_t(block >> 32), uint32_t(stream), uint32_t(stream >> 32)}},
      uint32_t(seed), uint32_t(seed >> 32));
}

HPDT_HD_INLINE uint32_t philox_u32(uint64_t seed, uint64_t stream, uint64_t offset) {
  return philox_block(seed, stream, offset >> 2).v[offset & 3];
}

// [0, 1) with 24 random bits: exact in f32, identical on every device.
HPDT_HD_INLINE float u32_to_uniform(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }
// (0, 1]: safe for log().
HPDT_HD_INLINE float u32_to_uniform_pos(uint32_t x) { return (float(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

HPDT_HD_INLINE float philox_uniform(uint64_t seed, uint64_t stream, uint64_t offset) {
  return u32_to_uniform(philox_u32(seed, stream, offset));
}

// Standard normal number `offset` of (seed, stream): Box-Muller on outputs 2k and 2k+1, where
// k = offset/2; even offsets take the cosine branch, odd ones the sine branch.
HPDT_HD_INLINE float philox_normal(uint64_t seed, uint64_t stream, uint64_t offset) {
  const uint64_t pair = offset & ~uint64_t(1);
  const Philox4x32 b = philox_block(seed, stream, pair >> 2);
  const uint32_t lane = uint32_t(pair & 3);
  const float u1 = u32_to_uniform_pos(b.v[lane]);
  const float u2 = u32_to_uniform(b.v[lane + 1]);
  const float r = sqrtf(-2.0f * logf(u1));
  const float theta = 6.28318530717958647692f * u2;
  return (offset & 1) ? r * sinf(theta) : r * cosf(theta);
}

// A host-side sequential generator over the same sequence, with state that fits a checkpoint.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0, uint64_t offset = 0)
      : seed_(seed), stream_(stream), offset_(offset) {}
  uint32_t next_u32() { return philox_u32(seed_, stream_, offset_++); }
  float uniform() { return u32_to_uniform(next_u32()); }                   // [0, 1)
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }  // [lo, hi)
  float normal() {                                                          // N(0, 1)
    offset_ = (offset_ + 1) & ~uint64_t(1);  // keep pairs aligned with philox_normal()
    const float z = philox_normal(seed_, stream_, offset_);
    offset_ += 1;
    return z;
  }
  // Uniform integer in [0, n) without modulo bias (Lemire's method with rejection).
  uint32_t below(uint32_t n) {
    uint64_t m = uint64_t(next_u32()) * n;
    uint32_t low = uint32_t(m);
    if (low < n) {
      const uint32_t threshold = uint32_t(-n) % n;
      while (low < threshold) {
        m = uint64_t(next_u32()) * n;
        low = uint32_t(m);
      }
    }
    return uint32_t(m >> 32);
  }
  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  void skip(uint64_t n) { offset_ += n; }

 private:
  uint64_t seed_, stream_, offset_;
};

}  // namespace hpdt
