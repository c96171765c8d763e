// 2-D convolution, NCHW, groups = 1, f32: forward, backward-data, backward-filter.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cpu/conv.h"

namespace hpdt::kernels {

// x [n, ci, h, w], w [co, ci, kh, kw], bias [co] or null -> y [n, co, oh, ow].
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, int64_t stride, int64_t pad,
                    const Stream& stream);
// dx [n, ci, h, w] overwritten.
void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, int64_t stride, int64_t pad,
                          const Stream& stream);
// dw and dbias (may be null) accumulated (+=).
void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias, int64_t stride,
                            int64_t pad, const Stream& stream);

// The shape record the CPU kernel takes, checked: throws naming `op` and the shapes when they disagree.
Conv2dShape conv2d_shape(std::string_view op, const Tensor& x, const Tensor& w, int64_t stride, int64_t pad);

}  // namespace hpdt::kernels
