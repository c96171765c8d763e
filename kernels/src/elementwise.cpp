#include "hpdt/kernels/elementwise.h"

#include "hpdt/kernels/cpu/elementwise.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/elementwise.h"
#endif

namespace hpdt::kernels {

void fill(Tensor& y, float value, const Stream& s) {
  if (detail::common_device("fill", {&y}, s).is_cpu()) return cpu::fill(y, value);
  HPDT_ON_CUDA(cuda::fill(y, value, s));
}

void fill_uniform(Tensor& y, float lo, float hi, uint64_t seed, uint64_t offset, const Stream& s) {
  if (detail::common_device("fill_uniform", {&y}, s).is_cpu()) return cpu::fill_uniform(y, lo, hi, seed, offset);
  HPDT_ON_CUDA(cuda::fill_uniform(y, lo, hi, seed, offset, s));
}

void axpy(float alpha, const Tensor& x, Tensor& y, const Stream& s) {
  if (detail::common_device("axpy", {&x, &y}, s).is_cpu()) return cpu::axpy(alpha, x, y);
  HPDT_ON_CUDA(cuda::axpy(alpha, x, y, s));
}

void cast(const Tensor& x, Tensor& y, const Stream& s) {
  if (detail::common_device("cast", {&x, &y}, s).is_cpu()) return cpu::cast(x, y);
  HPDT_ON_CUDA(cuda::cast(x, y, s));
}

}  // namespace hpdt::kernels
