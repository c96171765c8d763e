// CPU buffer reductions for comm/. Single-threaded on purpose: they run on the communication thread
// beside compute threads, and they are bound by memory bandwidth, which one core nearly saturates.
#include "hpdt/kernels/accumulate.h"

#include <cstring>
#include <type_traits>

#include "half_convert.h"

#include "hpdt/core/error.h"

namespace hpdt::kernels {

void accumulate_f32(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void add_f32(float* dst, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}

void divide_f32(float* x, size_t n, float d) {
  for (size_t i = 0; i < n; ++i) x[i] /= d;
}

namespace {
template <class D, class S>
void convert_typed(D* __restrict dst, const S* __restrict src, size_t n) {
  if constexpr (std::is_same_v<D, f16_t> && std::is_same_v<S, float>) {
    cpu::detail::f32_to_f16_range(src, dst, int64_t(n));  // F16C where available
  } else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, f16_t>) {
    cpu::detail::f16_to_f32_range(src, dst, int64_t(n));
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = from_f32<D>(to_f32(src[i]));
  }
}
}  // namespace

void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) {
  if (dst_type == src_type) {
    if (dst != src && n) std::memmove(dst, src, n * dtype_size(dst_type));
    return;
  }
  dispatch_floating(dst_type, "convert", [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_floating(src_type, "convert", [&](auto stag) {
      using S = decltype(stag);
      convert_typed(static_cast<D*>(dst), static_cast<const S*>(src), n);
    });
  });
}

}  // namespace hpdt::kernels
