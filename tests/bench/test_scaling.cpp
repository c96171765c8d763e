// hpdt-scaling's logic on synthetic runs whose answers are known: Amdahl/Gustafson fits recover the
// fraction the data were made with, speedup/efficiency/shares come out as defined, bad input is named.
#include <gtest/gtest.h>

#include <fstream>

#include "hpdt_test.h"
#include "scaling.h"

using namespace hpdt::bench;

namespace {
nlohmann::json summary(int ranks, double per_rank, double global, double step_s, double comm_s = 0, double data_s = 0) {
  return {{"type", "summary"}, {"model", "resnet8"}, {"ranks", ranks}, {"nodes", (ranks + 1) / 2},
          {"per_rank_batch", per_rank}, {"global_batch", global}, {"steps", 100}, {"step_time_s", step_s},
          {"throughput_img_s", global / step_s}, {"forward_s", step_s / 4}, {"backward_s", step_s / 2},
          {"exposed_comm_s", comm_s}, {"optimizer_s", 0.0}, {"data_wait_s", data_s}, {"bytes_sent_per_step", 1e6},
          {"algo", "ring"}, {"compress", "none"}, {"test_accuracy", 0.9}, {"git_commit", "abc"},
          {"hosts", {"node1", "node2"}}};
}
RunSummary run_of(const nlohmann::json& j) { return parse_summary(j, "synthetic"); }
}  // namespace

TEST(Scaling, StrongScalingRecoversAmdahlFraction) {
  const double f = 0.9, t1 = 1.0;
  std::vector<RunSummary> runs;
  for (int w : {1, 2, 4, 8}) runs.push_back(run_of(summary(w, 64.0 / w, 64, t1 * ((1 - f) + f / w), 0.01 * w)));
  const auto tables = build_tables(runs);
  ASSERT_EQ(tables.size(), 1u);
  const auto& t = tables[0];
  EXPECT_EQ(t.mode, ScalingMode::strong);
  EXPECT_NEAR(t.parallel_fraction, f, 1e-9);
  EXPECT_LT(t.fit_rms_error, 1e-9);
  ASSERT_EQ(t.rows.size(), 4u);
  const double s4 = 1.0 / ((1 - f) + f / 4);
  EXPECT_NEAR(t.rows[2].speedup, s4, 1e-9);            // S = T1/T4
  EXPECT_NEAR(t.rows[2].efficiency, s4 / 4, 1e-9);     // E = S/W
  EXPECT_NEAR(t.rows[2].comm_share, 0.04 / t.rows[2].step_time_s, 1e-12);
  EXPECT_NE(format_table(t).find("Amdahl fit: parallel fraction f = 0.9000"), std::string::npos) << format_table(t);
}

TEST(Scaling, WeakScalingDetectedAndGustafsonFit) {
  std::vector<RunSummary> runs;
  // fixed per-rank batch 32; step time grows 10 % per doubling
  runs.push_back(run_of(summary(1, 32, 32, 1.0)));
  runs.push_back(run_of(summary(2, 32, 64, 1.1, 0, 0.05)));
  runs.push_back(run_of(summary(4, 32, 128, 1.2)));
  const auto t = build_tables(runs).at(0);
  EXPECT_EQ(t.mode, ScalingMode::weak);
  EXPECT_NEAR(t.rows[1].speedup, 2 / 1.1, 1e-9);  // S = W T1/TW
  EXPECT_NEAR(t.rows[2].efficiency, 1 / 1.2, 1e-9);
  EXPECT_NEAR(t.rows[1].data_share, 0.05 / 1.1, 1e-12);
  EXPECT_GT(t.parallel_fraction, 0.7);
  EXPECT_LT(t.parallel_fraction, 0.9);
}

TEST(Scaling, BaselineAboveOneRankAndRepeatsUseMedian) {
  std::vector<RunSummary> runs;
  runs.push_back(run_of(summary(2, 32, 64, 1.0)));
  runs.push_back(run_of(summary(4, 16, 64, 0.9)));   // repeats at 4: median 0.6
  runs.push_back(run_of(summary(4, 16, 64, 0.6)));
  runs.push_back(run_of(summary(4, 16, 64, 0.5)));
  const auto t = build_tables(runs).at(0);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(t.rows[1].step_time_s, 0.6);
  EXPECT_NEAR(t.rows[0].speedup, 2, 1e-12);          // the smallest run counts as linear
  EXPECT_NEAR(t.rows[1].speedup, 2 * 1.0 / 0.6, 1e-9);
}

