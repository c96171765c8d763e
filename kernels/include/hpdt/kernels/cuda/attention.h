// CUDA flash-style self-attention, checked against hpdt::kernels::cpu (see hpdt/kernels/attention.h).
// qkv [b, t, 3 * heads * dh] packed q | k | v, out and dout [b, t, heads * dh], lse [b, heads, t] f32
// (natural-log log-sum-exp of each scaled score row), dqkv like qkv (overwritten). All tensors on the
// stream's device, shapes and dtypes already checked by kernels/src/attention.cpp; work is queued on
// `stream` and not waited for. Head dims up to 128.
//
// Numbered variants, each kept, tested and timed (tests/kernels/test_attention_cuda.cpp,
// bench/kernels/bench_attention_cuda.cpp):
//   1: SIMT, f32 arithmetic, every dtype and any head dim <= 128;
//   2: tensor cores (mma.sync m16n8k16, f32 accumulation), f16/bf16 with head dim a multiple of 8 and
//      16-byte aligned tensors;
//   3: as 2, with the backward in one pass (dQ added in a fixed order into an f32 accumulator: 5 tile products
//      instead of 7, still deterministic; the order, key blocks in turn or rotated, is HPDT_ATTENTION_V3_ORDER's and
//      the GPU's: attention_v3_rotated);
//   0: the best one that applies (2 where it can run, else 1; the backward's 2 becomes 3 under
//      HPDT_ATTENTION_BACKWARD=v3, for timing v3 in a training step).
#pragma once

#include <cstdint>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels::cuda {

inline constexpr int kAttentionAuto = 0, kAttentionSimt = 1, kAttentionTensorCore = 2, kAttentionFusedBackward = 3;

// Whether `variant` can run these tensors (variant 2: 16-bit dtype, head dim % 8 == 0, aligned data).
bool attention_variant_supported(int variant, const Tensor& qkv, int64_t heads);

void attention_forward(const Tensor& qkv, int64_t heads, Tensor& lse, Tensor& out, const Stream& stream,
                       int variant = kAttentionAuto);
// Deterministic (no float atomics in a varying order): D = rowsum(dout * out), then one pass per key block for dK and dV and one
// per query block for dQ (variant 3: dQ in the key blocks' pass, added in a fixed order).
void attention_backward(const Tensor& qkv, const Tensor& lse, const Tensor& out, const Tensor& dout, int64_t heads,
                        Tensor& dqkv, const Stream& stream, int variant = kAttentionAuto);

// Whether variant 3's backward of these tensors runs its rotated order (its key blocks start at different query
// blocks, so that none waits for another's dQ adds; it needs a head's key blocks resident together) rather than key
// order: HPDT_ATTENTION_V3_ORDER (rotated, the default, or keys) and what the current GPU holds at once. False
// where variant 3 cannot run. For tests and the benchmark's counters.
bool attention_v3_rotated(const Tensor& qkv, int64_t heads);

}  // namespace hpdt::kernels::cuda
