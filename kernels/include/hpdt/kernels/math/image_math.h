// Decoding one u8 pixel: the index rule of the reader's augmentation (crop and flip) and the normalisation, shared by
// the CPU decode (kernels/cpu/image.cpp, which the reader's host decode calls) and the CUDA one
// (kernels/cuda/image.cu).
#pragma once

#include <cmath>
#include <cstdint>

#include "hpdt/core/hostdev.h"

namespace hpdt::kernels::math {

// A sample's crop and flip: output pixel (y, x) of an h x w plane is source pixel (y + dy, x' + dx),
// x' = flip ? w - 1 - x : x, of the image zero-padded on every side. Returns the source's index in the plane, or -1
// where it falls in the padding (pixel value 0 there).
HPDT_HD_INLINE int64_t crop_source(int64_t y, int64_t x, int64_t h, int64_t w, int32_t dy, int32_t dx, bool flip) {
  const int64_t sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
  return (sy >= 0 && sy < h && sx >= 0 && sx < w) ? sy * w + sx : -1;
}

// The normalised value of pixel v: one fused multiply-add, written out on both sides. Left to the compilers, the host
// would fuse it or not by its -march (GCC contracts a * b + c in C++ where the target has FMA) and nvcc always, so the
// two could differ in the last bit; this way they agree everywhere (glibc's fmaf uses the instruction where it exists).
HPDT_HD_INLINE float normalize_pixel(uint8_t v, float scale, float shift) {
#if HPDT_DEVICE_CODE
  return __fmaf_rn(float(v), scale, shift);
#else
  return std::fma(float(v), scale, shift);
#endif
}

}  // namespace hpdt::kernels::math
