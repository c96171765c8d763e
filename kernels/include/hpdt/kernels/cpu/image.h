// CPU image decode (kernels/cpu/image.cpp): the oracle of kernels/cuda/image.cu, and what the reader's host decode
// runs per sample (io/src/reader.cpp).
#pragma once

#include <cstdint>

namespace hpdt::kernels::cpu {

// One sample: src u8 [c, h, w] -> dst f32 [c, h, w] (channels_last: [h, w, c]), cropped by (dy, dx), mirrored when
// flip, each channel normalised by fma(v, scale[ch], shift[ch]) (kernels/image.h). No threads of its own.
void decode_image(const uint8_t* src, int64_t c, int64_t h, int64_t w, int32_t dy, int32_t dx, bool flip,
                  const float* scale, const float* shift, float* dst, bool channels_last = false);

// n samples, one after the other in src and dst, sample i's crop at crops[3 i .. 3 i + 2]; OpenMP over samples.
void decode_images(int64_t n, const uint8_t* src, const int32_t* crops, int64_t c, int64_t h, int64_t w,
                   const float* scale, const float* shift, float* dst, bool channels_last = false);

}  // namespace hpdt::kernels::cpu
