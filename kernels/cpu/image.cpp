// The CPU image decode: u8 -> f32 with crop, flip and normalisation (kernels/image.h). Rows are handled whole: a row
// in the padding is the pixel-0 value; otherwise the stretch of the row whose source lies inside the image is a
// loop without branches (vectorised when neither cropped nor flipped), and the rest of the row the pixel-0 value.
// Channels last (NHWC) decodes an output row of every channel so, then interleaves them.
#include "hpdt/kernels/cpu/image.h"

#include <algorithm>
#include <vector>

#include "hpdt/kernels/math/image_math.h"

namespace hpdt::kernels::cpu {

namespace {

// Output row y of one channel (sp: its u8 plane) into row[0, w): the source stretch inside the image a loop without
// branches (vectorised when neither cropped nor flipped), the rest the pixel-0 value.
void decode_row(const uint8_t* sp, int64_t h, int64_t w, int32_t dy, int32_t dx, bool flip, float sc, float sh,
                int64_t y, float* row) {
  using math::normalize_pixel;
  const float zero = normalize_pixel(0, sc, sh);
  if (dy == 0 && dx == 0 && !flip) {
    const uint8_t* srow = sp + y * w;
    for (int64_t x = 0; x < w; ++x) row[x] = normalize_pixel(srow[x], sc, sh);
    return;
  }
  // Output column x reads source column (flip ? w-1-x : x) + dx, inside [0, w) for x in [x0, x1).
  const int64_t x0 = flip ? std::max<int64_t>(0, dx) : std::max<int64_t>(0, -dx);
  const int64_t x1 = flip ? std::min<int64_t>(w, w + dx) : std::min<int64_t>(w, w - dx);
  const int64_t sy = y + dy;
  if (sy < 0 || sy >= h || x0 >= x1) {
    std::fill(row, row + w, zero);
    return;
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

// rows [c][w] -> out [w][c]; C > 0: c = C, known to the compiler.
template <int C>
void interleave(const float* rows, int64_t w, float* out, int64_t c = C) {
  if constexpr (C > 0) c = C;
  for (int64_t x = 0; x < w; ++x)
    for (int64_t ch = 0; ch < c; ++ch) out[x * c + ch] = rows[ch * w + x];
}

}  // namespace

void decode_image(const uint8_t* src, int64_t c, int64_t h, int64_t w, int32_t dy, int32_t dx, bool flip,
                  const float* scale, const float* shift, float* dst, bool channels_last) {
  if (!channels_last) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const uint8_t* sp = src + ch * h * w;
      float* dp = dst + ch * h * w;
      if (dy == 0 && dx == 0 && !flip) {  // the plain path: the plane as one loop
        for (int64_t k = 0; k < h * w; ++k) dp[k] = math::normalize_pixel(sp[k], scale[ch], shift[ch]);
        continue;
      }
      for (int64_t y = 0; y < h; ++y) decode_row(sp, h, w, dy, dx, flip, scale[ch], shift[ch], y, dp + y * w);
    }
    return;
  }
  // Channels last: each output row decoded channel by channel as above, then interleaved (contiguous writes; RGB's
  // three channels by a loop of constant trip count, which the compiler turns into shuffles). One channel: NCHW.
  if (c == 1) return decode_image(src, c, h, w, dy, dx, flip, scale, shift, dst, false);
  std::vector<float> rows(size_t(c * w));
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t ch = 0; ch < c; ++ch)
      decode_row(src + ch * h * w, h, w, dy, dx, flip, scale[ch], shift[ch], y, rows.data() + ch * w);
    if (c == 3)
      interleave<3>(rows.data(), w, dst + y * w * c);
    else
      interleave<0>(rows.data(), w, dst + y * w * c, c);
  }
}

void decode_images(int64_t n, const uint8_t* src, const int32_t* crops, int64_t c, int64_t h, int64_t w,
                   const float* scale, const float* shift, float* dst, bool channels_last) {
  const int64_t s = c * h * w;
#pragma omp parallel for schedule(static) if (n > 1 && n * s > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    decode_image(src + i * s, c, h, w, crops[3 * i], crops[3 * i + 1], crops[3 * i + 2] != 0, scale, shift, dst + i * s,
                 channels_last);
}

}  // namespace hpdt::kernels::cpu
