// CPU optimizer steps and gradient clipping on flat f32 buffers (PyTorch torch.optim semantics).
// The per-element arithmetic lives in hpdt/kernels/math/optim_math.h, shared with the CUDA kernels.
#pragma once

#include <cstdint>

namespace hpdt::kernels {

struct SgdOptions {
  float lr = 0.1f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};
struct AdamWOptions {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 1e-2f;
};

// ---- the fused mixed-precision step (see hpdt/kernels/optim.h) -------------------------------------------

enum class OptimizerKind { sgd, adamw };

struct FusedStepOptions {
  OptimizerKind kind = OptimizerKind::adamw;
  SgdOptions sgd;           // kind == sgd
  AdamWOptions adamw;       // kind == adamw
  bool first_step = false;  // SGD with momentum: the buffer starts as the gradient (torch's "buf is None")
  int64_t step = 1;         // AdamW: counts from 1 (bias correction)
  float inv_scale = 1.0f;   // the gradients are multiplied by this first (1 / loss scale)
  double max_norm = 0;      // > 0: clip_grad_norm_ of the unscaled gradients to this; <= 0: no clipping
};

// What grad_stats() computes and fused_step() reads, as laid out in the 16-byte stats tensor.
struct GradStats {
  double sum_squares = 0;  // of the unscaled gradients g * inv_scale, in double
  int32_t nonfinite = 0;   // 1 when any unscaled gradient is inf or NaN
  int32_t reserved = 0;
  double norm() const;  // sqrt(sum_squares)
};
static_assert(sizeof(GradStats) == 16);

namespace cpu {
// p -= lr * update; with momentum the buffer is set to the gradient on the first step (first_step).
void sgd_step(int64_t n, const SgdOptions& o, bool first_step, float* p, const float* g, float* momentum_buf);
// step counts from 1. p *= 1 - lr*wd; m, v moments; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
void adamw_step(int64_t n, const AdamWOptions& o, int64_t step, float* p, const float* g, float* m, float* v);
// Sum of squares in double; the same bits for any thread count.
double sum_squares(int64_t n, const float* g);
// x *= s
void scale(int64_t n, float s, float* x);
// True when any element is inf or NaN.
bool has_nonfinite(int64_t n, const float* x);

// stats += {sum of squares of g * inv_scale (in 4096-element blocks, as sum_squares), any inf/NaN}.
// G: float, f16_t or bf16_t.
template <class G>
void grad_stats(int64_t n, const G* g, float inv_scale, GradStats& stats);
// The fused step: unless stats && stats->nonfinite, for every i: g' = (g[i] * inv_scale) * clip (clip from
// stats->sum_squares and max_norm), then sgd_update (state1 = momentum buffer, may be null without
// momentum) or adamw_update (state1 = m, state2 = v) of p[i], then model[i] = p[i] rounded to M when
// model is not null. stats may be null (never skip, no clipping; max_norm must then be <= 0).
// G: float, f16_t, bf16_t; M: f16_t, bf16_t (or float with model == nullptr: no copy).
template <class G, class M>
void fused_step(int64_t n, const FusedStepOptions& o, const GradStats* stats, float* p, const G* g, float* state1,
                float* state2, M* model);
}  // namespace cpu

}  // namespace hpdt::kernels
