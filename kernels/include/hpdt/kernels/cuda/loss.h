// CUDA softmax cross-entropy, checked against hpdt::kernels::cpu (see hpdt/kernels/loss.h).
// logits/dlogits f32, f16 or bf16 (math in f32), labels i32. Shapes are checked by the caller.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/loss.h"

namespace hpdt::kernels::cuda {
// Returns the mean loss, so it synchronises the stream (the one host value of the op). Throws the
// CPU's message for the first out-of-range label after that synchronisation (dlogits then unspecified).
double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                             double grad_scale, const Stream& stream);
// Without the wait (kernels/loss.h: softmax_cross_entropy_queued, read_loss_values).
Tensor make_loss_state(Device device, const Stream& stream);
void softmax_cross_entropy_queued(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                                  double grad_scale, Tensor& state, const Stream& stream);
LossValues read_loss_values(const Tensor& state, const Stream& stream);
}  // namespace hpdt::kernels::cuda
