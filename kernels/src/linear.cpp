#include "hpdt/kernels/linear.h"

#include "hpdt/kernels/cpu/linear.h"
#include "hpdt/kernels/dispatch.h"

#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/linear.h"
#endif

namespace hpdt::kernels {

namespace {
float* opt(const Tensor* t) { return t ? t->data<float>() : nullptr; }
[[maybe_unused]] void* raw(const Tensor* t) { return t ? t->data() : nullptr; }
// Rows of x [..., in]: its leading dimensions (in == 0 must not divide by zero).
int64_t rows_of(const Tensor& x, int64_t in) {
  if (in > 0) return x.numel() / in;
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.ndim(); ++d) rows *= x.size(d);
  return rows;
}
}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Stream& s) {
  const Device dev = detail::float_op_device("linear_forward", {&x, &w, &y}, s);
  HPDT_CHECK(w.ndim() == 2 && x.ndim() >= 1 && x.size(-1) == w.size(1), "linear_forward: x ", x.shape().str(),
             " does not match weight ", w.shape().str(), " (expected [..., ", w.ndim() == 2 ? w.size(1) : -1, "])");
  const int64_t in = w.size(1), out = w.size(0), rows = rows_of(x, in);
  HPDT_CHECK(y.numel() == rows * out && y.size(-1) == out, "linear_forward: y ", y.shape().str(), " for x ",
             x.shape().str(), " and weight ", w.shape().str());
  if (bias) {
    detail::float_op_device("linear_forward", {&x, bias}, s);
    check_shape("linear_forward", "bias", *bias, Shape{out});
  }
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::linear_forward(rows, in, out, x.data(), w.data(), raw(bias), y.data(), x.dtype(), s));
    return;
  }
  cpu::linear_forward<float>(rows, in, out, x.data<float>(), w.data<float>(), opt(bias), y.data<float>());
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dx, Tensor& dw, Tensor* dbias,
                     const Stream& s) {
  const Device dev = detail::float_op_device("linear_backward", {&dy, &x, &w, &dw}, s);
  if (dx) detail::float_op_device("linear_backward", {&dy, dx}, s);
  if (dbias) detail::float_op_device("linear_backward", {&dy, dbias}, s);
  HPDT_CHECK(w.ndim() == 2 && x.size(-1) == w.size(1) && dy.size(-1) == w.size(0) &&
                 rows_of(dy, w.size(0)) == rows_of(x, w.size(1)),
             "linear_backward: dy ", dy.shape().str(), ", x ", x.shape().str(), " and weight ", w.shape().str(),
             " do not agree");
  check_shape("linear_backward", "dw", dw, w.shape());
  if (dx) check_shape("linear_backward", "dx", *dx, x.shape());
  if (dbias) check_shape("linear_backward", "dbias", *dbias, Shape{w.size(0)});
  const int64_t in = w.size(1), out = w.size(0), rows = rows_of(x, in);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::linear_backward(rows, in, out, dy.data(), x.data(), w.data(), raw(dx), dw.data(), raw(dbias),
                                       x.dtype(), s));
    return;
  }
  cpu::linear_backward<float>(rows, in, out, dy.data<float>(), x.data<float>(), w.data<float>(), opt(dx),
                              dw.data<float>(), opt(dbias));
}

}  // namespace hpdt::kernels
