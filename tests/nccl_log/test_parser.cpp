// The parser on logs this project writes itself in NCCL's formats (GRAMMAR.md), one construct per
// test, plus the edge cases: interleaving, launcher prefixes, splices, truncation, garbage, gzip.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <random>
#include <sstream>

#include "corpus_helpers.h"
#include "hpdt/nccl_log/lexer.h"
#include "hpdt/nccl_log/parser.h"
#include "hpdt/nccl_log/report.h"
#include "hpdt_test.h"
#include "synthetic.h"

namespace hpdt::nccl_log::test {
namespace {

using V = std::vector<int>;
using S = std::set<int>;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The facts of job_2x2 that every variant below must reproduce.
void expect_job_2x2(const Log& log) {
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->id, "0xabcdef0123456789");
  EXPECT_EQ(c->versions, std::vector<std::string>{"2.20.5+cuda12.4"});
  EXPECT_EQ(c->nranks, 4);
  EXPECT_EQ(c->nnodes, 2);
  ASSERT_EQ(rank_list(*c), (V{0, 1, 2, 3}));
  EXPECT_EQ(c->ranks.at(2).host, "node-b");
  EXPECT_EQ(c->ranks.at(3).pid, 201);
  EXPECT_EQ(c->ranks.at(1).bus_id, "43000");
  EXPECT_TRUE(c->ranks.at(3).init_complete);
  EXPECT_EQ(c->channels, 2);
  EXPECT_EQ(ring(*c, 0), (V{0, 1, 2, 3}));
  EXPECT_EQ(ring(*c, 1), (V{0, 1, 2, 3}));
  EXPECT_EQ(via(*c, 0, 0, 1), "P2P/CUMEM/read");
  EXPECT_EQ(via(*c, 1, 1, 2), "NET/IB/0/GDRDMA");
  EXPECT_EQ(via(*c, 0, 3, 0), "NET/IB/0/GDRDMA");
  EXPECT_EQ(c->connections.size(), 8u);  // send/receive twins merged
  EXPECT_EQ(parent(*c, 0, 0), -1);
  EXPECT_EQ(children(*c, 0, 0), (S{1, 2}));
  EXPECT_EQ(parent(*c, 1, 3), 2);
  EXPECT_DOUBLE_EQ(c->ranks.at(2).init_timing.total, 0.52);
  EXPECT_DOUBLE_EQ(c->ranks.at(2).init_timing.parts.at("bootstrap"), 0.20);
  EXPECT_EQ(log.network.at("node-a").ib_devices, std::vector<std::string>{"mlx5_0:1/IB"});
  EXPECT_EQ(log.network.at("node-a").selected, "IB");
}

TEST(NcclLogParser, CompleteJobInOneStream) { expect_job_2x2(parse_text(job_2x2())); }

TEST(NcclLogParser, PerRankFilesAsSources) {
  LogParser p;
  for (int r = 3; r >= 0; --r) {  // any order of files
    p.add_source("nccl.rank" + std::to_string(r) + ".log");
    p.add_text(job_2x2_rank(r));
  }
  Log log = p.finish();
  EXPECT_EQ(log.sources.size(), 4u);
  expect_job_2x2(log);
}

TEST(NcclLogParser, InterleavedRanks) {
  std::vector<std::vector<std::string>> per;
  for (int r = 0; r < 4; ++r) per.push_back(lines_of(job_2x2_rank(r)));
  std::string mixed;
  for (size_t i = 0; i < per[0].size(); ++i)
    for (int r : {2, 0, 3, 1})
      if (i < per[static_cast<size_t>(r)].size()) mixed += per[static_cast<size_t>(r)][i] + "\n";
  expect_job_2x2(parse_text(mixed));
}

TEST(NcclLogParser, LauncherPrefixes) {
  for (int style = 0; style < 3; ++style) {
    std::string text;
    for (int r = 0; r < 4; ++r)
      for (const auto& l : lines_of(job_2x2_rank(r))) {
        const std::string rs = std::to_string(r);
        if (style == 0) text.append("[1,").append(rs).append("]<stdout>:");  // mpirun --tag-output
        if (style == 1) text.append("Fri Jun 19 08:53:03 2020[1,").append(rs).append("]<stderr>:");
        if (style == 2) text.append(" ").append(rs).append(": ");            // srun --label
        text.append(l).append("\n");
      }
    Log log = parse_text(text);
    expect_job_2x2(log);
    EXPECT_EQ(log.comms[0].ranks.at(3).launcher_rank, 3) << style;
  }
}

TEST(NcclLogParser, ApplicationOutputMixedIn) {
  std::string text = "Epoch 1 loss 2.3\nDDP: I am worker 0 of 4\n" + job_2x2() + "NCCL is great\nThroughput: 5 img/s\n";
  Log log = parse_text(text);
  expect_job_2x2(log);
  EXPECT_TRUE(log.failures.empty());
}

TEST(NcclLogParser, ChunkBoundariesDoNotMatter) {
  const std::string text = job_2x2();
  for (size_t chunk : {1u, 7u, 100u, 4096u}) {
    LogParser p;
    p.add_source("x");
    for (size_t i = 0; i < text.size(); i += chunk) p.add_text(std::string_view(text).substr(i, chunk));
    expect_job_2x2(p.finish());
  }
}

TEST(NcclLogParser, SplicedLineSplitsIntoRecords) {
  const std::string line =
      "node-a:100:107 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/Cnode-a:101:108 [1] NCCL INFO Connected all rings";
  LexedLine lx = lex_line(line, 1);
  ASSERT_EQ(lx.records.size(), 2u);
  EXPECT_TRUE(lx.records[0].spliced);
  EXPECT_TRUE(lx.records[0].cut_mid_word);
  // hostnames are [A-Za-z0-9._-]: the lexer cannot tell the "C" of "P2P/CUMEM" from the host ...
  EXPECT_EQ(lx.records[0].msg, "Channel 00/0 : 0[0] -> 1[1] via P2P/");
  EXPECT_EQ(lx.records[1].host, "Cnode-a");
  EXPECT_EQ(lx.records[1].pid, 101);
  EXPECT_EQ(lx.records[1].dev, 1);
  EXPECT_EQ(lx.records[1].msg, "Connected all rings");
  // ... the parser repairs it (a rare host that is junk + a known host), and drops the cut connection
  Log log = parse_text(job_2x2() + line + "\n");
  for (const auto& p : log.processes) EXPECT_NE(p.host, "Cnode-a");
  for (const auto& e : log.comms.at(0).connections) EXPECT_NE(e.via, "P2P/");
}

TEST(NcclLogParser, SpliceDamagedHostnameIsRepaired) {
  std::string text = job_2x2();
  text += "junknode-b:200:207 [0] NCCL INFO Connected all trees\n";  // text glued in front of a host
  text += "node-a:100:107 [0] NCCL INFO cudaDriverVersion 12040\n";
  text += "nod-a:100:107 [0] NCCL INFO Connected all trees\n";      // a piece taken out of the middle
  Log log = parse_text(text);
  EXPECT_EQ(log.network.size(), 2u);
  std::set<std::string> hosts;
  for (const auto& p : log.processes) hosts.insert(p.host);
  EXPECT_EQ(hosts, (std::set<std::string>{"node-a", "node-b"}));
}

TEST(NcclLogParser, TruncatedLastLine) {
  std::string text = job_2x2() + "node-a:100:107 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CU";
  Log log = parse_text(text);
  expect_job_2x2(log);
  EXPECT_EQ(log.spliced_records, 0u);
  for (const auto& e : log.comms.at(0).connections) EXPECT_NE(e.via, "P2P/CU");
}

TEST(NcclLogParser, EmptyInput) {
  Log log = parse_text("");
  EXPECT_EQ(log.lines, 0u);
  EXPECT_EQ(log.nccl_records, 0u);
  EXPECT_TRUE(log.comms.empty());
  EXPECT_TRUE(find_diag(diagnose(log), "no-nccl-output"));
}

TEST(NcclLogParser, BinaryGarbage) {
  std::mt19937 rng(7);
  std::string junk(1 << 16, '\0');
  for (auto& ch : junk) ch = static_cast<char>(rng() & 0xff);
  junk += " NCCL INFO :1:2 [x] NCCL WARN \n:::: [0] NCCL INFO\n[1,]<stdout>:\n99999999999999999999:1:1 [0] NCCL INFO Trees [0] -1->";
  Log log = parse_text(junk);
  EXPECT_TRUE(log.comms.empty() || log.comms[0].nranks < 0);
  (void)text_report(log, diagnose(log));  // and the writers cope too
  (void)json_report(log, diagnose(log)).dump();
}

TEST(NcclLogParser, CrashedJob) {
  // rank 1 dies during init: its last lines are a WARN and error traces; no Init COMPLETE anywhere.
  std::string text;
  for (int r = 0; r < 2; ++r) {
    std::string all = job_2x2_rank(r);
    text += all.substr(0, all.find("Connected all rings"));
    text.erase(text.rfind('\n') + 1);
  }
  text += "\nnode-a:101:108 [1] transport/net_ib.cc:1234 NCCL WARN NET/IB : Got completion with error 12, opcode 1\n";
  text += "node-a:101:108 [1] NCCL INFO transport/net.cc:783 -> 2\n";
  text += "node-a:101:108 [1] NCCL INFO init.cc:1263 -> 2\n";
  text += "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:121, unhandled system error, NCCL version 2.20.5\n";
  Log log = parse_text(text);
  ASSERT_EQ(log.comms.size(), 1u);
  for (const auto& [r, ri] : log.comms[0].ranks) EXPECT_FALSE(ri.init_complete);
  EXPECT_EQ(log.warn_count, 1);
  EXPECT_EQ(log.warnings.at(0).where, std::vector<std::string>{"rank 1 (node-a[1])"});
  EXPECT_EQ(log.error_traces.at(2), 2);
  ASSERT_EQ(log.failures.size(), 1u);
  EXPECT_EQ(log.failures[0].result, 2);
  auto ds = diagnose(log);
  ASSERT_TRUE(find_diag(ds, "system-error"));
  EXPECT_TRUE(find_diag(ds, "missing-ranks"));  // ranks 2 and 3 never printed
}

TEST(NcclLogParser, Format24RingAndTrees) {
  const std::string p0 = "h:1:2 [0] NCCL INFO ", p1 = "h:3:4 [1] NCCL INFO ";
  std::string t = "NCCL version 2.4.8+cuda10.1\n";
  t += p0 + "Channel 00 :    0   1\n" + p0 + "Ring 00 : 0[0] -> 1[1] via P2P/IPC\n" + p1 + "Ring 00 : 1[1] -> 0[0] via P2P/IPC\n";
  t += p0 + "Trees [0] -1->0->1/-1/-1\n" + p1 + "Trees [0] 0->1->-1/-1/-1\n";
  t += p0 + "comm 0x7f1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE\n";
  t += p1 + "comm 0x7f2 rank 1 nranks 2 cudaDev 1 nvmlDev 1 - Init COMPLETE\n";
  Log log = parse_text(t);
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->versions, std::vector<std::string>{"2.4.8+cuda10.1"});
  EXPECT_EQ(ring(*c, 0), (V{0, 1}));
  EXPECT_EQ(via(*c, 0, 1, 0), "P2P/IPC");
  EXPECT_EQ(children(*c, 0, 0), S{1});
  EXPECT_EQ(parent(*c, 0, 1), 0);
  EXPECT_EQ(c->ranks.at(1).nvml_dev, 1);
}

