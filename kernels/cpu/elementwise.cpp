// CPU elementwise kernels: OpenMP over contiguous ranges, f32 math, RNE rounding to the storage type.
#include "hpdt/kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "half_convert.h"
#include "hpdt/core/philox.h"

namespace hpdt::kernels::cpu {

namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

template <class T>
inline T store_as(float v) {
  if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, uint8_t>) return T(v);
  else return from_f32<T>(v);
}

template <class F>
void for_each_index(int64_t n, F&& f) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) f(i);
}

template <class T>
void fill_typed(Tensor& y, float value) {
  const T v = store_as<T>(value);
  T* p = static_cast<T*>(y.data());
  for_each_index(y.numel(), [&](int64_t i) { p[i] = v; });
}

// f32 <-> f16 (F16C where available, half_convert.h) in blocks of 4096 over the OpenMP threads.
constexpr int64_t kCastBlock = 4096;
void cast_f32_to_f16(const float* x, f16_t* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t b = 0; b < n; b += kCastBlock) detail::f32_to_f16_range(x + b, y + b, std::min(kCastBlock, n - b));
}

void cast_f16_to_f32(const f16_t* x, float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t b = 0; b < n; b += kCastBlock) detail::f16_to_f32_range(x + b, y + b, std::min(kCastBlock, n - b));
}

template <class TIn, class TOut>
void cast_typed(const Tensor& x, Tensor& y) {
  const TIn* in = static_cast<const TIn*>(x.data());
  TOut* out = static_cast<TOut*>(y.data());
  const int64_t n = x.numel();
  if constexpr (std::is_same_v<TIn, float> && std::is_same_v<TOut, f16_t>) {
    cast_f32_to_f16(in, out, n);
  } else if constexpr (std::is_same_v<TIn, f16_t> && std::is_same_v<TOut, float>) {
    cast_f16_to_f32(in, out, n);
  } else {
    for_each_index(n, [&](int64_t i) { out[i] = from_f32<TOut>(to_f32(in[i])); });
  }
}

}  // namespace

void fill(Tensor& y, float value) {
  switch (y.dtype()) {
    case DType::f32: return fill_typed<float>(y, value);
    case DType::f16: return fill_typed<f16_t>(y, value);
    case DType::bf16: return fill_typed<bf16_t>(y, value);
    case DType::i32: return fill_typed<int32_t>(y, value);
    case DType::u8: return fill_typed<uint8_t>(y, value);
  }
}

void fill_uniform(Tensor& y, float lo, float hi, uint64_t seed, uint64_t offset) {
  HPDT_CHECK(lo <= hi, "fill_uniform: lo ", lo, " > hi ", hi);
  dispatch_floating(y.dtype(), "fill_uniform", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(y.data());
    const float scale = hi - lo;
    for_each_index(y.numel(), [&](int64_t i) {
      p[i] = from_f32<T>(std::fma(scale, philox_uniform(seed, 0, offset + uint64_t(i)), lo));  // fused, as on CUDA
    });
  });
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  check_same_dtype("axpy", x, y);
  check_same_numel("axpy", x, y);
  dispatch_floating(y.dtype(), "axpy", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data());
    T* yp = static_cast<T*>(y.data());
    // One fused multiply-add, as nvcc always emits for the CUDA twin: the same bits whether or not the
    // host compiler would contract a*x + y on its own (it does only when optimising for FMA hardware).
    for_each_index(y.numel(), [&](int64_t i) { yp[i] = from_f32<T>(std::fma(alpha, to_f32(xp[i]), to_f32(yp[i]))); });
  });
}

void cast(const Tensor& x, Tensor& y) {
  check_same_numel("cast", x, y);
  dispatch_floating(x.dtype(), "cast (input)", [&](auto in_tag) {
    dispatch_floating(y.dtype(), "cast (output)", [&](auto out_tag) {
      cast_typed<decltype(in_tag), decltype(out_tag)>(x, y);
    });
  });
}

}  // namespace hpdt::kernels::cpu
