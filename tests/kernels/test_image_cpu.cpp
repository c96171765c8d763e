// The CPU image decode (kernels::decode_images, the reader's host decode and the oracle of the CUDA one) against a
// reference that does what the words say, step by step: zero-pad the image, mirror it, take the crop's window,
// normalise with the fma of kernels/image.h. Bit for bit, over random crops (inside, at and beyond the image's
// edges), odd sizes and 1-5 channels; then what it refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "hpdt/core/philox.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/image.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;

// Sample i of pixels [n, c, h, w] the long way round: the image padded by P on every side, mirrored about its
// vertical axis when flipped, then the h x w window at (P + dy, P + dx) of the mirrored padded image.
std::vector<float> reference(const Tensor& pixels, int64_t i, int32_t dy, int32_t dx, bool flip,
                             const kernels::PixelNormalization& norm) {
  const int64_t c = pixels.size(1), h = pixels.size(2), w = pixels.size(3);
  const int64_t P = std::max<int64_t>(std::abs(dy), std::abs(dx)) + 1, ph = h + 2 * P, pw = w + 2 * P;
  std::vector<float> out;
  for (int64_t ch = 0; ch < c; ++ch) {
    std::vector<uint8_t> padded(size_t(ph * pw), 0);
    const uint8_t* src = pixels.data<uint8_t>() + ((i * c + ch) * h) * w;
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) padded[size_t((y + P) * pw + x + P)] = src[y * w + x];
    // Mirroring the padded image about the image's own axis: the padding is symmetric, so padded column j <-> pw-1-j.
    if (flip)
      for (int64_t y = 0; y < ph; ++y)
        for (int64_t x = 0; x < pw / 2; ++x) std::swap(padded[size_t(y * pw + x)], padded[size_t(y * pw + pw - 1 - x)]);
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        // The crop moves the window by (dy, dx) in the source's coordinates; after a mirror, source column s is at
        // pw-1-s, so the window moves by -dx there.
        const int64_t wy = P + dy + y, wx = flip ? P - dx + x : P + dx + x;
        const uint8_t v = padded[size_t(wy * pw + wx)];
        out.push_back(std::fma(float(v), norm.scale[size_t(ch)], norm.shift[size_t(ch)]));
      }
  }
  return out;
}

struct Case {
  int64_t n, c, h, w;
};

// A batch of k's shape: random pixels, and random crops of up to a little more than the image, so that windows fall
// partly and wholly in the padding, half of them flipped; the first sample stays uncropped and unflipped (the plain
// path). A per-channel normalisation.
struct RandomBatch {
  Tensor pixels, crops;
  kernels::PixelNormalization norm;
  RandomBatch(const Case& k, uint64_t seed)
      : pixels(Tensor::empty({k.n, k.c, k.h, k.w}, DType::u8)), crops(Tensor::empty({k.n, 3}, DType::i32)) {
    for (int64_t j = 0; j < pixels.numel(); ++j)
      pixels.data<uint8_t>()[j] = uint8_t(philox_block(seed, 1, uint64_t(j)).v[0]);
    int32_t* cr = crops.data<int32_t>();
    const int64_t span = std::max(k.h, k.w) + 2;
    for (int64_t i = 0; i < k.n; ++i) {
      const Philox4x32 r = philox_block(seed, 2, uint64_t(i));
      cr[3 * i] = i == 0 ? 0 : int32_t(int64_t(r.v[0] % uint32_t(2 * span + 1)) - span);
      cr[3 * i + 1] = i == 0 ? 0 : int32_t(int64_t(r.v[1] % uint32_t(2 * span + 1)) - span);
      cr[3 * i + 2] = i == 0 ? 0 : int32_t(r.v[2] & 1u);
    }
    std::vector<float> mean, std;
    for (int64_t ch = 0; ch < k.c; ++ch) {
      mean.push_back(0.1f * float(ch + 1));
      std.push_back(0.2f + 0.05f * float(ch));
    }
    norm = kernels::PixelNormalization::from_mean_std(k.c, mean, std);
  }
  int32_t crop(int64_t i, int j) const { return crops.data<int32_t>()[3 * i + j]; }
};

const Case kCases[] = {{5, 3, 7, 5}, {4, 1, 28, 28}, {3, 5, 1, 9}, {6, 3, 32, 32}, {2, 2, 13, 1}};

uint64_t test_seed(uint64_t salt) {
  const uint64_t seed = uint64_t(::testing::UnitTest::GetInstance()->random_seed()) * 104729u + salt;
  ::testing::Test::RecordProperty("philox_seed", std::to_string(seed));
  return seed;
}

TEST(ImageDecodeCpu, MatchesThePadMirrorCropReferenceBitForBit) {
  const uint64_t seed = test_seed(3);
  for (const Case& k : kCases) {
    const RandomBatch b(k, seed + uint64_t(k.n));
    Tensor y = Tensor::empty({k.n, k.c, k.h, k.w}, DType::f32);
    kernels::fill(y, NAN, Stream());
    kernels::decode_images(b.pixels, b.crops, b.norm, y, Stream());
    for (int64_t i = 0; i < k.n; ++i) {
      const std::vector<float> want = reference(b.pixels, i, b.crop(i, 0), b.crop(i, 1), b.crop(i, 2) != 0, b.norm);
      const float* got = y.data<float>() + i * k.c * k.h * k.w;
      ASSERT_EQ(std::memcmp(want.data(), got, want.size() * sizeof(float)), 0)
          << k.n << "x" << k.c << "x" << k.h << "x" << k.w << " sample " << i << " crop (" << b.crop(i, 0) << ", "
          << b.crop(i, 1) << ") flip " << b.crop(i, 2);
    }
  }
}

