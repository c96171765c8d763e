#include <cmath>
#include <utility>

#include "hpdt/core/env.h"
#include "hpdt/kernels/attention.h"
#include "hpdt/kernels/conv.h"
#include "hpdt/kernels/linear.h"
#include "hpdt/kernels/pool.h"
#include "hpdt/nn/layer.h"

namespace hpdt::nn {

void Layer::fail(const std::string& what, const Tensor& got) const {
  HPDT_FAIL(name_, ": ", what, " (got ", got.shape().str(), " ", dtype_name(got.dtype()), ")");
}

void Layer::check_device(const Tensor& x) const {
  if (x.defined() && x.device() != device())
    fail("input on " + x.device().str() + ", but this layer runs on " + device().str() + "; copy the input to " +
             device().str() + " first",
         x);
}

bool Layer::float_ok(const Tensor& x) const {
  if (device().is_cpu()) return x.dtype() == DType::f32;
  return x.dtype() == DType::f32 || x.dtype() == DType::f16 || x.dtype() == DType::bf16;
}

std::string Layer::image_shape(const std::string& c) const {
  return layout_ == kernels::Layout::nhwc ? "[n, h, w, " + c + "]" : "[n, " + c + ", h, w]";
}

std::string Layer::float_names() const { return device().is_cpu() ? "f32" : "f32, f16 or bf16"; }

Tensor& Layer::ensure(Tensor& t, const Shape& shape, DType dtype) { return ensure_on(t, shape, dtype, stream_); }

Tensor& ensure_on(Tensor& t, const Shape& shape, DType dtype, const Stream& stream) {
  if (!t.defined() || !(t.shape() == shape) || t.dtype() != dtype || t.device() != stream.device()) {
    AllocOptions o;
    if (stream.is_cuda()) o.stream = &stream;
    t = Tensor::empty(shape, dtype, stream.device(), o);
  }
  return t;
}

namespace {
std::string dt_name(DType t) { return std::string(dtype_name(t)); }
}  // namespace

namespace {
// PyTorch's default Conv2d/Linear init: kaiming_uniform(a = sqrt(5)) = U(+-1/sqrt(fan_in)); same bound for bias.
ParameterArena::Init default_uniform(int64_t fan_in) { return init::uniform(float(1.0 / std::sqrt(double(fan_in)))); }
}  // namespace

// ---- Conv2d ------------------------------------------------------------------------------------------

Conv2d::Conv2d(ParameterArena& arena, std::string name, int64_t c_in, int64_t c_out, int64_t kernel, int64_t stride,
               int64_t pad, bool bias, ParameterArena::Init weight_init)
    : Layer(std::move(name)), arena_(&arena), c_in_(c_in), c_out_(c_out), k_(kernel), stride_(stride), pad_(pad) {
  const int64_t fan_in = c_in * kernel * kernel;
  w_id_ = arena.add(name_ + ".weight", {c_out, c_in, kernel, kernel}, weight_init ? weight_init : default_uniform(fan_in));
  if (bias) b_id_ = arena.add(name_ + ".bias", {c_out}, default_uniform(fan_in));
}

Tensor Conv2d::forward(const Tensor& x) {
  check_device(x);
  const DType dt = arena_->compute_dtype();
  const bool nhwc = layout_ == kernels::Layout::nhwc;
  if (x.ndim() != 4 || channels(x) != c_in_ || x.dtype() != dt)
    fail("expects " + dt_name(dt) + " input " + image_shape(std::to_string(c_in_)), x);
  const int64_t h = nhwc ? x.size(1) : x.size(2), w_in = nhwc ? x.size(2) : x.size(3);
  if (h + 2 * pad_ < k_ || w_in + 2 * pad_ < k_)
    fail("input smaller than the " + std::to_string(k_) + "x" + std::to_string(k_) + " kernel", x);
  x_ = x;
  const Tensor w = arena_->param(w_id_);
  const Tensor b = b_id_ >= 0 ? arena_->param(b_id_) : Tensor();
  const int64_t oh = (h + 2 * pad_ - k_) / stride_ + 1, ow = (w_in + 2 * pad_ - k_) / stride_ + 1;
  ensure(y_, nhwc ? Shape{x.size(0), oh, ow, c_out_} : Shape{x.size(0), c_out_, oh, ow}, dt);
  if (output_stats_wanted_ && training_) {
    kernels::conv2d_forward_fused(x, w, {.bias = b_id_ >= 0 ? &b : nullptr, .stats = &output_stats_}, y_, stride_,
                                  pad_, stream_, layout_);
  } else {
    output_stats_.clear_results();
    kernels::conv2d_forward(x, w, b_id_ >= 0 ? &b : nullptr, y_, stride_, pad_, stream_, layout_);
  }
  return y_;
}

Tensor Conv2d::backward(const Tensor& dy) {
  if (!(dy.shape() == y_.shape())) fail("gradient shape differs from the output " + y_.shape().str(), dy);
  Tensor dw = arena_->compute_grad(w_id_);
  Tensor db = b_id_ >= 0 ? arena_->compute_grad(b_id_) : Tensor();
  kernels::conv2d_backward_filter(x_, dy, dw, b_id_ >= 0 ? &db : nullptr, stride_, pad_, stream_, layout_);
  arena_->grads_ready(w_id_, b_id_ >= 0 ? 2 : 1);
  const Tensor r = std::exchange(dx_residual_, Tensor());
  if (!needs_dx_) {
    HPDT_CHECK(!r.defined(), name_, ": add_to_next_input_grad on a layer that computes no input gradient");
    return Tensor();
  }
  ensure(dx_, x_.shape(), x_.dtype());
  if (r.defined() && (!(r.shape() == x_.shape()) || r.dtype() != x_.dtype()))
    fail("the gradient to add must match the input " + x_.shape().str() + " " + dt_name(x_.dtype()), r);
  kernels::ChannelGradSums* sums = BatchNorm::ask_grad_sums(grad_sums_for_, input_grad_sums_, dx_);
  kernels::conv2d_backward_data(dy, arena_->param(w_id_), dx_, stride_, pad_, stream_, layout_,
                                r.defined() ? &r : nullptr, sums);
  return dx_;
}

void Conv2d::feed_grad_sums_to(BatchNorm& bn) {
  grad_sums_for_ = &bn;
  bn.grad_sums_from_ = &input_grad_sums_;
}

// ---- BatchNorm ---------------------------------------------------------------------------------------

void BatchNorm::feed_residual_grad_sums_to(BatchNorm& residual_bn) {
  HPDT_CHECK(&residual_bn != this && residual_bn.c_ == c_ && !residual_bn.then_relu_, name_,
             ": the residual's batch norm ", residual_bn.name_, " must be another layer with ", c_,
             " channels and no ReLU");
  residual_grad_sums_for_ = &residual_bn;
  residual_bn.grad_sums_from_ = &residual_grad_sums_;
}

kernels::ChannelGradSums* BatchNorm::ask_grad_sums(const BatchNorm* bn, kernels::ChannelGradSums& request,
                                                   const Tensor& dy) {
  if (!bn || !bn->training_ || !bn->x_.defined() || !bn->saved_.mean.defined() || !(bn->x_.shape() == dy.shape()) ||
      bn->x_.dtype() != dy.dtype()) {
    request.clear_results();
    return nullptr;
  }
  request.x = bn->x_;
  request.y = bn->then_relu_ ? bn->y_ : Tensor();
  request.mean = bn->saved_.mean;
  return &request;
}

BatchNorm::BatchNorm(ParameterArena& arena, std::string name, int64_t channels, float eps, float momentum,
                     bool then_relu)
    : Layer(std::move(name)), arena_(&arena), c_(channels), eps_(eps), momentum_(momentum), then_relu_(then_relu) {
  g_id_ = arena.add(name_ + ".weight", {channels}, init::constant(1.0f));
  b_id_ = arena.add(name_ + ".bias", {channels}, init::constant(0.0f));
  Tensor var = Tensor::empty({channels}, DType::f32);
  for (int64_t i = 0; i < channels; ++i) var.data<float>()[i] = 1.0f;
  mean_id_ = arena.add_buffer(name_ + ".running_mean", Tensor::zeros({channels}, DType::f32));
  var_id_ = arena.add_buffer(name_ + ".running_var", var);
}

Tensor BatchNorm::forward(const Tensor& x) { return run_forward(x, nullptr); }

Tensor BatchNorm::forward(const Tensor& x, const Tensor& residual) {
  check_device(residual);
  if (!(residual.shape() == x.shape()) || residual.dtype() != x.dtype())
    fail("residual must match the input " + x.shape().str() + " " + dt_name(x.dtype()), residual);
  return run_forward(x, &residual);
}

Tensor BatchNorm::forward(const Tensor& x, const Tensor& r, const BatchNorm& residual_bn) {
  check_device(r);
  if (!(r.shape() == x.shape()) || r.dtype() != x.dtype())
    fail("residual must match the input " + x.shape().str() + " " + dt_name(x.dtype()), r);
  const std::string of = "the residual's batch norm " + residual_bn.name_;
  HPDT_CHECK(residual_bn.c_ == c_ && !residual_bn.then_relu_, name_, ": ", of, " must have ", c_,
             " channels and no ReLU");
  HPDT_CHECK(residual_bn.training_ == training_, name_, ": ", of, " is in ",
             residual_bn.training_ ? "training" : "eval", " mode, this layer in ", training_ ? "training" : "eval");
  HPDT_CHECK(residual_bn.x_.defined() && residual_bn.x_.data() == r.data() && residual_bn.x_.shape() == r.shape(),
             name_, ": ", of, " must run forward_statistics on the residual first");
  return run_forward(x, &r, &residual_bn);
}

void BatchNorm::forward_statistics(const Tensor& x) {
  HPDT_CHECK(!then_relu_, name_, ": forward_statistics is for a batch norm without a ReLU");
  check_device(x);
  check_input(x, arena_->compute_dtype());
  x_ = x;
  if (!training_) return;
  prepare_training(x);
  Tensor mean = arena_->buffer(mean_id_), var = arena_->buffer(var_id_);
  kernels::batchnorm_statistics(x, mean, var, eps_, momentum_, saved_, sync_, stream_, layout_,
                                stats_from_ ? &stats_from_->output_stats() : nullptr);
}

void BatchNorm::prepare_training(const Tensor& x) {
  if (x.numel() / c_ < 2 && !sync_) fail("needs more than one value per channel in training mode", x);
  // the saved statistics: f32 [c] on the layer's device
  ensure(saved_.mean, {c_}, DType::f32);
  ensure(saved_.invstd, {c_}, DType::f32);
}

void BatchNorm::check_input(const Tensor& x, DType dt) const {
  const int64_t c = x.ndim() == 4 ? channels(x) : x.ndim() == 2 ? x.size(1) : -1;
  if ((x.ndim() != 4 && x.ndim() != 2) || c != c_ || x.dtype() != dt)
    fail("expects " + dt_name(dt) + " input " + image_shape(std::to_string(c_)) + " or [n, " + std::to_string(c_) + "]", x);
}

Tensor BatchNorm::run_forward(const Tensor& x, const Tensor* residual, const BatchNorm* residual_bn) {
  check_device(x);
  const DType dt = arena_->compute_dtype();
  check_input(x, dt);
  x_ = x;
  forward_added_residual_ = residual != nullptr;
  ensure(y_, x.shape(), dt);
  const Tensor g = arena_->param(g_id_), b = arena_->param(b_id_);
  Tensor mean = arena_->buffer(mean_id_), var = arena_->buffer(var_id_);
  kernels::BatchNormFusion fusion;
  if (residual) fusion.residual = *residual;
  kernels::ResidualBatchNorm rb;
  if (residual_bn) {
    const BatchNorm& o = *residual_bn;
    rb = {o.arena_->param(o.g_id_), o.arena_->param(o.b_id_), training_ ? o.saved_.mean : o.running_mean(),
          training_ ? o.saved_.invstd : o.running_var(), o.eps_};
    fusion.residual_bn = &rb;
  }
  fusion.relu = then_relu_;
  if (stats_from_) fusion.stats = &stats_from_->output_stats();
  if (training_) {
    prepare_training(x);
    kernels::batchnorm_forward_train(x, g, b, mean, var, eps_, momentum_, saved_, y_, sync_, stream_, layout_, fusion);
  } else {
    kernels::batchnorm_forward_eval(x, g, b, mean, var, eps_, y_, stream_, layout_, fusion);
  }
  return y_;
}

namespace {
// HPDT_BN_RELU_MASK=output keeps the fused ReLU's backward on its output's mask (dz written, the dx pass reading it)
// where the mask from x would do: the A/B of kernels::BatchNormReluGrad::mask_from_input.
bool relu_mask_from_input() { return env_switch("HPDT_BN_RELU_MASK", "input", "output"); }
}  // namespace

Tensor BatchNorm::residual_grad() const {
  if (!then_relu_) return dy_;
  HPDT_CHECK(masked_grad_.defined(), name_,
             ": residual_grad() after a backward whose forward added no residual (its ReLU's mask came from x: no dz)");
  return masked_grad_;
}

Tensor BatchNorm::backward(const Tensor& dy) {
  if (!(dy.shape() == x_.shape())) fail("gradient shape differs from the output " + x_.shape().str(), dy);
  HPDT_CHECK(training_, name_, ": backward in eval mode is not supported (statistics are frozen; use train mode)");
  ensure(dx_, x_.shape(), x_.dtype());
  Tensor dg = arena_->compute_grad(g_id_), db = arena_->compute_grad(b_id_);
  dy_ = dy;
  // The layer that wrote dy (a convolution's backward-data, the max pool's backward) may have computed this layer's
  // backward sums (and, with then_relu, written dz into dy): Conv2d::feed_grad_sums_to, MaxPool2d::feed_grad_sums_to.
  const kernels::ChannelGradSums* sums = grad_sums_from_;
  if (sums && !(sums->describe(dy, c_) && sums->y.defined() == then_relu_)) sums = nullptr;
  // feed_residual_grad_sums_to: the residual's batch norm's sums, from the apply pass that reads dz anyway
  kernels::ChannelGradSums* rsums = ask_grad_sums(residual_grad_sums_for_, residual_grad_sums_, dy);
  if (then_relu_) {
    kernels::BatchNormReluGrad relu;
    if (sums) {
      masked_grad_ = dy;
      relu = {y_, masked_grad_};
    } else if (!forward_added_residual_ && !rsums && relu_mask_from_input()) {
      // Nobody reads dz (no residual to hand it to): the mask from x, two passes over the activation fewer.
      masked_grad_ = Tensor();
      relu.beta = arena_->param(b_id_);
    } else {
      ensure(dz_, x_.shape(), x_.dtype());
      masked_grad_ = dz_;
      relu = {y_, masked_grad_};
    }
    kernels::batchnorm_backward_train(dy, x_, arena_->param(g_id_), saved_, dx_, dg, db, sync_, stream_, layout_, &relu,
                                      sums, rsums);
  } else {
    kernels::batchnorm_backward_train(dy, x_, arena_->param(g_id_), saved_, dx_, dg, db, sync_, stream_, layout_,
                                      nullptr, sums, rsums);
  }
  if (!defer_ready_) announce_grads();
  return dx_;
}

// ---- ReLU, pools -------------------------------------------------------------------------------------

Tensor ReLU::forward(const Tensor& x) {
  check_device(x);
  if (!float_ok(x)) fail("expects " + float_names() + " input", x);
  ensure(y_, x.shape(), x.dtype());
  kernels::relu_forward(x, y_, stream_);
  return y_;
}

Tensor ReLU::backward(const Tensor& dy) {
  if (!(dy.shape() == y_.shape())) fail("gradient shape differs from the output " + y_.shape().str(), dy);
  ensure(dx_, dy.shape(), dy.dtype());
  kernels::relu_backward(y_, dy, dx_, stream_);
  return dx_;
}

Tensor ImageInput::forward(const Tensor& x) {
  check_device(x);
  if (layout_ == input_layout_) return x;
  if (x.ndim() != 4) fail(std::string("expects ") + kernels::layout_name(input_layout_) + " images", x);
  const bool to_nhwc = layout_ == kernels::Layout::nhwc;
  const Shape out =
      to_nhwc ? Shape{x.size(0), x.size(2), x.size(3), x.size(1)} : Shape{x.size(0), x.size(3), x.size(1), x.size(2)};
  if ((to_nhwc ? x.size(1) : x.size(3)) == 1) return x.view(out);  // one channel: the same bytes
  ensure(y_, out, x.dtype());
  if (to_nhwc)
    kernels::nchw_to_nhwc(x, y_, stream_);
  else
    kernels::nhwc_to_nchw(x, y_, stream_);
  return y_;
}

Tensor ImageInput::backward(const Tensor& dy) {
  if (layout_ == input_layout_ || !dy.defined()) return dy;
  const bool from_nhwc = layout_ == kernels::Layout::nhwc;
  const Shape out = from_nhwc ? Shape{dy.size(0), dy.size(3), dy.size(1), dy.size(2)}
                              : Shape{dy.size(0), dy.size(2), dy.size(3), dy.size(1)};
  if ((from_nhwc ? dy.size(3) : dy.size(1)) == 1) return dy.view(out);
  ensure(dx_, out, dy.dtype());
  if (from_nhwc)
    kernels::nhwc_to_nchw(dy, dx_, stream_);
  else
    kernels::nchw_to_nhwc(dy, dx_, stream_);
  return dx_;
}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_device(x);
  if (x.ndim() != 4 || !float_ok(x)) fail("expects " + float_names() + " input " + image_shape("c"), x);
  in_shape_ = x.shape();
  const bool nhwc = layout_ == kernels::Layout::nhwc;
  const int64_t h = nhwc ? x.size(1) : x.size(2), w = nhwc ? x.size(2) : x.size(3);
  const int64_t oh = (h + 2 * pad_ - k_) / stride_ + 1, ow = (w + 2 * pad_ - k_) / stride_ + 1;
  if (h + 2 * pad_ < k_ || w + 2 * pad_ < k_ || oh < 1 || ow < 1) fail("input smaller than the pooling window", x);
  ensure(y_, nhwc ? Shape{x.size(0), oh, ow, x.size(3)} : Shape{x.size(0), x.size(1), oh, ow}, x.dtype());
  ensure(argmax_, y_.shape(), DType::i32);
  kernels::maxpool2d_forward(x, k_, stride_, pad_, y_, argmax_, stream_, layout_);
  return y_;
}

