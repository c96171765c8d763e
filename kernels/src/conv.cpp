#include "hpdt/kernels/conv.h"

#include "hpdt/kernels/dispatch.h"

namespace hpdt::kernels {

Conv2dShape conv2d_shape(std::string_view op, const Tensor& x, const Tensor& w, int64_t stride, int64_t pad) {
  HPDT_CHECK(x.ndim() == 4 && w.ndim() == 4, op, ": needs x [n, c, h, w] and w [co, ci, kh, kw], got x ",
             x.shape().str(), ", w ", w.shape().str());
  Conv2dShape s{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), stride, pad};
  HPDT_CHECK(w.size(1) == x.size(1), op, ": input channels of x ", x.shape().str(), " and w ", w.shape().str(),
             " differ (groups = 1 only)");
  HPDT_CHECK(stride >= 1 && pad >= 0 && s.h + 2 * pad >= s.kh && s.w + 2 * pad >= s.kw, op,
             ": unsupported configuration ", s.str());
  return s;
}

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, int64_t stride, int64_t pad,
                    const Stream& st) {
  detail::cpu_f32_only("conv2d_forward", {&x, &w, &y}, st);
  const Conv2dShape s = conv2d_shape("conv2d_forward", x, w, stride, pad);
  check_shape("conv2d_forward", "y", y, Shape{s.n, s.c_out, s.out_h(), s.out_w()});
  if (bias) {
    detail::cpu_f32_only("conv2d_forward", {bias}, st);
    check_shape("conv2d_forward", "bias", *bias, Shape{s.c_out});
  }
  cpu::conv2d_forward<float>(s, x.data<float>(), w.data<float>(), bias ? bias->data<float>() : nullptr,
                             y.data<float>());
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, int64_t stride, int64_t pad,
                          const Stream& st) {
  detail::cpu_f32_only("conv2d_backward_data", {&dy, &w, &dx}, st);
  const Conv2dShape s = conv2d_shape("conv2d_backward_data", dx, w, stride, pad);
  check_shape("conv2d_backward_data", "dy", dy, Shape{s.n, s.c_out, s.out_h(), s.out_w()});
  cpu::conv2d_backward_data<float>(s, dy.data<float>(), w.data<float>(), dx.data<float>());
}

void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias, int64_t stride,
                            int64_t pad, const Stream& st) {
  detail::cpu_f32_only("conv2d_backward_filter", {&x, &dy, &dw}, st);
  const Conv2dShape s = conv2d_shape("conv2d_backward_filter", x, dw, stride, pad);
  check_shape("conv2d_backward_filter", "dy", dy, Shape{s.n, s.c_out, s.out_h(), s.out_w()});
  if (dbias) check_shape("conv2d_backward_filter", "dbias", *dbias, Shape{s.c_out});
  cpu::conv2d_backward_filter<float>(s, x.data<float>(), dy.data<float>(), dw.data<float>(),
                                     dbias ? dbias->data<float>() : nullptr, true);
}

}  // namespace hpdt::kernels
