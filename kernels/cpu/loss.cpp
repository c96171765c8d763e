// Softmax cross-entropy with label smoothing on the CPU: log-sum-exp with the row maximum subtracted.
#include "hpdt/kernels/cpu/loss.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hpdt/core/error.h"

namespace hpdt::kernels::cpu {

template <class T>
double softmax_cross_entropy(int64_t b, int64_t classes, const T* logits, const int32_t* labels, double smoothing,
                             T* dlogits, double grad_scale) {
  HPDT_CHECK(smoothing >= 0.0 && smoothing <= 1.0, "softmax_cross_entropy: label smoothing ", smoothing,
             " is not in [0, 1]");
  for (int64_t i = 0; i < b; ++i)
    HPDT_CHECK(labels[i] >= 0 && labels[i] < classes, "softmax_cross_entropy: label ", labels[i], " of sample ", i,
               " is outside [0, ", classes, ")");
  const double off = smoothing / double(classes), on = 1.0 - smoothing + off;
  double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (b * classes > (1 << 14))
  for (int64_t i = 0; i < b; ++i) {
    const T* z = logits + i * classes;
    double m = double(z[0]);
    for (int64_t c = 1; c < classes; ++c) m = std::max(m, double(z[c]));
    double s = 0, qz = 0;
    for (int64_t c = 0; c < classes; ++c) {
      s += std::exp(double(z[c]) - m);
      qz += (c == labels[i] ? on : off) * double(z[c]);
    }
    const double lse = m + std::log(s);
    total += lse - qz;
    if (dlogits) {
      const double k = grad_scale / double(b);
      for (int64_t c = 0; c < classes; ++c)
        dlogits[i * classes + c] = T((std::exp(double(z[c]) - lse) - (c == labels[i] ? on : off)) * k);
    }
  }
  return total / double(b);
}

template <class T>
int64_t count_correct(int64_t b, int64_t classes, const T* logits, const int32_t* labels) {
  int64_t correct = 0;
  for (int64_t i = 0; i < b; ++i) {
    const T* z = logits + i * classes;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < classes; ++c) m = std::fmax(m, z[c]);  // fmax: NaNs skipped, as on the GPU
    int64_t first = classes;
    for (int64_t c = 0; c < classes && first == classes; ++c)
      if (z[c] == m) first = c;
    correct += first < classes && first == labels[i];  // (a row of NaNs has no first)
  }
  return correct;
}

template double softmax_cross_entropy<float>(int64_t, int64_t, const float*, const int32_t*, double, float*, double);
template double softmax_cross_entropy<double>(int64_t, int64_t, const double*, const int32_t*, double, double*,
                                              double);

template int64_t count_correct<float>(int64_t, int64_t, const float*, const int32_t*);
template int64_t count_correct<double>(int64_t, int64_t, const double*, const int32_t*);

}  // namespace hpdt::kernels::cpu
