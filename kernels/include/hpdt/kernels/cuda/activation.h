// CUDA activations, checked against hpdt::kernels::cpu (see hpdt/kernels/activation.h). Storage f32,
// f16 or bf16 (all tensors of a call share it), math in f32, 16-byte vector loads where aligned.
#pragma once

#include <cstdint>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cpu/activation.h"

namespace hpdt::kernels::cuda {
void relu_forward(const Tensor& x, Tensor& y, const Stream& stream);
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& stream);  // dx may be dy
void add(const Tensor& a, const Tensor& b, Tensor& y, const Stream& stream);              // y may be a or b
void gelu_forward(const Tensor& x, GeluForm form, Tensor& y, const Stream& stream);
void gelu_backward(const Tensor& x, const Tensor& dy, GeluForm form, Tensor& dx, const Stream& stream);
void softmax_forward(const Tensor& x, Tensor& y, const Stream& stream);
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, const Stream& stream);  // dx may be dy
// The same mask bits as the CPU: element i dropped when philox_uniform(seed, stream_id, i) < p.
void dropout_forward(const Tensor& x, float p, uint64_t seed, uint64_t stream_id, Tensor& y, const Stream& stream,
                     uint64_t first);
void dropout_backward(const Tensor& dy, float p, uint64_t seed, uint64_t stream_id, Tensor& dx, const Stream& stream,
                      uint64_t first);
}  // namespace hpdt::kernels::cuda