Tensor MaxPool2d::backward(const Tensor& dy) {
  if (!(dy.shape() == y_.shape())) fail("gradient shape differs from the output " + y_.shape().str(), dy);
  ensure(dx_, in_shape_, dy.dtype());
  kernels::ChannelGradSums* sums = BatchNorm::ask_grad_sums(grad_sums_for_, input_grad_sums_, dx_);
  kernels::maxpool2d_backward(dy, argmax_, k_, stride_, pad_, dx_, stream_, layout_, sums);
  return dx_;
}

void MaxPool2d::feed_grad_sums_to(BatchNorm& bn) {
  grad_sums_for_ = &bn;
  bn.grad_sums_from_ = &input_grad_sums_;
}

Tensor GlobalAvgPool::forward(const Tensor& x) {
  check_device(x);
  if (x.ndim() != 4 || !float_ok(x)) fail("expects " + float_names() + " input " + image_shape("c"), x);
  in_shape_ = x.shape();
  ensure(y_, {x.size(0), channels(x)}, x.dtype());
  kernels::global_avgpool_forward(x, y_, stream_, layout_);
  return y_;
}

Tensor GlobalAvgPool::backward(const Tensor& dy) {
  if (!(dy.shape() == y_.shape())) fail("gradient shape differs from the output " + y_.shape().str(), dy);
  ensure(dx_, in_shape_, dy.dtype());
  kernels::global_avgpool_backward(dy, dx_, stream_, layout_);
  return dx_;
}

