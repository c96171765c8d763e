// Pointwise and row-wise activations on the CPU.
#include "hpdt/kernels/cpu/activation.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "hpdt/core/error.h"
#include "hpdt/core/philox.h"
#include "hpdt/kernels/math/activation_math.h"

namespace hpdt::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

template <class T>
void relu_forward(int64_t n, const T* x, T* y) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

template <class T>
void relu_backward(int64_t n, const T* y, const T* dy, T* dx) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}

template <class T>
void add_forward(int64_t n, const T* a, const T* b, T* y) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// GELU's scalar formulas live in hpdt/kernels/math/activation_math.h, shared with the CUDA kernels.
template <class T>
void gelu_forward(int64_t n, GeluForm form, const T* x, T* y) {
  if (form == GeluForm::erf) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin / 4)
    for (int64_t i = 0; i < n; ++i) y[i] = math::gelu_erf(x[i]);
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMin / 4)
    for (int64_t i = 0; i < n; ++i) y[i] = math::gelu_tanh(x[i]);
  }
}

template <class T>
void gelu_backward(int64_t n, GeluForm form, const T* x, const T* dy, T* dx) {
  if (form == GeluForm::erf) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin / 4)
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * math::gelu_erf_grad(x[i]);
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMin / 4)
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * math::gelu_tanh_grad(x[i]);
  }
}

template <class T>
void softmax_forward(int64_t rows, int64_t d, const T* x, T* y) {
#pragma omp parallel for schedule(static) if (rows * d >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = x + r * d;
    T* q = y + r * d;
    T m = p[0];
    for (int64_t j = 1; j < d; ++j) m = std::max(m, p[j]);
    T s = 0;
    for (int64_t j = 0; j < d; ++j) {
      q[j] = std::exp(p[j] - m);
      s += q[j];
    }
    const T inv = T(1) / s;
    for (int64_t j = 0; j < d; ++j) q[j] *= inv;
  }
}

template <class T>
void softmax_backward(int64_t rows, int64_t d, const T* y, const T* dy, T* dx) {
#pragma omp parallel for schedule(static) if (rows * d >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = y + r * d;
    const T* g = dy + r * d;
    T* q = dx + r * d;
    T s = 0;
    for (int64_t j = 0; j < d; ++j) s += g[j] * p[j];
    for (int64_t j = 0; j < d; ++j) q[j] = p[j] * (g[j] - s);
  }
}

template <class T>
void dropout_forward(int64_t n, float p, uint64_t seed, uint64_t stream, const T* x, T* y, uint64_t first) {
  HPDT_CHECK(p >= 0.0f && p < 1.0f, "dropout: probability ", p, " is not in [0, 1)");
  if (p == 0.0f) {
    if (x != y) std::memcpy(y, x, size_t(n) * sizeof(T));
    return;
  }
  const T keep_scale = T(1) / (T(1) - T(p));
#pragma omp parallel for schedule(static) if (n >= kParallelMin / 4)
  for (int64_t i = 0; i < n; ++i) y[i] = philox_uniform(seed, stream, first + uint64_t(i)) < p ? T(0) : x[i] * keep_scale;
}

template <class T>
void dropout_backward(int64_t n, float p, uint64_t seed, uint64_t stream, const T* dy, T* dx, uint64_t first) {
  dropout_forward(n, p, seed, stream, dy, dx, first);  // the same mask and scale
}

#define HPDT_INSTANTIATE(T)                                                           \
  template void relu_forward<T>(int64_t, const T*, T*);                               \
  template void relu_backward<T>(int64_t, const T*, const T*, T*);                    \
  template void add_forward<T>(int64_t, const T*, const T*, T*);                      \
  template void gelu_forward<T>(int64_t, GeluForm, const T*, T*);                     \
  template void gelu_backward<T>(int64_t, GeluForm, const T*, const T*, T*);          \
  template void softmax_forward<T>(int64_t, int64_t, const T*, T*);                   \
  template void softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);        \
  template void dropout_forward<T>(int64_t, float, uint64_t, uint64_t, const T*, T*, uint64_t); \
  template void dropout_backward<T>(int64_t, float, uint64_t, uint64_t, const T*, T*, uint64_t);
HPDT_INSTANTIATE(float)
HPDT_INSTANTIATE(double)
#undef HPDT_INSTANTIATE

}  // namespace hpdt::kernels::cpu
