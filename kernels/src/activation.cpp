#include "hpdt/kernels/activation.h"

#include "hpdt/kernels/dispatch.h"

namespace hpdt::kernels {

namespace {
void same(std::string_view op, const Tensor& a, const Tensor& b) { check_shape(op, "output", b, a.shape()); }
}  // namespace

void relu_forward(const Tensor& x, Tensor& y, const Stream& s) {
  detail::cpu_f32_only("relu_forward", {&x, &y}, s);
  same("relu_forward", x, y);
  cpu::relu_forward<float>(x.numel(), x.data<float>(), y.data<float>());
}
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& s) {
  detail::cpu_f32_only("relu_backward", {&y, &dy, &dx}, s);
  same("relu_backward", y, dy);
  same("relu_backward", y, dx);
  cpu::relu_backward<float>(y.numel(), y.data<float>(), dy.data<float>(), dx.data<float>());
}
void add(const Tensor& a, const Tensor& b, Tensor& y, const Stream& s) {
  detail::cpu_f32_only("add", {&a, &b, &y}, s);
  HPDT_CHECK(a.shape() == b.shape(), "add: operands ", a.shape().str(), " and ", b.shape().str(), " differ");
  same("add", a, y);
  cpu::add_forward<float>(a.numel(), a.data<float>(), b.data<float>(), y.data<float>());
}
void gelu_forward(const Tensor& x, GeluForm form, Tensor& y, const Stream& s) {
  detail::cpu_f32_only("gelu_forward", {&x, &y}, s);
  same("gelu_forward", x, y);
  cpu::gelu_forward<float>(x.numel(), form, x.data<float>(), y.data<float>());
}
void gelu_backward(const Tensor& x, const Tensor& dy, GeluForm form, Tensor& dx, const Stream& s) {
  detail::cpu_f32_only("gelu_backward", {&x, &dy, &dx}, s);
  same("gelu_backward", x, dy);
  same("gelu_backward", x, dx);
  cpu::gelu_backward<float>(x.numel(), form, x.data<float>(), dy.data<float>(), dx.data<float>());
}
void softmax_forward(const Tensor& x, Tensor& y, const Stream& s) {
  detail::cpu_f32_only("softmax_forward", {&x, &y}, s);
  same("softmax_forward", x, y);
  const int64_t d = x.size(-1);
  cpu::softmax_forward<float>(x.numel() / d, d, x.data<float>(), y.data<float>());
}
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& s) {
  detail::cpu_f32_only("softmax_backward", {&y, &dy, &dx}, s);
  same("softmax_backward", y, dy);
  same("softmax_backward", y, dx);
  const int64_t d = y.size(-1);
  cpu::softmax_backward<float>(y.numel() / d, d, y.data<float>(), dy.data<float>(), dx.data<float>());
}
void dropout_forward(const Tensor& x, float p, uint64_t seed, uint64_t stream_id, Tensor& y, const Stream& s) {
  detail::cpu_f32_only("dropout_forward", {&x, &y}, s);
  same("dropout_forward", x, y);
  cpu::dropout_forward<float>(x.numel(), p, seed, stream_id, x.data<float>(), y.data<float>());
}
void dropout_backward(const Tensor& dy, float p, uint64_t seed, uint64_t stream_id, Tensor& dx, const Stream& s) {
  detail::cpu_f32_only("dropout_backward", {&dy, &dx}, s);
  same("dropout_backward", dy, dx);
  cpu::dropout_backward<float>(dy.numel(), p, seed, stream_id, dy.data<float>(), dx.data<float>());
}

}  // namespace hpdt::kernels
