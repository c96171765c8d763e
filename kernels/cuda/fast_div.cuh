// Division by a divisor fixed at launch, for index decoding in kernels (private to kernels/cuda).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace hpdt::kernels::cuda {

// Granlund-Montgomery, as PyTorch's IntDivider: exact for 0 <= n < 2^31 and 1 <= d < 2^31; one mul.hi, an add and
// a shift instead of a ~20-instruction integer division. Memory-bound kernels that decode a flat index per value
// (2-byte values in bf16) are instruction-bound with the plain division.
struct FastDiv {
  uint32_t d = 1, mul = 1, shr = 0;
  FastDiv() = default;
  explicit FastDiv(int64_t divisor) : d(uint32_t(std::max<int64_t>(divisor, 1))) {
    while ((uint64_t(1) << shr) < d) ++shr;
    mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shr) - d)) / d + 1);
  }
  __device__ __forceinline__ int div(int n) const { return int((__umulhi(uint32_t(n), mul) + uint32_t(n)) >> shr); }
  __device__ __forceinline__ int value() const { return int(d); }
};

}  // namespace hpdt::kernels::cuda
