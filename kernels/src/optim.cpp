#include "hpdt/kernels/optim.h"

#include <cmath>
#include <cstring>

#include "hpdt/kernels/dispatch.h"
#include "hpdt/kernels/elementwise.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/optim.h"
#endif

namespace hpdt::kernels {

namespace {
constexpr int64_t kStatsBytes = int64_t(sizeof(GradStats));

void check_stats(std::string_view op, const Tensor& stats) {
  check_dtype(op, "stats", stats, DType::u8);
  HPDT_CHECK(stats.numel() == kStatsBytes, op, ": stats must be the ", kStatsBytes,
             "-byte tensor of make_grad_stats, got ", stats.str());
}

// The stats as computed so far, on the host (synchronises on CUDA).
GradStats host_stats(const Tensor& stats, const Stream& s) {
  GradStats out;
  if (stats.is_cpu()) {
    std::memcpy(&out, stats.data(), sizeof out);
    return out;
  }
  Tensor host = stats.to(Device::cpu(), s);
  s.synchronize();
  std::memcpy(&out, host.data(), sizeof out);
  return out;
}
}  // namespace

void sgd_step(Tensor& p, const Tensor& g, Tensor& buf, const SgdOptions& o, bool first_step, const Stream& s) {
  const Device dev = detail::float_op_device("sgd_step", {&p, &g, &buf}, s);
  check_same_numel("sgd_step", p, g);
  check_same_numel("sgd_step", p, buf);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::sgd_step(p, g, buf, o, first_step, s));
    return;
  }
  cpu::sgd_step(p.numel(), o, first_step, p.data<float>(), g.data<float>(), buf.data<float>());
}

void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWOptions& o, int64_t step,
                const Stream& s) {
  const Device dev = detail::float_op_device("adamw_step", {&p, &g, &m, &v}, s);
  check_same_numel("adamw_step", p, g);
  check_same_numel("adamw_step", p, m);
  check_same_numel("adamw_step", p, v);
  HPDT_CHECK(step >= 1, "adamw_step: step ", step, " must count from 1");
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::adamw_step(p, g, m, v, o, step, s));
    return;
  }
  cpu::adamw_step(p.numel(), o, step, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>());
}

double global_norm(const std::vector<Tensor>& grads, const Stream& s) {
  for (const Tensor& g : grads) {
    detail::float_op_device("global_norm", {&g}, s);
    detail::common_device("global_norm", {&g, &grads.front()}, s);
  }
  if (!grads.empty() && grads.front().is_cuda()) {
    Tensor stats = make_grad_stats(grads.front().device(), s);
    for (size_t i = 0; i < grads.size(); ++i) HPDT_ON_CUDA(cuda::grad_stats(grads[i], 1.0f, stats, i > 0, s));
    return std::sqrt(host_stats(stats, s).sum_squares);
  }
  double total = 0;
  for (const Tensor& g : grads) total += cpu::sum_squares(g.numel(), g.data<float>());
  return std::sqrt(total);
}

double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, const Stream& s) {
  const double norm = global_norm(grads, s);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (Tensor& g : grads) scale(g, float(coef), s);
  return norm;
}

void scale(Tensor& x, float f, const Stream& s) {
  if (detail::float_op_device("scale", {&x}, s).is_cuda()) {
    HPDT_ON_CUDA(cuda::scale(x, f, s));
    return;
  }
  cpu::scale(x.numel(), f, x.data<float>());
}

bool has_nonfinite(const Tensor& x, const Stream& s) {
  if (detail::float_op_device("has_nonfinite", {&x}, s).is_cuda()) {
    Tensor stats = make_grad_stats(x.device(), s);
    HPDT_ON_CUDA(cuda::grad_stats(x, 1.0f, stats, false, s));
    return host_stats(stats, s).nonfinite != 0;
  }
  return cpu::has_nonfinite(x.numel(), x.data<float>());
}

// ---- mixed precision ------------------------------------------------------------------------------

Tensor make_grad_stats(Device device, const Stream& s) {
  AllocOptions opts;
  opts.stream = &s;
  Tensor t = Tensor::empty({kStatsBytes}, DType::u8, device, opts);
  fill(t, 0.0f, s);  // GradStats{} is all zero bytes
  return t;
}

