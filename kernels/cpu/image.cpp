// The CPU image decode: u8 -> f32 with crop, flip and normalisation (kernels/image.h). Rows are handled whole: a row
// in the padding is the pixel-0 value; otherwise the stretch of the row whose source lies inside the image is a
// loop without branches (vectorised when neither cropped nor flipped), and the rest of the row the pixel-0 value.
#include "hpdt/kernels/cpu/image.h"

#include <algorithm>

#include "hpdt/kernels/math/image_math.h"

namespace hpdt::kernels::cpu {

void decode_image(const uint8_t* src, int64_t c, int64_t h, int64_t w, int32_t dy, int32_t dx, bool flip,
                  const float* scale, const float* shift, float* dst) {
  using math::normalize_pixel;
  for (int64_t ch = 0; ch < c; ++ch) {
    const float sc = scale[ch], sh = shift[ch], zero = normalize_pixel(0, sc, sh);
    const uint8_t* sp = src + ch * h * w;
    float* dp = dst + ch * h * w;
    if (dy == 0 && dx == 0 && !flip) {
      for (int64_t k = 0; k < h * w; ++k) dp[k] = normalize_pixel(sp[k], sc, sh);
      continue;
    }
    // Output column x reads source column (flip ? w-1-x : x) + dx, inside [0, w) for x in [x0, x1).
    const int64_t x0 = flip ? std::max<int64_t>(0, dx) : std::max<int64_t>(0, -dx);
    const int64_t x1 = flip ? std::min<int64_t>(w, w + dx) : std::min<int64_t>(w, w - dx);
    for (int64_t y = 0; y < h; ++y) {
      float* row = dp + y * w;
      const int64_t sy = y + dy;
      if (sy < 0 || sy >= h || x0 >= x1) {
        std::fill(row, row + w, zero);
        continue;
      }
      const uint8_t* srow = sp + sy * w;
      std::fill(row, row + x0, zero);
      if (flip) {
        for (int64_t x = x0; x < x1; ++x) row[x] = normalize_pixel(srow[w - 1 - x + dx], sc, sh);
      } else {
        for (int64_t x = x0; x < x1; ++x) row[x] = normalize_pixel(srow[x + dx], sc, sh);
      }
      std::fill(row + x1, row + w, zero);
    }
  }
}

void decode_images(int64_t n, const uint8_t* src, const int32_t* crops, int64_t c, int64_t h, int64_t w,
                   const float* scale, const float* shift, float* dst) {
  const int64_t s = c * h * w;
#pragma omp parallel for schedule(static) if (n > 1 && n * s > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    decode_image(src + i * s, c, h, w, crops[3 * i], crops[3 * i + 1], crops[3 * i + 2] != 0, scale, shift,
                 dst + i * s);
}

}  // namespace hpdt::kernels::cpu