// Channels last: the NCHW decode's values at [i, r, x, c], bit for bit, over the same kinds of batches (the NHWC
// writer decodes a row of each channel, then interleaves them: RGB's by a loop of constant trip count, others by the
// general one).
TEST(ImageDecodeCpu, ChannelsLastIsTheTransposeOfTheNchwDecode) {
  const uint64_t seed = test_seed(5);
  for (const Case& k : kCases) {
    const RandomBatch b(k, seed + uint64_t(k.n));
    Tensor nchw = Tensor::empty({k.n, k.c, k.h, k.w}, DType::f32),
           nhwc = Tensor::empty({k.n, k.h, k.w, k.c}, DType::f32);
    kernels::fill(nhwc, NAN, Stream());
    kernels::decode_images(b.pixels, b.crops, b.norm, nchw, Stream());
    kernels::decode_images(b.pixels, b.crops, b.norm, nhwc, Stream(), kernels::Layout::nhwc);
    const float* want_at = nchw.data<float>();
    const float* got_at = nhwc.data<float>();
    for (int64_t i = 0; i < k.n; ++i)
      for (int64_t ch = 0; ch < k.c; ++ch)
        for (int64_t p = 0; p < k.h * k.w; ++p) {
          const float want = want_at[(i * k.c + ch) * k.h * k.w + p], got = got_at[(i * k.h * k.w + p) * k.c + ch];
          ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0)
              << k.n << "x" << k.c << "x" << k.h << "x" << k.w << " sample " << i << " channel " << ch << " pixel " << p
              << " crop (" << b.crop(i, 0) << ", " << b.crop(i, 1) << ") flip " << b.crop(i, 2);
        }
  }
}

TEST(ImageDecodeCpu, NormalisationIsTheDatasetsMeanAndStd) {
  const auto n = kernels::PixelNormalization::from_mean_std(2, {0.5f, 0.25f}, {0.5f, 0.125f});
  ASSERT_EQ(n.scale.size(), 2u);
  EXPECT_EQ(n.scale[0], 1.0f / (255.0f * 0.5f));
  EXPECT_EQ(n.shift[1], -2.0f);
  const auto none = kernels::PixelNormalization::from_mean_std(3, {}, {});
  ASSERT_EQ(none.scale.size(), 3u);
  EXPECT_EQ(none.scale[2], 1.0f / 255.0f);
  EXPECT_EQ(std::fma(255.0f, none.scale[2], none.shift[2]), 1.0f);
}

TEST(ImageDecodeCpu, RefusesWhatItCannotDecode) {
  using kernels::PixelNormalization;
  HPDT_EXPECT_THROW_MSG(PixelNormalization::from_mean_std(3, {0.5f}, {0.5f}), "3 channels, but 1 means");
  HPDT_EXPECT_THROW_MSG(PixelNormalization::from_mean_std(1, {0.5f}, {0.0f}), "channel 0 has mean 0.5 and std 0");
  HPDT_EXPECT_THROW_MSG(PixelNormalization::from_mean_std(1, {NAN}, {1.0f}), "channel 0 has mean nan");
  HPDT_EXPECT_THROW_MSG(PixelNormalization::from_mean_std(0, {}, {}), "channels must be >= 1");
  const auto norm = PixelNormalization::from_mean_std(3, {}, {});
  Tensor pixels = Tensor::zeros({2, 3, 4, 4}, DType::u8), crops = Tensor::zeros({2, 3}, DType::i32);
  Tensor y = Tensor::empty({2, 3, 4, 4}, DType::f32);
  Tensor f32_pixels = Tensor::zeros({2, 3, 4, 4}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::decode_images(f32_pixels, crops, norm, y, Stream()), "pixels");
  Tensor short_crops = Tensor::zeros({2, 2}, DType::i32);
  HPDT_EXPECT_THROW_MSG(kernels::decode_images(pixels, short_crops, norm, y, Stream()), "crops");
  Tensor wrong_y = Tensor::empty({2, 3, 4, 5}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::decode_images(pixels, crops, norm, wrong_y, Stream()), "y");
  Tensor bf16_y = Tensor::empty({2, 3, 4, 4}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::decode_images(pixels, crops, norm, bf16_y, Stream()), "decode_images");
  HPDT_EXPECT_THROW_MSG(kernels::decode_images(pixels, crops, norm, y, Stream(), kernels::Layout::nhwc),
                        "y (nhwc) has shape [2, 3, 4, 4], expected [2, 4, 4, 3]");
  const auto norm1 = PixelNormalization::from_mean_std(1, {}, {});
  HPDT_EXPECT_THROW_MSG(kernels::decode_images(pixels, crops, norm1, y, Stream()), "1 scales and 1 shifts for 3");
}

}  // namespace
