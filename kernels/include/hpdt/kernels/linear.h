// Linear layer y = x w^T + b; x [rows, in] (any leading dims flattened), w [out, in].
// CPU: f32 tensors. CUDA: all tensors one of f32, f16, bf16 (f32 accumulation; cuda/linear.h).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cpu/activation.h"  // GeluForm

namespace hpdt::kernels {

// bias may be null. With a residual (y's shape and dtype, not y itself): y = x w^T + b + residual, a skip
// connection added in the GEMM's epilogue on CUDA (the same bits as linear_forward then add on the CPU).
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Stream& stream,
                    const Tensor* residual = nullptr);
// dx overwritten (skipped when null); dw and dbias accumulated (+=), dbias may be null.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dx, Tensor& dw, Tensor* dbias,
                     const Stream& stream);

// The GELU after a linear layer, fused (a transformer MLP's fc1 -> GELU -> [dropout] -> fc2):
// forward: pre = x w^T + b (the GELU's input, kept for backward) and y = gelu(pre), both [rows, out];
// backward of the layer after the GELU (its x = gelu(h), up to elementwise factors such as dropout's mask, whose
// backward then runs on dx): dx = (dy w) * gelu'(h), the gradient of the GELU's input h (x's shape).
// CUDA: in the GEMM's epilogue (one pass less each way; the same math, rounded once). CPU: the linear op, then
// gelu_forward / gelu_backward, the same bits as the separate ops.
void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias, GeluForm form, Tensor& pre, Tensor& y,
                         const Stream& stream);
void linear_backward_through_gelu(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& gelu_input,
                                  GeluForm form, Tensor& dx, Tensor& dw, Tensor* dbias, const Stream& stream);

}  // namespace hpdt::kernels
