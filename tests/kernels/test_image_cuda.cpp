// The CUDA image decode against the CPU oracle (kernels/cpu/image.cpp): bit for bit in every dtype (both sides
// compute the same fma in f32, and the GPU rounds it to nearest even as kernels::cpu::cast does), over random u8
// pixels, random crops within, at and beyond the edges, flips, odd sizes, 1-16 channels, NCHW and NHWC outputs;
// outputs poisoned first.
#include <cstring>

#include "cuda_oracle.h"
#include "hpdt/kernels/image.h"

namespace {

using namespace hpdt;
using test::CudaOracleTest;

class ImageCuda : public CudaOracleTest {
 protected:
  // Random pixels [n, c, h, w] and crops (shifts up to `span`), the oracle's decode, and the GPU's in `dt`, both
  // in `layout`.
  void check(int64_t n, int64_t c, int64_t h, int64_t w, int64_t span, DType dt,
             kernels::Layout layout = kernels::Layout::nchw) {
    SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w) + " " +
                 std::string(dtype_name(dt)) + " " + kernels::layout_name(layout));
    Tensor pixels = Tensor::empty({n, c, h, w}, DType::u8);
    uint8_t* px = pixels.data<uint8_t>();
    for (int64_t j = 0; j < pixels.numel(); ++j) px[j] = uint8_t(philox_block(seed, 11, uint64_t(j)).v[j & 3]);
    Tensor crops = Tensor::empty({n, 3}, DType::i32);
    int32_t* cr = crops.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      const Philox4x32 r = philox_block(seed, 12, uint64_t(i));
      cr[3 * i] = int32_t(int64_t(r.v[0] % uint32_t(2 * span + 1)) - span);
      cr[3 * i + 1] = int32_t(int64_t(r.v[1] % uint32_t(2 * span + 1)) - span);
      cr[3 * i + 2] = int32_t(r.v[2] & 1u);
    }
    if (n > 0) cr[0] = cr[1] = cr[2] = 0;  // one sample on the plain path
    std::vector<float> mean, std;
    for (int64_t ch = 0; ch < c; ++ch) {
      mean.push_back(0.3f + 0.02f * float(ch));
      std.push_back(0.15f + 0.03f * float(ch));
    }
    const auto norm = kernels::PixelNormalization::from_mean_std(c, mean, std);
    const Shape out = layout == kernels::Layout::nhwc ? Shape{n, h, w, c} : Shape{n, c, h, w};
    Tensor want = Tensor::empty(out, DType::f32);
    kernels::decode_images(pixels, crops, norm, want, cpu, layout);
    Tensor g = poisoned(out, dt);
    kernels::decode_images(pixels.to(Device::cuda(0), stream), crops.to(Device::cuda(0), stream), norm, g, stream,
                           layout);
    const Tensor got = to_cpu_f32(g), expected = round_through(want, dt);
    ASSERT_EQ(std::memcmp(expected.data(), got.data(), got.nbytes()), 0) << close(expected, got, {0, 0});
  }
};

TEST_F(ImageCuda, MatchesTheCpuBitForBit) {
  for (DType dt : test::kCudaTestDtypes) {
    check(5, 3, 7, 5, 9, dt);       // crops beyond the image: whole planes of padding
    check(9, 1, 28, 28, 4, dt);     // Fashion-MNIST's shape with the reader's 4-pixel padding
    check(3, 16, 9, 33, 3, dt);     // the most channels CUDA takes
    check(2, 3, 1, 1, 1, dt);       // one pixel
    check(1, 2, 1, 1030, 700, dt);  // a long row: several blocks along it
  }
  check(4, 3, test::small_shapes() ? 40 : 224, test::small_shapes() ? 40 : 224, 8, DType::bf16);  // ImageNet's shape
}

TEST_F(ImageCuda, ChannelsLastMatchesTheCpuBitForBit) {
  constexpr auto nhwc = kernels::Layout::nhwc;
  for (DType dt : test::kCudaTestDtypes) {
    check(5, 3, 7, 5, 9, dt, nhwc);       // whole images of padding
    check(9, 1, 28, 28, 4, dt, nhwc);     // one channel: NCHW's bytes
    check(3, 16, 9, 33, 3, dt, nhwc);     // the most channels CUDA takes
    check(2, 5, 1, 1, 1, dt, nhwc);       // one pixel, fewer values than a warp
    check(1, 3, 1, 1030, 700, dt, nhwc);  // a long row: several blocks along the image
  }
  check(4, 3, test::small_shapes() ? 40 : 224, test::small_shapes() ? 40 : 224, 8, DType::bf16, nhwc);
  check(70000, 3, 1, 1, 1, DType::bf16, nhwc);  // 70,000 images: past 65,535 blocks in y
}

TEST_F(ImageCuda, PlanesBeyondTheGridsHeight) {
  // 22,000 one-pixel images of 3 channels: 66,000 planes, past 65,535 blocks in y (the kernel strides over them).
  check(22000, 3, 1, 1, 1, DType::bf16);
}

TEST_F(ImageCuda, RefusesMoreChannelsThanItsArguments) {
  const int64_t c = kernels::kDecodeMaxChannelsCuda + 1;
  Tensor pixels = Tensor::zeros({1, c, 2, 2}, DType::u8, Device::cuda(0));
  Tensor crops = Tensor::zeros({1, 3}, DType::i32, Device::cuda(0));
  Tensor y = poisoned({1, c, 2, 2}, DType::bf16);
  const auto norm = kernels::PixelNormalization::from_mean_std(c, {}, {});
  HPDT_EXPECT_THROW_MSG(kernels::decode_images(pixels, crops, norm, y, stream), "CUDA takes at most 16");
  Tensor cpu_crops = Tensor::zeros({1, 3}, DType::i32);
  HPDT_EXPECT_THROW_MSG(kernels::decode_images(pixels, cpu_crops, norm, y, stream), "decode_images");
}

}  // namespace
