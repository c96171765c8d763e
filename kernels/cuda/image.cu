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

// Both layouts. A row of the grid's y is a plane (image, channel) in NCHW and an image in NHWC; its `len` outputs
// (h w, or h w c) go over blockIdx.x, kItems a thread a block width apart, so that a warp writes 32 consecutive ones.
template <class T, bool kNhwc>
__global__ void __launch_bounds__(kThreads)
    decode_images_kernel(const uint8_t* __restrict__ pixels, const int32_t* __restrict__ crops, Normalization norm,
                         T* __restrict__ y, int64_t rows, int c, int h, int w) {
  // The normalisation by constant indices: indexing the argument struct by a channel made nvcc copy all 128 bytes of it
  // to each thread's stack (-Xptxas -v: a 128-byte stack frame). NCHW selects its plane's pair once a row; NHWC, whose
  // channel changes from one output to the next, reads a copy in shared memory, filled so.
  __shared__ float s_scale[kDecodeMaxChannelsCuda], s_shift[kDecodeMaxChannelsCuda];
  if constexpr (kNhwc) {
#pragma unroll
    for (int k = 0; k < kDecodeMaxChannelsCuda; ++k)
      if (int(threadIdx.x) == k) s_scale[k] = norm.scale[k], s_shift[k] = norm.shift[k];
    __syncthreads();
  }
  const int hw = h * w, len = kNhwc ? hw * c : hw;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t img = kNhwc ? row : row / c;
    const int row_ch = kNhwc ? 0 : int(row - img * c);
    const int32_t dy = __ldg(crops + 3 * img), dx = __ldg(crops + 3 * img + 1);
    const bool flip = __ldg(crops + 3 * img + 2) != 0;
    float sc = 0, sh = 0;
    if constexpr (!kNhwc) {
#pragma unroll
      for (int k = 0; k < kDecodeMaxChannelsCuda; ++k)
        if (k == row_ch) sc = norm.scale[k], sh = norm.shift[k];
    }
    const uint8_t* src = pixels + img * int64_t(hw) * c;  // the image's first plane
    T* dst = y + row * len;
    for (int p = blockIdx.x * kThreads * kItems + threadIdx.x; p < len; p += gridDim.x * kThreads * kItems) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int q = p + k * kThreads;
        if (q >= len) break;
        int pix = q, ch = row_ch;
        if constexpr (kNhwc) {  // output q of an image is pixel q / c's channel q % c
          pix = q / c;
          ch = q - pix * c;
          sc = s_scale[ch];
          sh = s_shift[ch];
        }
        const int r = pix / w, x = pix - r * w;
        const int64_t s = math::crop_source(r, x, h, w, dy, dx, flip);
        dst[q] = from_f32<T>(math::normalize_pixel(s < 0 ? uint8_t(0) : __ldg(src + int64_t(ch) * hw + s), sc, sh));
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
    T* out = static_cast<T*>(y.data());
    if (nhwc)
      decode_images_kernel<T, true>
          <<<grid, kThreads, 0, detail::native(stream)>>>(px, cr, args, out, rows, int(c), int(h), int(w));
    else
      decode_images_kernel<T, false>
          <<<grid, kThreads, 0, detail::native(stream)>>>(px, cr, args, out, rows, int(c), int(h), int(w));
  });
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace hpdt::kernels::cuda
