#include "hpdt/kernels/reduce.h"

#include "hpdt/kernels/cpu/reduce.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/reduce.h"
#endif

namespace hpdt::kernels {

void sum(const Tensor& x, Tensor& out, const Stream& s) {
  if (detail::common_device("sum", {&x, &out}, s).is_cpu()) return cpu::sum(x, out);
  HPDT_ON_CUDA(cuda::sum(x, out, s));
}

}  // namespace hpdt::kernels
