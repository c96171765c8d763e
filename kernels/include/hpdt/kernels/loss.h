// Softmax cross-entropy with label smoothing (PyTorch CrossEntropyLoss, mean reduction).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

// logits [b, classes] f32, labels [b] i32. Returns the mean loss; when dlogits is given writes
// d(loss * grad_scale)/dlogits (grad_scale: the loss scale of mixed precision, 1 otherwise).
double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                             double grad_scale, const Stream& stream);

// Top-1 accuracy's count: the samples whose label is the first class holding the row's largest logit (ties go
// to the lower class, as torch.argmax; NaN logits are never the largest, a row of NaNs has none). logits
// [b, classes] f32 and labels [b] i32 on the CPU; a label outside [0, classes) is simply not correct.
int64_t count_correct(const Tensor& logits, const Tensor& labels);

// The same on the GPU without reading the loss back, for a step queued whole (hpdt-train, whose host reads
// come after its one wait a step) or captured into a CUDA graph (core/cuda_graph.h): queues the loss, the
// correct count and dlogits on `stream`, into `state` (device memory from make_loss_state). read_loss(state)
// waits for the stream and returns the mean loss of the last queued (or replayed) call, throwing the same
// message as softmax_cross_entropy for an out-of-range label; read_loss_values also returns that call's
// count_correct and batch. CUDA tensors only.
struct LossValues {
  double mean_loss = 0;  // NaN before a call was queued
  int64_t correct = 0, batch = 0;
};
Tensor make_loss_state(Device device, const Stream& stream);
void softmax_cross_entropy_queued(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                                  double grad_scale, Tensor& state, const Stream& stream);
double read_loss(const Tensor& state, const Stream& stream);
LossValues read_loss_values(const Tensor& state, const Stream& stream);

}  // namespace hpdt::kernels