TEST(Scaling, GroupsByAlgorithmAndRejectsMixedSweeps) {
  std::vector<RunSummary> runs;
  auto j = summary(2, 32, 64, 1.0);
  runs.push_back(run_of(j));
  j["algo"] = "hier";
  runs.push_back(run_of(j));
  EXPECT_EQ(build_tables(runs).size(), 2u);
  std::vector<RunSummary> mixed = {run_of(summary(1, 32, 32, 1)), run_of(summary(2, 16, 48, 1)),
                                   run_of(summary(4, 8, 64, 1))};
  HPDT_EXPECT_THROW_MSG(build_tables(mixed), "neither the global batch");
  const ScalingMode weak = ScalingMode::weak;
  EXPECT_EQ(build_tables(mixed, &weak).at(0).mode, ScalingMode::weak);
}

TEST(Scaling, LoadsLastSummaryLineAndNamesBadFiles) {
  hpdt::test::TempDir dir;
  {
    std::ofstream f(dir.file("ranks2.jsonl"));
    f << R"({"type":"step","step":1,"loss":2.3})" << "\n";
    f << summary(2, 32, 64, 0.5).dump() << "\n";
  }
  {
    std::ofstream f(dir.file("unfinished.jsonl"));
    f << R"({"type":"step","step":1})" << "\n";
  }
  {
    std::ofstream f(dir.file("bad.jsonl"));
    f << R"({"type":"summary","ranks":2,"per_rank_batch":32})" << "\n";  // no step_time_s
  }
  std::vector<std::string> skipped;
  const auto runs = load_runs(dir.path(), &skipped);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].ranks, 2);
  EXPECT_EQ(runs[0].hosts.size(), 2u);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("bad.jsonl"), std::string::npos);
  EXPECT_NE(skipped[0].find("step_time_s"), std::string::npos);
  EXPECT_NE(skipped[1].find("no {\"type\":\"summary\"} line"), std::string::npos);
  HPDT_EXPECT_THROW_MSG(load_summary(dir.file("missing.jsonl")), "cannot open metrics file");
  HPDT_EXPECT_THROW_MSG(load_runs(dir.file("nodir")), "not a directory");
}

TEST(Scaling, ParseBandwidth) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("450GB/s"), 450e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("4x400Gbit/s"), 200e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1gbit"), 125e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("100Mb/s"), 12.5e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("125e6"), 125e6);
  HPDT_EXPECT_THROW_MSG(parse_bandwidth("fast"), "bad bandwidth 'fast'");
  HPDT_EXPECT_THROW_MSG(parse_bandwidth("10furlongs"), "unknown unit 'furlongs'");
  HPDT_EXPECT_THROW_MSG(parse_bandwidth("-1GB/s"), "must be > 0");
}

TEST(Scaling, PredictEfficiencyFallsWithScaleAndCompressionHelps) {
  PredictInput in;
  in.compute_s = 0.05;
  in.backward_s = 0.03;
  in.grad_bytes = 100e6;
  in.net.ranks_per_node = 8;
  in.net.inter_bw_Bps = 25e9;
  in.algos = {"ring", "hier"};
  in.compresses = {"none", "fp16"};
  in.ranks = {8, 64, 1024};
  const auto rows = predict(in);
  ASSERT_EQ(rows.size(), 12u);
  auto find = [&](int w, const char* a, const char* c) {
    for (const auto& r : rows)
      if (r.ranks == w && r.algo == a && r.compress == c) return r;
    ADD_FAILURE() << "no row " << w << a << c;
    return PredictRow{};
  };
  EXPECT_GT(find(8, "ring", "none").efficiency, find(1024, "ring", "none").efficiency);
  EXPECT_GT(find(64, "ring", "fp16").efficiency, find(64, "ring", "none").efficiency);
  EXPECT_GE(find(1024, "hier", "none").efficiency, find(1024, "ring", "none").efficiency);
  const auto r = find(64, "ring", "none");
  EXPECT_NEAR(r.step_s, in.compute_s + r.comm_s, 1e-12);
  EXPECT_NEAR(r.speedup, 64 * r.efficiency, 1e-9);
  in.overlap = 1.0;  // full overlap hides up to backward_s
  const auto hidden = predict(in);
  EXPECT_NEAR(hidden[0].exposed_comm_s, std::max(0.0, hidden[0].comm_s - 0.03), 1e-12);
}
