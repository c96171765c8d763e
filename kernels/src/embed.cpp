#include "hpdt/kernels/embed.h"

#include "hpdt/kernels/cpu/embed.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/embed.h"
#endif

namespace hpdt::kernels {

void tokens_forward(const Tensor& patches, const Tensor& cls, const Tensor& pos, Tensor& y, const Stream& s) {
  const char* op = "tokens_forward";
  const Device dev = detail::float_op_device(op, {&patches, &cls, &pos, &y}, s);
  HPDT_CHECK(patches.ndim() == 4, op, ": patches must be [b, d, gh, gw], got ", patches.shape().str());
  const int64_t b = patches.size(0), d = patches.size(1), p = patches.size(2) * patches.size(3);
  check_shape(op, "cls", cls, Shape{d});
  check_shape(op, "pos", pos, Shape{p + 1, d});
  check_shape(op, "y", y, Shape{b, p + 1, d});
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::tokens_forward(patches, cls, pos, y, s));
    return;
  }
  cpu::tokens_forward<float>(b, d, p, patches.data<float>(), cls.data<float>(), pos.data<float>(), y.data<float>());
}

void tokens_backward(const Tensor& dy, Tensor& dpatches, Tensor& dcls, Tensor& dpos, const Stream& s) {
  const char* op = "tokens_backward";
  const Device dev = detail::float_op_device(op, {&dy, &dpatches, &dcls, &dpos}, s);
  HPDT_CHECK(dpatches.ndim() == 4, op, ": dpatches must be [b, d, gh, gw], got ", dpatches.shape().str());
  const int64_t b = dpatches.size(0), d = dpatches.size(1), p = dpatches.size(2) * dpatches.size(3);
  check_shape(op, "dy", dy, Shape{b, p + 1, d});
  check_shape(op, "dcls", dcls, Shape{d});
  check_shape(op, "dpos", dpos, Shape{p + 1, d});
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::tokens_backward(dy, dpatches, dcls, dpos, s));
    return;
  }
  cpu::tokens_backward<float>(b, d, p, dy.data<float>(), dpatches.data<float>(), dcls.data<float>(),
                              dpos.data<float>());
}

void cls_select_forward(const Tensor& x, Tensor& y, const Stream& s) {
  const char* op = "cls_select_forward";
  const Device dev = detail::float_op_device(op, {&x, &y}, s);
  HPDT_CHECK(x.ndim() == 3, op, ": x must be [b, t, d], got ", x.shape().str());
  check_shape(op, "y", y, Shape{x.size(0), x.size(2)});
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::cls_select_forward(x, y, s));
    return;
  }
  cpu::cls_select_forward<float>(x.size(0), x.size(1), x.size(2), x.data<float>(), y.data<float>());
}

void cls_select_backward(const Tensor& dy, Tensor& dx, const Stream& s) {
  const char* op = "cls_select_backward";
  const Device dev = detail::float_op_device(op, {&dy, &dx}, s);
  HPDT_CHECK(dx.ndim() == 3, op, ": dx must be [b, t, d], got ", dx.shape().str());
  check_shape(op, "dy", dy, Shape{dx.size(0), dx.size(2)});
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::cls_select_backward(dy, dx, s));
    return;
  }
  cpu::cls_select_backward<float>(dx.size(0), dx.size(1), dx.size(2), dy.data<float>(), dx.data<float>());
}

}  // namespace hpdt::kernels
