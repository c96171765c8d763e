#include "hpdt/kernels/norm.h"

#include <cmath>
#include <vector>

#include "hpdt/kernels/cpu/activation.h"
#include "hpdt/kernels/cpu/norm.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/norm.h"
#endif

namespace hpdt::kernels {

namespace {
struct Nchw {
  int64_t n, c, hw;
};
// NHWC is batch norm of the [n*h*w, c] matrix (hw = 1).
Nchw bn_dims(std::string_view op, const Tensor& x, const Tensor& gamma, Layout layout,
             const char* gamma_name = "gamma") {
  const bool nhwc = layout == Layout::nhwc;
  HPDT_CHECK(x.ndim() == 4 || x.ndim() == 2, op, ": x must be ", nhwc ? "[n, h, w, c]" : "[n, c, h, w]",
             " or [n, c], got ", x.shape().str());
  const Nchw d = x.ndim() == 2 ? Nchw{x.size(0), x.size(1), 1}
                 : nhwc        ? Nchw{x.size(0) * x.size(1) * x.size(2), x.size(3), 1}
                               : Nchw{x.size(0), x.size(1), x.size(2) * x.size(3)};
  check_shape(op, gamma_name, gamma, Shape{d.c});
  return d;
}
void ensure(Tensor& t, int64_t n) {
  if (!t.defined() || t.numel() != n || !t.is_cpu() || t.dtype() != DType::f32) t = Tensor::empty({n}, DType::f32);
}
// Parameters share the storage dtype of x; running and saved statistics are f32 on either device.
void check_f32_stats(std::string_view op, std::initializer_list<std::pair<const char*, const Tensor*>> stats) {
  for (const auto& [name, t] : stats) check_dtype(op, name, *t, DType::f32);
}
// The fused epilogue's tensors live with x and share its dtype and shape; the residual's batch norm has x's
// channels, its parameters x's dtype and its statistics f32.
void check_fusion(std::string_view op, const Tensor& x, int64_t c, const BatchNormFusion& f, const Stream& s) {
  const ResidualBatchNorm* rb = f.residual_bn;
  HPDT_CHECK(!rb || f.residual.defined(), op, ": a residual batch norm needs a residual");
  if (!f.residual.defined()) return;
  detail::float_op_device(op, {&x, &f.residual}, s);
  check_shape(op, "residual", f.residual, x.shape());
  if (!rb) return;
  detail::float_op_device(op, {&x, &rb->gamma, &rb->beta}, s);
  detail::common_device(op, {&x, &rb->mean, &rb->scale}, s);
  check_f32_stats(op, {{"residual batch norm's mean", &rb->mean}, {"residual batch norm's scale", &rb->scale}});
  check_shape(op, "residual batch norm's gamma", rb->gamma, Shape{c});
  check_shape(op, "residual batch norm's beta", rb->beta, Shape{c});
  check_shape(op, "residual batch norm's mean", rb->mean, Shape{c});
  check_shape(op, "residual batch norm's scale", rb->scale, Shape{c});
}
void check_relu_grad(std::string_view op, const Tensor& x, int64_t c, const BatchNormReluGrad* r, const Stream& s) {
  if (!r) return;
  if (r->mask_from_input()) {
    HPDT_CHECK(!r->y.defined() && !r->dz.defined(), op,
               ": the ReLU's mask from x (relu.beta given) takes no relu output y and writes no dz");
    detail::float_op_device(op, {&x, &r->beta}, s);
    check_shape(op, "relu's beta", r->beta, Shape{c});
    return;
  }
  detail::float_op_device(op, {&x, &r->y, &r->dz}, s);
  check_shape(op, "relu output y", r->y, x.shape());
  check_shape(op, "dz", r->dz, x.shape());
}
// The residual's batch norm's backward sums asked of batchnorm_backward_train: r with x, f32 [c] mean, no ReLU output.
void check_residual_sums(std::string_view op, const Tensor& x, int64_t c, const ChannelGradSums* r, const Stream& s) {
  if (!r) return;
  HPDT_CHECK(!r->y.defined(), op, ": the residual's batch norm has no ReLU (residual_sums' y must be undefined)");
  detail::float_op_device(op, {&x, &r->x}, s);
  check_shape(op, "residual_sums' residual", r->x, x.shape());
  detail::common_device(op, {&x, &r->mean}, s);
  check_f32_stats(op, {{"residual_sums' mean", &r->mean}});
  check_shape(op, "residual_sums' mean", r->mean, Shape{c});
}
// Both forwards' checks: devices, dtypes, shapes (the statistics f32 [c]), the fused epilogue; x's device and dims.
struct Checked {
  Device dev;
  Nchw d;
};
Checked check_forward(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                      const Tensor& running_mean, const Tensor& running_var, const Tensor& y, const Stream& s,
                      Layout layout, const BatchNormFusion& fusion) {
  const Device dev = detail::common_device(op, {&x, &gamma, &beta, &running_mean, &running_var, &y}, s);
  if (dev.is_cpu())
    detail::float_op_device(op, {&x, &gamma, &beta, &running_mean, &running_var, &y}, s);
  else
    detail::float_op_device(op, {&x, &gamma, &beta, &y}, s);
  check_f32_stats(op, {{"running_mean", &running_mean}, {"running_var", &running_var}});
  const Nchw d = bn_dims(op, x, gamma, layout);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&beta, &running_mean, &running_var})
    check_shape(op, "a per-channel tensor", *t, Shape{d.c});
  check_shape(op, "y", y, x.shape());
  check_fusion(op, x, d.c, fusion, s);
  return {dev, d};
}

