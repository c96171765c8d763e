#include <gtest/gtest.h>

#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt_test.h"

namespace {

TEST(Error, CarriesWhatWhereRankAndLocation) {
  hpdt::set_process_rank(3);
  try {
    throw hpdt::Error("dataset /images has rank 3, expected 4", "file train.h5");
  } catch (const hpdt::Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("[rank 3]"), std::string::npos) << w;
    EXPECT_NE(w.find("dataset /images has rank 3, expected 4"), std::string::npos) << w;
    EXPECT_NE(w.find("(file train.h5)"), std::string::npos) << w;
    EXPECT_NE(w.find(" [tests/core/test_error_log.cpp:"), std::string::npos) << w;  // below the repository root
    EXPECT_EQ(e.rank(), 3);
    EXPECT_EQ(e.where(), "file train.h5");
    EXPECT_EQ(e.message(), "dataset /images has rank 3, expected 4");
  }
  hpdt::set_process_rank(-1);
}

TEST(Error, CheckMacros) {
  const int n = 5;
  HPDT_EXPECT_THROW_MSG(HPDT_CHECK(n == 4, "n is ", n), "n is 5");
  HPDT_EXPECT_THROW_MSG(HPDT_CHECK(n == 4), "check failed: n == 4");
  HPDT_EXPECT_THROW_MSG(HPDT_FAIL("bad ", 1, " thing"), "bad 1 thing");
  EXPECT_NO_THROW(HPDT_CHECK(n == 5, "unused"));
}

TEST(Log, Levels) {
  EXPECT_EQ(hpdt::parse_log_level("debug"), hpdt::LogLevel::debug);
  EXPECT_EQ(hpdt::parse_log_level("warning"), hpdt::LogLevel::warn);
  HPDT_EXPECT_THROW_MSG(hpdt::parse_log_level("loud"), "unknown log level 'loud'");
  const auto saved = hpdt::log_level();
  hpdt::set_log_level(hpdt::LogLevel::warn);
  EXPECT_FALSE(hpdt::log_enabled(hpdt::LogLevel::info));
  EXPECT_TRUE(hpdt::log_enabled(hpdt::LogLevel::error));
  int evaluated = 0;
  HPDT_LOG(info) << (++evaluated);  // not evaluated below the level
  EXPECT_EQ(evaluated, 0);
  hpdt::set_log_level(saved);
}

TEST(Log, RankSelection) {
  const auto saved = hpdt::log_level();
  hpdt::set_log_level(hpdt::LogLevel::info);
  hpdt::set_process_rank(2);
  hpdt::set_log_ranks("0,3");
  EXPECT_FALSE(hpdt::log_enabled(hpdt::LogLevel::info));
  EXPECT_TRUE(hpdt::log_enabled(hpdt::LogLevel::warn));  // warnings from every rank
  hpdt::set_log_ranks("2");
  EXPECT_TRUE(hpdt::log_enabled(hpdt::LogLevel::info));
  testing::internal::CaptureStderr();
  HPDT_LOG(info) << "hello " << 42;
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("[hpdt r2 I "), std::string::npos) << out;
  EXPECT_NE(out.find("hello 42\n"), std::string::npos) << out;
  HPDT_EXPECT_THROW_MSG(hpdt::set_log_ranks("0,x"), "comma-separated");
  hpdt::set_log_ranks("all");
  hpdt::set_process_rank(-1);
  hpdt::set_log_level(saved);
}

}  // namespace
