// CUDA implementations, checked against hpdt::kernels::cpu. See hpdt/kernels/elementwise.h.
// All tensors on the stream's device; work is queued on `stream` and not waited for.
#pragma once

#include <cstdint>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels::cuda {
void fill(Tensor& y, float value, const Stream& stream);
void fill_uniform(Tensor& y, float lo, float hi, uint64_t seed, uint64_t offset, const Stream& stream);
void axpy(float alpha, const Tensor& x, Tensor& y, const Stream& stream);
void cast(const Tensor& x, Tensor& y, const Stream& stream);
}  // namespace hpdt::kernels::cuda
