#include "hpdt/nn/optim.h"

#include "hpdt/kernels/elementwise.h"

namespace hpdt::nn {

namespace {
// Optimizer state: f32, like the master weights, on the arena's device and stream.
Tensor state_like(const ParameterArena& arena) {
  AllocOptions o;
  if (arena.stream().is_cuda()) o.stream = &arena.stream();
  return Tensor::zeros({std::max<int64_t>(arena.numel(), 1)}, DType::f32, arena.device(), o).flat(0, arena.numel());
}
}  // namespace

bool Optimizer::fused_step(const Tensor& grads, float scale, double max_norm) {
  queue_fused_step(grads, scale, max_norm);
  return finish_fused_step();
}

bool Optimizer::finish_fused_step() {
  const bool ok = last_fused_step_ok();
  if (ok) {
    if (arena_->device().is_cpu()) arena_->sync_model_copy();
  } else {
    --steps_;  // skipped on the device: not a step
  }
  return ok;
}

bool Optimizer::last_fused_step_ok() {
  HPDT_CHECK(stats_.defined(), "Optimizer::last_fused_step_ok: no fused step was queued");
  return !kernels::read_grad_stats(stats_, arena_->stream()).nonfinite;
}

void Optimizer::queue_fused_step(const Tensor& grads, float scale, double max_norm) {
  const Stream& s = arena_->stream();
  if (!stats_.defined()) stats_ = kernels::make_grad_stats(arena_->device(), s);
  const float inv_scale = 1.0f / scale;
  kernels::grad_stats({grads}, inv_scale, stats_, s);
  kernels::FusedStepOptions o;
  kernels::FusedStepBuffers b;
  fused_options(o, b);
  o.inv_scale = inv_scale;
  o.max_norm = max_norm;
  b.params = arena_->master_params();
  b.grads = grads;
  b.stats = stats_;
  // The kernel writes the model copy on either device; the CPU's f32 compute copy follows it below.
  if (arena_->model_dtype() != DType::f32) b.model_copy = arena_->model_params();
  kernels::fused_step(b, o, s);
  ++steps_;  // counted as taken (it cannot know yet); fused_step takes it back when the step was skipped
}

Sgd::Sgd(ParameterArena& arena, const kernels::SgdOptions& o) : Optimizer(arena), o_(o) {
  HPDT_CHECK(arena.finalized(), "Sgd: the arena is not finalized");
  HPDT_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "Sgd: Nesterov needs momentum > 0 and no dampening");
  buf_ = state_like(arena);
}

void Sgd::step() {
  Tensor p = arena_->master_params();
  kernels::sgd_step(p, arena_->grads(), buf_, o_, steps_ == 0, arena_->stream());
  ++steps_;
  arena_->sync_model_copy();
}

void Sgd::fused_options(kernels::FusedStepOptions& o, kernels::FusedStepBuffers& b) {
  o.kind = kernels::OptimizerKind::sgd;
  o.sgd = o_;
  o.first_step = steps_ == 0;
  b.state1 = buf_;
}

AdamW::AdamW(ParameterArena& arena, const kernels::AdamWOptions& o) : Optimizer(arena), o_(o) {
  HPDT_CHECK(arena.finalized(), "AdamW: the arena is not finalized");
  m_ = state_like(arena);
  v_ = state_like(arena);
}

void AdamW::step() {
  Tensor p = arena_->master_params();
  ++steps_;
  kernels::adamw_step(p, arena_->grads(), m_, v_, o_, steps_, arena_->stream());
  arena_->sync_model_copy();
}

void AdamW::fused_options(kernels::FusedStepOptions& o, kernels::FusedStepBuffers& b) {
  o.kind = kernels::OptimizerKind::adamw;
  o.adamw = o_;
  o.step = steps_ + 1;
  b.state1 = m_;
  b.state2 = v_;
}

double clip_grad_norm(ParameterArena& arena, double max_norm) {
  std::vector<Tensor> g = {arena.grads()};
  return kernels::clip_grad_norm(g, max_norm, arena.stream());
}

LossScaler LossScaler::for_dtype(DType model_dtype) {
  return model_dtype == DType::f16 ? dynamic() : off();
}

bool LossScaler::unscale(ParameterArena& arena, bool cast_model_grads) const {
  const Stream& s = arena.stream();
  Tensor g = arena.grads();
  if (arena.model_dtype() != DType::f32 && cast_model_grads) kernels::cast(arena.model_grads(), g, s);
  if (scale_ != 1.0f) kernels::scale(g, 1.0f / scale_, s);
  if (mode_ == Mode::off) return true;
  return !kernels::has_nonfinite(g, s);
}

void LossScaler::update(bool found_inf) {
  if (mode_ != Mode::dynamic) return;
  if (found_inf) {
    scale_ *= o_.backoff_factor;
    tracker_ = 0;
  } else if (++tracker_ == o_.growth_interval) {
    scale_ *= o_.growth_factor;
    tracker_ = 0;
  }
}

}  // namespace hpdt::nn