// ---- Linear, LayerNorm, GELU, Dropout ------------------------------------------------------------------

Linear::Linear(ParameterArena& arena, std::string name, int64_t in, int64_t out, bool bias,
               ParameterArena::Init weight_init, ParameterArena::Init bias_init)
    : Layer(std::move(name)), arena_(&arena), in_(in), out_(out) {
  w_id_ = arena.add(name_ + ".weight", {out, in}, weight_init ? weight_init : default_uniform(in));
  if (bias) b_id_ = arena.add(name_ + ".bias", {out}, bias_init ? bias_init : default_uniform(in));
}

void Linear::then_gelu(kernels::GeluForm form) {
  gelu_ = true;
  gelu_form_ = form;
}

void Linear::input_is_gelu_of(Linear& prev) {
  HPDT_CHECK(prev.gelu_, name_, ": input_is_gelu_of(", prev.name(), "), which has no fused GELU (then_gelu)");
  HPDT_CHECK(prev.out_ == in_, name_, ": input_is_gelu_of(", prev.name(), "): its ", prev.out_,
             " outputs are not this layer's ", in_, " inputs");
  gelu_source_ = &prev;
  prev.gelu_grad_by_next_ = true;
}

Tensor Linear::forward(const Tensor& x) {
  check_device(x);
  const DType dt = arena_->compute_dtype();
  if (x.ndim() < 2 || x.size(-1) != in_ || x.dtype() != dt)
    fail("expects " + dt_name(dt) + " input [..., " + std::to_string(in_) + "]", x);
  x_ = x;
  std::vector<int64_t> dims = x.shape().vec();
  dims.back() = out_;
  ensure(y_, Shape(std::span<const int64_t>(dims)), dt);
  const Tensor w = arena_->param(w_id_);
  const Tensor b = b_id_ >= 0 ? arena_->param(b_id_) : Tensor();
  const Tensor r = std::exchange(y_residual_, Tensor());
  if (r.defined() && (!(r.shape() == y_.shape()) || r.dtype() != dt))
    fail("the residual to add must match the output " + y_.shape().str() + " " + dt_name(dt), r);
  if (r.defined() && gelu_) fail("add_to_next_output on a layer with a fused GELU", r);
  if (gelu_) {
    ensure(pre_, y_.shape(), dt);
    kernels::linear_gelu_forward(x, w, b_id_ >= 0 ? &b : nullptr, gelu_form_, pre_, y_, stream_);
  } else {
    kernels::linear_forward(x, w, b_id_ >= 0 ? &b : nullptr, y_, stream_, r.defined() ? &r : nullptr);
  }
  return y_;
}

