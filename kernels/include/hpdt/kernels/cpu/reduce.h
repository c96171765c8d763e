// CPU implementations of hpdt/kernels/reduce.h.
#pragma once

#include "hpdt/core/tensor.h"

namespace hpdt::kernels::cpu {
void sum(const Tensor& x, Tensor& out);
}  // namespace hpdt::kernels::cpu
