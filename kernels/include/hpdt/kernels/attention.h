// Scaled dot-product self-attention on the packed QKV projection: qkv [b, t, 3 * d] (q | k | v, heads
// of width d / heads inside each), probs [b, heads, t, t] saved, out [b, t, d]. f32.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

void attention_forward(const Tensor& qkv, int64_t heads, Tensor& probs, Tensor& out, const Stream& stream);
void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t heads, Tensor& dqkv,
                        const Stream& stream);

}  // namespace hpdt::kernels
