// CPU optimizer steps and gradient clipping on flat f32 buffers (PyTorch torch.optim semantics).
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
}  // namespace cpu

}  // namespace hpdt::kernels
