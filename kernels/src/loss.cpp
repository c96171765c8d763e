#include "hpdt/kernels/loss.h"

#include "hpdt/kernels/cpu/loss.h"
#include "hpdt/kernels/dispatch.h"

namespace hpdt::kernels {

double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                             double grad_scale, const Stream& s) {
  const char* op = "softmax_cross_entropy";
  detail::cpu_f32_only(op, {&logits}, s);
  if (!detail::common_device(op, {&logits, &labels}, s).is_cpu()) detail::not_on_cuda_yet(op);
  HPDT_CHECK(logits.ndim() == 2, op, ": logits must be [b, classes], got ", logits.shape().str());
  check_dtype(op, "labels", labels, DType::i32);
  check_shape(op, "labels", labels, Shape{logits.size(0)});
  if (dlogits) {
    detail::cpu_f32_only(op, {dlogits}, s);
    check_shape(op, "dlogits", *dlogits, logits.shape());
  }
  return cpu::softmax_cross_entropy<float>(logits.size(0), logits.size(1), logits.data<float>(),
                                           labels.data<int32_t>(), smoothing,
                                           dlogits ? dlogits->data<float>() : nullptr, grad_scale);
}

}  // namespace hpdt::kernels
