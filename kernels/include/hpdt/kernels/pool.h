// Pooling (f32 on the CPU; f32, f16 or bf16 on CUDA): max pool (window k, stride, padding) and global
// average pool. NCHW by default; NHWC ([n, h, w, c]) with `layout = Layout::nhwc`, on either device.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/channel_stats.h"
#include "hpdt/kernels/layout.h"

namespace hpdt::kernels {

// y [n, c, oh, ow]; argmax (i32, same shape as y) saved for backward.
void maxpool2d_forward(const Tensor& x, int64_t k, int64_t stride, int64_t pad, Tensor& y, Tensor& argmax,
                       const Stream& stream, Layout layout = Layout::nchw);
// dx [n, c, h, w] overwritten: each input element gets the sum of the dy of the windows whose argmax is it.
// The CUDA version is a gather over the windows that contain an input element, so it needs the window
// (k, stride, pad of the forward); the 4-argument form (no window) runs on the CPU only.
// bn_grad (optional): the batch norm whose output is the pool's input (its x, fused output y, saved mean; as
// conv2d_backward_data's, channel_stats.h). Where the kernel can (CUDA, either layout, NHWC up to 256 vectors of
// channels a pixel; HPDT_CONV_BN_STATS=separate turns it off) dx gets dz = (y > 0 ? g : 0) and bn_grad the partials
// (sum dz, sum dz (x - mean)) of the values as stored, so that the batch norm skips its reduce pass; elsewhere dx gets
// g and bn_grad is cleared (the batch norm computes its own).
void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, int64_t k, int64_t stride, int64_t pad, Tensor& dx,
                        const Stream& stream, Layout layout = Layout::nchw, ChannelGradSums* bn_grad = nullptr);
void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, Tensor& dx, const Stream& stream,
                        Layout layout = Layout::nchw);
// x [n, c, h, w] (or [n, h, w, c]) -> y [n, c]
void global_avgpool_forward(const Tensor& x, Tensor& y, const Stream& stream, Layout layout = Layout::nchw);
void global_avgpool_backward(const Tensor& dy, Tensor& dx, const Stream& stream, Layout layout = Layout::nchw);

}  // namespace hpdt::kernels
