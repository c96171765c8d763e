#include "hpdt/kernels/linear.h"

#include "hpdt/kernels/cpu/activation.h"
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

namespace {

// pre: the fused GELU's input (linear_gelu_forward), else null; residual: linear_forward's skip connection.
void forward(const char* op, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, Tensor* pre,
             GeluForm form, const Tensor* residual, const Stream& s) {
  const Device dev = detail::float_op_device(op, {&x, &w, &y}, s);
  HPDT_CHECK(w.ndim() == 2 && x.ndim() >= 1 && x.size(-1) == w.size(1), op, ": x ", x.shape().str(),
             " does not match weight ", w.shape().str(), " (expected [..., ", w.ndim() == 2 ? w.size(1) : -1, "])");
  const int64_t in = w.size(1), out = w.size(0), rows = rows_of(x, in);
  HPDT_CHECK(y.numel() == rows * out && y.size(-1) == out, op, ": y ", y.shape().str(), " for x ", x.shape().str(),
             " and weight ", w.shape().str());
  if (bias) {
    detail::float_op_device(op, {&x, bias}, s);
    check_shape(op, "bias", *bias, Shape{out});
  }
  if (pre) {
    detail::float_op_device(op, {&x, pre}, s);
    check_shape(op, "pre", *pre, y.shape());
    HPDT_CHECK(pre->data() != y.data(), op, ": pre and y must be different tensors");
  }
  if (residual) {
    detail::float_op_device(op, {&x, residual}, s);
    check_shape(op, "residual", *residual, y.shape());
    HPDT_CHECK(residual->data() != y.data(), op, ": the residual must be a tensor other than y");
  }
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::linear_forward(rows, in, out, x.data(), w.data(), raw(bias), y.data(), x.dtype(), s, raw(pre),
                                      form, residual ? residual->data() : nullptr));
    return;
  }
  if (!pre) {
    cpu::linear_forward<float>(rows, in, out, x.data<float>(), w.data<float>(), opt(bias), y.data<float>());
    if (residual) cpu::add_forward<float>(y.numel(), y.data<float>(), residual->data<float>(), y.data<float>());
    return;
  }
  cpu::linear_forward<float>(rows, in, out, x.data<float>(), w.data<float>(), opt(bias), pre->data<float>());
  cpu::gelu_forward<float>(pre->numel(), form, pre->data<float>(), y.data<float>());
}

// gelu_input: h of linear_backward_through_gelu, else null.
void backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dx, Tensor& dw,
              Tensor* dbias, const Tensor* gelu_input, GeluForm form, const Stream& s) {
  const Device dev = detail::float_op_device(op, {&dy, &x, &w, &dw}, s);
  if (dx) detail::float_op_device(op, {&dy, dx}, s);
  if (dbias) detail::float_op_device(op, {&dy, dbias}, s);
  HPDT_CHECK(w.ndim() == 2 && x.size(-1) == w.size(1) && dy.size(-1) == w.size(0) &&
                 rows_of(dy, w.size(0)) == rows_of(x, w.size(1)),
             op, ": dy ", dy.shape().str(), ", x ", x.shape().str(), " and weight ", w.shape().str(), " do not agree");
  check_shape(op, "dw", dw, w.shape());
  if (dx) check_shape(op, "dx", *dx, x.shape());
  if (dbias) check_shape(op, "dbias", *dbias, Shape{w.size(0)});
  if (gelu_input) {
    detail::float_op_device(op, {&dy, gelu_input}, s);
    check_shape(op, "gelu_input", *gelu_input, x.shape());
    HPDT_CHECK(dx && gelu_input->data() != dx->data(), op, ": dx and gelu_input must be different tensors");
  }
  const int64_t in = w.size(1), out = w.size(0), rows = rows_of(x, in);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::linear_backward(rows, in, out, dy.data(), x.data(), w.data(), raw(dx), dw.data(), raw(dbias),
                                       x.dtype(), s, gelu_input ? gelu_input->data() : nullptr, form));
    return;
  }
  cpu::linear_backward<float>(rows, in, out, dy.data<float>(), x.data<float>(), w.data<float>(), opt(dx),
                              dw.data<float>(), opt(dbias));
  if (gelu_input)
    cpu::gelu_backward<float>(dx->numel(), form, gelu_input->data<float>(), dx->data<float>(), dx->data<float>());
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Stream& s,
                    const Tensor* residual) {
  forward("linear_forward", x, w, bias, y, nullptr, GeluForm::erf, residual, s);
}

void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias, GeluForm form, Tensor& pre, Tensor& y,
                         const Stream& s) {
  forward("linear_gelu_forward", x, w, bias, y, &pre, form, nullptr, s);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dx, Tensor& dw, Tensor* dbias,
                     const Stream& s) {
  backward("linear_backward", dy, x, w, dx, dw, dbias, nullptr, GeluForm::erf, s);
}

void linear_backward_through_gelu(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& gelu_input,
                                  GeluForm form, Tensor& dx, Tensor& dw, Tensor* dbias, const Stream& s) {
  backward("linear_backward_through_gelu", dy, x, w, &dx, dw, dbias, &gelu_input, form, s);
}

}  // namespace hpdt::kernels
