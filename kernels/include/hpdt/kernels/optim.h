// Optimizer steps and gradient clipping on flat f32 buffers (the parameter arena's).
#pragma once

#include <vector>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cpu/optim.h"

namespace hpdt::kernels {

// torch.optim.SGD; first_step: the momentum buffer starts as the gradient.
void sgd_step(Tensor& params, const Tensor& grads, Tensor& momentum, const SgdOptions& o, bool first_step,
              const Stream& stream);
// torch.optim.AdamW; step counts from 1.
void adamw_step(Tensor& params, const Tensor& grads, Tensor& m, Tensor& v, const AdamWOptions& o, int64_t step,
                const Stream& stream);
// L2 norm over all given tensors together.
double global_norm(const std::vector<Tensor>& grads, const Stream& stream);
// torch.nn.utils.clip_grad_norm_: scales all grads by max_norm / (norm + 1e-6) when that is < 1.
// Returns the norm before clipping.
double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, const Stream& stream);
void scale(Tensor& x, float s, const Stream& stream);
bool has_nonfinite(const Tensor& x, const Stream& stream);

}  // namespace hpdt::kernels