Tensor Linear::backward(const Tensor& dy) {
  if (!(dy.shape() == y_.shape())) fail("gradient shape differs from the output " + y_.shape().str(), dy);
  ensure(dx_, x_.shape(), x_.dtype());
  Tensor dw = arena_->compute_grad(w_id_);
  Tensor db = b_id_ >= 0 ? arena_->compute_grad(b_id_) : Tensor();
  Tensor* dbias = b_id_ >= 0 ? &db : nullptr;
  Tensor g = dy;  // the gradient of x w^T + b
  if (gelu_ && !gelu_grad_by_next_) {
    ensure(dpre_, pre_.shape(), pre_.dtype());
    kernels::gelu_backward(pre_, dy, gelu_form_, dpre_, stream_);
    g = dpre_;
  }
  if (gelu_source_) {
    const Tensor& h = gelu_source_->pre_;
    if (!(h.shape() == x_.shape()) || h.dtype() != x_.dtype())
      fail("the GELU input of " + gelu_source_->name() + " does not match this layer's input " + x_.shape().str(), h);
    kernels::linear_backward_through_gelu(g, x_, arena_->param(w_id_), h, gelu_source_->gelu_form_, dx_, dw, dbias,
                                          stream_);
  } else {
    kernels::linear_backward(g, x_, arena_->param(w_id_), &dx_, dw, dbias, stream_);
  }
  arena_->grads_ready(w_id_, b_id_ >= 0 ? 2 : 1);
  return dx_;
}

