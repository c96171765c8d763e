// Decoding u8 images into a model's input: crop and flip (the reader's augmentation) and per-channel normalisation
// in one pass, on the CPU or on CUDA, with the same values on both, bit for bit (math/image_math.h).
//
// The reader (io/reader.h) either decodes on its own threads into f32 batches, or, with ReaderOptions::raw_pixels,
// hands over each batch's u8 pixels and its samples' crops, and the consumer decodes them where the model runs:
// hpdt-train on a GPU copies a quarter of the bytes and writes the model's dtype directly (docs/io.md).
#pragma once

#include <cstdint>
#include <vector>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/layout.h"

namespace hpdt::kernels {

// value = fma(pixel, scale[c], shift[c]) for channel c.
struct PixelNormalization {
  std::vector<float> scale, shift;
  // From the per-channel mean and std in units of the [0, 1] pixel range (DatasetInfo's): scale = 1 / (255 std),
  // shift = -mean / std. Empty mean and std: none (mean 0, std 1: v / 255). Throws unless they have `channels`
  // entries each, every mean finite and every std positive and finite.
  static PixelNormalization from_mean_std(int64_t channels, const std::vector<float>& mean,
                                          const std::vector<float>& std);
};

// The most channels decode_images takes on CUDA (the normalisation travels in the kernel's arguments).
inline constexpr int64_t kDecodeMaxChannelsCuda = 16;

// pixels u8 [n, C, H, W] (as the dataset stores them); crops i32 [n, 3]: each sample's (dy, dx, flip) as
// math::crop_source takes them (flip: nonzero mirrors);
// y [n, C, H, W], or [n, H, W, C] with layout nhwc (the channels-last model's input, without a transpose after):
//   y[i, c, r, x] = normalize_pixel(pixels[i, c, crop_source(r, x)], scale[c], shift[c]), pixel 0 in the padding.
// All on one device: the CPU (y f32) or CUDA (y f32, f16 or bf16: the f32 value rounded to nearest even). Throws
// naming the tensor or the normalisation otherwise.
void decode_images(const Tensor& pixels, const Tensor& crops, const PixelNormalization& norm, Tensor& y,
                   const Stream& stream, Layout layout = Layout::nchw);

}  // namespace hpdt::kernels
