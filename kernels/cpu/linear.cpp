// Linear layer on the CPU: GEMMs against the [out, in] weight, bias as a row broadcast / column sum.
#include "hpdt/kernels/cpu/linear.h"

#include "hpdt/kernels/cpu/gemm.h"

namespace hpdt::kernels::cpu {

template <class T>
void linear_forward(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y) {
  gemm<T>(false, true, rows, out, in, T(1), x, in, w, in, T(0), y, out);
  if (b) {
#pragma omp parallel for schedule(static) if (rows * out > (1 << 15))
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) y[r * out + j] += b[j];
  }
}

template <class T>
void linear_backward(int64_t rows, int64_t in, int64_t out, const T* dy, const T* x, const T* w, T* dx, T* dw,
                     T* db) {
  if (dx) gemm<T>(false, false, rows, in, out, T(1), dy, out, w, in, T(0), dx, in);
  gemm<T>(true, false, out, in, rows, T(1), dy, out, x, in, T(1), dw, in);
  if (db) {
#pragma omp parallel for schedule(static) if (rows * out > (1 << 15))
    for (int64_t j = 0; j < out; ++j) {
      T s = 0;
      for (int64_t r = 0; r < rows; ++r) s += dy[r * out + j];
      db[j] += s;
    }
  }
}

template void linear_forward<float>(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*);
template void linear_forward<double>(int64_t, int64_t, int64_t, const double*, const double*, const double*, double*);
template void linear_backward<float>(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*,
                                     float*, float*);
template void linear_backward<double>(int64_t, int64_t, int64_t, const double*, const double*, const double*,
                                      double*, double*, double*);

}  // namespace hpdt::kernels::cpu