LayerNorm::LayerNorm(ParameterArena& arena, std::string name, int64_t d, float eps)
    : Layer(std::move(name)), arena_(&arena), d_(d), eps_(eps) {
  g_id_ = arena.add(name_ + ".weight", {d}, init::constant(1.0f));
  b_id_ = arena.add(name_ + ".bias", {d}, init::constant(0.0f));
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_device(x);
  const DType dt = arena_->compute_dtype();
  if (x.ndim() < 2 || x.size(-1) != d_ || x.dtype() != dt)
    fail("expects " + dt_name(dt) + " input [..., " + std::to_string(d_) + "]", x);
  x_ = x;
  ensure(y_, x.shape(), dt);
  // the saved statistics: f32 per row on the layer's device
  ensure(saved_.mean, {x.numel() / d_}, DType::f32);
  ensure(saved_.rstd, {x.numel() / d_}, DType::f32);
  kernels::layernorm_forward(x, arena_->param(g_id_), arena_->param(b_id_), eps_, saved_, y_, stream_);
  return y_;
}

Tensor LayerNorm::backward(const Tensor& dy) {
  if (!(dy.shape() == y_.shape())) fail("gradient shape differs from the output " + y_.shape().str(), dy);
  ensure(dx_, x_.shape(), x_.dtype());
  Tensor dg = arena_->compute_grad(g_id_), db = arena_->compute_grad(b_id_);
  const Tensor r = std::exchange(dx_residual_, Tensor());
  if (r.defined() && (!(r.shape() == x_.shape()) || r.dtype() != x_.dtype()))
    fail("the gradient to add must match the input " + x_.shape().str() + " " + dt_name(x_.dtype()), r);
  kernels::layernorm_backward(dy, x_, arena_->param(g_id_), saved_, dx_, dg, db, stream_, r.defined() ? &r : nullptr);
  arena_->grads_ready(g_id_, 2);
  return dx_;
}

