#include "hpdt/kernels/pool.h"

#include "hpdt/kernels/cpu/pool.h"
#include "hpdt/kernels/dispatch.h"

namespace hpdt::kernels {

void maxpool2d_forward(const Tensor& x, int64_t k, int64_t stride, int64_t pad, Tensor& y, Tensor& argmax,
                       const Stream& s) {
  const char* op = "maxpool2d_forward";
  detail::cpu_f32_only(op, {&x, &y}, s);
  HPDT_CHECK(x.ndim() == 4, op, ": x must be [n, c, h, w], got ", x.shape().str());
  HPDT_CHECK(k >= 1 && stride >= 1 && pad >= 0 && 2 * pad <= k && x.size(2) + 2 * pad >= k && x.size(3) + 2 * pad >= k,
             op, ": unsupported window ", k, " stride ", stride, " pad ", pad, " for x ", x.shape().str());
  const int64_t oh = (x.size(2) + 2 * pad - k) / stride + 1, ow = (x.size(3) + 2 * pad - k) / stride + 1;
  const Shape ys{x.size(0), x.size(1), oh, ow};
  check_shape(op, "y", y, ys);
  if (!argmax.defined() || !(argmax.shape() == ys)) argmax = Tensor::empty(ys, DType::i32);
  check_dtype(op, "argmax", argmax, DType::i32);
  cpu::maxpool2d_forward<float>(x.size(0), x.size(1), x.size(2), x.size(3), k, stride, pad, x.data<float>(),
                                y.data<float>(), argmax.data<int32_t>());
}

void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, Tensor& dx, const Stream& s) {
  const char* op = "maxpool2d_backward";
  detail::cpu_f32_only(op, {&dy, &dx}, s);
  HPDT_CHECK(dx.ndim() == 4 && dy.ndim() == 4 && dy.size(0) == dx.size(0) && dy.size(1) == dx.size(1), op, ": dy ",
             dy.shape().str(), " does not match dx ", dx.shape().str());
  check_shape(op, "argmax", argmax, dy.shape());
  check_dtype(op, "argmax", argmax, DType::i32);
  cpu::maxpool2d_backward<float>(dx.size(0), dx.size(1), dx.size(2), dx.size(3), dy.size(2), dy.size(3),
                                 dy.data<float>(), argmax.data<int32_t>(), dx.data<float>());
}

void global_avgpool_forward(const Tensor& x, Tensor& y, const Stream& s) {
  const char* op = "global_avgpool_forward";
  detail::cpu_f32_only(op, {&x, &y}, s);
  HPDT_CHECK(x.ndim() == 4, op, ": x must be [n, c, h, w], got ", x.shape().str());
  check_shape(op, "y", y, Shape{x.size(0), x.size(1)});
  cpu::global_avgpool_forward<float>(x.size(0), x.size(1), x.size(2) * x.size(3), x.data<float>(), y.data<float>());
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx, const Stream& s) {
  const char* op = "global_avgpool_backward";
  detail::cpu_f32_only(op, {&dy, &dx}, s);
  HPDT_CHECK(dx.ndim() == 4, op, ": dx must be [n, c, h, w], got ", dx.shape().str());
  check_shape(op, "dy", dy, Shape{dx.size(0), dx.size(1)});
  cpu::global_avgpool_backward<float>(dx.size(0), dx.size(1), dx.size(2) * dx.size(3), dy.data<float>(),
                                      dx.data<float>());
}

}  // namespace hpdt::kernels
