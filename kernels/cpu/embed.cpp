// ViT token embedding on the CPU (class token, position embedding, NCHW patch features to tokens).
#include "hpdt/kernels/cpu/embed.h"

#include <algorithm>

namespace hpdt::kernels::cpu {

template <class T>
void tokens_forward(int64_t b, int64_t d, int64_t p, const T* x, const T* cls, const T* pos, T* y) {
#pragma omp parallel for schedule(static) if (b * d * p > (1 << 15))
  for (int64_t bi = 0; bi < b; ++bi) {
    T* yb = y + bi * (p + 1) * d;
    for (int64_t j = 0; j < d; ++j) yb[j] = cls[j] + pos[j];
    const T* xb = x + bi * d * p;
    for (int64_t i = 0; i < p; ++i)
      for (int64_t j = 0; j < d; ++j) yb[(i + 1) * d + j] = xb[j * p + i] + pos[(i + 1) * d + j];
  }
}

template <class T>
void tokens_backward(int64_t b, int64_t d, int64_t p, const T* dy, T* dx, T* dcls, T* dpos) {
#pragma omp parallel for schedule(static) if (b * d * p > (1 << 15))
  for (int64_t bi = 0; bi < b; ++bi) {
    const T* g = dy + bi * (p + 1) * d;
    T* xb = dx + bi * d * p;
    for (int64_t i = 0; i < p; ++i)
      for (int64_t j = 0; j < d; ++j) xb[j * p + i] = g[(i + 1) * d + j];
  }
  for (int64_t bi = 0; bi < b; ++bi) {
    const T* g = dy + bi * (p + 1) * d;
    for (int64_t j = 0; j < d; ++j) dcls[j] += g[j];
    for (int64_t i = 0; i < (p + 1) * d; ++i) dpos[i] += g[i];
  }
}

template <class T>
void cls_select_forward(int64_t b, int64_t t, int64_t d, const T* x, T* y) {
  for (int64_t bi = 0; bi < b; ++bi) std::copy(x + bi * t * d, x + bi * t * d + d, y + bi * d);
}

template <class T>
void cls_select_backward(int64_t b, int64_t t, int64_t d, const T* dy, T* dx) {
  std::fill(dx, dx + b * t * d, T(0));
  for (int64_t bi = 0; bi < b; ++bi) std::copy(dy + bi * d, dy + bi * d + d, dx + bi * t * d);
}

#define HPDT_INSTANTIATE(T)                                                                          \
  template void tokens_forward<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*);     \
  template void tokens_backward<T>(int64_t, int64_t, int64_t, const T*, T*, T*, T*);                \
  template void cls_select_forward<T>(int64_t, int64_t, int64_t, const T*, T*);                     \
  template void cls_select_backward<T>(int64_t, int64_t, int64_t, const T*, T*);
HPDT_INSTANTIATE(float)
HPDT_INSTANTIATE(double)
#undef HPDT_INSTANTIATE

}  // namespace hpdt::kernels::cpu