Tensor GELU::forward(const Tensor& x) {
  check_device(x);
  if (!float_ok(x)) fail("expects " + float_names() + " input", x);
  x_ = x;
  ensure(y_, x.shape(), x.dtype());
  kernels::gelu_forward(x, form_, y_, stream_);
  return y_;
}

Tensor GELU::backward(const Tensor& dy) {
  if (!(dy.shape() == y_.shape())) fail("gradient shape differs from the output " + y_.shape().str(), dy);
  ensure(dx_, x_.shape(), x_.dtype());
  kernels::gelu_backward(x_, dy, form_, dx_, stream_);
  return dx_;
}

Tensor Dropout::forward(const Tensor& x) {
  active_ = !identity_now();
  if (!active_) return x;
  check_device(x);
  mask_seed_ = seed_ ^ (0x9E3779B97F4A7C15ull * ++calls_);  // a fresh mask each call
  first_ = x.ndim() > 0 && x.size(0) > 0 ? uint64_t(first_sample_) * uint64_t(x.numel() / x.size(0)) : 0;
  ensure(y_, x.shape(), x.dtype());
  kernels::dropout_forward(x, p_, mask_seed_, stream_id_, y_, stream_, first_);
  return y_;
}

Tensor Dropout::backward(const Tensor& dy) {
  if (!active_) return dy;
  ensure(dx_, dy.shape(), dy.dtype());
  kernels::dropout_backward(dy, p_, mask_seed_, stream_id_, dx_, stream_, first_);
  return dx_;
}

