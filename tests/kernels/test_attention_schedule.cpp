// Attention v3's rotated order (kernels/cuda/attention_schedule.cuh): plain C++, checked here on the CPU. Whether it
// makes the backward faster shows in the benchmarks (attention_bwd/v3 against v3_keys).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "attention_schedule.cuh"

namespace {

using hpdt::kernels::cuda::detail::v3_first_query_block;
using hpdt::kernels::cuda::detail::v3_rotated_rank;
using hpdt::kernels::cuda::detail::v3_rotation_fits;

// The step at which key block k reaches query block qb, visiting from its first query block and wrapping around.
int arrival(int qb, int k, int nkb, int nqb) {
  const int s = qb - v3_first_query_block(k, nkb, nqb);
  return s < 0 ? s + nqb : s;
}

// For every query block: the ranks are 0 .. nkb - 1, each key block's rank is its place in the order of arrival,
// and each arrives at least one step after the one before it (so that, in lockstep, nobody waits), for every
// nkb <= nqb up to 40 and the shapes of the benchmark (t 4096 at dh 128: 64 key blocks of 64, 128 query blocks of
// 32; at dh 64: 32 of 128 and 128 of 32; ViT-B/16: 2 of 128 and 7 of 32).
TEST(AttentionSchedule, RanksAreTheOrderOfArrival) {
  std::vector<std::pair<int, int>> shapes = {{64, 128}, {32, 128}, {2, 7}, {132, 264}, {16, 32}};
  for (int nqb = 1; nqb <= 40; ++nqb)
    for (int nkb = 1; nkb <= nqb; ++nkb) shapes.emplace_back(nkb, nqb);
  for (const auto& [nkb, nqb] : shapes)
    for (int qb = 0; qb < nqb; ++qb) {
      SCOPED_TRACE(::testing::Message() << nkb << " key blocks, " << nqb << " query blocks, query block " << qb);
      std::vector<int> by_rank(size_t(nkb), -1);
      for (int k = 0; k < nkb; ++k) {
        const int r = v3_rotated_rank(qb, k, nkb, nqb);
        ASSERT_GE(r, 0);
        ASSERT_LT(r, nkb);
        ASSERT_EQ(by_rank[size_t(r)], -1) << "rank " << r << " twice";
        by_rank[size_t(r)] = k;
      }
      for (int r = 1; r < nkb; ++r)
        EXPECT_GE(arrival(qb, by_rank[size_t(r)], nkb, nqb), arrival(qb, by_rank[size_t(r - 1)], nkb, nqb) + 1)
            << "rank " << r << " (key block " << by_rank[size_t(r)] << ") does not arrive after rank " << r - 1;
    }
}

// The first query blocks differ and spread evenly: key block k starts at k nqb / nkb.
TEST(AttentionSchedule, FirstQueryBlocksSpreadEvenly) {
  EXPECT_EQ(v3_first_query_block(0, 64, 128), 0);
  EXPECT_EQ(v3_first_query_block(1, 64, 128), 2);
  EXPECT_EQ(v3_first_query_block(63, 64, 128), 126);
  EXPECT_EQ(v3_first_query_block(1, 2, 7), 3);
  EXPECT_EQ(v3_first_query_block(2, 3, 3), 2);
  // no overflow where k nqb passes 2^31
  EXPECT_EQ(v3_first_query_block(100, 132, 30'000'000), 22'727'272);
}

// Where the order can be computed: as many query blocks as key blocks or more, and the rank's products in 32 bits,
// up to the edge: (nkb + 1) nqb < 2^32, where (qb + 1) nkb + nqb - 1 is largest at the last query block.
TEST(AttentionSchedule, RotationFitsIn32Bits) {
  EXPECT_TRUE(v3_rotation_fits(64, 128));
  EXPECT_TRUE(v3_rotation_fits(1, 1));
  EXPECT_FALSE(v3_rotation_fits(5, 4));
  EXPECT_FALSE(v3_rotation_fits(0, 4));
  EXPECT_TRUE(v3_rotation_fits(65534, 65536));   // 65535 * 65536 = 2^32 - 65536
  EXPECT_FALSE(v3_rotation_fits(65535, 65536));  // 65536 * 65536 = 2^32
  // at the largest nkb that fits with nqb = 65536, the ranks at the first and last query blocks
  const int nkb = 65534, nqb = 65536;
  EXPECT_EQ(v3_rotated_rank(nqb - 1, 0, nkb, nqb), nkb - 1);
  EXPECT_EQ(v3_rotated_rank(nqb - 1, nkb - 1, nkb, nqb), 0);
  EXPECT_EQ(v3_rotated_rank(0, 0, nkb, nqb), 0);
}

}  // namespace
