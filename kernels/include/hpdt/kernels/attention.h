// Scaled dot-product self-attention on the packed QKV projection: qkv [b, t, 3 * d] (q | k | v, heads
// of width d / heads inside each), out [b, t, d].
//
// What forward keeps for backward depends on the device:
//   CPU:  the probabilities [b, heads, t, t] (the oracle: plain softmax(q k^T / sqrt(dh)) v);
//   CUDA: flash style, no t x t matrix in memory: the log-sum-exp of each score row [b, heads, t] f32;
//         backward recomputes the scores tile by tile from q, k and lse, and needs `out` for
//         D = rowsum(dout * out).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

struct AttentionSaved {
  Tensor probs;  // CPU: [b, heads, t, t], dtype of qkv
  Tensor lse;    // CUDA: [b, heads, t] f32
};

// saved's tensors are (re)allocated on qkv's device when their shape does not match.
void attention_forward(const Tensor& qkv, int64_t heads, AttentionSaved& saved, Tensor& out, const Stream& stream);
// dqkv overwritten.
void attention_backward(const Tensor& qkv, const AttentionSaved& saved, const Tensor& out, const Tensor& dout,
                        int64_t heads, Tensor& dqkv, const Stream& stream);

}  // namespace hpdt::kernels
