// Matrix multiply on 2-D f32 tensors: c = alpha * op(a) * op(b) + beta * c. CPU: our blocked SGEMM
// (cpu/gemm.h). CUDA: not implemented yet.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta,
            const Stream& stream);

}  // namespace hpdt::kernels
