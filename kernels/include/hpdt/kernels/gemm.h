// Matrix multiply on 2-D tensors: c = alpha * op(a) * op(b) + beta * c.
// CPU: f32 tensors, our blocked SGEMM (cpu/gemm.h).
// CUDA: a and b share one of f32, f16, bf16; c is f32 or that dtype; f32 accumulation (cuda/gemm.h:
// v2 tensor cores for 16-bit inputs, v1 SIMT for f32, cuBLAS under KernelBackend::vendor).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta,
            const Stream& stream);

}  // namespace hpdt::kernels
