// CUDA softmax cross-entropy, checked against hpdt::kernels::cpu (see hpdt/kernels/loss.h).
// logits/dlogits f32, f16 or bf16 (math in f32), labels i32. Shapes are checked by the caller.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels::cuda {
// Returns the mean loss, so it synchronises the stream (the one host value of the op). Throws the
// CPU's message for the first out-of-range label after that synchronisation (dlogits then unspecified).
double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                             double grad_scale, const Stream& stream);
}  // namespace hpdt::kernels::cuda