TEST(NcclLogParser, Format24NetConnectionsWithoutBrackets) {
  std::string t = "a:1:2 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/IB/0\n"
                  "a:1:2 [0] NCCL INFO Ring 00 : 0 -> 1 [send] via NET/IB/0\n"
                  "a:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE\n"
                  "b:1:2 [0] NCCL INFO Ring 00 : 0 -> 1 [receive] via NET/IB/0\n"
                  "b:1:2 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE\n";
  Log log = parse_text(t);
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->nnodes, 2);  // pids repeat on two hosts (containers): still two processes
  ASSERT_EQ(c->connections.size(), 2u);
  EXPECT_EQ(via(*c, 0, 0, 1), "NET/IB/0");
  EXPECT_TRUE(c->connections[0].send_seen || c->connections[1].send_seen);
  for (const auto& e : c->connections) EXPECT_EQ(e.net, "IB");
}

TEST(NcclLogParser, DualTreeLayout) {
  std::string t = "h:1:2 [1] NCCL INFO Trees [0] 2/4/-1->1->0|0->1->2/4/-1 [1] -1/-1/-1->1->2|2->1->-1/-1/-1\n";
  Log log = parse_text(t);
  ASSERT_EQ(log.comms.size(), 1u);
  const Communicator& c = log.comms[0];
  EXPECT_EQ(parent(c, 0, 1), 0);
  EXPECT_EQ(children(c, 0, 1), (S{2, 4}));
  EXPECT_EQ(parent(c, 1, 1), 2);
  EXPECT_NE(c.version_inferred.find("2.5-2.7"), std::string::npos);
}

