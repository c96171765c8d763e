#include "hpdt/kernels/pool.h"

#include "hpdt/kernels/cpu/pool.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/pool.h"
#endif

namespace hpdt::kernels {

namespace {
void check_window(const char* op, const Tensor& x_or_dx, int64_t k, int64_t stride, int64_t pad) {
  HPDT_CHECK(k >= 1 && stride >= 1 && pad >= 0 && 2 * pad <= k && x_or_dx.size(2) + 2 * pad >= k &&
                 x_or_dx.size(3) + 2 * pad >= k,
             op, ": unsupported window ", k, " stride ", stride, " pad ", pad, " for x ", x_or_dx.shape().str());
}
}  // namespace

void maxpool2d_forward(const Tensor& x, int64_t k, int64_t stride, int64_t pad, Tensor& y, Tensor& argmax,
                       const Stream& s) {
  const char* op = "maxpool2d_forward";
  const Device dev = detail::float_op_device(op, {&x, &y}, s);
  HPDT_CHECK(x.ndim() == 4, op, ": x must be [n, c, h, w], got ", x.shape().str());
  check_window(op, x, k, stride, pad);
  const int64_t oh = (x.size(2) + 2 * pad - k) / stride + 1, ow = (x.size(3) + 2 * pad - k) / stride + 1;
  const Shape ys{x.size(0), x.size(1), oh, ow};
  check_shape(op, "y", y, ys);
  if (!argmax.defined() || !(argmax.shape() == ys) || argmax.device() != dev)
    argmax = Tensor::empty(ys, DType::i32, dev, AllocOptions{.stream = &s});
  check_dtype(op, "argmax", argmax, DType::i32);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::maxpool2d_forward(x, k, stride, pad, y, argmax, s));
    return;
  }
  cpu::maxpool2d_forward<float>(x.size(0), x.size(1), x.size(2), x.size(3), k, stride, pad, x.data<float>(),
                                y.data<float>(), argmax.data<int32_t>());
}

void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, int64_t k, int64_t stride, int64_t pad, Tensor& dx,
                        const Stream& s) {
  const char* op = "maxpool2d_backward";
  const Device dev = detail::float_op_device(op, {&dy, &dx}, s);
  detail::common_device(op, {&dy, &argmax}, s);
  HPDT_CHECK(dx.ndim() == 4 && dy.ndim() == 4 && dy.size(0) == dx.size(0) && dy.size(1) == dx.size(1), op, ": dy ",
             dy.shape().str(), " does not match dx ", dx.shape().str());
  check_window(op, dx, k, stride, pad);
  const int64_t oh = (dx.size(2) + 2 * pad - k) / stride + 1, ow = (dx.size(3) + 2 * pad - k) / stride + 1;
  check_shape(op, "dy", dy, Shape{dx.size(0), dx.size(1), oh, ow});
  check_shape(op, "argmax", argmax, dy.shape());
  check_dtype(op, "argmax", argmax, DType::i32);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::maxpool2d_backward(dy, argmax, k, stride, pad, dx, s));
    return;
  }
  cpu::maxpool2d_backward<float>(dx.size(0), dx.size(1), dx.size(2), dx.size(3), dy.size(2), dy.size(3),
                                 dy.data<float>(), argmax.data<int32_t>(), dx.data<float>());
}

void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, Tensor& dx, const Stream& s) {
  const char* op = "maxpool2d_backward";
  const Device dev = detail::float_op_device(op, {&dy, &dx}, s);
  HPDT_CHECK(dev.is_cpu(), op,
             ": on CUDA pass the window (maxpool2d_backward(dy, argmax, k, stride, pad, dx, stream)): "
             "the backward is a gather over the windows that contain each input element");
  HPDT_CHECK(dx.ndim() == 4 && dy.ndim() == 4 && dy.size(0) == dx.size(0) && dy.size(1) == dx.size(1), op, ": dy ",
             dy.shape().str(), " does not match dx ", dx.shape().str());
  check_shape(op, "argmax", argmax, dy.shape());
  check_dtype(op, "argmax", argmax, DType::i32);
  cpu::maxpool2d_backward<float>(dx.size(0), dx.size(1), dx.size(2), dx.size(3), dy.size(2), dy.size(3),
                                 dy.data<float>(), argmax.data<int32_t>(), dx.data<float>());
}

void global_avgpool_forward(const Tensor& x, Tensor& y, const Stream& s) {
  const char* op = "global_avgpool_forward";
  const Device dev = detail::float_op_device(op, {&x, &y}, s);
  HPDT_CHECK(x.ndim() == 4, op, ": x must be [n, c, h, w], got ", x.shape().str());
  check_shape(op, "y", y, Shape{x.size(0), x.size(1)});
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::global_avgpool_forward(x, y, s));
    return;
  }
  cpu::global_avgpool_forward<float>(x.size(0), x.size(1), x.size(2) * x.size(3), x.data<float>(), y.data<float>());
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx, const Stream& s) {
  const char* op = "global_avgpool_backward";
  const Device dev = detail::float_op_device(op, {&dy, &dx}, s);
  HPDT_CHECK(dx.ndim() == 4, op, ": dx must be [n, c, h, w], got ", dx.shape().str());
  check_shape(op, "dy", dy, Shape{dx.size(0), dx.size(1)});
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::global_avgpool_backward(dy, dx, s));
    return;
  }
  cpu::global_avgpool_backward<float>(dx.size(0), dx.size(1), dx.size(2) * dx.size(3), dy.data<float>(),
                                      dx.data<float>());
}

}  // namespace hpdt::kernels
