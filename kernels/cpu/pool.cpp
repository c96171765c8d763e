// Max pool and global average pool on the CPU: NCHW one plane per OpenMP iteration, NHWC one pixel or
// image per iteration with the channels innermost.
#include "hpdt/kernels/cpu/pool.h"

#include <algorithm>
#include <limits>

namespace hpdt::kernels::cpu {

template <class T>
void maxpool2d_forward(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t stride, int64_t pad,
                       const T* x, T* y, int32_t* argmax) {
  const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
#pragma omp parallel for schedule(static) if (n * c * oh * ow > (1 << 14))
  for (int64_t plane = 0; plane < n * c; ++plane) {
    const T* p = x + plane * h * w;
    T* q = y + plane * oh * ow;
    int32_t* a = argmax + plane * oh * ow;
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        T best = -std::numeric_limits<T>::infinity();
        int64_t at = -1;
        for (int64_t ky = 0; ky < k; ++ky) {
          const int64_t iy = oy * stride - pad + ky;
          if (iy < 0 || iy >= h) continue;
          for (int64_t kx = 0; kx < k; ++kx) {
            const int64_t ix = ox * stride - pad + kx;
            if (ix < 0 || ix >= w) continue;
            const T v = p[iy * w + ix];
            if (at < 0 || v > best || v != v) {  // NaN propagates like PyTorch
              best = v;
              at = iy * w + ix;
            }
          }
        }
        q[oy * ow + ox] = best;
        a[oy * ow + ox] = int32_t(at);
      }
  }
}

template <class T>
void maxpool2d_backward(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow, const T* dy,
                        const int32_t* argmax, T* dx) {
#pragma omp parallel for schedule(static) if (n * c * h * w > (1 << 14))
  for (int64_t plane = 0; plane < n * c; ++plane) {
    T* q = dx + plane * h * w;
    std::fill(q, q + h * w, T(0));
    const T* g = dy + plane * oh * ow;
    const int32_t* a = argmax + plane * oh * ow;
    for (int64_t i = 0; i < oh * ow; ++i)
      if (a[i] >= 0) q[a[i]] += g[i];
  }
}

template <class T>
void global_avgpool_forward(int64_t n, int64_t c, int64_t hw, const T* x, T* y) {
#pragma omp parallel for schedule(static) if (n * c * hw > (1 << 14))
  for (int64_t plane = 0; plane < n * c; ++plane) {
    const T* p = x + plane * hw;
    T s = 0;
    for (int64_t j = 0; j < hw; ++j) s += p[j];
    y[plane] = s / T(hw);
  }
}

template <class T>
void global_avgpool_backward(int64_t n, int64_t c, int64_t hw, const T* dy, T* dx) {
#pragma omp parallel for schedule(static) if (n * c * hw > (1 << 14))
  for (int64_t plane = 0; plane < n * c; ++plane) {
    const T g = dy[plane] / T(hw);
    T* q = dx + plane * hw;
    for (int64_t j = 0; j < hw; ++j) q[j] = g;
  }
}

// NHWC: the window loop per output pixel, the channel loop innermost (vectorised). The argmax is the
// same index into the h*w plane as NCHW's.
template <class T>
void maxpool2d_forward_nhwc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t stride, int64_t pad,
                            const T* x, T* y, int32_t* argmax) {
  const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
#pragma omp parallel for schedule(static) if (n * c * oh * ow > (1 << 14))
  for (int64_t pix = 0; pix < n * oh * ow; ++pix) {
    const int64_t i = pix / (oh * ow), oy = pix / ow % oh, ox = pix % ow;
    T* q = y + pix * c;
    int32_t* a = argmax + pix * c;
    std::fill(q, q + c, -std::numeric_limits<T>::infinity());
    std::fill(a, a + c, -1);
    for (int64_t ky = 0; ky < k; ++ky) {
      const int64_t iy = oy * stride - pad + ky;
      if (iy < 0 || iy >= h) continue;
      for (int64_t kx = 0; kx < k; ++kx) {
        const int64_t ix = ox * stride - pad + kx;
        if (ix < 0 || ix >= w) continue;
        const T* p = x + ((i * h + iy) * w + ix) * c;
        const int32_t at = int32_t(iy * w + ix);
        for (int64_t ch = 0; ch < c; ++ch) {
          const T v = p[ch];
          const bool take = a[ch] < 0 || v > q[ch] || v != v;  // NaN propagates like PyTorch
          q[ch] = take ? v : q[ch];
          a[ch] = take ? at : a[ch];
        }
      }
    }
  }
}

template <class T>
void maxpool2d_backward_nhwc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow, const T* dy,
                             const int32_t* argmax, T* dx) {
#pragma omp parallel for schedule(static) if (n * c * h * w > (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    T* q = dx + i * h * w * c;
    std::fill(q, q + h * w * c, T(0));
    for (int64_t p = 0; p < oh * ow; ++p) {
      const T* g = dy + (i * oh * ow + p) * c;
      const int32_t* a = argmax + (i * oh * ow + p) * c;
      for (int64_t ch = 0; ch < c; ++ch)
        if (a[ch] >= 0) q[a[ch] * c + ch] += g[ch];
    }
  }
}

template <class T>
void global_avgpool_forward_nhwc(int64_t n, int64_t c, int64_t hw, const T* x, T* y) {
#pragma omp parallel for schedule(static) if (n * c * hw > (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    T* q = y + i * c;
    std::fill(q, q + c, T(0));
    for (int64_t p = 0; p < hw; ++p) {
      const T* r = x + (i * hw + p) * c;
      for (int64_t ch = 0; ch < c; ++ch) q[ch] += r[ch];
    }
    for (int64_t ch = 0; ch < c; ++ch) q[ch] /= T(hw);
  }
}

template <class T>
void global_avgpool_backward_nhwc(int64_t n, int64_t c, int64_t hw, const T* dy, T* dx) {
#pragma omp parallel for schedule(static) if (n * c * hw > (1 << 14))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p) {
      T* q = dx + (i * hw + p) * c;
      for (int64_t ch = 0; ch < c; ++ch) q[ch] = dy[i * c + ch] / T(hw);
    }
}

#define HPDT_INSTANTIATE(T)                                                                                      \
  template void maxpool2d_forward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const T*, T*, \
                                     int32_t*);                                                                  \
  template void maxpool2d_backward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const T*,            \
                                      const int32_t*, T*);                                                       \
  template void global_avgpool_forward<T>(int64_t, int64_t, int64_t, const T*, T*);                             \
  template void global_avgpool_backward<T>(int64_t, int64_t, int64_t, const T*, T*);                            \
  template void maxpool2d_forward_nhwc<T>(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const T*, \
                                          T*, int32_t*);                                                         \
  template void maxpool2d_backward_nhwc<T>(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const T*,       \
                                           const int32_t*, T*);                                                  \
  template void global_avgpool_forward_nhwc<T>(int64_t, int64_t, int64_t, const T*, T*);                        \
  template void global_avgpool_backward_nhwc<T>(int64_t, int64_t, int64_t, const T*, T*);
HPDT_INSTANTIATE(float)
HPDT_INSTANTIATE(double)
#undef HPDT_INSTANTIATE

}  // namespace hpdt::kernels::cpu
