// detail::choose_split_k (kernels/cuda/split_k.cuh), the split-K sizing of the CUDA GEMM and backward-filter
// kernels: plain C++, checked here on the CPU. What it does on a GPU shows in the benchmarks.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "split_k.cuh"

namespace {

using hpdt::kernels::cuda::detail::choose_split_k;
using hpdt::kernels::cuda::detail::SplitK;

constexpr double kTile128Step = 2.0 * 128 * 128 * 32;  // flops of one 32-deep k step of a 128 x 128 tile

int64_t waves(int64_t blocks, int64_t resident) { return (blocks + resident - 1) / resident; }

// ResNet-50's 3x3 256 -> 256 convolution at 14x14, batch 256, backward-filter: 36 output tiles, 1,568 k tiles, two
// blocks per SM on 132 SMs. The rule before (enough splits for 528 blocks) took 15 splits: 540 blocks, three waves
// on 264 slots of which the third held 12 blocks.
TEST(SplitK, FillsOneWaveInsteadOfSpillingIntoAThird) {
  const SplitK sk = choose_split_k(36, 1568, 264, kTile128Step, 256 * 2304, 8, 56);
  EXPECT_EQ(sk.splits, 7);
  EXPECT_EQ(sk.steps_per_split, 224);
  EXPECT_EQ(waves(36 * sk.splits, 264), 1);
}

// ViT-B/16's fc1 weight gradient through GEMM v2 (144 tiles of 128 x 128, K = 12,608 in 394 k tiles, 264 slots):
// two splits made 288 blocks, two waves of which the second held 24. Now most slots of every wave are busy.
TEST(SplitK, WeightGradientGemmRunsFullerWaves) {
  const SplitK sk = choose_split_k(144, 394, 264, kTile128Step, 3072 * 768, 8, 16);
  const int64_t blocks = 144 * int64_t(sk.splits);
  EXPECT_GT(sk.splits, 2);
  EXPECT_GE(double(blocks) / double(waves(blocks, 264) * 264), 0.8) << sk.splits << " splits";
}

// Enough tiles for many waves, and a large output: splitting only adds passes over the partials.
TEST(SplitK, ManyTilesTakeNoSplit) {
  EXPECT_EQ(choose_split_k(1188, 24, 132, 2.0 * 128 * 256 * 32, 12608 * 3072, 8, 16).splits, 1);
  EXPECT_EQ(choose_split_k(4096, 1000, 264, kTile128Step, 4096 * 4096, 8, 16).splits, 1);
}

TEST(SplitK, DegenerateInputs) {
  EXPECT_EQ(choose_split_k(0, 100, 264, kTile128Step, 100, 8, 16).splits, 1);
  EXPECT_EQ(choose_split_k(10, 0, 264, kTile128Step, 100, 8, 16).splits, 1);
  const SplitK one = choose_split_k(1, 7, 264, kTile128Step, 100, 8, 16);  // fewer steps than min_steps
  EXPECT_EQ(one.splits, 1);
  EXPECT_EQ(one.steps_per_split, 7);
  EXPECT_EQ(choose_split_k(1, 1000, 264, kTile128Step, 100, 8, 16).splits, 16);  // idle slots, tiny partials
  EXPECT_EQ(choose_split_k(1, 1000, 0, kTile128Step, 100, 8, 16).splits, 1);  // resident 0 counts as 1: a wave each
  EXPECT_EQ(choose_split_k(1, 1000, 264, kTile128Step, 100, 8, 1).splits, 1);
}

// Whatever the shape: no empty split, the steps cover the reduction, each split keeps min_steps, max_splits and
// the workspace cap hold.
TEST(SplitK, PartitionInvariants) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const int64_t tiles = 1 + int64_t(rng() % 2000), k_steps = 1 + int64_t(rng() % 5000);
    const int64_t resident = 1 + int64_t(rng() % 600), partial = 1 + int64_t(rng() % (1 << 24));
    const int64_t min_steps = 1 + int64_t(rng() % 16);
    const int max_splits = 1 + int(rng() % 256);
    const SplitK sk = choose_split_k(tiles, k_steps, resident, kTile128Step, partial, min_steps, max_splits);
    ASSERT_GE(sk.splits, 1);
    ASSERT_LE(sk.splits, max_splits);
    ASSERT_GE(int64_t(sk.splits) * sk.steps_per_split, k_steps);
    ASSERT_LT(int64_t(sk.splits - 1) * sk.steps_per_split, k_steps) << "an empty split";
    if (sk.splits > 1) {
      ASSERT_GE(sk.steps_per_split, min_steps);
      ASSERT_LE(int64_t(sk.splits) * partial, hpdt::kernels::cuda::detail::kMaxPartialFloats) << "workspace cap";
    }
  }
}

