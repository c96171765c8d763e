// CPU (OpenMP) implementations; the oracle for the CUDA versions. See hpdt/kernels/elementwise.h.
#pragma once

#include <cstdint>

#include "hpdt/core/tensor.h"

namespace hpdt::kernels::cpu {
void fill(Tensor& y, float value);
void fill_uniform(Tensor& y, float lo, float hi, uint64_t seed, uint64_t offset);
void axpy(float alpha, const Tensor& x, Tensor& y);
void cast(const Tensor& x, Tensor& y);
}  // namespace hpdt::kernels::cpu