// Eval's invstd = 1 / sqrt(running_var + eps), in f32 as the CUDA kernels compute it.
std::vector<float> eval_invstd(const Tensor& running_var, float eps, int64_t c) {
  std::vector<float> invstd(static_cast<size_t>(c));
  const float* rv = running_var.data<float>();
  for (int64_t i = 0; i < c; ++i) invstd[size_t(i)] = 1.0f / std::sqrt(rv[i] + eps);
  return invstd;
}

// CPU: y = relu(y + residual) in place, through the CPU add and ReLU (the reference is those ops); the residual
// through its batch norm's apply first (scale_is_var: eval, scale is the running variance).
void fused_epilogue_cpu(const Nchw& d, const BatchNormFusion& f, bool scale_is_var, Tensor& y) {
  float* p = y.data<float>();
  if (const ResidualBatchNorm* rb = f.residual_bn) {
    std::vector<float> r(size_t(y.numel()));
    const std::vector<float> invstd = scale_is_var ? eval_invstd(rb->scale, rb->eps, d.c) : std::vector<float>();
    cpu::batchnorm_apply<float>(d.n, d.c, d.hw, f.residual.data<float>(), rb->mean.data<float>(),
                                scale_is_var ? invstd.data() : rb->scale.data<float>(), rb->gamma.data<float>(),
                                rb->beta.data<float>(), r.data());
    cpu::add_forward<float>(y.numel(), p, r.data(), p);
  } else if (f.residual.defined()) {
    cpu::add_forward<float>(y.numel(), p, f.residual.data<float>(), p);
  }
  if (f.relu) cpu::relu_forward<float>(y.numel(), p, p);
}

// SyncBN on the CPU: the host sum (a device-only seam is a caller's mistake, named).
void host_sum(const AllReduceSum& sync, std::vector<float>& buf) {
  HPDT_CHECK(bool(sync.host),
             "batch norm on the CPU: the SyncBN seam has only a device all-reduce (AllReduceSum::device)");
  sync.host(buf.data(), buf.size());
}

