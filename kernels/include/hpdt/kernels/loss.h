// Softmax cross-entropy with label smoothing (PyTorch CrossEntropyLoss, mean reduction).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

// logits [b, classes] f32, labels [b] i32. Returns the mean loss; when dlogits is given writes
// d(loss * grad_scale)/dlogits (grad_scale: the loss scale of mixed precision, 1 otherwise).
double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                             double grad_scale, const Stream& stream);

}  // namespace hpdt::kernels
