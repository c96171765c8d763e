// Softmax cross-entropy with label smoothing (PyTorch CrossEntropyLoss, mean reduction).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

// logits [b, classes] f32, labels [b] i32. Returns the mean loss; when dlogits is given writes
// d(loss * grad_scale)/dlogits (grad_scale: the loss scale of mixed precision, 1 otherwise).
double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                             double grad_scale, const Stream& stream);

// The same on the GPU without reading the loss back, for work captured into a CUDA graph (core/cuda_graph.h):
// queues the loss and dlogits on `stream`, the loss into `state` (device memory from make_loss_state);
// read_loss(state) waits for the stream and returns the mean loss of the last queued (or replayed) call,
// throwing the same message as softmax_cross_entropy for an out-of-range label. CUDA tensors only.
Tensor make_loss_state(Device device, const Stream& stream);
void softmax_cross_entropy_queued(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                                  double grad_scale, Tensor& state, const Stream& stream);
double read_loss(const Tensor& state, const Stream& stream);

}  // namespace hpdt::kernels
