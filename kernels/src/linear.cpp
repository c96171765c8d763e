#include "hpdt/kernels/linear.h"

#include "hpdt/kernels/cpu/linear.h"
#include "hpdt/kernels/dispatch.h"

namespace hpdt::kernels {

namespace {
float* opt(const Tensor* t) { return t ? t->data<float>() : nullptr; }
}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Stream& s) {
  detail::cpu_f32_only("linear_forward", {&x, &w, &y}, s);
  HPDT_CHECK(w.ndim() == 2 && x.ndim() >= 1 && x.size(-1) == w.size(1), "linear_forward: x ", x.shape().str(),
             " does not match weight ", w.shape().str(), " (expected [..., ", w.ndim() == 2 ? w.size(1) : -1, "])");
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  HPDT_CHECK(y.numel() == rows * out && y.size(-1) == out, "linear_forward: y ", y.shape().str(), " for x ",
             x.shape().str(), " and weight ", w.shape().str());
  if (bias) {
    detail::cpu_f32_only("linear_forward", {bias}, s);
    check_shape("linear_forward", "bias", *bias, Shape{out});
  }
  cpu::linear_forward<float>(rows, in, out, x.data<float>(), w.data<float>(), opt(bias), y.data<float>());
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dx, Tensor& dw, Tensor* dbias,
                     const Stream& s) {
  detail::cpu_f32_only("linear_backward", {&dy, &x, &w, &dw}, s);
  HPDT_CHECK(w.ndim() == 2 && x.size(-1) == w.size(1) && dy.size(-1) == w.size(0) &&
                 dy.numel() / w.size(0) == x.numel() / w.size(1),
             "linear_backward: dy ", dy.shape().str(), ", x ", x.shape().str(), " and weight ", w.shape().str(),
             " do not agree");
  check_shape("linear_backward", "dw", dw, w.shape());
  if (dx) check_shape("linear_backward", "dx", *dx, x.shape());
  if (dbias) check_shape("linear_backward", "dbias", *dbias, Shape{w.size(0)});
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  cpu::linear_backward<float>(rows, in, out, dy.data<float>(), x.data<float>(), w.data<float>(), opt(dx),
                              dw.data<float>(), opt(dbias));
}

}  // namespace hpdt::kernels
