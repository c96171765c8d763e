// Activations on f32 tensors of any shape: ReLU, residual add, GELU (erf and tanh), softmax over the
// last dimension, seeded dropout.
#pragma once

#include <cstdint>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cpu/activation.h"

namespace hpdt::kernels {

void relu_forward(const Tensor& x, Tensor& y, const Stream& stream);
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& stream);  // dx may be dy
void add(const Tensor& a, const Tensor& b, Tensor& y, const Stream& stream);              // y may be a or b
void gelu_forward(const Tensor& x, GeluForm form, Tensor& y, const Stream& stream);
void gelu_backward(const Tensor& x, const Tensor& dy, GeluForm form, Tensor& dx, const Stream& stream);
void softmax_forward(const Tensor& x, Tensor& y, const Stream& stream);
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& stream);
// Element i dropped when philox_uniform(seed, stream_id, first + i) < p; kept ones scaled by 1/(1-p).
// `first`: the index of x's first element in a larger tensor whose mask this piece shares (e.g. this
// rank's part of the global batch), 0 for a whole tensor.
void dropout_forward(const Tensor& x, float p, uint64_t seed, uint64_t stream_id, Tensor& y, const Stream& stream,
                     uint64_t first = 0);
void dropout_backward(const Tensor& dy, float p, uint64_t seed, uint64_t stream_id, Tensor& dx,
                      const Stream& stream, uint64_t first = 0);

}  // namespace hpdt::kernels
