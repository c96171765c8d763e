#include "hpdt/core/results.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "hpdt/core/build_info.h"
#include "hpdt_test.h"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Results, AtomicWriteReplacesAndCreatesDirectories) {
  hpdt::test::TempDir dir;
  const std::string path = dir.file("a/b/result.json");
  hpdt::write_file_atomic(path, "first");
  EXPECT_EQ(slurp(path), "first");
  hpdt::write_file_atomic(path, "second");
  EXPECT_EQ(slurp(path), "second");
  for (auto& e : std::filesystem::directory_iterator(dir.file("a/b")))
    EXPECT_EQ(e.path().filename(), "result.json") << "temporary file left behind";
}

TEST(Results, FailedWriteLeavesTheOldFile) {
  hpdt::test::TempDir dir;
  const std::string path = dir.file("keep.json");
  hpdt::write_file_atomic(path, "precious");
  // The target is a directory's child that cannot be created: the old file must be untouched.
  HPDT_EXPECT_THROW_MSG(hpdt::write_file_atomic(path + "/sub/x", "new"), "keep.json");
  EXPECT_EQ(slurp(path), "precious");
}

TEST(Results, MachineAndBuildInfo) {
  const auto m = hpdt::machine_info();
  EXPECT_TRUE(m.contains("hostname"));
  EXPECT_GT(m["logical_cpus"].get<int>(), 0);
  EXPECT_TRUE(m["gpus"].is_array());
  const auto b = hpdt::build_info_json();
  EXPECT_EQ(b["version"], hpdt::build_info().version);
  EXPECT_FALSE(b["git_commit"].get<std::string>().empty());
}

TEST(Results, SampleStats) {
  const auto s = hpdt::sample_stats({5, 1, 3, 2, 4});
  EXPECT_EQ(s.n, 5u);
  EXPECT_EQ(s.median, 3);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_NEAR(s.stddev, 1.5811, 1e-4);
  EXPECT_EQ(hpdt::sample_stats({1, 2, 3, 4}).median, 2.5);
  EXPECT_EQ(hpdt::sample_stats({}).n, 0u);
}

TEST(Results, CsvQuoting) {
  hpdt::CsvWriter csv({"name", "value"});
  csv.add_row({"plain", "1"});
  csv.add_row({"with,comma", "say \"hi\""});
  EXPECT_EQ(csv.str(), "name,value\nplain,1\n\"with,comma\",\"say \"\"hi\"\"\"\n");
  HPDT_EXPECT_THROW_MSG(csv.add_row({"one"}), "1 fields, the header has 2");
}

}  // namespace
