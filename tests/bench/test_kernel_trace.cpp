// The per-kernel summary of a GPU trace (bench/kernel_trace: what hpdt-bench-train-step --kernel-trace writes) on
// made-up activities, and the trace's refusals that need no GPU. The trace itself runs in test_kernel_trace_cuda.
#include <gtest/gtest.h>

#include <cstdlib>

#include "hpdt/bench/kernel_trace.h"
#include "hpdt_test.h"

namespace {

using hpdt::bench::GpuActivity;

// Totals by name, largest first; busy time is the union of the intervals (overlaps counted once, gaps not at all).
TEST(KernelSummary, TotalsByNameAndBusyTimeIsTheUnion) {
  // ms -> ns
  const auto a = [](const char* n, double b, double e) { return GpuActivity{n, uint64_t(b * 1e6), uint64_t(e * 1e6)}; };
  // gemm 0-3 and 5-6 on one stream; norm 2-4 on another (overlaps gemm's first by 1 ms); a copy 8-8.5; nested 5.2-5.4
  const std::vector<GpuActivity> acts = {a("gemm", 0, 3), a("norm", 2, 4), a("gemm", 5, 6), a("[memcpy DtoD]", 8, 8.5),
                                         a("tiny", 5.2, 5.4)};
  const auto s = hpdt::bench::summarize(acts);
  EXPECT_EQ(s.activities, 5);
  ASSERT_EQ(s.kernels.size(), 4u);
  EXPECT_EQ(s.kernels[0].name, "gemm");
  EXPECT_EQ(s.kernels[0].count, 2);
  EXPECT_NEAR(s.kernels[0].total_ms, 4.0, 1e-9);
  EXPECT_EQ(s.kernels[1].name, "norm");
  EXPECT_EQ(s.kernels[2].name, "[memcpy DtoD]");
  EXPECT_EQ(s.kernels[3].name, "tiny");
  EXPECT_NEAR(s.sum_ms, 3 + 2 + 1 + 0.5 + 0.2, 1e-9);
  EXPECT_NEAR(s.busy_ms, 4 + 1 + 0.5, 1e-9);  // [0,4) [5,6) [8,8.5)
  EXPECT_NEAR(s.span_ms, 8.5, 1e-9);
}

TEST(KernelSummary, OrderOfTheActivitiesDoesNotMatter) {
  std::vector<GpuActivity> acts = {{"b", 700, 900}, {"a", 0, 500}, {"a", 400, 600}, {"c", 1000, 1000}};
  const auto s1 = hpdt::bench::summarize(acts);
  std::swap(acts[0], acts[3]);
  std::swap(acts[1], acts[2]);
  const auto s2 = hpdt::bench::summarize(acts);
  EXPECT_DOUBLE_EQ(s1.busy_ms, s2.busy_ms);
  EXPECT_NEAR(s1.busy_ms, (600 + 200) * 1e-6, 1e-12);
  EXPECT_NEAR(s1.span_ms, 1000 * 1e-6, 1e-12);
  ASSERT_EQ(s1.kernels.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(s1.kernels[i].name, s2.kernels[i].name);
}

TEST(KernelSummary, EmptyTraceAndBadActivity) {
  const auto s = hpdt::bench::summarize({});
  EXPECT_EQ(s.activities, 0);
  EXPECT_TRUE(s.kernels.empty());
  EXPECT_EQ(s.busy_ms, 0.0);
  HPDT_EXPECT_THROW_MSG(hpdt::bench::summarize({{"backwards_kernel", 10, 5}}), "'backwards_kernel' ends");
}

TEST(KernelSummary, JsonIsPerStep) {
  const auto s = hpdt::bench::summarize({{"k", 0, 4'000'000}, {"k", 5'000'000, 7'000'000}, {"m", 7'000'000, 8'000'000}});
  const auto j = hpdt::bench::summary_json(s, 2);
  EXPECT_EQ(j["steps"], 2);
  EXPECT_EQ(j["activities"], 3);
  EXPECT_NEAR(j["busy_ms_per_step"].get<double>(), 3.5, 1e-9);
  EXPECT_NEAR(j["span_ms_per_step"].get<double>(), 4.0, 1e-9);
  EXPECT_NEAR(j["sum_ms_per_step"].get<double>(), 3.5, 1e-9);
  ASSERT_EQ(j["kernels"].size(), 2u);
  EXPECT_EQ(j["kernels"][0]["name"], "k");
  EXPECT_NEAR(j["kernels"][0]["count_per_step"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(j["kernels"][0]["ms_per_step"].get<double>(), 3.0, 1e-9);
  EXPECT_NEAR(j["kernels"][1]["count_per_step"].get<double>(), 0.5, 1e-12);
  HPDT_EXPECT_THROW_MSG(hpdt::bench::summary_json(s, 0), "steps >= 1");
}

TEST(KernelSummary, Demangle) {
  EXPECT_EQ(hpdt::bench::demangle("_Z3fooi"), "foo(int)");
  EXPECT_EQ(hpdt::bench::demangle("_ZN4hpdt7kernels4cuda11fill_kernelIfEEvPT_lf"),
            "void hpdt::kernels::cuda::fill_kernel<float>(float*, long, float)");
  EXPECT_EQ(hpdt::bench::demangle("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNT"), "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNT");
  EXPECT_EQ(hpdt::bench::demangle(nullptr), "[unnamed]");
}

// A CUPTI library that is not there is an error naming it and the variable (in a build without CUPTI: saying so).
TEST(KernelTrace, MissingLibraryIsNamed) {
  ::setenv("HPDT_CUPTI_LIBRARY", "/nonexistent/libcupti.so.99", 1);
  try {
    hpdt::bench::KernelTrace t;
    ADD_FAILURE() << "a trace started with HPDT_CUPTI_LIBRARY pointing nowhere";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("/nonexistent/libcupti.so.99") != std::string::npos || m.find("no CUPTI") != std::string::npos)
        << m;
    if (m.find("no CUPTI") == std::string::npos) {
      EXPECT_NE(m.find("HPDT_CUPTI_LIBRARY"), std::string::npos) << m;
    }
  }
  ::unsetenv("HPDT_CUPTI_LIBRARY");
}

}  // namespace
