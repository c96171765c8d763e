// Optimizer steps and gradient clipping on flat buffers (the parameter arena's).
//
// On the CPU every tensor is f32. On CUDA sgd_step, adamw_step, scale, global_norm and has_nonfinite take
// one of f32, f16, bf16 for all their tensors (computed in f32); the fused step below takes f32 master
// weights and optimizer state with f32, f16 or bf16 gradients and an optional f16/bf16 model copy, on
// either device. Per-element arithmetic: hpdt/kernels/math/optim_math.h, the same on both devices.
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
// L2 norm over all given tensors together. Returns a host value: synchronises the stream on CUDA.
// CUDA sums squares in double with fixed-order partials (deterministic); it agrees with the CPU's
// 4096-element blocks to ~1e-15 relative, not bitwise.
double global_norm(const std::vector<Tensor>& grads, const Stream& stream);
// torch.nn.utils.clip_grad_norm_: scales all grads by max_norm / (norm + 1e-6) when that is < 1.
// Returns the norm before clipping (synchronises on CUDA, as global_norm).
double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, const Stream& stream);
void scale(Tensor& x, float s, const Stream& stream);
// Returns a host value: synchronises the stream on CUDA.
bool has_nonfinite(const Tensor& x, const Stream& stream);

// ---- mixed precision: the step in two passes over the gradients ------------------------------------------
//
//   Tensor stats = make_grad_stats(device, stream);
//   grad_stats({grads}, inv_scale, stats, stream);       // pass 1: inf/NaN flag + sum of squares, one read
//   fused_step({params, grads, m, v, model_copy, stats}, options, stream);  // pass 2: the whole update
//   bool skipped = read_grad_stats(stats, stream).nonfinite;  // whenever the host wants it (synchronises)
//
// fused_step does, per element and in one read of each buffer, what the unfused sequence
//   scale(g, inv_scale); if (!has_nonfinite(g)) { clip_grad_norm({g}, max_norm); sgd/adamw_step(...);
//   cast(params, model_copy); }
// does, with the same f32 operations (bitwise the same result for f32 gradients, given the same sum of
// squares), except that the gradients themselves are left unchanged. The skip decision needs no host round
// trip: the step kernel reads the flag in `stats` on the device and changes nothing when it is set (as
// GradScaler skips optimizer.step()). The caller's step counter (AdamW's bias correction, SGD's first step)
// is host state: to follow PyTorch exactly after a skipped step, read the flag before the next step.

// A zeroed 16-byte stats tensor (u8, laid out as GradStats) on `device`.
Tensor make_grad_stats(Device device, const Stream& stream);
// stats = {sum over all `grads` (f32, f16 or bf16 each, summed in order) of (g * inv_scale)^2 in double,
// any g * inv_scale inf/NaN}. One read of each gradient; asynchronous on CUDA.
void grad_stats(const std::vector<Tensor>& grads, float inv_scale, Tensor& stats, const Stream& stream);
// The stats as host values (synchronises the stream on CUDA).
GradStats read_grad_stats(const Tensor& stats, const Stream& stream);

struct FusedStepBuffers {
  Tensor params;      // f32 master weights, updated
  Tensor grads;       // f32, f16 or bf16, read only
  Tensor state1;      // f32: SGD's momentum buffer (undefined allowed without momentum); AdamW's m
  Tensor state2;      // f32: AdamW's v; undefined for SGD
  Tensor model_copy;  // optional f16 or bf16 copy of the updated params (the reduced-precision model), written
  Tensor stats;       // optional grad_stats() result: skip on inf/NaN, clip by its norm (needed for max_norm > 0)
};
// All tensors with the same number of elements, on one device. Asynchronous on CUDA.
void fused_step(const FusedStepBuffers& buffers, const FusedStepOptions& options, const Stream& stream);

}  // namespace hpdt::kernels
