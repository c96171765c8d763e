// CUDA ViT token embedding and class-token select, checked against hpdt::kernels::cpu (see
// hpdt/kernels/embed.h). Storage f32, f16 or bf16, math in f32. Shapes are checked by the caller.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels::cuda {
void tokens_forward(const Tensor& patches, const Tensor& cls, const Tensor& pos, Tensor& y, const Stream& stream);
// dpatches overwritten; dcls, dpos += the sums over the batch, in a fixed order (deterministic).
void tokens_backward(const Tensor& dy, Tensor& dpatches, Tensor& dcls, Tensor& dpos, const Stream& stream);
void cls_select_forward(const Tensor& x, Tensor& y, const Stream& stream);
void cls_select_backward(const Tensor& dy, Tensor& dx, const Stream& stream);
}  // namespace hpdt::kernels::cuda
