// NcclDebugCapture: the environment it sets before NCCL starts, and the report it writes at the end.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hpdt/nccl_log/capture.h"
#include "hpdt_test.h"
#include "synthetic.h"

namespace hpdt::nccl_log::test {
namespace {

namespace fs = std::filesystem;

// Restores the NCCL_DEBUG* variables a test changed.
class NcclEnvGuard {
 public:
  NcclEnvGuard() {
    for (const char* k : kVars) {
      const char* v = std::getenv(k);
      saved_.emplace_back(k, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(k);
    }
  }
  ~NcclEnvGuard() {
    for (const auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }

 private:
  static constexpr const char* kVars[] = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "(unset)";
}

TEST(NcclDebugCapture, DisabledChangesNothing) {
  NcclEnvGuard guard;
  NcclDebugCapture cap("");
  EXPECT_FALSE(cap.enabled());
  EXPECT_EQ(env("NCCL_DEBUG"), "(unset)");
  EXPECT_EQ(cap.report(), "");
}

TEST(NcclDebugCapture, SetsTheEnvironmentAndCreatesTheDirectory) {
  NcclEnvGuard guard;
  hpdt::test::TempDir tmp;
  const std::string dir = tmp.file("a/b");
  NcclDebugCapture cap(dir);
  EXPECT_TRUE(cap.enabled());
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_EQ(env("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(env("NCCL_DEBUG_SUBSYS"), "INIT,ENV,GRAPH,TUNING,COLL");
  EXPECT_EQ(env("NCCL_DEBUG_FILE"), dir + "/nccl.%h.%p.log");
  EXPECT_EQ(cap.settings().size(), 3u);
}

TEST(NcclDebugCapture, KeepsTheUsersLevelAndSubsystems) {
  NcclEnvGuard guard;
  ::setenv("NCCL_DEBUG", "TRACE", 1);
  ::setenv("NCCL_DEBUG_SUBSYS", "ALL", 1);
  hpdt::test::TempDir tmp;
  NcclDebugCapture cap(tmp.path());
  EXPECT_EQ(env("NCCL_DEBUG"), "TRACE");
  EXPECT_EQ(env("NCCL_DEBUG_SUBSYS"), "ALL");
  ::setenv("NCCL_DEBUG", "WARN", 1);  // too quiet for a report: raised to INFO
  NcclDebugCapture cap2(tmp.path());
  EXPECT_EQ(env("NCCL_DEBUG"), "INFO");
}

TEST(NcclDebugCapture, ReportsOverThePerProcessFiles) {
  NcclEnvGuard guard;
  hpdt::test::TempDir tmp;
  NcclDebugCapture cap(tmp.path());
  EXPECT_NE(cap.report().find("no NCCL output"), std::string::npos);  // nothing written yet
  const char* names[] = {"nccl.node-a.100.log", "nccl.node-a.101.log", "nccl.node-b.200.log", "nccl.node-b.201.log"};
  for (int r = 0; r < 4; ++r) std::ofstream(tmp.file(names[r])) << job_2x2_rank(r);
  for (int pass = 0; pass < 2; ++pass) {  // the second pass must not read the first pass's reports
    std::string text = cap.report();
    EXPECT_NE(text.find("Communicator 0xabcdef0123456789"), std::string::npos) << text;
    EXPECT_NE(text.find("ranks        : 4 (4 printed)"), std::string::npos) << text;
    EXPECT_NE(text.find("Diagnoses: none"), std::string::npos) << text;
    std::ifstream jf(tmp.file("nccl-report.json"));
    nlohmann::json j = nlohmann::json::parse(jf);
    EXPECT_EQ(j["schema"], "hpdt-nccl-log/1");
    EXPECT_EQ(j["sources"].size(), 4u);
    EXPECT_EQ(j["communicators"][0]["nranks"], 4);
    EXPECT_TRUE(fs::exists(tmp.file("nccl-report.txt")));
  }
}

TEST(NcclDebugCapture, EnvForJobScripts) {
  NcclEnvGuard guard;
  auto e = nccl_debug_env("/scratch/run7");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[2].first, "NCCL_DEBUG_FILE");
  EXPECT_EQ(e[2].second, "/scratch/run7/nccl.%h.%p.log");
  EXPECT_EQ(env("NCCL_DEBUG"), "(unset)");  // only computed, not set
}

}  // namespace
}  // namespace hpdt::nccl_log::test
