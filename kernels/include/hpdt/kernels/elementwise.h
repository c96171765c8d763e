// Elementwise kernels. Each dispatches on the tensors' device to kernels/cpu (OpenMP) or
// kernels/cuda; both compute in f32 and round to the storage type with round-to-nearest-even.
#pragma once

#include <cstdint>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

// y[i] = value, converted to y's dtype (f32/f16/bf16 rounded; i32/u8 truncated toward zero).
void fill(Tensor& y, float value, const Stream& stream);

// y[i] = lo + (hi - lo) * U_i, U_i = philox_uniform(seed, 0, offset + i): the same bits on every device.
void fill_uniform(Tensor& y, float lo, float hi, uint64_t seed, uint64_t offset, const Stream& stream);

// y = alpha * x + y; x and y of one floating dtype and element count.
void axpy(float alpha, const Tensor& x, Tensor& y, const Stream& stream);

// y = x converted to y's dtype; f32, f16 and bf16 each way; same element count.
void cast(const Tensor& x, Tensor& y, const Stream& stream);

}  // namespace hpdt::kernels
