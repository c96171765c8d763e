// The float vector the CPU kernels are written in: one register of the widest set the build targets
// (AVX-512: 16 lanes, AVX2+FMA: 8 lanes, else a portable 4-lane struct the compiler vectorises as it
// can). The GEMM micro-kernel and the NHWC convolution use these primitives and nothing else, so one
// source serves every x86-64 level (-march=native picks the set at build time). Private to kernels/cpu.
#pragma once

#include <cstdint>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace hpdt::kernels::cpu::simd {

#if defined(__AVX512F__)
constexpr int VW = 16;
using vec = __m512;
inline vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vec v) { _mm512_storeu_ps(p, v); }
inline vec vset1(float x) { return _mm512_set1_ps(x); }
inline vec vzero() { return _mm512_setzero_ps(); }
inline vec vfma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
inline vec vmul(vec a, vec b) { return _mm512_mul_ps(a, b); }
inline vec vadd(vec a, vec b) { return _mm512_add_ps(a, b); }
// The first n (0 <= n <= VW) lanes of p, zeros above; reads nothing past p + n.
inline vec vload_first(const float* p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1u), p); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int VW = 8;
using vec = __m256;
inline vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vec v) { _mm256_storeu_ps(p, v); }
inline vec vset1(float x) { return _mm256_set1_ps(x); }
inline vec vzero() { return _mm256_setzero_ps(); }
inline vec vfma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
inline vec vmul(vec a, vec b) { return _mm256_mul_ps(a, b); }
inline vec vadd(vec a, vec b) { return _mm256_add_ps(a, b); }
inline vec vload_first(const float* p, int n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
}
#else
constexpr int VW = 4;
struct vec {
  float v[4];
};
inline vec vload(const float* p) { return {{p[0], p[1], p[2], p[3]}}; }
inline void vstore(float* p, vec a) {
  for (int i = 0; i < 4; ++i) p[i] = a.v[i];
}
inline vec vset1(float x) { return {{x, x, x, x}}; }
inline vec vzero() { return vset1(0.0f); }
inline vec vfma(vec a, vec b, vec c) {
  for (int i = 0; i < 4; ++i) c.v[i] += a.v[i] * b.v[i];
  return c;
}
inline vec vmul(vec a, vec b) {
  for (int i = 0; i < 4; ++i) a.v[i] *= b.v[i];
  return a;
}
inline vec vadd(vec a, vec b) {
  for (int i = 0; i < 4; ++i) a.v[i] += b.v[i];
  return a;
}
inline vec vload_first(const float* p, int n) {
  vec r = vzero();
  for (int i = 0; i < n; ++i) r.v[i] = p[i];
  return r;
}
#endif

// Stores the first n (0 <= n <= VW) lanes of v at p; writes nothing past p + n.
inline void vstore_first(float* p, vec v, int n) {
  if (n == VW) {
    vstore(p, v);
    return;
  }
  alignas(64) float tmp[VW];
  vstore(tmp, v);
  for (int i = 0; i < n; ++i) p[i] = tmp[i];
}

}  // namespace hpdt::kernels::cpu::simd
