#include "hpdt/nn/optim.h"

#include "hpdt/kernels/elementwise.h"

namespace hpdt::nn {

Sgd::Sgd(ParameterArena& arena, const kernels::SgdOptions& o) : arena_(&arena), o_(o) {
  HPDT_CHECK(arena.finalized(), "Sgd: the arena is not finalized");
  HPDT_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "Sgd: Nesterov needs momentum > 0 and no dampening");
  buf_ = Tensor::zeros({std::max<int64_t>(arena.numel(), 1)}, DType::f32).flat(0, arena.numel());
}

void Sgd::step() {
  Tensor p = arena_->master_params();
  kernels::sgd_step(p, arena_->grads(), buf_, o_, steps_ == 0, Stream());
  ++steps_;
  arena_->sync_model_copy();
}

AdamW::AdamW(ParameterArena& arena, const kernels::AdamWOptions& o) : arena_(&arena), o_(o) {
  HPDT_CHECK(arena.finalized(), "AdamW: the arena is not finalized");
  m_ = Tensor::zeros({std::max<int64_t>(arena.numel(), 1)}, DType::f32).flat(0, arena.numel());
  v_ = Tensor::zeros({std::max<int64_t>(arena.numel(), 1)}, DType::f32).flat(0, arena.numel());
}

void AdamW::step() {
  Tensor p = arena_->master_params();
  ++steps_;
  kernels::adamw_step(p, arena_->grads(), m_, v_, o_, steps_, Stream());
  arena_->sync_model_copy();
}

double clip_grad_norm(ParameterArena& arena, double max_norm) {
  std::vector<Tensor> g = {arena.grads()};
  return kernels::clip_grad_norm(g, max_norm, Stream());
}

LossScaler LossScaler::for_dtype(DType model_dtype) {
  return model_dtype == DType::f16 ? dynamic() : off();
}

bool LossScaler::unscale(ParameterArena& arena, bool cast_model_grads) const {
  const Stream s;
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
