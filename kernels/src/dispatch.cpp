#include "hpdt/kernels/dispatch.h"

namespace hpdt::kernels::detail {

Device common_device(std::string_view op, std::initializer_list<const Tensor*> tensors, const Stream& stream) {
  const Tensor* first = *tensors.begin();
  for (const Tensor* t : tensors) {
    HPDT_CHECK(t->defined(), op, ": an argument is an undefined tensor");
    check_same_device(op, *first, *t);
  }
  const Device d = first->device();
  if (d.is_cuda()) {
    HPDT_CHECK(HPDT_HAVE_CUDA, op, ": tensor on ", d.str(), " but hpdt was built without CUDA");
    HPDT_CHECK(stream.is_cuda() && stream.device() == d, op, ": tensors on ", d.str(), " need a CUDA stream of that device, got a stream on ",
               stream.device().str());
  }
  return d;
}

void not_on_cuda_yet(std::string_view op) {
  HPDT_FAIL(op, ": not implemented on CUDA yet (the CPU version exists; the CUDA twin is issue 7)");
}

void cpu_f32_only(std::string_view op, std::initializer_list<const Tensor*> tensors, const Stream& stream) {
  if (!common_device(op, tensors, stream).is_cpu()) not_on_cuda_yet(op);
  for (const Tensor* t : tensors)
    HPDT_CHECK(t->dtype() == DType::f32, op, ": tensor ", t->str(), " has dtype ", dtype_name(t->dtype()),
               "; this op computes on f32 tensors (cast reduced-precision copies first)");
}

void check_residual(std::string_view op, const Tensor& residual, const Tensor& out, std::string_view out_name,
                    const Stream& stream) {
  float_op_device(op, {&out, &residual}, stream);
  check_shape(op, "residual", residual, out.shape());
  HPDT_CHECK(residual.numel() == 0 || residual.data() != out.data(), op, ": the residual must be a tensor other than ",
             out_name);
}

void check_grad_sums(std::string_view op, ChannelGradSums& sums, const Tensor& dx, int64_t channels,
                     const Stream& stream) {
  sums.clear_results();
  float_op_device(op, {&dx, &sums.x}, stream);
  check_shape(op, "bn_grad.x", sums.x, dx.shape());
  if (sums.y.defined()) {
    float_op_device(op, {&dx, &sums.y}, stream);
    check_shape(op, "bn_grad.y", sums.y, dx.shape());
  }
  HPDT_CHECK(sums.mean.defined() && sums.mean.numel() == channels && sums.mean.dtype() == DType::f32 &&
                 sums.mean.device() == dx.device(),
             op, ": bn_grad.mean must be f32 [", channels, "] on ", dx.device().str());
}

Device float_op_device(std::string_view op, std::initializer_list<const Tensor*> tensors, const Stream& stream) {
  const Device d = common_device(op, tensors, stream);
  const DType first = (*tensors.begin())->dtype();
  for (const Tensor* t : tensors) {
    if (d.is_cpu())
      HPDT_CHECK(t->dtype() == DType::f32, op, ": tensor ", t->str(), " has dtype ", dtype_name(t->dtype()),
                 "; on the CPU this op computes on f32 tensors (cast reduced-precision copies first)");
    else
      HPDT_CHECK(is_floating(t->dtype()) && t->dtype() == first, op, ": tensor ", t->str(), " has dtype ",
                 dtype_name(t->dtype()), "; on CUDA all tensors of this op share one of f32, f16, bf16 (the first is ",
                 dtype_name(first), ")");
  }
  return d;
}

}  // namespace hpdt::kernels::detail
