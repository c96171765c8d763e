#include "hpdt/kernels/layout.h"

#include "hpdt/kernels/cpu/layout.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/layout.h"
#endif

namespace hpdt::kernels {

Layout parse_layout(std::string_view name, std::string_view what) {
  if (name == "nchw") return Layout::nchw;
  if (name == "nhwc") return Layout::nhwc;
  HPDT_FAIL(what, ": unknown layout '", name, "' (known: nchw nhwc)");
}

namespace {
void transpose(const char* op, const Tensor& x, Tensor& y, bool to_nhwc, const Stream& s) {
  const Device dev = detail::float_op_device(op, {&x, &y}, s);
  HPDT_CHECK(x.ndim() == 4, op, ": x must be 4-D, got ", x.shape().str());
  HPDT_CHECK(x.data() != y.data() || x.numel() == 0, op, ": y must not alias x");
  const Shape out = to_nhwc ? Shape{x.size(0), x.size(2), x.size(3), x.size(1)}
                            : Shape{x.size(0), x.size(3), x.size(1), x.size(2)};
  check_shape(op, "y", y, out);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(to_nhwc ? cuda::nchw_to_nhwc(x, y, s) : cuda::nhwc_to_nchw(x, y, s));
    return;
  }
  if (to_nhwc)
    cpu::nchw_to_nhwc(x.size(0), x.size(1), x.size(2) * x.size(3), x.data<float>(), y.data<float>());
  else
    cpu::nhwc_to_nchw(x.size(0), x.size(3), x.size(1) * x.size(2), x.data<float>(), y.data<float>());
}
}  // namespace

void nchw_to_nhwc(const Tensor& x, Tensor& y, const Stream& s) { transpose("nchw_to_nhwc", x, y, true, s); }
void nhwc_to_nchw(const Tensor& x, Tensor& y, const Stream& s) { transpose("nhwc_to_nchw", x, y, false, s); }

}  // namespace hpdt::kernels
