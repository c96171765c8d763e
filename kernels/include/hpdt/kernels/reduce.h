// Reductions to a scalar.
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

// out (an f32 tensor of one element, on x's device) = sum of x, accumulated in f32.
// Deterministic: the same input on the same device gives the same bits on every run (the order of
// additions depends on the element count only, never on thread count or timing).
void sum(const Tensor& x, Tensor& out, const Stream& stream);

}  // namespace hpdt::kernels
