// CUDA image decode (kernels/cuda/image.cu), checked against hpdt::kernels::cpu::decode_images. Arguments are checked
// by the caller (kernels/src/image.cpp): y f32, f16 or bf16; at most kDecodeMaxChannelsCuda channels.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/image.h"

namespace hpdt::kernels::cuda {
void decode_images(const Tensor& pixels, const Tensor& crops, const PixelNormalization& norm, Tensor& y,
                   const Stream& stream, Layout layout);
}  // namespace hpdt::kernels::cuda
