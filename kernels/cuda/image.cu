// CUDA image decode: u8 pixels -> the model's input (f32, f16 or bf16), cropped, flipped and normalised in one pass;
// the CPU oracle is kernels/cpu/image.cpp, and both take each pixel's source and value from math/image_math.h, so
// the two agree bit for bit. It replaces the f32 batch's copy up and its cast: 1 byte a pixel crosses PCIe instead of
// 4, and the kernel reads 1 and writes 2 (bf16) where the cast read 4 and wrote 2.
//
// NCHW: one plane (image, channel) per blockIdx.y (grid-striding past 65535), its pixels over blockIdx.x, kItems a
// thread a block width apart: a warp writes 32 consecutive outputs, and reads 32 consecutive source bytes of one row
// (in reverse when flipped) or of two rows at a row's end.
// NHWC (channels last): one image per blockIdx.y, its h w c outputs over blockIdx.x the same way: a warp writes 32
// consecutive outputs, 32 / c pixels of every channel, and reads c runs of ~32 / c bytes, one in each channel's plane.
#include <algorithm>
#include <cstdint>

#include "hpdt/kernels/cuda/image.h"
#include "hpdt/kernels/math/image_math.h"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256, kItems = 4;

struct Normalization {
  float scale[kDecodeMaxChannelsCuda], shift[kDecodeMaxChannelsCuda];
};

template <class T>
__global__ void __launch_bounds__(kThreads)
    decode_images_kernel(const uint8_t* __restrict__ pixels, const int32_t* __restrict__ crops, Normalization norm,
                         T* __restrict__ y, int64_t planes, int c, int h, int w) {
  const int hw = h * w;
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const int64_t img = plane / c;
    const int ch = int(plane - img * c);
    const int32_t dy = __ldg(crops + 3 * img), dx = __ldg(crops + 3 * img + 1);
    const bool flip = __ldg(crops + 3 * img + 2) != 0;
    // The channel's pair by constant indices: indexing the argument struct by `ch` made nvcc copy all 128 bytes of it
    // to each thread's stack (-Xptxas -v: a 128-byte stack frame), this selection keeps it in the parameter bank.
    float sc = 0, sh = 0;
#pragma unroll
    for (int k = 0; k < kDecodeMaxChannelsCuda; ++k)
      if (k == ch) sc = norm.scale[k], sh = norm.shift[k];
    const uint8_t* src = pixels + plane * hw;
    T* dst = y + plane * hw;
    for (int p = blockIdx.x * kThreads * kItems + threadIdx.x; p < hw; p += gridDim.x * kThreads * kItems) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int q = p + k * kThreads;
        if (q >= hw) break;
        const int r = q / w, x = q - r * w;
        const int64_t s = math::crop_source(r, x, h, w, dy, dx, flip);
        dst[q] = from_f32<T>(math::normalize_pixel(s < 0 ? uint8_t(0) : __ldg(src + s), sc, sh));
      }
    }
  }
}

// The channels-last form: output q of an image is pixel q / c's channel q % c.
template <class T>
__global__ void __launch_bounds__(kThreads)
    decode_images_nhwc_kernel(const uint8_t* __restrict__ pixels, const int32_t* __restrict__ crops, Normalization norm,
                              T* __restrict__ y, int64_t n, int c, int h, int w) {
  // The normalisation in shared memory, each entry copied by constant index (see above: no stack copy of the struct).
  __shared__ float s_scale[kDecodeMaxChannelsCuda], s_shift[kDecodeMaxChannelsCuda];
#pragma unroll
  for (int k = 0; k < kDecodeMaxChannelsCuda; ++k)
    if (int(threadIdx.x) == k) s_scale[k] = norm.scale[k], s_shift[k] = norm.shift[k];
  __syncthreads();
  const int hw = h * w, hwc = hw * c;
  for (int64_t img = blockIdx.y; img < n; img += gridDim.y) {
    const int32_t dy = __ldg(crops + 3 * img), dx = __ldg(crops + 3 * img + 1);
    const bool flip = __ldg(crops + 3 * img + 2) != 0;
    const uint8_t* src = pixels + img * hwc;
    T* dst = y + img * hwc;
    for (int p = blockIdx.x * kThreads * kItems + threadIdx.x; p < hwc; p += gridDim.x * kThreads * kItems) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int q = p + k * kThreads;
        if (q >= hwc) break;
        const int pix = q / c, ch = q - pix * c, r = pix / w, x = pix - r * w;
        const int64_t s = math::crop_source(r, x, h, w, dy, dx, flip);
        dst[q] = from_f32<T>(
            math::normalize_pixel(s < 0 ? uint8_t(0) : __ldg(src + int64_t(ch) * hw + s), s_scale[ch], s_shift[ch]));
      }
    }
  }
}

}  // namespace

void decode_images(const Tensor& pixels, const Tensor& crops, const PixelNormalization& norm, Tensor& y,
                   const Stream& stream, Layout layout) {
  const int64_t n = pixels.size(0), c = pixels.size(1), h = pixels.size(2), w = pixels.size(3);
  if (y.numel() == 0) return;
  HPDT_CHECK(h * w * c < (int64_t(1) << 31), "decode_images: ", c, "x", h, "x", w,
             " images are too large for CUDA (2^31 values an image)");
  Normalization args{};
  for (int64_t ch = 0; ch < c; ++ch) {
    args.scale[ch] = norm.scale[size_t(ch)];
    args.shift[ch] = norm.shift[size_t(ch)];
  }
  const bool nhwc = layout == Layout::nhwc;
  const int64_t per_block = kThreads * kItems, rows = nhwc ? n : n * c, row = nhwc ? h * w * c : h * w;
  const dim3 grid(unsigned((row + per_block - 1) / per_block), unsigned(std::min<int64_t>(rows, 65535)));
  dispatch_floating(y.dtype(), "decode_images (y)", [&](auto tag) {
    using T = decltype(tag);
    const auto* px = pixels.data<uint8_t>();
    const auto* cr = crops.data<int32_t>();
    if (nhwc)
      decode_images_nhwc_kernel<T><<<grid, kThreads, 0, detail::native(stream)>>>(
          px, cr, args, static_cast<T*>(y.data()), n, int(c), int(h), int(w));
    else
      decode_images_kernel<T><<<grid, kThreads, 0, detail::native(stream)>>>(px, cr, args, static_cast<T*>(y.data()),
                                                                             rows, int(c), int(h), int(w));
  });
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace hpdt::kernels::cuda
