// 2-D convolution, groups = 1: forward, backward-data, backward-filter, and a fused forward
// (conv + bias + per-channel scale/shift + residual + ReLU in one pass on CUDA).
// Layout (layout.h): NCHW by default; NHWC with `layout = Layout::nhwc` (x [n, h, w, ci], y [n, oh, ow, co];
// the weights are [co, ci, kh, kw] in both), on either device.
// CPU: f32; NCHW is the oracle (kernels/cpu/conv.cpp, im2col + our SGEMM), NHWC the fast path (direct
// convolution, kernels/cpu/conv_nhwc.cpp). CUDA: f32, f16 or bf16 storage, f32 accumulation; hpdt's own
// implicit-GEMM kernels (kernels/cuda/conv.cu for NCHW, conv_nhwc.cu for NHWC), or cuDNN (NCHW or NHWC
// descriptors) when kernel_backend() is vendor.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/channel_stats.h"
#include "hpdt/kernels/cpu/conv.h"
#include "hpdt/kernels/layout.h"

namespace hpdt::kernels {

// x [n, ci, h, w], w [co, ci, kh, kw], bias [co] or null -> y [n, co, oh, ow].
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, int64_t stride, int64_t pad,
                    const Stream& stream, Layout layout = Layout::nchw);
// dx [n, ci, h, w] overwritten; with a residual (dx's shape and dtype, a tensor other than dx),
// dx = conv^T(dy) + residual: a ResNet block's input gradient, the main path's plus the shortcut's, in the
// backward-data epilogue instead of a separate add (CUDA: one rounding; CPU: the same bits as kernels::add).
// bn_grad (optional): dx is the output gradient of a batch norm (bn_grad's x, y, mean are its input, fused output
// and saved mean, all of dx's layout); where the kernel can (CUDA, hpdt's tensor-core v2 kernels, 16-bit, every dx
// pixel reached by a tap; HPDT_CONV_BN_STATS=separate turns it off) it writes the ReLU-masked gradient dz into dx
// and that batch norm's backward sums into bn_grad (channel_stats.h); elsewhere dx is the plain gradient and the
// results are cleared.
void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, int64_t stride, int64_t pad,
                          const Stream& stream, Layout layout = Layout::nchw, const Tensor* residual = nullptr,
                          ChannelGradSums* bn_grad = nullptr);
// dw and dbias (may be null) accumulated (+=).
void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias, int64_t stride,
                            int64_t pad, const Stream& stream, Layout layout = Layout::nchw);

// What the fused forward applies to the convolution, in this order, every part optional:
//   y = relu?( (conv(x, w) + bias) * scale + shift + residual )
// bias, scale, shift [co] (scale/shift: batch norm in eval folded per channel, scale = gamma * invstd,
// shift = beta - mean * scale); residual [n, co, oh, ow], a tensor other than y. All of y's dtype.
// stats (an output, optional): y's per-channel statistics for the batch norm that reads y next, written by the
// kernel as it stores y where it can (CUDA, hpdt's tensor-core v2 kernels, f16/bf16, an epilogue with no other part
// set; HPDT_CONV_BN_STATS=separate turns it off), cleared otherwise, so a batch norm given them computes its own.
struct Conv2dEpilogue {
  const Tensor* bias = nullptr;
  const Tensor* scale = nullptr;
  const Tensor* shift = nullptr;
  const Tensor* residual = nullptr;
  bool relu = false;
  ChannelStats* stats = nullptr;
};
// CUDA: one kernel (the epilogue runs on the f32 accumulators; y is rounded once). CPU: the composition of
// the CPU ops (conv2d_forward, a per-channel affine, add, relu), for reference and for CPU-only runs;
// the residual is in y's layout.
void conv2d_forward_fused(const Tensor& x, const Tensor& w, const Conv2dEpilogue& epilogue, Tensor& y,
                          int64_t stride, int64_t pad, const Stream& stream, Layout layout = Layout::nchw);

// The shape record the CPU kernel takes, checked: throws naming `op` and the shapes when they disagree.
Conv2dShape conv2d_shape(std::string_view op, const Tensor& x, const Tensor& w, int64_t stride, int64_t pad,
                         Layout layout = Layout::nchw);
// The output shape of a convolution in `layout`: [n, co, oh, ow] or [n, oh, ow, co].
Shape conv2d_output_shape(const Conv2dShape& s, Layout layout);

}  // namespace hpdt::kernels
