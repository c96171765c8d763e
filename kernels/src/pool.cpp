#include "hpdt/kernels/pool.h"

#include "hpdt/kernels/cpu/pool.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/pool.h"
#endif

namespace hpdt::kernels {

namespace {
// n, c, h, w of a 4-D activation in `layout`.
struct Dims {
  int64_t n, c, h, w;
};
Dims dims(const char* op, const char* name, const Tensor& t, Layout layout) {
  const bool nhwc = layout == Layout::nhwc;
  HPDT_CHECK(t.ndim() == 4, op, ": ", name, " must be ", nhwc ? "[n, h, w, c]" : "[n, c, h, w]", ", got ",
             t.shape().str());
  return nhwc ? Dims{t.size(0), t.size(3), t.size(1), t.size(2)} : Dims{t.size(0), t.size(1), t.size(2), t.size(3)};
}
Shape shape_of(const Dims& d, Layout layout) {
  return layout == Layout::nhwc ? Shape{d.n, d.h, d.w, d.c} : Shape{d.n, d.c, d.h, d.w};
}
void check_window(const char* op, const Tensor& x_or_dx, const Dims& d, int64_t k, int64_t stride, int64_t pad) {
  HPDT_CHECK(k >= 1 && stride >= 1 && pad >= 0 && 2 * pad <= k && d.h + 2 * pad >= k && d.w + 2 * pad >= k, op,
             ": unsupported window ", k, " stride ", stride, " pad ", pad, " for x ", x_or_dx.shape().str());
}
void check_backward(const char* op, const Tensor& dy, const Tensor& argmax, const Dims& dyd, const Dims& dxd,
                    const Tensor& dx) {
  HPDT_CHECK(dyd.n == dxd.n && dyd.c == dxd.c, op, ": dy ", dy.shape().str(), " does not match dx ", dx.shape().str());
  check_shape(op, "argmax", argmax, dy.shape());
  check_dtype(op, "argmax", argmax, DType::i32);
}
void maxpool_backward_cpu(const Tensor& dy, const Tensor& argmax, Tensor& dx, const Dims& dyd, const Dims& dxd,
                          Layout layout) {
  if (layout == Layout::nhwc)
    cpu::maxpool2d_backward_nhwc<float>(dxd.n, dxd.c, dxd.h, dxd.w, dyd.h, dyd.w, dy.data<float>(),
                                        argmax.data<int32_t>(), dx.data<float>());
  else
    cpu::maxpool2d_backward<float>(dxd.n, dxd.c, dxd.h, dxd.w, dyd.h, dyd.w, dy.data<float>(), argmax.data<int32_t>(),
                                   dx.data<float>());
}
}  // namespace

void maxpool2d_forward(const Tensor& x, int64_t k, int64_t stride, int64_t pad, Tensor& y, Tensor& argmax,
                       const Stream& s, Layout layout) {
  const char* op = "maxpool2d_forward";
  const Device dev = detail::float_op_device(op, {&x, &y}, s);
  const Dims d = dims(op, "x", x, layout);
  check_window(op, x, d, k, stride, pad);
  const Dims yd{d.n, d.c, (d.h + 2 * pad - k) / stride + 1, (d.w + 2 * pad - k) / stride + 1};
  const Shape ys = shape_of(yd, layout);
  check_shape(op, "y", y, ys);
  if (!argmax.defined() || !(argmax.shape() == ys) || argmax.device() != dev)
    argmax = Tensor::empty(ys, DType::i32, dev, AllocOptions{.stream = &s});
  check_dtype(op, "argmax", argmax, DType::i32);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::maxpool2d_forward(x, k, stride, pad, y, argmax, s, layout));
    return;
  }
  if (layout == Layout::nhwc)
    cpu::maxpool2d_forward_nhwc<float>(d.n, d.c, d.h, d.w, k, stride, pad, x.data<float>(), y.data<float>(),
                                       argmax.data<int32_t>());
  else
    cpu::maxpool2d_forward<float>(d.n, d.c, d.h, d.w, k, stride, pad, x.data<float>(), y.data<float>(),
                                  argmax.data<int32_t>());
}

void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, int64_t k, int64_t stride, int64_t pad, Tensor& dx,
                        const Stream& s, Layout layout, ChannelGradSums* bn_grad) {
  const char* op = "maxpool2d_backward";
  const Device dev = detail::float_op_device(op, {&dy, &dx}, s);
  detail::common_device(op, {&dy, &argmax}, s);
  const Dims dxd = dims(op, "dx", dx, layout), dyd = dims(op, "dy", dy, layout);
  HPDT_CHECK(dyd.n == dxd.n && dyd.c == dxd.c, op, ": dy ", dy.shape().str(), " does not match dx ", dx.shape().str());
  check_window(op, dx, dxd, k, stride, pad);
  check_shape(op, "dy", dy, shape_of({dxd.n, dxd.c, (dxd.h + 2 * pad - k) / stride + 1, (dxd.w + 2 * pad - k) / stride + 1}, layout));
  check_backward(op, dy, argmax, dyd, dxd, dx);
  if (bn_grad) detail::check_grad_sums(op, *bn_grad, dx, dxd.c, s);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::maxpool2d_backward(dy, argmax, k, stride, pad, dx, s, layout, bn_grad));
    return;
  }
  maxpool_backward_cpu(dy, argmax, dx, dyd, dxd, layout);
}

void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, Tensor& dx, const Stream& s, Layout layout) {
  const char* op = "maxpool2d_backward";
  const Device dev = detail::float_op_device(op, {&dy, &dx}, s);
  HPDT_CHECK(dev.is_cpu(), op,
             ": on CUDA pass the window (maxpool2d_backward(dy, argmax, k, stride, pad, dx, stream)): "
             "the backward is a gather over the windows that contain each input element");
  const Dims dxd = dims(op, "dx", dx, layout), dyd = dims(op, "dy", dy, layout);
  check_backward(op, dy, argmax, dyd, dxd, dx);
  maxpool_backward_cpu(dy, argmax, dx, dyd, dxd, layout);
}

void global_avgpool_forward(const Tensor& x, Tensor& y, const Stream& s, Layout layout) {
  const char* op = "global_avgpool_forward";
  const Device dev = detail::float_op_device(op, {&x, &y}, s);
  const Dims d = dims(op, "x", x, layout);
  check_shape(op, "y", y, Shape{d.n, d.c});
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::global_avgpool_forward(x, y, s, layout));
    return;
  }
  if (layout == Layout::nhwc)
    cpu::global_avgpool_forward_nhwc<float>(d.n, d.c, d.h * d.w, x.data<float>(), y.data<float>());
  else
    cpu::global_avgpool_forward<float>(d.n, d.c, d.h * d.w, x.data<float>(), y.data<float>());
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx, const Stream& s, Layout layout) {
  const char* op = "global_avgpool_backward";
  const Device dev = detail::float_op_device(op, {&dy, &dx}, s);
  const Dims d = dims(op, "dx", dx, layout);
  check_shape(op, "dy", dy, Shape{d.n, d.c});
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::global_avgpool_backward(dy, dx, s, layout));
    return;
  }
  if (layout == Layout::nhwc)
    cpu::global_avgpool_backward_nhwc<float>(d.n, d.c, d.h * d.w, dy.data<float>(), dx.data<float>());
  else
    cpu::global_avgpool_backward<float>(d.n, d.c, d.h * d.w, dy.data<float>(), dx.data<float>());
}

}  // namespace hpdt::kernels
