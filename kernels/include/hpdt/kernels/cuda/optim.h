// CUDA implementations of hpdt/kernels/optim.h, checked against hpdt::kernels::cpu (same per-element
// arithmetic: hpdt/kernels/math/optim_math.h). Shapes and devices are checked by the callers (kernels/src).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/optim.h"

namespace hpdt::kernels::cuda {
// params, grads, momentum: one of f32, f16, bf16.
void sgd_step(Tensor& params, const Tensor& grads, Tensor& momentum, const SgdOptions& o, bool first_step,
              const Stream& stream);
void adamw_step(Tensor& params, const Tensor& grads, Tensor& m, Tensor& v, const AdamWOptions& o, int64_t step,
                const Stream& stream);
void scale(Tensor& x, float s, const Stream& stream);
// stats (16 device bytes, a GradStats) = (accumulate ? stats : 0) + {sum of (g * inv_scale)^2, any inf/NaN}.
void grad_stats(const Tensor& grads, float inv_scale, Tensor& stats, bool accumulate, const Stream& stream);
void fused_step(const FusedStepBuffers& buffers, const FusedStepOptions& options, const Stream& stream);
}  // namespace hpdt::kernels::cuda
