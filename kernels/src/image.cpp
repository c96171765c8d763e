#include "hpdt/kernels/image.h"

#include <cmath>

#include "hpdt/kernels/cpu/image.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/image.h"
#endif

namespace hpdt::kernels {

PixelNormalization PixelNormalization::from_mean_std(int64_t channels, const std::vector<float>& mean,
                                                     const std::vector<float>& std) {
  HPDT_CHECK(channels >= 1, "pixel normalisation: channels must be >= 1, got ", channels);
  const bool none = mean.empty() && std.empty();
  HPDT_CHECK(none || (int64_t(mean.size()) == channels && int64_t(std.size()) == channels),
             "pixel normalisation: ", channels, " channels, but ", mean.size(), " means and ", std.size(), " stds");
  PixelNormalization n;
  for (int64_t c = 0; c < channels; ++c) {
    const float m = none ? 0.0f : mean[size_t(c)], s = none ? 1.0f : std[size_t(c)];
    HPDT_CHECK(std::isfinite(m) && std::isfinite(s) && s > 0, "pixel normalisation: channel ", c, " has mean ", m,
               " and std ", s, " (a finite mean and a positive finite std needed)");
    n.scale.push_back(1.0f / (255.0f * s));
    n.shift.push_back(-m / s);
  }
  return n;
}

void decode_images(const Tensor& pixels, const Tensor& crops, const PixelNormalization& norm, Tensor& y,
                   const Stream& s, Layout layout) {
  constexpr const char* op = "decode_images";
  const Device dev = detail::float_op_device(op, {&y}, s);
  detail::common_device(op, {&pixels, &crops, &y}, s);
  check_dtype(op, "pixels", pixels, DType::u8);
  check_dtype(op, "crops", crops, DType::i32);
  HPDT_CHECK(pixels.ndim() == 4, op, ": pixels must be [n, c, h, w], got ", pixels.shape().str());
  check_shape(op, "crops", crops, Shape{pixels.size(0), 3});
  const int64_t c = pixels.size(1);
  const bool nhwc = layout == Layout::nhwc;
  check_shape(op, nhwc ? "y (nhwc)" : "y", y,
              nhwc ? Shape{pixels.size(0), pixels.size(2), pixels.size(3), c} : pixels.shape());
  HPDT_CHECK(int64_t(norm.scale.size()) == c && int64_t(norm.shift.size()) == c, op, ": the normalisation has ",
             norm.scale.size(), " scales and ", norm.shift.size(), " shifts for ", c, " channels");
  if (dev.is_cuda()) {
    HPDT_CHECK(c <= kDecodeMaxChannelsCuda, op, ": ", c, " channels; CUDA takes at most ", kDecodeMaxChannelsCuda);
    HPDT_ON_CUDA(cuda::decode_images(pixels, crops, norm, y, s, layout));
    return;
  }
  cpu::decode_images(pixels.size(0), pixels.data<uint8_t>(), crops.data<int32_t>(), c, pixels.size(2), pixels.size(3),
                     norm.scale.data(), norm.shift.data(), y.data<float>(), nhwc);
}

}  // namespace hpdt::kernels