TEST(NcclLogParser, GraphRingLinesAreNotConnections) {
  std::string t;
  for (int r = 0; r < 3; ++r)
    t += "h:" + std::to_string(10 + r) + ":1 [" + std::to_string(r) + "] NCCL INFO comm 0x" + std::to_string(r + 1) + " rank " +
         std::to_string(r) + " nRanks 3 nNodes 1 localRanks 3 localRank " + std::to_string(r) + " MNNVL 0\n";
  t += "h:11:1 [1] NCCL INFO Ring 00 : 0 -> 1 -> 2\n";
  t += "h:12:1 [2] NCCL INFO Ring 00 : 1 -> 2 -> 0\n";
  t += "h:12:1 [2] NCCL INFO Tree 0 : 1 -> 2 -> -1/-1/-1\n";  // NCCL_GRAPH tree: up -> rank -> downs
  Log log = parse_text(t);
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->connections.empty());
  EXPECT_EQ(ring(*c, 0), (V{0, 1, 2}));
  EXPECT_TRUE(c->ring_inferred.at(0));
  EXPECT_EQ(parent(*c, 0, 2), 1);
}

TEST(NcclLogParser, CompactRingListAndTimestampedWarn) {
  std::string t = "h:1:1 [0] NCCL INFO comm 0x9 rank 0 nRanks 12 nNodes 1 localRanks 12 localRank 0 MNNVL 0\n"
                  "h:1:1 [0] NCCL INFO Channel 00/24 :  0  1  2  3  4  5  6  7  8  9 10 11\n"
                  "\n[2025-01-30 12:34:56] h:1:1 [0] init.cc:1 (ncclCommInitRank) NCCL WARN something odd\n";
  Log log = parse_text(t);
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->channels, 24);
  EXPECT_EQ(ring(*c, 0).size(), 12u);
  EXPECT_EQ(log.warn_count, 1);
  EXPECT_EQ(log.warnings.at(0).location, "init.cc:1");
  EXPECT_EQ(log.warnings.at(0).example, "something odd");
}

