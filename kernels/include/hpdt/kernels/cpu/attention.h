// CPU scaled dot-product attention over a packed QKV buffer (the output of the QKV projection).
//   qkv [b, t, 3, heads, dh] (= PyTorch in_proj order q | k | v), out [b, t, heads * dh]
//   probs [b, heads, t, t] = softmax(q k^T / sqrt(dh)) saved for backward.
// The QKV and output projections are linear layers (nn::MultiHeadSelfAttention composes them).
#pragma once

#include <cstdint>

namespace hpdt::kernels::cpu {

template <class T>
void attention_forward(int64_t b, int64_t t, int64_t heads, int64_t dh, const T* qkv, T* probs, T* out);
// dqkv overwritten. scratch: at least t * t elements per thread (allocated inside).
template <class T>
void attention_backward(int64_t b, int64_t t, int64_t heads, int64_t dh, const T* qkv, const T* probs,
                        const T* dout, T* dqkv);

}  // namespace hpdt::kernels::cpu
