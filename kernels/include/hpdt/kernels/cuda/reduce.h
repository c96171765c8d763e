// CUDA implementations of hpdt/kernels/reduce.h, checked against hpdt::kernels::cpu.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels::cuda {
void sum(const Tensor& x, Tensor& out, const Stream& stream);
}  // namespace hpdt::kernels::cuda