TEST(NcclLogParser, WrappedTreesLine) {
  std::string t = "h:1:1 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1\n"
                  "[2] 1/-1/-1->0->-1 [3] 1/-1/-1->0->-1\n"
                  "h:1:1 [0] NCCL INFO comm 0x9 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n";
  Log log = parse_text(t);
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->trees.size(), 4u);
  EXPECT_EQ(children(*c, 3, 0), S{1});
}

TEST(NcclLogParser, CollAndTuningLines) {
  std::string p = "h:1:1 [0] NCCL INFO ";
  std::string t = p + "comm 0x5 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x77 - Init COMPLETE\n";
  for (int i = 0; i < 3; ++i)
    t += p + "AllReduce: opCount " + std::to_string(i) + " sendbuff 0x1 recvbuff 0x2 count 1048576 datatype 9 op 0 root 0 comm 0x5 [nranks=2] stream 0x3\n" +
         p + "AllReduce: 2097152 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}\n";
  t += p + "Broadcast: opCount 3 sendbuff 0x1 recvbuff 0x2 count 8 datatype 4 op 0 root 1 comm 0x5 [nranks=2] stream 0x3\n";
  Log log = parse_text(t);
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->colls.size(), 2u);
  EXPECT_EQ(c->colls[0].op, "AllReduce");
  EXPECT_EQ(c->colls[0].calls, 3);
  EXPECT_EQ(c->colls[0].bytes, 2097152u);  // bfloat16
  EXPECT_EQ(c->colls[1].bytes, 64u);       // int64
  ASSERT_EQ(c->tuning.size(), 1u);
  EXPECT_EQ(c->tuning[0].op, "AllReduce");
  EXPECT_EQ(c->tuning[0].algo, "RING");
  EXPECT_EQ(c->tuning[0].proto, "SIMPLE");
  EXPECT_EQ(c->collectives_last_opcount.at("0x5"), 3);
}