// GEMM v3's block tile by whole waves (wide_tile_by_waves), on 132 SMs: the ViT-B/16 GEMMs of 12,608 rows.
TEST(BlockTile, WholeWavesChooseTheTile) {
  using hpdt::kernels::cuda::detail::wide_tile_by_waves;
  const auto choose = [](int64_t m, int64_t n, int64_t sms) {
    const int64_t tm = (m + 127) / 128;
    return wide_tile_by_waves(tm * ((n + 255) / 256), tm * ((n + 127) / 128), sms);
  };
  // 768 wide: 297 wide tiles are 3 waves (5.4 narrow ones at 1.8), 594 narrow ones 5: narrow
  EXPECT_FALSE(choose(12608, 768, 132));
  // 2304 wide (qkv): 891 wide tiles in 7 waves (12.6) against 1,782 narrow in 14: wide
  EXPECT_TRUE(choose(12608, 2304, 132));
  // 3072 wide (fc1): 1,188 wide tiles, 9 whole waves (16.2), against 18: wide
  EXPECT_TRUE(choose(12608, 3072, 132));
  // 4096^2: 512 wide tiles in 4 waves (7.2) against 1,024 narrow in 8: wide
  EXPECT_TRUE(choose(4096, 4096, 132));
  // below a wave of wide tiles (split-K fills the GPU there): narrow, as before
  EXPECT_FALSE(choose(768, 768, 132));
  EXPECT_FALSE(choose(3072, 768, 132));  // 72 wide tiles
  EXPECT_FALSE(wide_tile_by_waves(131, 262, 132));
  // exactly a wave: wide (1.8 <= 2)
  EXPECT_TRUE(wide_tile_by_waves(132, 264, 132));
  // no SM count (0) counts as one: every tile a wave, wide halves them
  EXPECT_TRUE(wide_tile_by_waves(10, 20, 0));
}

}  // namespace

// GEMM v3's and conv v3's pipeline by rule: the persistent pipelines for a k loop of at most 18 k tiles (K <= 1152)
// over a wave of tiles or more. ResNet-50's 3x3 64- and 128-channel convolutions (K = 576, 1152; thousands of tiles)
// take them, its 256-channel ones (K = 2304) and ViT-B/16's K = 3072 GEMMs do not, nor a call of fewer tiles than SMs.
TEST(ShortKLoop, ByKAndWaves) {
  using hpdt::kernels::cuda::detail::short_k_loop;
  EXPECT_TRUE(short_k_loop(576, 7168, 132));
  EXPECT_TRUE(short_k_loop(1152, 1568, 132));
  EXPECT_TRUE(short_k_loop(768, 891, 132));  // ViT-B/16's qkv forward (12,608 x 2,304, K = 768) on the wide tile
  EXPECT_FALSE(short_k_loop(1153, 7168, 132));
  EXPECT_FALSE(short_k_loop(2304, 784, 132));
  EXPECT_FALSE(short_k_loop(3072, 594, 132));
  EXPECT_FALSE(short_k_loop(64, 131, 132));  // less than a wave
  EXPECT_TRUE(short_k_loop(64, 132, 132));
  EXPECT_TRUE(short_k_loop(64, 1, 0));  // no SM count: one tile is a wave
}
