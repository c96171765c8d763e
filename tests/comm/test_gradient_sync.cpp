// GradientSync (buckets completing in random order == one big all-reduce), the watchdog (a rank that
// skips a collective gives the watchdog's message, not a hang) and the debug-mode mismatch check.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "hpdt/comm/allreduce.h"
#include "hpdt/comm/gradient_sync.h"
#include "hpdt/core/error.h"
#include "hpdt_test.h"

using namespace hpdt;
using namespace hpdt::comm;

namespace {
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}
}  // namespace

TEST(GradientSync, RandomCompletionOrderEqualsOneAllreduce) {
  Communicator comm(MPI_COMM_WORLD);
  const size_t n = 100003;  // prime: the last bucket is short
  for (Algorithm a : {Algorithm::ring, Algorithm::rhd, Algorithm::automatic}) {
    GradientSyncOptions o;
    o.bucket_bytes = 40000;  // 10000 floats: 11 buckets
    o.algorithm = a;
    std::vector<float> grads(n), expect(n);
    GradientSync sync(comm, grads.data(), n, DType::f32, o);
    ASSERT_EQ(sync.bucket_count(), 11u);
    for (int step = 0; step < 3; ++step) {
      // Integer values, so every summation order gives the same exact sum.
      for (size_t i = 0; i < n; ++i) grads[i] = float(int((i * 13 + size_t(comm.rank()) * 5 + size_t(step)) % 17) - 8);
      allreduce(comm, grads.data(), expect.data(), n, DType::f32, ReduceOp::avg, Algorithm::mpi);
      // Cut the buffer into random pieces and notify them in a rank-specific random order.
      std::mt19937 gen(unsigned(comm.rank() * 100 + step));
      std::vector<size_t> cuts = {0, n};
      for (int i = 0; i < 60; ++i) cuts.push_back(gen() % n);
      std::sort(cuts.begin(), cuts.end());
      std::vector<std::pair<size_t, size_t>> pieces;
      for (size_t i = 0; i + 1 < cuts.size(); ++i) pieces.push_back({cuts[i], cuts[i + 1] - cuts[i]});
      std::shuffle(pieces.begin(), pieces.end(), gen);
      sync.begin_step();
      for (auto [off, cnt] : pieces) sync.notify_ready(off, cnt);
      sync.wait();
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) bad += hpdt::test::bits_of(grads[i]) != hpdt::test::bits_of(expect[i]);
      EXPECT_EQ(bad, 0u) << algorithm_name(a) << " step " << step;
      ASSERT_EQ(sync.timings().size(), 11u);
      for (const auto& t : sync.timings()) {
        EXPECT_GT(t.ready_s, 0);
        EXPECT_GE(t.start_s, t.ready_s);
        EXPECT_GE(t.end_s, t.start_s);
      }
      EXPECT_GE(sync.exposed_s(), 0);
      if (comm.size() > 1) {
        EXPECT_GT(sync.bytes_sent(), 0u);
      }
    }
  }
}

TEST(GradientSync, BadUse) {
  Communicator comm(MPI_COMM_WORLD);
  std::vector<float> g(100);
  GradientSync sync(comm, g.data(), g.size(), DType::f32, {});
  HPDT_EXPECT_THROW_MSG(sync.notify_ready(0, 1), "begin_step");
  sync.begin_step();
  HPDT_EXPECT_THROW_MSG(sync.notify_ready(90, 20), "outside the gradient buffer");
  sync.notify_ready(0, 60);
  sync.notify_ready(60, 40);
  // Readiness is counted per bucket (as DDP does): a repeat shows once a bucket is over-full.
  HPDT_EXPECT_THROW_MSG(sync.notify_ready(50, 10), "notified twice");
  sync.wait();
}

TEST(Watchdog, RankSkippingACollectiveGetsTheWatchdogMessage) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  CommunicatorOptions o;
  o.watchdog.timeout_s = 1.0;
  o.watchdog.action = WatchdogOptions::Action::throw_error;
  // After a watchdog error the communicator holds unmatched messages (the job would normally abort).
  // Keep it alive until MPI ends, so that MPI cannot reuse its context for the next test's communicator.
  static std::unique_ptr<Communicator> kept;
  kept = std::make_unique<Communicator>(MPI_COMM_WORLD, o);
  {
    Communicator& comm = *kept;
    std::vector<float> x(8, 1.0f);  // small: eager sends, nothing left half-done on the skipping rank
    AllreduceOptions ao;
    ao.bucket = 7;
    const int skipper = world_size() - 1;
    if (comm.rank() != skipper) {
      try {
        allreduce(comm, x.data(), x.data(), x.size(), DType::f32, ReduceOp::sum, Algorithm::ring, ao);
        ADD_FAILURE() << "the all-reduce finished although rank " << skipper << " never called it";
      } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("watchdog"), std::string::npos) << m;
        EXPECT_NE(m.find("allreduce ring of 8 x f32"), std::string::npos) << m;
        EXPECT_NE(m.find("bucket 7"), std::string::npos) << m;
        // In a ring every rank waits on its left neighbour; the one left of the skipper names it.
        if (comm.rank() == (skipper + 1) % comm.size() || comm.size() == 2) {
          EXPECT_NE(m.find("ranks not arrived: " + std::to_string(skipper)), std::string::npos) << m;
        }
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(DebugChecks, MismatchIsReportedOnEveryRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  CommunicatorOptions o;
  o.debug_checks = true;
  o.watchdog.timeout_s = 30;
  o.watchdog.action = WatchdogOptions::Action::throw_error;
  Communicator comm(MPI_COMM_WORLD, o);
  std::vector<float> x(12, 1.0f);
  const size_t n = comm.rank() == 0 ? 10 : 12;
  HPDT_EXPECT_THROW_MSG(allreduce(comm, x.data(), x.data(), n, DType::f32, ReduceOp::sum, Algorithm::ring), "collective mismatch");
  // A matching call still works afterwards, with the checks on.
  allreduce(comm, x.data(), x.data(), 12, DType::f32, ReduceOp::sum, Algorithm::ring);
  EXPECT_EQ(x[0], float(comm.size()));
  (void)world_rank;
}