TEST(NcclLogParser, TwoCommunicatorsInOneProcess) {
  std::string t = job_2x2();
  std::string second = job_2x2();
  for (size_t at; (at = second.find("0xabcdef0123456789")) != std::string::npos;) second.replace(at, 18, "0x1111111111111111");
  for (size_t at; (at = second.find("0x55500000000")) != std::string::npos;) second.replace(at, 13, "0x66600000000");
  Log log = parse_text(t + second);
  ASSERT_EQ(log.comms.size(), 2u);
  EXPECT_EQ(log.comms[0].id, "0xabcdef0123456789");
  EXPECT_EQ(log.comms[1].id, "0x1111111111111111");
  EXPECT_EQ(log.comms[1].ranks.size(), 4u);
  EXPECT_EQ(log.comms[1].connections.size(), 8u);
}

TEST(NcclLogParser, TwoCommunicatorsWithoutCommId) {  // 2.7: grouped by order of creation per process
  std::string one;
  for (int r = 0; r < 2; ++r)
    one += "h:" + std::to_string(r + 1) + ":9 [" + std::to_string(r) + "] NCCL INFO Channel 00 : " + std::to_string(r) + "[0] -> " +
           std::to_string(1 - r) + "[0] via P2P/IPC\n" + "h:" + std::to_string(r + 1) + ":9 [" + std::to_string(r) +
           "] NCCL INFO comm 0x" + std::to_string(r) + " rank " + std::to_string(r) + " nranks 2 cudaDev " + std::to_string(r) +
           " busId 1000 - Init COMPLETE\n";
  std::string two = one;
  for (size_t at; (at = two.find("P2P/IPC")) != std::string::npos;) two.replace(at, 7, "SHM/xxx");
  for (size_t at; (at = two.find("comm 0x")) != std::string::npos;) two.replace(at, 7, "comm 0y");
  for (size_t at; (at = two.find("comm 0y")) != std::string::npos;) two.replace(at, 7, "comm 0xf");
  Log log = parse_text(one + two);
  ASSERT_EQ(log.comms.size(), 2u);
  EXPECT_EQ(via(log.comms[0], 0, 0, 1), "P2P/IPC");
  EXPECT_EQ(via(log.comms[1], 0, 0, 1), "SHM/xxx");
}

TEST(NcclLogParser, GzipAndPlainFilesAndErrors) {
  hpdt::test::TempDir dir;
  const std::string text = job_2x2();
  {
    gzFile f = gzopen(dir.file("nccl.log.gz").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
    gzclose(f);
  }
  expect_job_2x2(read_logs({dir.file("nccl.log.gz")}));
  std::ofstream(dir.file("plain.log")) << text;
  expect_job_2x2(read_logs({dir.file("plain.log")}));
  HPDT_EXPECT_THROW_MSG(read_logs({dir.file("missing.log")}), "missing.log");
  HPDT_EXPECT_THROW_MSG(read_logs({dir.path()}), "is a directory");
  std::ofstream(dir.file("broken.gz"), std::ios::binary) << std::string("\x1f\x8b\x08\x00garbage", 11);
  EXPECT_THROW(read_logs({dir.file("broken.gz")}), std::exception);
}

}  // namespace
}  // namespace hpdt::nccl_log::test
