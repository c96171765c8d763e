// One test per diagnosis rule (each firing on a synthetic log), and none on a clean job.
#include <gtest/gtest.h>

#include "corpus_helpers.h"
#include "hpdt/nccl_log/parser.h"
#include "synthetic.h"

namespace hpdt::nccl_log::test {
namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  return s;
}

std::vector<Diagnosis> run(const std::string& text) { return diagnose(parse_text(text)); }

TEST(NcclLogDiagnose, CleanJobHasNone) {
  auto ds = run(job_2x2());
  for (const auto& d : ds) ADD_FAILURE() << d.rule << ": " << d.summary;
}

TEST(NcclLogDiagnose, EveryRuleIsListed) {
  EXPECT_EQ(diagnosis_rules().size(), 10u);
}

TEST(NcclLogDiagnose, VersionMismatch) {
  std::string t = job_2x2_rank(0) + job_2x2_rank(1) + job_2x2_rank(2) + job_2x2_rank(3, "2.18.5+cuda12.2");
  auto d = find_diag(run(t), "version-mismatch");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->evidence.size(), 2u);
  // a different CUDA build of the same NCCL is not a mismatch
  EXPECT_FALSE(find_diag(run(job_2x2_rank(0) + job_2x2_rank(1) + job_2x2_rank(2) + job_2x2_rank(3, "2.20.5+cuda12.2")),
                      "version-mismatch"));
}

TEST(NcclLogDiagnose, SocketWhileIbPresent) {
  std::string t = replace_all(job_2x2(), "NET/IB/0/GDRDMA", "NET/Socket/0");
  auto d = find_diag(run(t), "socket-with-ib");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->severity, "warning");
  // NCCL_IB_DISABLE alone (no IB devices listed) also counts
  std::string t2 = replace_all(t, "NET/IB : Using [0]mlx5_0:1/IB [RO]", "NET/IB : No device found. [RO]");
  t2 += "node-a:100:107 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n";
  auto d2 = find_diag(run(t2), "socket-with-ib");
  ASSERT_TRUE(d2.has_value());
  EXPECT_NE(d2->next_step.find("NCCL_IB_DISABLE"), std::string::npos);
}

TEST(NcclLogDiagnose, P2pDisabledInsideANode) {
  std::string t = replace_all(job_2x2(), "P2P/CUMEM/read", "SHM/direct/direct");
  auto d = find_diag(run(t), "p2p-disabled");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->severity, "info");
  t += "node-a:100:107 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.\n";
  d = find_diag(run(t), "p2p-disabled");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->severity, "warning");
}

TEST(NcclLogDiagnose, GdrOffWhereTheNicSupportsIt) {
  std::string t = replace_all(job_2x2(), "NET/IB/0/GDRDMA", "NET/IB/0");
  t = replace_all(t, "GPU Direct RDMA Enabled for GPU 1b000 / HCA 0 (distance 3 <= 4), read 1",
                  "GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 5 > 4)");
  auto d = find_diag(run(t), "gdr-off");
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->evidence.at(0).find("distance 5 > 4"), std::string::npos);
}

TEST(NcclLogDiagnose, FewerChannelsOnSomeRanks) {
  std::string t = job_2x2_rank(0) + job_2x2_rank(1) + job_2x2_rank(2) +
                  replace_all(job_2x2_rank(3), "2 coll channels", "1 coll channels");
  auto d = find_diag(run(t), "few-channels");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->evidence.size(), 2u);
}

TEST(NcclLogDiagnose, RingCrossesNodesTooOften) {
  std::string t = replace_all(job_2x2(), "Channel 00/02 :    0   1   2   3", "Channel 00/02 :    0   2   1   3");
  auto d = find_diag(run(t), "ring-crossings");
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->summary.find("4 times"), std::string::npos) << d->summary;
}

TEST(NcclLogDiagnose, RanksMissingFromTheCapture) {
  auto d = find_diag(run(job_2x2_rank(0) + job_2x2_rank(1) + job_2x2_rank(3)), "missing-ranks");
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->summary.find("1 of 4 ranks printed nothing: 2"), std::string::npos) << d->summary;
}

TEST(NcclLogDiagnose, KnownFailureLines) {
  struct Case { const char* line; const char* rule; };
  const Case cases[] = {
      {"\nnode-a:100:107 [0] transport/net.cc:1 NCCL WARN Call to ibv_reg_mr failed\nRuntimeError: NCCL error: unhandled system error", "system-error"},
      {"cnode2-001: Test NCCL failure common.cu:401 'remote process exited or there was a network error / '", "remote-error"},
      {"[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds", "timeout"},
      {"\nnode-a:100:107 [0] include/alloc.h:1 NCCL WARN Cuda failure 'out of memory'", "out-of-memory"},
      {"\nnode-a:100:107 [0] init.cc:1 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1b000", "duplicate-gpu"},
      {"\nnode-a:100:107 [0] misc/shmutils.cc:1 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)", "shm-space"},
      {"\nnode-a:100:107 [0] misc/socket.cc:1 NCCL WARN socketProgress: Connection closed by remote peer node-b<1234>", "peer-connection-closed"},
  };
  for (const auto& c : cases) {
    auto ds = run(job_2x2() + c.line + "\n");
    auto d = find_diag(ds, c.rule);
    ASSERT_TRUE(d.has_value()) << c.rule;
    EXPECT_EQ(d->severity, "error");
    EXPECT_FALSE(d->next_step.empty());
    EXPECT_FALSE(d->evidence.empty()) << c.rule;
  }
}

TEST(NcclLogDiagnose, AbortAfterLastCollective) {
  std::string t = job_2x2() +
                  "node-a:100:100 [0] NCCL INFO AllReduce: opCount 1f sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0x555000000000 [nranks=4] stream 0x2\n"
                  "node-a:100:150 [0] NCCL INFO comm 0x555000000000 rank 0 nranks 4 cudaDev 0 busId 1b000 - Abort COMPLETE\n";
  auto d = find_diag(run(t), "aborted");
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->summary.find("opCount 1f"), std::string::npos) << d->summary;
}

TEST(NcclLogDiagnose, NoNcclOutput) {
  auto d = find_diag(run("hello\nworld\n"), "no-nccl-output");
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->next_step.find("NCCL_DEBUG=INFO"), std::string::npos);
}

}  // namespace
}  // namespace hpdt::nccl_log::test
