#include "hpdt/kernels/optim.h"

#include <cmath>

#include "hpdt/kernels/dispatch.h"

namespace hpdt::kernels {

void sgd_step(Tensor& p, const Tensor& g, Tensor& buf, const SgdOptions& o, bool first_step, const Stream& s) {
  detail::cpu_f32_only("sgd_step", {&p, &g, &buf}, s);
  check_same_numel("sgd_step", p, g);
  check_same_numel("sgd_step", p, buf);
  cpu::sgd_step(p.numel(), o, first_step, p.data<float>(), g.data<float>(), buf.data<float>());
}

void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWOptions& o, int64_t step,
                const Stream& s) {
  detail::cpu_f32_only("adamw_step", {&p, &g, &m, &v}, s);
  check_same_numel("adamw_step", p, g);
  check_same_numel("adamw_step", p, m);
  check_same_numel("adamw_step", p, v);
  HPDT_CHECK(step >= 1, "adamw_step: step ", step, " must count from 1");
  cpu::adamw_step(p.numel(), o, step, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>());
}

double global_norm(const std::vector<Tensor>& grads, const Stream& s) {
  double total = 0;
  for (const Tensor& g : grads) {
    detail::cpu_f32_only("global_norm", {&g}, s);
    total += cpu::sum_squares(g.numel(), g.data<float>());
  }
  return std::sqrt(total);
}

double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, const Stream& s) {
  const double norm = global_norm(grads, s);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (Tensor& g : grads) cpu::scale(g.numel(), float(coef), g.data<float>());
  return norm;
}

void scale(Tensor& x, float f, const Stream& s) {
  detail::cpu_f32_only("scale", {&x}, s);
  cpu::scale(x.numel(), f, x.data<float>());
}

bool has_nonfinite(const Tensor& x, const Stream& s) {
  detail::cpu_f32_only("has_nonfinite", {&x}, s);
  return cpu::has_nonfinite(x.numel(), x.data<float>());
}

}  // namespace hpdt::kernels
