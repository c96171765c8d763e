#include "hpdt/kernels/loss.h"

#include "hpdt/kernels/cpu/loss.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/loss.h"
#endif

namespace hpdt::kernels {

namespace {
// The arguments both forms take: returns the device the loss runs on.
Device check_loss_args(const char* op, const Tensor& logits, const Tensor& labels, const Tensor* dlogits,
                       const Stream& s) {
  const Device dev =
      dlogits ? detail::float_op_device(op, {&logits, dlogits}, s) : detail::float_op_device(op, {&logits}, s);
  detail::common_device(op, {&logits, &labels}, s);
  HPDT_CHECK(logits.ndim() == 2, op, ": logits must be [b, classes], got ", logits.shape().str());
  check_dtype(op, "labels", labels, DType::i32);
  check_shape(op, "labels", labels, Shape{logits.size(0)});
  if (dlogits) check_shape(op, "dlogits", *dlogits, logits.shape());
  return dev;
}

[[noreturn]] void cuda_only(const char* op, const Device& d) {
  HPDT_FAIL(op, ": CUDA tensors only (got ", d.str(), "); on the CPU call softmax_cross_entropy");
}
}  // namespace

double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                             double grad_scale, const Stream& s) {
  const Device dev = check_loss_args("softmax_cross_entropy", logits, labels, dlogits, s);
  if (dev.is_cuda()) {
#if HPDT_HAVE_CUDA
    return cuda::softmax_cross_entropy(logits, labels, smoothing, dlogits, grad_scale, s);
#endif
  }
  return cpu::softmax_cross_entropy<float>(logits.size(0), logits.size(1), logits.data<float>(), labels.data<int32_t>(),
                                           smoothing, dlogits ? dlogits->data<float>() : nullptr, grad_scale);
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const char* op = "count_correct";
  HPDT_CHECK(logits.is_cpu() && labels.is_cpu(), op, ": CPU tensors only (got ", logits.device().str(), " and ",
             labels.device().str(), "); on the GPU read_loss_values counts them");
  HPDT_CHECK(logits.ndim() == 2, op, ": logits must be [b, classes], got ", logits.shape().str());
  check_dtype(op, "logits", logits, DType::f32);
  check_dtype(op, "labels", labels, DType::i32);
  check_shape(op, "labels", labels, Shape{logits.size(0)});
  return cpu::count_correct<float>(logits.size(0), logits.size(1), logits.data<float>(), labels.data<int32_t>());
}

Tensor make_loss_state(Device device, const Stream& s) {
  if (!device.is_cuda()) cuda_only("make_loss_state", device);
#if HPDT_HAVE_CUDA
  return cuda::make_loss_state(device, s);
#else
  (void)s;
  cuda_only("make_loss_state", device);
#endif
}

void softmax_cross_entropy_queued(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                                  double grad_scale, Tensor& state, const Stream& s) {
  const char* op = "softmax_cross_entropy_queued";
  const Device dev = check_loss_args(op, logits, labels, dlogits, s);
  detail::common_device(op, {&logits, &state}, s);
  if (!dev.is_cuda()) cuda_only(op, dev);
#if HPDT_HAVE_CUDA
  cuda::softmax_cross_entropy_queued(logits, labels, smoothing, dlogits, grad_scale, state, s);
#else
  (void)smoothing;
  (void)grad_scale;
#endif
}

double read_loss(const Tensor& state, const Stream& s) { return read_loss_values(state, s).mean_loss; }

LossValues read_loss_values(const Tensor& state, const Stream& s) {
  if (!state.is_cuda()) cuda_only("read_loss", state.device());
#if HPDT_HAVE_CUDA
  return cuda::read_loss_values(state, s);
#else
  (void)s;
  cuda_only("read_loss", state.device());
#endif
}

}  // namespace hpdt::kernels
