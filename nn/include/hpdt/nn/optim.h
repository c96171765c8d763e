// Optimizers over a model's ParameterArena (f32 master weights, f32 gradients, one flat buffer each),
// and the LossScaler of mixed precision. Optimizer state lives on the arena's device; every step runs on
// the arena's stream.
//
// One training step with mixed precision (what the trainer does on the CPU):
//   loss = softmax_cross_entropy(logits, labels, smoothing, &dlogits, scaler.scale())   // scaled grads
//   model.backward(dlogits)            // arena.grads_ready() rounds finished slices into model_grads()
//   (all-reduce arena.comm_grads())
//   bool ok = scaler.unscale(arena);   // master grads = model grads / scale; false on inf/NaN
//   if (ok) { clip_grad_norm(arena, max_norm); optimizer.step(); }   // step() refreshes the model copy
//   scaler.update(!ok);
// and the same in two passes over the gradients (what it does on the GPU):
//   bool ok = optimizer.fused_step(arena.comm_grads(), scaler.scale(), max_norm);
//   scaler.update(!ok);
#pragma once

#include <cstdint>

#include "hpdt/kernels/optim.h"
#include "hpdt/nn/arena.h"

namespace hpdt::nn {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of arena.master_params() from arena.grads(); then arena.sync_model_copy().
  virtual void step() = 0;
  // unscale + clip + step + model-copy refresh as one kernel over `grads` as backward and the all-reduce
  // left them (arena.comm_grads(): the model dtype; or arena.grads() when the f32 gradients were
  // reduced), which are read, not changed (kernels::fused_step; the same f32 arithmetic). Gradients
  // with an inf/NaN (after unscaling by 1/scale) skip the step on the device: nothing changes, the step
  // count stays, and this returns false (it reads that flag, so it synchronises the stream). max_norm
  // > 0: clip_grad_norm_ of the unscaled gradients.
  bool fused_step(const Tensor& grads, float scale, double max_norm);
  // fused_step without the wait, for a step captured into a CUDA graph (core/cuda_graph.h): queues the
  // same kernels and counts the step as taken (a graph replays the options of the capture: the first-step
  // rule, AdamW's bias correction and the learning rate of that call). last_fused_step_ok() then waits
  // and says whether the last queued (or replayed) step ran (no inf/NaN gradient). GPU arenas only: on
  // the CPU the model copy is refreshed by fused_step.
  void queue_fused_step(const Tensor& grads, float scale, double max_norm);
  bool last_fused_step_ok();
  // The rest of fused_step after queue_fused_step, for a step queued whole and read back at its end (as
  // hpdt-bench-train-step's eager GPU step does): waits, takes a skipped step back from the count, refreshes a
  // CPU arena's compute copy, and returns whether the step ran. fused_step = queue_fused_step + this.
  bool finish_fused_step();
  virtual void set_lr(float lr) = 0;
  virtual float lr() const = 0;
  int64_t steps() const { return steps_; }
  // Resume from a checkpoint: the number of steps already taken (SGD's first-step momentum rule and
  // AdamW's bias correction depend on it).
  void restore_steps(int64_t steps) { steps_ = steps; }

 protected:
  explicit Optimizer(ParameterArena& arena) : arena_(&arena) {}
  // The optimizer's part of a fused step: kind, options, state buffers.
  virtual void fused_options(kernels::FusedStepOptions& o, kernels::FusedStepBuffers& b) = 0;
  ParameterArena* arena_;
  int64_t steps_ = 0;
  Tensor stats_;  // fused_step's grad_stats, on the arena's device
};

class Sgd : public Optimizer {
 public:
  Sgd(ParameterArena& arena, const kernels::SgdOptions& options);
  void step() override;
  void set_lr(float lr) override { o_.lr = lr; }
  float lr() const override { return o_.lr; }
  Tensor momentum_buffer() const { return buf_; }

 private:
  void fused_options(kernels::FusedStepOptions& o, kernels::FusedStepBuffers& b) override;
  kernels::SgdOptions o_;
  Tensor buf_;
};

class AdamW : public Optimizer {
 public:
  AdamW(ParameterArena& arena, const kernels::AdamWOptions& options);
  void step() override;
  void set_lr(float lr) override { o_.lr = lr; }
  float lr() const override { return o_.lr; }
  Tensor exp_avg() const { return m_; }
  Tensor exp_avg_sq() const { return v_; }

 private:
  void fused_options(kernels::FusedStepOptions& o, kernels::FusedStepBuffers& b) override;
  kernels::AdamWOptions o_;
  Tensor m_, v_;
};

// clip_grad_norm_ over all of the arena's f32 gradients; returns the norm before clipping.
double clip_grad_norm(ParameterArena& arena, double max_norm);

struct LossScalerOptions {
  float init_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
};

// torch.cuda.amp.GradScaler semantics: dynamic scale, step skipped on inf/NaN and the scale backed off,
// grown after growth_interval clean steps in a row. A static mode keeps the scale fixed (still skipping
// steps with inf/NaN); off is scale 1 without checks (bf16 and f32 by default).
class LossScaler {
 public:
  enum class Mode { off, dynamic, fixed };
  static LossScaler off() { return LossScaler(Mode::off, 1.0f, {}); }
  static LossScaler dynamic(const LossScalerOptions& o = {}) { return LossScaler(Mode::dynamic, o.init_scale, o); }
  static LossScaler fixed(float scale) { return LossScaler(Mode::fixed, scale, {}); }
  // f16: dynamic; bf16 and f32: off.
  static LossScaler for_dtype(DType model_dtype);

  Mode mode() const { return mode_; }
  float scale() const { return scale_; }
  int64_t growth_tracker() const { return tracker_; }
  // Gradients of the scaled loss -> true gradients in arena.grads(): from model_grads() in mixed
  // precision (where f16 overflow is inf), from grads() in f32. Returns false when the step must be
  // skipped (any inf/NaN; never in mode off). cast_model_grads = false: the gradients were reduced in
  // arena.grads() itself (mixed precision with lossy gradient compression), leave model_grads() alone.
  bool unscale(ParameterArena& arena, bool cast_model_grads = true) const;
  // After the step (or its skip): GradScaler.update().
  void update(bool found_inf);
  // Resume from a checkpoint: the scale and the count of clean steps since the last change.
  void restore(float scale, int64_t growth_tracker) {
    scale_ = scale;
    tracker_ = growth_tracker;
  }

 private:
  LossScaler(Mode m, float scale, const LossScalerOptions& o) : mode_(m), scale_(scale), o_(o) {}
  Mode mode_;
  float scale_;
  LossScalerOptions o_;
  int64_t tracker_ = 0;
};

}  // namespace hpdt::nn