void grad_stats(const std::vector<Tensor>& grads, float inv_scale, Tensor& stats, const Stream& s) {
  check_stats("grad_stats", stats);
  detail::common_device("grad_stats", {&stats}, s);
  for (const Tensor& g : grads) {
    detail::common_device("grad_stats", {&g, &stats}, s);
    HPDT_CHECK(is_floating(g.dtype()), "grad_stats: gradients ", g.str(), " must be f32, f16 or bf16");
  }
  if (stats.is_cuda()) {
    if (grads.empty()) return fill(stats, 0.0f, s);
    for (size_t i = 0; i < grads.size(); ++i) HPDT_ON_CUDA(cuda::grad_stats(grads[i], inv_scale, stats, i > 0, s));
    return;
  }
  GradStats acc;
  for (const Tensor& g : grads) {
    dispatch_floating(g.dtype(), "grad_stats", [&](auto tag) {
      using G = decltype(tag);
      cpu::grad_stats<G>(g.numel(), static_cast<const G*>(g.data()), inv_scale, acc);
    });
  }
  std::memcpy(stats.data(), &acc, sizeof acc);
}

GradStats read_grad_stats(const Tensor& stats, const Stream& s) {
  check_stats("read_grad_stats", stats);
  detail::common_device("read_grad_stats", {&stats}, s);
  return host_stats(stats, s);
}

void fused_step(const FusedStepBuffers& b, const FusedStepOptions& o, const Stream& s) {
  constexpr std::string_view op = "fused_step";
  const bool adamw = o.kind == OptimizerKind::adamw;
  const bool sgd_momentum = !adamw && o.sgd.momentum != 0.0f;
  HPDT_CHECK(b.params.defined() && b.grads.defined(), op, ": params and grads are required");
  check_dtype(op, "params", b.params, DType::f32);
  HPDT_CHECK(is_floating(b.grads.dtype()), op, ": grads ", b.grads.str(), " must be f32, f16 or bf16");
  check_same_numel(op, b.params, b.grads);
  std::vector<const Tensor*> all = {&b.params, &b.grads};
  if (adamw || sgd_momentum) {
    HPDT_CHECK(b.state1.defined(), op, ": ",
               adamw ? "AdamW needs m (state1)" : "SGD with momentum needs its buffer (state1)");
    check_dtype(op, "state1", b.state1, DType::f32);
    check_same_numel(op, b.params, b.state1);
    all.push_back(&b.state1);
  }
  if (adamw) {
    HPDT_CHECK(b.state2.defined(), op, ": AdamW needs v (state2)");
    check_dtype(op, "state2", b.state2, DType::f32);
    check_same_numel(op, b.params, b.state2);
    all.push_back(&b.state2);
    HPDT_CHECK(o.step >= 1, op, ": AdamW step ", o.step, " must count from 1");
  }
  if (b.model_copy.defined()) {
    HPDT_CHECK(b.model_copy.dtype() == DType::f16 || b.model_copy.dtype() == DType::bf16, op, ": model_copy ",
               b.model_copy.str(),
               " must be f16 or bf16 (the reduced-precision model; an f32 model is the master itself)");
    check_same_numel(op, b.params, b.model_copy);
    all.push_back(&b.model_copy);
  }
  if (b.stats.defined()) {
    check_stats(op, b.stats);
    all.push_back(&b.stats);
  } else {
    HPDT_CHECK(!(o.max_norm > 0), op, ": clipping (max_norm ", o.max_norm, ") needs the stats of grad_stats");
  }
  for (const Tensor* t : all) detail::common_device(op, {&b.params, t}, s);
  if (b.params.is_cuda()) {
    HPDT_ON_CUDA(cuda::fused_step(b, o, s));
    return;
  }
  GradStats host;
  const GradStats* stats = nullptr;
  if (b.stats.defined()) {
    std::memcpy(&host, b.stats.data(), sizeof host);
    stats = &host;
  }
  const int64_t n = b.params.numel();
  float* state1 = b.state1.defined() ? b.state1.data<float>() : nullptr;
  float* state2 = b.state2.defined() ? b.state2.data<float>() : nullptr;
  dispatch_floating(b.grads.dtype(), op, [&](auto gtag) {
    using G = decltype(gtag);
    const G* g = static_cast<const G*>(b.grads.data());
    if (!b.model_copy.defined())
      return cpu::fused_step<G, float>(n, o, stats, b.params.data<float>(), g, state1, state2, nullptr);
    if (b.model_copy.dtype() == DType::f16)
      return cpu::fused_step<G, f16_t>(n, o, stats, b.params.data<float>(), g, state1, state2,
                                       static_cast<f16_t*>(b.model_copy.data()));
    cpu::fused_step<G, bf16_t>(n, o, stats, b.params.data<float>(), g, state1, state2,
                               static_cast<bf16_t*>(b.model_copy.data()));
  });
}

}  // namespace hpdt::kernels
