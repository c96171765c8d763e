// CPU transposes between NCHW and NHWC activations (per image a [c, hw] <-> [hw, c] transpose).
#pragma once

#include <cstdint>

namespace hpdt::kernels::cpu {

// x [n, c, hw] -> y [n, hw, c]
void nchw_to_nhwc(int64_t n, int64_t c, int64_t hw, const float* x, float* y);
// x [n, hw, c] -> y [n, c, hw]
void nhwc_to_nchw(int64_t n, int64_t c, int64_t hw, const float* x, float* y);

}  // namespace hpdt::kernels::cpu
