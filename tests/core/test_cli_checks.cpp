// hpdt/core/cli_checks.h: the number checks every program's options use, through a real CLI11 parse. Each rejected
// value's whole message is asserted (CLI11's own checks printed "Value 0 not in range 0.000000 to 1797...": 0 inside
// the range it claimed, DBL_MAX in 309 digits), as are the accepted edges and the help's tags.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "hpdt/core/cli_checks.h"

namespace {

struct Parsed {
  bool ok = false;
  std::string error;  // CLI11's message, as the programs print it
};

// One option of each kind; args after the program name.
Parsed parse(std::vector<std::string> args, double* lr = nullptr, int* batch = nullptr) {
  CLI::App app{"test"};
  double lr_v = 1, momentum = 0.9;
  int batch_v = 1, steps = 0;
  app.add_option("--lr", lr_v)->check(hpdt::cli::positive());
  app.add_option("--batch", batch_v)->check(hpdt::cli::positive());
  app.add_option("--steps", steps)->check(hpdt::cli::non_negative());
  app.add_option("--momentum", momentum)->check(hpdt::cli::in_range(0.0, 1.0));
  args.insert(args.begin(), "test");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  Parsed p;
  try {
    app.parse(int(argv.size()), argv.data());
    p.ok = true;
  } catch (const CLI::ParseError& e) {
    p.error = e.what();
  }
  if (lr) *lr = lr_v;
  if (batch) *batch = batch_v;
  return p;
}

TEST(CliChecks, RejectedValuesSayWhatIsWanted) {
  EXPECT_EQ(parse({"--batch", "0"}).error, "--batch: must be > 0, got 0");
  EXPECT_EQ(parse({"--batch", "-2"}).error, "--batch: must be > 0, got -2");
  EXPECT_EQ(parse({"--lr", "0.0"}).error, "--lr: must be > 0, got 0.0");
  EXPECT_EQ(parse({"--steps", "-1"}).error, "--steps: must be >= 0, got -1");
  EXPECT_EQ(parse({"--momentum", "1.5"}).error, "--momentum: must be in [0, 1], got 1.5");
  EXPECT_EQ(parse({"--momentum", "-0.25"}).error, "--momentum: must be in [0, 1], got -0.25");
}

TEST(CliChecks, WordsAndNonFiniteValuesAreNotNumbers) {
  EXPECT_EQ(parse({"--batch", "many"}).error, "--batch: 'many' is not a number");
  EXPECT_EQ(parse({"--lr", "3x"}).error, "--lr: '3x' is not a number");
  EXPECT_EQ(parse({"--lr", "inf"}).error, "--lr: 'inf' is not a number");
  EXPECT_EQ(parse({"--lr", "nan"}).error, "--lr: 'nan' is not a number");
  EXPECT_EQ(parse({"--steps", ""}).error, "--steps: '' is not a number");
}

TEST(CliChecks, AcceptedValuesAndEdges) {
  double lr = 0;
  int batch = 0;
  ASSERT_TRUE(parse({"--lr", "1e-6", "--batch", "1"}, &lr, &batch).ok);
  EXPECT_EQ(lr, 1e-6);
  EXPECT_EQ(batch, 1);
  EXPECT_TRUE(parse({"--steps", "0"}).ok);
  EXPECT_TRUE(parse({"--momentum", "0"}).ok);
  EXPECT_TRUE(parse({"--momentum", "1"}).ok);
  EXPECT_FALSE(parse({"--batch", "2.5"}).ok);  // passes the check, not the conversion to int (CLI11's message)
}

TEST(CliChecks, HelpKeepsTheTags) {
  CLI::App app{"test"};
  int batch = 1, steps = 0;
  double momentum = 0;
  app.add_option("--batch", batch)->check(hpdt::cli::positive());
  app.add_option("--steps", steps)->check(hpdt::cli::non_negative());
  app.add_option("--momentum", momentum)->check(hpdt::cli::in_range(0, 1));
  const std::string help = app.help();
  EXPECT_NE(help.find("INT:POSITIVE"), std::string::npos) << help;
  EXPECT_NE(help.find("INT:NONNEGATIVE"), std::string::npos) << help;
  EXPECT_NE(help.find("FLOAT:in [0, 1]"), std::string::npos) << help;
}

// parse_on_rank: the MPI programs' parse after MPI_Init. Rank 0 prints the error (or the help) and every rank gets the
// same status to exit with; a good command line goes on.
TEST(CliChecks, ParseOnRankPrintsOnRankZeroOnly) {
  const auto run = [](std::vector<const char*> argv, int rank, std::string& out, std::string& err) {
    CLI::App app{"test"};
    int batch = 1;
    app.add_option("--batch", batch)->check(hpdt::cli::positive());
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    const std::optional<int> status = hpdt::cli::parse_on_rank(app, int(argv.size()), argv.data(), rank);
    out = testing::internal::GetCapturedStdout();
    err = testing::internal::GetCapturedStderr();
    return status;
  };
  std::string out, err;
  const auto root = run({"test", "--batch", "0"}, 0, out, err);
  ASSERT_TRUE(root.has_value());
  EXPECT_NE(*root, 0);
  EXPECT_NE(err.find("--batch: must be > 0, got 0"), std::string::npos) << err;
  const auto other = run({"test", "--batch", "0"}, 3, out, err);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(*other, *root);
  EXPECT_EQ(out + err, "");
  const auto help = run({"test", "--help"}, 0, out, err);
  ASSERT_TRUE(help.has_value());
  EXPECT_EQ(*help, 0);
  EXPECT_NE(out.find("--batch"), std::string::npos) << out;
  const auto help_other = run({"test", "--help"}, 1, out, err);
  EXPECT_EQ(help_other, std::optional<int>(0));
  EXPECT_EQ(out + err, "");
  EXPECT_FALSE(run({"test", "--batch", "4"}, 0, out, err).has_value());
}

}  // namespace
