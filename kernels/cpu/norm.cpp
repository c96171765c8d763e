// Batch norm and layer norm on the CPU. Per-channel / per-row sums accumulate in double so that the
// E[x^2] - E[x]^2 variance does not lose digits at large n*h*w.
#include "hpdt/kernels/cpu/norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace hpdt::kernels::cpu {

template <class T>
using Acc = T;

template <class T>
void batchnorm_stats(int64_t n, int64_t c, int64_t hw, const T* x, double* sum, double* sumsq) {
#pragma omp parallel for schedule(static) if (n * c * hw > (1 << 14))
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const T* p = x + (i * c + ch) * hw;
      Acc<T> fs = 0, fs2 = 0;  // a plane in T (vectorises), planes in double
      for (int64_t j = 0; j < hw; ++j) {
        fs += p[j];
        fs2 += p[j] * p[j];
      }
      s += double(fs);
      s2 += double(fs2);
    }
    sum[ch] = s;
    sumsq[ch] = s2;
  }
}

template <class T>
void batchnorm_finalize(int64_t c, double count, const double* sum, const double* sumsq, double eps, double momentum,
                        T* mean, T* invstd, T* running_mean, T* running_var) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const double m = sum[ch] / count;
    const double var = std::max(0.0, sumsq[ch] / count - m * m);
    mean[ch] = T(m);
    invstd[ch] = T(1.0 / std::sqrt(var + eps));
    if (running_mean) running_mean[ch] = T((1 - momentum) * double(running_mean[ch]) + momentum * m);
    if (running_var) {
      const double unbiased = count > 1 ? var * count / (count - 1) : var;
      running_var[ch] = T((1 - momentum) * double(running_var[ch]) + momentum * unbiased);
    }
  }
}

template <class T>
void batchnorm_apply(int64_t n, int64_t c, int64_t hw, const T* x, const T* mean, const T* invstd, const T* gamma,
                     const T* beta, T* y) {
#pragma omp parallel for schedule(static) if (n * c * hw > (1 << 14))
  for (int64_t plane = 0; plane < n * c; ++plane) {
    const int64_t ch = plane % c;
    const T a = invstd[ch] * gamma[ch], b = beta[ch] - mean[ch] * a;
    const T* p = x + plane * hw;
    T* q = y + plane * hw;
    for (int64_t j = 0; j < hw; ++j) q[j] = p[j] * a + b;
  }
}

template <class T>
void batchnorm_backward_reduce(int64_t n, int64_t c, int64_t hw, const T* dy, const T* x, const T* mean,
                               const T* invstd, double* sum_dy, double* sum_dy_xhat) {
#pragma omp parallel for schedule(static) if (n * c * hw > (1 << 14))
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, sx = 0;
    const T m = mean[ch];
    for (int64_t i = 0; i < n; ++i) {
      const T* g = dy + (i * c + ch) * hw;
      const T* p = x + (i * c + ch) * hw;
      T fs = 0, fsx = 0;
      for (int64_t j = 0; j < hw; ++j) {
        fs += g[j];
        fsx += g[j] * (p[j] - m);
      }
      s += double(fs);
      sx += double(fsx);
    }
    sum_dy[ch] = s;
    sum_dy_xhat[ch] = sx * double(invstd[ch]);
  }
}

template <class T>
void batchnorm_backward_apply(int64_t n, int64_t c, int64_t hw, const T* dy, const T* x, const T* mean,
                              const T* invstd, const T* gamma, const double* sum_dy, const double* sum_dy_xhat,
                              double count, T* dx) {
#pragma omp parallel for schedule(static) if (n * c * hw > (1 << 14))
  for (int64_t plane = 0; plane < n * c; ++plane) {
    const int64_t ch = plane % c;
    const T is = invstd[ch], k = gamma[ch] * is;
    const T mdy = T(sum_dy[ch] / count), mdyx = T(sum_dy_xhat[ch] / count);
    const T m = mean[ch];
    const T* g = dy + plane * hw;
    const T* p = x + plane * hw;
    T* q = dx + plane * hw;
    for (int64_t j = 0; j < hw; ++j) q[j] = k * (g[j] - mdy - (p[j] - m) * is * mdyx);
  }
}

template <class T>
void layernorm_forward(int64_t rows, int64_t d, const T* x, const T* gamma, const T* beta, T eps, T* y, T* mean,
                       T* rstd) {
#pragma omp parallel for schedule(static) if (rows * d > (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = x + r * d;
    T* q = y + r * d;
    T s = 0;
    for (int64_t j = 0; j < d; ++j) s += p[j];
    const T m = s / T(d);
    T v = 0;
    for (int64_t j = 0; j < d; ++j) v += (p[j] - m) * (p[j] - m);
    const T rs = T(1) / std::sqrt(v / T(d) + eps);
    for (int64_t j = 0; j < d; ++j) q[j] = (p[j] - m) * rs * gamma[j] + beta[j];
    mean[r] = m;
    rstd[r] = rs;
  }
}

template <class T>
void layernorm_backward(int64_t rows, int64_t d, const T* dy, const T* x, const T* gamma, const T* mean,
                        const T* rstd, T* dx, T* dgamma, T* dbeta) {
  const int threads = rows * d > (1 << 14) ? omp_get_max_threads() : 1;
  std::vector<T> partial(size_t(threads) * size_t(2 * d), T(0));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    T* pg = partial.data() + size_t(omp_get_thread_num()) * size_t(2 * d);
    T* pb = pg + d;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* g = dy + r * d;
      const T* p = x + r * d;
      T* q = dx + r * d;
      const T m = mean[r], rs = rstd[r];
      T sg = 0, sgx = 0;
      for (int64_t j = 0; j < d; ++j) {
        const T xh = (p[j] - m) * rs, gj = g[j] * gamma[j];
        sg += gj;
        sgx += gj * xh;
        pg[j] += g[j] * xh;
        pb[j] += g[j];
      }
      sg /= T(d);
      sgx /= T(d);
      for (int64_t j = 0; j < d; ++j) q[j] = rs * (g[j] * gamma[j] - sg - (p[j] - m) * rs * sgx);
    }
  }
  for (int t = 0; t < threads; ++t)
    for (int64_t j = 0; j < d; ++j) {
      dgamma[j] += partial[size_t(t) * size_t(2 * d) + size_t(j)];
      dbeta[j] += partial[size_t(t) * size_t(2 * d) + size_t(d + j)];
    }
}

#define HPDT_INSTANTIATE(T)                                                                                       \
  template void batchnorm_stats<T>(int64_t, int64_t, int64_t, const T*, double*, double*);                       \
  template void batchnorm_finalize<T>(int64_t, double, const double*, const double*, double, double, T*, T*, T*,  \
                                      T*);                                                                       \
  template void batchnorm_apply<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*); \
  template void batchnorm_backward_reduce<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*,  \
                                             double*, double*);                                                  \
  template void batchnorm_backward_apply<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*,   \
                                            const T*, const double*, const double*, double, T*);                 \
  template void layernorm_forward<T>(int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*);             \
  template void layernorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*, T*, T*);
HPDT_INSTANTIATE(float)
HPDT_INSTANTIATE(double)
#undef HPDT_INSTANTIATE

}  // namespace hpdt::kernels::cpu
