#include "hpdt/kernels/activation.h"

#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/activation.h"
#endif

namespace hpdt::kernels {

namespace {
void same(std::string_view op, const Tensor& a, const Tensor& b) { check_shape(op, "output", b, a.shape()); }
}  // namespace

void relu_forward(const Tensor& x, Tensor& y, const Stream& s) {
  const Device dev = detail::float_op_device("relu_forward", {&x, &y}, s);
  same("relu_forward", x, y);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::relu_forward(x, y, s));
    return;
  }
  cpu::relu_forward<float>(x.numel(), x.data<float>(), y.data<float>());
}
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& s) {
  const Device dev = detail::float_op_device("relu_backward", {&y, &dy, &dx}, s);
  same("relu_backward", y, dy);
  same("relu_backward", y, dx);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::relu_backward(y, dy, dx, s));
    return;
  }
  cpu::relu_backward<float>(y.numel(), y.data<float>(), dy.data<float>(), dx.data<float>());
}
void add(const Tensor& a, const Tensor& b, Tensor& y, const Stream& s) {
  const Device dev = detail::float_op_device("add", {&a, &b, &y}, s);
  HPDT_CHECK(a.shape() == b.shape(), "add: operands ", a.shape().str(), " and ", b.shape().str(), " differ");
  same("add", a, y);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::add(a, b, y, s));
    return;
  }
  cpu::add_forward<float>(a.numel(), a.data<float>(), b.data<float>(), y.data<float>());
}
void gelu_forward(const Tensor& x, GeluForm form, Tensor& y, const Stream& s) {
  const Device dev = detail::float_op_device("gelu_forward", {&x, &y}, s);
  same("gelu_forward", x, y);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::gelu_forward(x, form, y, s));
    return;
  }
  cpu::gelu_forward<float>(x.numel(), form, x.data<float>(), y.data<float>());
}
void gelu_backward(const Tensor& x, const Tensor& dy, GeluForm form, Tensor& dx, const Stream& s) {
  const Device dev = detail::float_op_device("gelu_backward", {&x, &dy, &dx}, s);
  same("gelu_backward", x, dy);
  same("gelu_backward", x, dx);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::gelu_backward(x, dy, form, dx, s));
    return;
  }
  cpu::gelu_backward<float>(x.numel(), form, x.data<float>(), dy.data<float>(), dx.data<float>());
}
void softmax_forward(const Tensor& x, Tensor& y, const Stream& s) {
  const Device dev = detail::float_op_device("softmax_forward", {&x, &y}, s);
  same("softmax_forward", x, y);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::softmax_forward(x, y, s));
    return;
  }
  const int64_t d = x.size(-1);
  cpu::softmax_forward<float>(x.numel() / d, d, x.data<float>(), y.data<float>());
}
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& s) {
  const Device dev = detail::float_op_device("softmax_backward", {&y, &dy, &dx}, s);
  same("softmax_backward", y, dy);
  same("softmax_backward", y, dx);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::softmax_backward(y, dy, dx, s));
    return;
  }
  const int64_t d = y.size(-1);
  cpu::softmax_backward<float>(y.numel() / d, d, y.data<float>(), dy.data<float>(), dx.data<float>());
}
void dropout_forward(const Tensor& x, float p, uint64_t seed, uint64_t stream_id, Tensor& y, const Stream& s,
                     uint64_t first) {
  const Device dev = detail::float_op_device("dropout_forward", {&x, &y}, s);
  same("dropout_forward", x, y);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::dropout_forward(x, p, seed, stream_id, y, s, first));
    return;
  }
  cpu::dropout_forward<float>(x.numel(), p, seed, stream_id, x.data<float>(), y.data<float>(), first);
}
void dropout_backward(const Tensor& dy, float p, uint64_t seed, uint64_t stream_id, Tensor& dx, const Stream& s,
                      uint64_t first) {
  const Device dev = detail::float_op_device("dropout_backward", {&dy, &dx}, s);
  same("dropout_backward", dy, dx);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::dropout_backward(dy, p, seed, stream_id, dx, s, first));
    return;
  }
  cpu::dropout_backward<float>(dy.numel(), p, seed, stream_id, dy.data<float>(), dx.data<float>(), first);
}

}  // namespace hpdt::kernels
