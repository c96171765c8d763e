// CPU batch norm (NCHW, per channel) and layer norm (last dimension). Statistics accumulate in double.
#pragma once

#include <cstdint>

namespace hpdt::kernels::cpu {

// Batch norm in phases so that a SyncBN all-reduce can sit between them:
//   stats:    sum[c] = sum x, sumsq[c] = sum x^2 over n, h, w
//   (all-reduce sum/sumsq/count across ranks here for SyncBN)
//   finalize: mean, invstd = 1/sqrt(var + eps) with var the biased variance; running stats updated
//             with momentum and the unbiased variance (PyTorch semantics)
//   apply:    y = (x - mean) * invstd * gamma + beta  (eval: mean/var are the running stats)
template <class T>
void batchnorm_stats(int64_t n, int64_t c, int64_t hw, const T* x, double* sum, double* sumsq);
// running_mean/running_var may be null (no update).
template <class T>
void batchnorm_finalize(int64_t c, double count, const double* sum, const double* sumsq, double eps, double momentum,
                        T* mean, T* invstd, T* running_mean, T* running_var);
template <class T>
void batchnorm_apply(int64_t n, int64_t c, int64_t hw, const T* x, const T* mean, const T* invstd, const T* gamma,
                     const T* beta, T* y);
// Backward in two phases (SyncBN all-reduces sum_dy / sum_dy_xhat between them):
//   reduce: sum_dy[c] = sum dy, sum_dy_xhat[c] = sum dy * xhat. These are also dbeta and dgamma.
//   apply:  dx = gamma * invstd * (dy - sum_dy/count - xhat * sum_dy_xhat/count)
template <class T>
void batchnorm_backward_reduce(int64_t n, int64_t c, int64_t hw, const T* dy, const T* x, const T* mean,
                               const T* invstd, double* sum_dy, double* sum_dy_xhat);
template <class T>
void batchnorm_backward_apply(int64_t n, int64_t c, int64_t hw, const T* dy, const T* x, const T* mean,
                              const T* invstd, const T* gamma, const double* sum_dy, const double* sum_dy_xhat,
                              double count, T* dx);
// Eval-mode backward (statistics are constants): dx = dy * gamma * invstd.

// Layer norm over the last dimension d of `rows` rows; saves mean and rstd per row for backward.
template <class T>
void layernorm_forward(int64_t rows, int64_t d, const T* x, const T* gamma, const T* beta, T eps, T* y, T* mean,
                       T* rstd);
// dx overwritten; dgamma, dbeta accumulated (+=).
template <class T>
void layernorm_backward(int64_t rows, int64_t d, const T* dy, const T* x, const T* gamma, const T* mean,
                        const T* rstd, T* dx, T* dgamma, T* dbeta);

}  // namespace hpdt::kernels::cpu