// The CPU's training statistics: saved mean and invstd, running statistics updated.
void statistics_cpu(const Nchw& d, const Tensor& x, Tensor& running_mean, Tensor& running_var, float eps,
                    float momentum, BatchNormSaved& saved, const AllReduceSum& sync) {
  std::vector<double> sum(size_t(d.c)), sumsq(size_t(d.c));
  cpu::batchnorm_stats<float>(d.n, d.c, d.hw, x.data<float>(), sum.data(), sumsq.data());
  double count = double(d.n * d.hw);
  if (sync) {
    std::vector<float> buf(size_t(2 * d.c + 1));
    for (int64_t c = 0; c < d.c; ++c) {
      buf[size_t(c)] = float(sum[size_t(c)]);
      buf[size_t(d.c + c)] = float(sumsq[size_t(c)]);
    }
    buf[size_t(2 * d.c)] = float(count);
    host_sum(sync, buf);
    for (int64_t c = 0; c < d.c; ++c) {
      sum[size_t(c)] = buf[size_t(c)];
      sumsq[size_t(c)] = buf[size_t(d.c + c)];
    }
    count = buf[size_t(2 * d.c)];
  }
  ensure(saved.mean, d.c);
  ensure(saved.invstd, d.c);
  cpu::batchnorm_finalize<float>(d.c, count, sum.data(), sumsq.data(), eps, momentum, saved.mean.data<float>(),
                                 saved.invstd.data<float>(), running_mean.data<float>(), running_var.data<float>());
}
}  // namespace

void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                             Tensor& running_var, float eps, float momentum, BatchNormSaved& saved, Tensor& y,
                             const AllReduceSum& sync, const Stream& s, Layout layout, const BatchNormFusion& fusion) {
  const char* op = "batchnorm_forward_train";
  const auto [dev, d] = check_forward(op, x, gamma, beta, running_mean, running_var, y, s, layout, fusion);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::batchnorm_forward_train(x, gamma, beta, running_mean, running_var, eps, momentum, saved, y, sync,
                                               s, layout, fusion));
    return;
  }
  statistics_cpu(d, x, running_mean, running_var, eps, momentum, saved, sync);
  cpu::batchnorm_apply<float>(d.n, d.c, d.hw, x.data<float>(), saved.mean.data<float>(), saved.invstd.data<float>(),
                              gamma.data<float>(), beta.data<float>(), y.data<float>());
  fused_epilogue_cpu(d, fusion, false, y);
}

void batchnorm_statistics(const Tensor& x, Tensor& running_mean, Tensor& running_var, float eps, float momentum,
                          BatchNormSaved& saved, const AllReduceSum& sync, const Stream& s, Layout layout,
                          const ChannelStats* stats) {
  const char* op = "batchnorm_statistics";
  const Device dev = detail::common_device(op, {&x, &running_mean, &running_var}, s);
  if (dev.is_cpu())
    detail::float_op_device(op, {&x, &running_mean, &running_var}, s);
  else
    detail::float_op_device(op, {&x}, s);
  check_f32_stats(op, {{"running_mean", &running_mean}, {"running_var", &running_var}});
  const Nchw d = bn_dims(op, x, running_mean, layout, "running_mean");
  check_shape(op, "running_var", running_var, Shape{d.c});
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(
        cuda::batchnorm_statistics(x, running_mean, running_var, eps, momentum, saved, sync, s, layout, stats));
    return;
  }
  (void)stats;  // the CPU computes its own
  statistics_cpu(d, x, running_mean, running_var, eps, momentum, saved, sync);
}

void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, float eps, Tensor& y, const Stream& s, Layout layout,
                            const BatchNormFusion& fusion) {
  const char* op = "batchnorm_forward_eval";
  const auto [dev, d] = check_forward(op, x, gamma, beta, running_mean, running_var, y, s, layout, fusion);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::batchnorm_forward_eval(x, gamma, beta, running_mean, running_var, eps, y, s, layout, fusion));
    return;
  }
  const std::vector<float> invstd = eval_invstd(running_var, eps, d.c);
  cpu::batchnorm_apply<float>(d.n, d.c, d.hw, x.data<float>(), running_mean.data<float>(), invstd.data(),
                              gamma.data<float>(), beta.data<float>(), y.data<float>());
  fused_epilogue_cpu(d, fusion, true, y);
}

