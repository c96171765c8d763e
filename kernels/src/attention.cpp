#include "hpdt/kernels/attention.h"

#include "hpdt/kernels/cpu/attention.h"
#include "hpdt/kernels/dispatch.h"

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
  detail::cpu_f32_only(op, {&qkv, &out}, s);
  const Dims d = dims(op, qkv, heads);
  check_shape(op, "out", out, Shape{d.b, d.t, d.d});
  Tensor& probs = saved.probs;
  const Shape ps{d.b, heads, d.t, d.t};
  if (!probs.defined() || !(probs.shape() == ps) || !probs.is_cpu()) probs = Tensor::empty(ps, DType::f32);
  cpu::attention_forward<float>(d.b, d.t, heads, d.dh, qkv.data<float>(), probs.data<float>(), out.data<float>());
}

void attention_backward(const Tensor& qkv, const AttentionSaved& saved, const Tensor& out, const Tensor& dout,
                        int64_t heads, Tensor& dqkv, const Stream& s) {
  const char* op = "attention_backward";
  const Tensor& probs = saved.probs;
  HPDT_CHECK(probs.defined(), op, ": no saved probabilities (run attention_forward first)");
  detail::cpu_f32_only(op, {&qkv, &probs, &out, &dout, &dqkv}, s);
  const Dims d = dims(op, qkv, heads);
  check_shape(op, "out", out, Shape{d.b, d.t, d.d});
  check_shape(op, "probs", probs, Shape{d.b, heads, d.t, d.t});
  check_shape(op, "dout", dout, Shape{d.b, d.t, d.d});
  check_shape(op, "dqkv", dqkv, qkv.shape());
  cpu::attention_backward<float>(d.b, d.t, heads, d.dh, qkv.data<float>(), probs.data<float>(), dout.data<float>(),
                                 dqkv.data<float>());
}

}  // namespace hpdt::kernels
