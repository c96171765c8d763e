// Linear layer y = x w^T + b; x [rows, in] (any leading dims flattened), w [out, in].
// CPU: f32 tensors. CUDA: all tensors one of f32, f16, bf16 (f32 accumulation; cuda/linear.h).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

// bias may be null.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Stream& stream);
// dx overwritten (skipped when null); dw and dbias accumulated (+=), dbias may be null.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dx, Tensor& dw, Tensor* dbias,
                     const Stream& stream);

}  // namespace hpdt::kernels
