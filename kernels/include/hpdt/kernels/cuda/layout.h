// CUDA transposes between NCHW and NHWC activations (kernels/cuda/layout.cu), checked against
// hpdt::kernels::cpu::nchw_to_nhwc / nhwc_to_nchw. Any 2- or 4-byte element type (the bits are moved, not
// converted): f32, f16, bf16. Shapes are checked by the caller (kernels/src/layout.cpp).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels::cuda {
// x [n, c, h, w] -> y [n, h, w, c]
void nchw_to_nhwc(const Tensor& x, Tensor& y, const Stream& stream);
// x [n, h, w, c] -> y [n, c, h, w]
void nhwc_to_nchw(const Tensor& x, Tensor& y, const Stream& stream);
}  // namespace hpdt::kernels::cuda