// ---- attention ---------------------------------------------------------------------------------------

MultiHeadSelfAttention::MultiHeadSelfAttention(ParameterArena& arena, std::string name, int64_t d, int64_t heads)
    : Layer(name), d_(d), heads_(heads),
      // PyTorch nn.MultiheadAttention: in_proj xavier_uniform with zero bias, out_proj zero bias
      qkv_(arena, name + ".in_proj", d, 3 * d, true, init::xavier_uniform(d, 3 * d), init::constant(0.0f)),
      proj_(arena, name + ".out_proj", d, d, true, nullptr, init::constant(0.0f)) {
  HPDT_CHECK(heads >= 1 && d % heads == 0, name_, ": width ", d, " is not divisible by ", heads, " heads");
}

Tensor MultiHeadSelfAttention::forward(const Tensor& x) {
  check_device(x);
  if (x.ndim() != 3 || x.size(2) != d_ || !float_ok(x))
    fail("expects " + float_names() + " input [b, t, " + std::to_string(d_) + "]", x);
  qkv_out_ = qkv_.forward(x);
  ensure(attn_, x.shape(), qkv_out_.dtype());
  kernels::attention_forward(qkv_out_, heads_, saved_, attn_, stream_);
  return proj_.forward(attn_);
}

Tensor MultiHeadSelfAttention::backward(const Tensor& dy) {
  const Tensor dattn = proj_.backward(dy);
  ensure(dattn_, qkv_out_.shape(), qkv_out_.dtype());
  kernels::attention_backward(qkv_out_, saved_, attn_, dattn, heads_, dattn_, stream_);
  return qkv_.backward(dattn_);
}

// ---- Sequential --------------------------------------------------------------------------------------

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& l : layers_) h = l->forward(h);
  return h;
}

Tensor Sequential::backward(const Tensor& dy) {
  Tensor g = dy;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) g = (*it)->backward(g);
  return g;
}

}  // namespace hpdt::nn
