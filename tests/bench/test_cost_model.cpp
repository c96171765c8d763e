// The alpha-beta model: structural coefficients, the non-negative least-squares fit, the two-level
// prediction (hier beats ring by the 1.5x the theory says on 2 nodes x 2 ranks) and wire formats.
#include <gtest/gtest.h>

#include <cmath>

#include "hpdt/bench/cost_model.h"
#include "hpdt_test.h"

using namespace hpdt::bench;

TEST(CostModel, Coefficients) {
  EXPECT_DOUBLE_EQ(flat_coefficients("ring", 4).a, 6);
  EXPECT_DOUBLE_EQ(flat_coefficients("ring", 4).b, 1.5);
  EXPECT_DOUBLE_EQ(flat_coefficients("rhd", 4).a, 4);
  EXPECT_DOUBLE_EQ(flat_coefficients("rhd", 4).b, 1.5);
  EXPECT_DOUBLE_EQ(flat_coefficients("rhd", 3).a, 2 + 2);  // floor(lg 3)=1 -> 2, +2 for the fold
  EXPECT_DOUBLE_EQ(flat_coefficients("rhd", 3).b, 2.0 * 2 / 3 + 1);
  EXPECT_DOUBLE_EQ(flat_coefficients("tree", 5).a, 6);  // ceil(lg 5) = 3
  EXPECT_DOUBLE_EQ(flat_coefficients("ring", 1).a, 0);
  HPDT_EXPECT_THROW_MSG(flat_coefficients("bogus", 4), "bogus");
  HPDT_EXPECT_THROW_MSG(flat_coefficients("ring", 0), "rank count");
}

TEST(CostModel, FitRecoversExactParameters) {
  const Coefficients c = flat_coefficients("ring", 4);
  const double alpha = 20e-6, beta = 1.0 / 2e9;
  std::vector<TimeSample> s;
  for (double n = 8; n <= 64 << 20; n *= 4) s.push_back({n, c.a * alpha + c.b * n * beta});
  const AlphaBeta f = fit_alpha_beta(c, s);
  EXPECT_NEAR(f.alpha_s, alpha, alpha * 1e-6);
  EXPECT_NEAR(f.beta_s_per_byte, beta, beta * 1e-6);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  EXPECT_EQ(f.samples, s.size());
}

TEST(CostModel, FitNeverNegative) {
  // Times falling with size (noise at small sizes) would give a negative beta unconstrained.
  const Coefficients c = flat_coefficients("tree", 2);
  std::vector<TimeSample> s = {{8, 30e-6}, {1024, 25e-6}, {4096, 20e-6}};
  const AlphaBeta f = fit_alpha_beta(c, s);
  EXPECT_GE(f.alpha_s, 0);
  EXPECT_GE(f.beta_s_per_byte, 0);
  EXPECT_GT(f.alpha_s, 0);
}

TEST(CostModel, HierBeatsRingOnTwoNodesByTheTheoreticalFactor) {
  Network net;
  net.ranks_per_node = 2;
  net.intra_bw_Bps = 1e15;  // intra-node essentially free: the node link is the bottleneck
  net.intra_alpha_s = 0;
  net.inter_alpha_s = 0;
  net.inter_bw_Bps = 125e6;  // 1 Gbit/s
  const double n = 64 << 20;
  const double ring = predict_allreduce_s("ring", 4, n, net);
  const double hier = predict_allreduce_s("hier", 4, n, net);
  EXPECT_NEAR(ring / hier, 1.5, 1e-6);
  EXPECT_NEAR(ring, 1.5 * n / 125e6, 1e-9);
}

TEST(CostModel, SingleNodeUsesIntraFigures) {
  Network net;
  net.ranks_per_node = 8;
  net.intra_alpha_s = 1e-6;
  net.intra_bw_Bps = 100e9;
  net.inter_bw_Bps = 1;  // would dominate if it were used
  EXPECT_NEAR(predict_allreduce_s("ring", 8, 1e9, net), 14e-6 + 1.75 * 1e9 / 100e9, 1e-12);
  EXPECT_EQ(predict_allreduce_s("ring", 1, 1e9, net), 0.0);
}

TEST(CostModel, WireFormats) {
  EXPECT_DOUBLE_EQ(wire_format("none").ratio, 1);
  EXPECT_DOUBLE_EQ(wire_format("bf16").ratio, 0.5);
  EXPECT_DOUBLE_EQ(wire_format("qsgd:8").ratio, 0.25);
  EXPECT_DOUBLE_EQ(wire_format("topk:0.01").ratio, 0.02);
  EXPECT_TRUE(wire_format("topk:0.01").allgather);
  HPDT_EXPECT_THROW_MSG(wire_format("topk:2"), "kept fraction");
  EXPECT_DOUBLE_EQ(wire_format("powersgd:4", 0.03).ratio, 0.03);
  HPDT_EXPECT_THROW_MSG(wire_format("zip"), "unknown compression 'zip'");
  HPDT_EXPECT_THROW_MSG(wire_format("topk:abc"), "not a number");
  HPDT_EXPECT_THROW_MSG(wire_format("qsgd:0"), "bits");
}

TEST(CostModel, SparseAllGatherGrowsWithRanks) {
  Network net;
  net.ranks_per_node = 8;
  const double g = 100e6;
  const double t64 = predict_exchange_s("ring", "topk:0.01", 64, g, net);
  const double t512 = predict_exchange_s("ring", "topk:0.01", 512, g, net);
  EXPECT_GT(t512, 7 * t64);  // (p-1) growth
  // while the dense ring stays nearly flat in bandwidth terms
  const double r64 = predict_exchange_s("ring", "none", 64, g, net);
  const double r512 = predict_exchange_s("ring", "none", 512, g, net);
  EXPECT_LT(r512, 1.2 * r64 + 512 * 2 * net.inter_alpha_s);
}

TEST(CostModel, HeapTreeAcrossNodesCarriesEveryRanksTraffic) {
  Network net;
  net.ranks_per_node = 8;
  net.intra_bw_Bps = 450e9;
  net.inter_bw_Bps = 200e9;
  net.intra_alpha_s = 1e-6;
  net.inter_alpha_s = 5e-6;
  const double n = 100e6;
  // 64 ranks on 8 nodes: 8 ranks x (n up + 2n down) per node, against ring's 2(p-1)/p n.
  EXPECT_NEAR(predict_allreduce_s("tree", 64, n, net), 2 * 6 * 5e-6 + 3.0 * 8 * n / 200e9, 1e-12);
  EXPECT_GT(predict_allreduce_s("tree", 64, n, net), 5 * predict_allreduce_s("ring", 64, n, net));
}
