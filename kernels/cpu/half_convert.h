// f32 <-> f16 over a range, by the F16C instructions (8 values each) where the build has them, else the
// portable rule of hpdt/core/float16.h; both give the same bits (round to nearest even, f16 subnormals
// kept, overflow to inf, NaN quieted with its top payload bits). Single-threaded: the OpenMP cast
// (elementwise.cpp) splits ranges over threads, comm's conversions (accumulate.cpp) run on its thread.
// Private to kernels/cpu.
#pragma once

#include <cstdint>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "hpdt/core/float16.h"

namespace hpdt::kernels::cpu::detail {

inline void f32_to_f16_range(const float* x, f16_t* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) y[i] = f16_t(x[i]);
}

inline void f16_to_f32_range(const f16_t* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
#endif
  for (; i < n; ++i) y[i] = float(x[i]);
}

}  // namespace hpdt::kernels::cpu::detail
