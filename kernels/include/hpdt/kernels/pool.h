// Pooling on NCHW f32 tensors: max pool (window k, stride, padding) and global average pool.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

// y [n, c, oh, ow]; argmax (i32, same shape as y) saved for backward.
void maxpool2d_forward(const Tensor& x, int64_t k, int64_t stride, int64_t pad, Tensor& y, Tensor& argmax,
                       const Stream& stream);
void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, Tensor& dx, const Stream& stream);
// x [n, c, h, w] -> y [n, c]
void global_avgpool_forward(const Tensor& x, Tensor& y, const Stream& stream);
void global_avgpool_backward(const Tensor& dy, Tensor& dx, const Stream& stream);

}  // namespace hpdt::kernels
