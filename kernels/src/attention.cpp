#include "hpdt/kernels/attention.h"

#include "hpdt/kernels/cpu/attention.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/attention.h"
#endif

namespace hpdt::kernels {

namespace {
struct Dims {
  int64_t b, t, d, dh;
};
Dims dims(std::string_view op, const Tensor& qkv, int64_t heads) {
  HPDT_CHECK(qkv.ndim() == 3 && qkv.size(2) % 3 == 0 && heads >= 1 && (qkv.size(2) / 3) % heads == 0, op,
             ": qkv must be [b, t, 3 * d] with d divisible by ", heads, " heads, got ", qkv.shape().str());
  return {qkv.size(0), qkv.size(1), qkv.size(2) / 3, qkv.size(2) / 3 / heads};
}
}  // namespace

void attention_forward(const Tensor& qkv, int64_t heads, AttentionSaved& saved, Tensor& out, const Stream& s) {
  const char* op = "attention_forward";
  const Device dev = detail::float_op_device(op, {&qkv, &out}, s);
  const Dims d = dims(op, qkv, heads);
  check_shape(op, "out", out, Shape{d.b, d.t, d.d});
  if (dev.is_cuda()) {
    // Flash style: only the log-sum-exp of each score row is kept (f32 whatever the storage type).
    Tensor& lse = saved.lse;
    const Shape ls{d.b, heads, d.t};
    if (!lse.defined() || !(lse.shape() == ls) || lse.dtype() != DType::f32 || !(lse.device() == dev))
      lse = Tensor::empty(ls, DType::f32, dev, AllocOptions{.stream = &s});
    HPDT_ON_CUDA(cuda::attention_forward(qkv, heads, lse, out, s));
    return;
  }
  Tensor& probs = saved.probs;
  const Shape ps{d.b, heads, d.t, d.t};
  if (!probs.defined() || !(probs.shape() == ps) || !probs.is_cpu()) probs = Tensor::empty(ps, DType::f32);
  cpu::attention_forward<float>(d.b, d.t, heads, d.dh, qkv.data<float>(), probs.data<float>(), out.data<float>());
}

void attention_backward(const Tensor& qkv, const AttentionSaved& saved, const Tensor& out, const Tensor& dout,
                        int64_t heads, Tensor& dqkv, const Stream& s) {
  const char* op = "attention_backward";
  if (qkv.defined() && qkv.is_cuda()) {
    const Device dev = detail::float_op_device(op, {&qkv, &out, &dout, &dqkv}, s);
    const Dims d = dims(op, qkv, heads);
    check_shape(op, "out", out, Shape{d.b, d.t, d.d});
    check_shape(op, "dout", dout, Shape{d.b, d.t, d.d});
    check_shape(op, "dqkv", dqkv, qkv.shape());
    const Tensor& lse = saved.lse;
    HPDT_CHECK(lse.defined(), op, ": no saved log-sum-exp (run attention_forward on CUDA first)");
    HPDT_CHECK(lse.device() == dev, op, ": saved log-sum-exp is on ", lse.device().str(), ", qkv on ", dev.str(),
               " (run attention_forward on CUDA first)");
    check_dtype(op, "lse", lse, DType::f32);
    check_shape(op, "lse", lse, Shape{d.b, heads, d.t});
    HPDT_ON_CUDA(cuda::attention_backward(qkv, lse, out, dout, heads, dqkv, s));
    return;
  }
  const Tensor& probs = saved.probs;
  HPDT_CHECK(probs.defined(), op, ": no saved probabilities (run attention_forward first)");
  detail::float_op_device(op, {&qkv, &probs, &out, &dout, &dqkv}, s);
  const Dims d = dims(op, qkv, heads);
  check_shape(op, "out", out, Shape{d.b, d.t, d.d});
  check_shape(op, "probs", probs, Shape{d.b, heads, d.t, d.t});
  check_shape(op, "dout", dout, Shape{d.b, d.t, d.d});
  check_shape(op, "dqkv", dqkv, qkv.shape());
  cpu::attention_backward<float>(d.b, d.t, heads, d.dh, qkv.data<float>(), probs.data<float>(), dout.data<float>(),
                                 dqkv.data<float>());
}

}  // namespace hpdt::kernels
