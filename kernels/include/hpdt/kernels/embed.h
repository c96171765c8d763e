// ViT token embedding: patch features [b, d, gh, gw] -> tokens [b, 1 + gh*gw, d] with the class token
// in front and the position embedding [1 + gh*gw, d] added; and the class token picked at the end.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

void tokens_forward(const Tensor& patches, const Tensor& cls, const Tensor& pos, Tensor& y, const Stream& stream);
// dpatches overwritten, dcls and dpos accumulated.
void tokens_backward(const Tensor& dy, Tensor& dpatches, Tensor& dcls, Tensor& dpos, const Stream& stream);
// x [b, t, d] -> y [b, d] (token 0)
void cls_select_forward(const Tensor& x, Tensor& y, const Stream& stream);
void cls_select_backward(const Tensor& dy, Tensor& dx, const Stream& stream);

}  // namespace hpdt::kernels