void batchnorm_backward_train(const Tensor& dy, const Tensor& x, const Tensor& gamma, const BatchNormSaved& saved,
                              Tensor& dx, Tensor& dgamma, Tensor& dbeta, const AllReduceSum& sync, const Stream& s,
                              Layout layout, const BatchNormReluGrad* relu, const ChannelGradSums* sums,
                              ChannelGradSums* residual_sums) {
  const char* op = "batchnorm_backward_train";
  const Device dev = detail::common_device(op, {&dy, &x, &gamma, &saved.mean, &saved.invstd, &dx, &dgamma, &dbeta}, s);
  if (dev.is_cpu())
    detail::float_op_device(op, {&dy, &x, &gamma, &saved.mean, &saved.invstd, &dx, &dgamma, &dbeta}, s);
  else
    detail::float_op_device(op, {&dy, &x, &gamma, &dx, &dgamma, &dbeta}, s);
  check_f32_stats(op, {{"saved mean", &saved.mean}, {"saved invstd", &saved.invstd}});
  const Nchw d = bn_dims(op, x, gamma, layout);
  check_shape(op, "dy", dy, x.shape());
  check_shape(op, "dx", dx, x.shape());
  check_shape(op, "dgamma", dgamma, Shape{d.c});
  check_shape(op, "dbeta", dbeta, Shape{d.c});
  check_relu_grad(op, x, d.c, relu, s);
  check_residual_sums(op, x, d.c, residual_sums, s);
  HPDT_CHECK(!(relu && relu->mask_from_input() && residual_sums), op,
             ": the residual's batch norm's sums (residual_sums) are of dz, which the ReLU's mask from x does not "
             "write: give the mask as the output y and dz (a forward with a residual)");
  if (dev.is_cuda()) {
    check_shape(op, "saved mean", saved.mean, Shape{d.c});
    check_shape(op, "saved invstd", saved.invstd, Shape{d.c});
    HPDT_ON_CUDA(cuda::batchnorm_backward_train(dy, x, gamma, saved, dx, dgamma, dbeta, sync, s, layout, relu, sums,
                                                residual_sums));
    return;
  }
  (void)sums;  // the CPU runs its own reduce (no CPU kernel computes them) and hands none on
  if (residual_sums) residual_sums->clear_results();
  const float* g = dy.data<float>();  // dL/d(bn output): dy, or through the fused ReLU's mask
  std::vector<float> own_dz;
  if (relu && relu->mask_from_input()) {
    // the forward's output again, by the forward's own functions (so the mask is its bits), masking dy in place
    own_dz.resize(size_t(dy.numel()));
    cpu::batchnorm_apply<float>(d.n, d.c, d.hw, x.data<float>(), saved.mean.data<float>(), saved.invstd.data<float>(),
                                gamma.data<float>(), relu->beta.data<float>(), own_dz.data());
    cpu::relu_forward<float>(dy.numel(), own_dz.data(), own_dz.data());
    cpu::relu_backward<float>(dy.numel(), own_dz.data(), g, own_dz.data());
    g = own_dz.data();
  } else if (relu) {
    cpu::relu_backward<float>(dy.numel(), relu->y.data<float>(), g, relu->dz.data<float>());
    g = relu->dz.data<float>();
  }
  std::vector<double> sdy(size_t(d.c)), sdyx(size_t(d.c));
  cpu::batchnorm_backward_reduce<float>(d.n, d.c, d.hw, g, x.data<float>(), saved.mean.data<float>(),
                                        saved.invstd.data<float>(), sdy.data(), sdyx.data());
  float* dg = dgamma.data<float>();
  float* db = dbeta.data<float>();
  for (int64_t c = 0; c < d.c; ++c) {
    dg[c] += float(sdyx[size_t(c)]);
    db[c] += float(sdy[size_t(c)]);
  }
  double count = double(d.n * d.hw);
  if (sync) {
    std::vector<float> buf(size_t(2 * d.c + 1));
    for (int64_t c = 0; c < d.c; ++c) {
      buf[size_t(c)] = float(sdy[size_t(c)]);
      buf[size_t(d.c + c)] = float(sdyx[size_t(c)]);
    }
    buf[size_t(2 * d.c)] = float(count);
    host_sum(sync, buf);
    for (int64_t c = 0; c < d.c; ++c) {
      sdy[size_t(c)] = buf[size_t(c)];
      sdyx[size_t(c)] = buf[size_t(d.c + c)];
    }
    count = buf[size_t(2 * d.c)];
  }
  cpu::batchnorm_backward_apply<float>(d.n, d.c, d.hw, g, x.data<float>(), saved.mean.data<float>(),
                                       saved.invstd.data<float>(), gamma.data<float>(), sdy.data(), sdyx.data(), count,
                                       dx.data<float>());
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, LayerNormSaved& saved,
                       Tensor& y, const Stream& s) {
  const char* op = "layernorm_forward";
  const Device dev = detail::float_op_device(op, {&x, &gamma, &beta, &y}, s);
  const int64_t d = x.size(-1), rows = x.numel() / d;
  check_shape(op, "gamma", gamma, Shape{d});
  check_shape(op, "beta", beta, Shape{d});
  check_shape(op, "y", y, x.shape());
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::layernorm_forward(x, gamma, beta, eps, saved, y, s));
    return;
  }
  ensure(saved.mean, rows);
  ensure(saved.rstd, rows);
  cpu::layernorm_forward<float>(rows, d, x.data<float>(), gamma.data<float>(), beta.data<float>(), eps, y.data<float>(),
                                saved.mean.data<float>(), saved.rstd.data<float>());
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const LayerNormSaved& saved, Tensor& dx,
                        Tensor& dgamma, Tensor& dbeta, const Stream& s, const Tensor* residual) {
  const char* op = "layernorm_backward";
  const Device dev = detail::common_device(op, {&dy, &x, &gamma, &saved.mean, &saved.rstd, &dx, &dgamma, &dbeta}, s);
  if (dev.is_cpu())
    detail::float_op_device(op, {&dy, &x, &gamma, &saved.mean, &saved.rstd, &dx, &dgamma, &dbeta}, s);
  else
    detail::float_op_device(op, {&dy, &x, &gamma, &dx, &dgamma, &dbeta}, s);
  check_f32_stats(op, {{"saved mean", &saved.mean}, {"saved rstd", &saved.rstd}});
  const int64_t d = x.size(-1), rows = x.numel() / d;
  check_shape(op, "dy", dy, x.shape());
  check_shape(op, "dx", dx, x.shape());
  check_shape(op, "dgamma", dgamma, Shape{d});
  check_shape(op, "dbeta", dbeta, Shape{d});
  check_shape(op, "saved mean", saved.mean, Shape{rows});
  if (residual) detail::check_residual(op, *residual, dx, "dx", s);
  if (dev.is_cuda()) {
    check_shape(op, "saved rstd", saved.rstd, Shape{rows});
    HPDT_ON_CUDA(cuda::layernorm_backward(dy, x, gamma, saved, dx, dgamma, dbeta, s, residual));
    return;
  }
  cpu::layernorm_backward<float>(rows, d, dy.data<float>(), x.data<float>(), gamma.data<float>(),
                                 saved.mean.data<float>(), saved.rstd.data<float>(), dx.data<float>(),
                                 dgamma.data<float>(), dbeta.data<float>());
  if (residual) cpu::add_forward<float>(dx.numel(), dx.data<float>(), residual->data<float>(), dx.data<float>());
}

}  // namespace hpdt::kernels
