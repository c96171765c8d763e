#include "hpdt/core/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace {

using hpdt::Philox4x32;

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(Philox, KnownAnswers) {
  struct Kat {
    Philox4x32 ctr;
    uint32_t k0, k1;
    Philox4x32 expect;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff, {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0, {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const Philox4x32 r = hpdt::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.expect.v[i]) << "word " << i;
  }
}

TEST(Philox, OffsetsAddressTheSequence) {
  // philox_u32(seed, stream, n) is lane n%4 of block n/4, counter = (n/4, stream).
  const uint64_t seed = 0x123456789abcdefULL, stream = 7;
  const Philox4x32 b = hpdt::philox4x32_10({{5, 0, 7, 0}}, uint32_t(seed), uint32_t(seed >> 32));
  for (int lane = 0; lane < 4; ++lane) EXPECT_EQ(hpdt::philox_u32(seed, stream, 20 + lane), b.v[lane]);
  // The sequential generator walks the same sequence.
  hpdt::Rng rng(seed, stream);
  for (uint64_t n = 0; n < 100; ++n) EXPECT_EQ(rng.next_u32(), hpdt::philox_u32(seed, stream, n));
  EXPECT_EQ(rng.offset(), 100u);
}

TEST(Philox, UniformIsExactAndInRange) {
  EXPECT_EQ(hpdt::u32_to_uniform(0), 0.0f);
  EXPECT_LT(hpdt::u32_to_uniform(0xffffffffu), 1.0f);
  EXPECT_GT(hpdt::u32_to_uniform_pos(0), 0.0f);
  EXPECT_EQ(hpdt::u32_to_uniform_pos(0xffffffffu), 1.0f);
  hpdt::Rng rng(1);
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float u = rng.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sum2 += double(u) * u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sum2 / n - (sum / n) * (sum / n), 1.0 / 12, 0.002);
}

TEST(Philox, NormalMoments) {
  hpdt::Rng rng(42, 3);
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float z = rng.normal();
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sum2 += double(z) * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.02);
}

TEST(Philox, StreamsAndSeedsDiffer) {
  std::set<uint32_t> seen;
  for (uint64_t seed : {0ULL, 1ULL, 1ULL << 32})
    for (uint64_t stream : {0ULL, 1ULL, 1ULL << 32}) seen.insert(hpdt::philox_u32(seed, stream, 0));
  EXPECT_EQ(seen.size(), 9u);
}

TEST(Philox, BelowIsUnbiasedAndInRange) {
  hpdt::Rng rng(5);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) {
    const uint32_t r = rng.below(7);
    ASSERT_LT(r, 7u);
    ++counts[r];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

TEST(Philox, ResumeFromOffset) {
  hpdt::Rng a(9);
  for (int i = 0; i < 37; ++i) a.uniform();
  hpdt::Rng b(9, 0, a.offset());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
}

}  // namespace
