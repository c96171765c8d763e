// Batch norm and layer norm on the CPU. Batch-norm sums accumulate in double, squares included (a float's
// square is exact in double), so that the E[x^2] - E[x]^2 variance keeps its digits at large n*h*w and
// where a channel's mean is large against its spread (mean 30, spread 0.05: float plane sums of x^2
// gave invstd 20 % off).
#include "hpdt/kernels/cpu/norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace hpdt::kernels::cpu {

// hw == 1: x is a [rows, c] matrix with channels innermost (NHWC activations, or BN on [n, c]).
// Sums run over fixed blocks of rows, vectorised across the channels, in double; the blocks' sums are
// then added in block order, so the result has the same bits at any thread count.
int64_t rows_per_block(int64_t c) { return std::max<int64_t>(16, (int64_t(1) << 14) / std::max<int64_t>(c, 1)); }

// body(row, s0, s1) adds row's terms into the block's sums s0[c], s1[c]; out0/out1[c] get the blocks'
// sums, added in block order.
template <class Body>
void row_block_sums(int64_t rows, int64_t c, double* out0, double* out1, Body body) {
  const int64_t rb = rows_per_block(c), blocks = (rows + rb - 1) / rb;
  std::vector<double> part(size_t(blocks * 2 * c));
#pragma omp parallel for schedule(static) if (rows * c > (1 << 14))
  for (int64_t b = 0; b < blocks; ++b) {
    double* s0 = part.data() + b * 2 * c;
    double* s1 = s0 + c;
    std::fill(s0, s0 + 2 * c, 0.0);
    for (int64_t r = b * rb; r < std::min(rows, (b + 1) * rb); ++r) body(r, s0, s1);
  }
  std::fill(out0, out0 + c, 0.0);
  std::fill(out1, out1 + c, 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      out0[ch] += part[size_t((b * 2) * c + ch)];
      out1[ch] += part[size_t((b * 2 + 1) * c + ch)];
    }
}

template <class T>
void batchnorm_stats(int64_t n, int64_t c, int64_t hw, const T* x, double* sum, double* sumsq) {
  if (hw == 1) {
    row_block_sums(n, c, sum, sumsq, [&](int64_t r, double* __restrict s0, double* __restrict s1) {
      const T* p = x + r * c;
      for (int64_t ch = 0; ch < c; ++ch) {
        s0[ch] += p[ch];
        s1[ch] += double(p[ch]) * p[ch];  // exact in double
      }
    });
    return;
  }
#pragma omp parallel for schedule(static) if (n * c * hw > (1 << 14))
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const T* p = x + (i * c + ch) * hw;
      for (int64_t j = 0; j < hw; ++j) {
        s += p[j];
        s2 += double(p[j]) * p[j];
      }
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
  if (hw == 1) {
    std::vector<T> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
    for (int64_t ch = 0; ch < c; ++ch) {
      a[size_t(ch)] = invstd[ch] * gamma[ch];
      b[size_t(ch)] = beta[ch] - mean[ch] * a[size_t(ch)];
    }
    const T* pa = a.data();
    const T* pb = b.data();
#pragma omp parallel for schedule(static) if (n * c > (1 << 14))
    for (int64_t r = 0; r < n; ++r) {
      const T* p = x + r * c;
      T* q = y + r * c;
      for (int64_t ch = 0; ch < c; ++ch) q[ch] = p[ch] * pa[ch] + pb[ch];
    }
    return;
  }
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
  if (hw == 1) {
    row_block_sums(n, c, sum_dy, sum_dy_xhat, [&](int64_t r, double* __restrict s0, double* __restrict s1) {
      const T* g = dy + r * c;
      const T* p = x + r * c;
      for (int64_t ch = 0; ch < c; ++ch) {
        s0[ch] += g[ch];
        s1[ch] += g[ch] * (p[ch] - mean[ch]);
      }
    });
    for (int64_t ch = 0; ch < c; ++ch) sum_dy_xhat[ch] *= double(invstd[ch]);
    return;
  }
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
  if (hw == 1) {
    // dx = k * (dy - mdy) - k2 * (x - mean), per channel k = gamma * invstd, k2 = k * invstd * mdyx
    std::vector<T> k(static_cast<size_t>(c)), mdy(static_cast<size_t>(c)), k2(static_cast<size_t>(c));
    for (int64_t ch = 0; ch < c; ++ch) {
      k[size_t(ch)] = gamma[ch] * invstd[ch];
      mdy[size_t(ch)] = T(sum_dy[ch] / count);
      k2[size_t(ch)] = k[size_t(ch)] * invstd[ch] * T(sum_dy_xhat[ch] / count);
    }
    const T* pk = k.data();
    const T* pm = mdy.data();
    const T* pk2 = k2.data();
#pragma omp parallel for schedule(static) if (n * c > (1 << 14))
    for (int64_t r = 0; r < n; ++r) {
      const T* g = dy + r * c;
      const T* p = x + r * c;
      T* q = dx + r * c;
      for (int64_t ch = 0; ch < c; ++ch) q[ch] = pk[ch] * (g[ch] - pm[ch]) - pk2[ch] * (p[ch] - mean[ch]);
    }
    return;
  }
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
