// CUDA max pool and global average pool (NCHW, or NHWC with `layout`), checked against hpdt::kernels::cpu (see
// hpdt/kernels/pool.h). Storage f32, f16 or bf16, math in f32; argmax i32 (an index into the h*w plane in both
// layouts). Shapes are checked by the caller (kernels/src/pool.cpp).
#pragma once

#include <cstdint>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/channel_stats.h"
#include "hpdt/kernels/layout.h"

namespace hpdt::kernels::cuda {
void maxpool2d_forward(const Tensor& x, int64_t k, int64_t stride, int64_t pad, Tensor& y, Tensor& argmax,
                       const Stream& stream, Layout layout = Layout::nchw);
// A gather (each input element sums the windows whose argmax points at it): deterministic, no atomics.
// Needs the window geometry, which the argmax alone does not carry.
// bn_grad: as hpdt/kernels/pool.h's (maxpool_backward_sums_kernel and its NHWC twin; cleared where neither runs).
void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, int64_t k, int64_t stride, int64_t pad, Tensor& dx,
                        const Stream& stream, Layout layout = Layout::nchw, ChannelGradSums* bn_grad = nullptr);
void global_avgpool_forward(const Tensor& x, Tensor& y, const Stream& stream, Layout layout = Layout::nchw);
void global_avgpool_backward(const Tensor& dy, Tensor& dx, const Stream& stream, Layout layout = Layout::nchw);
}  // namespace hpdt::kernels::cuda
