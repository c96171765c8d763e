// Every log of the real corpus (../shared/nccl_logs, third-party data read at test time) against
// the answer key in its INDEX.md, field by field, including the traps the index points out.
#include <gtest/gtest.h>

#include "corpus_helpers.h"

namespace hpdt::nccl_log::test {
namespace {

using V = std::vector<int>;
using S = std::set<int>;
using Strs = std::vector<std::string>;

TEST(Corpus, Log001_v248_ib_warn_spam_tagged) {
  HPDT_LOAD_CORPUS(log, "001_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(log.bare_banners, Strs{"2.4.8+cuda10.1"});  // bare, behind a [1,0]<stdout>: tag
  EXPECT_EQ(c->versions, Strs{"2.4.8+cuda10.1"});
  EXPECT_EQ(c->nranks, 8);
  EXPECT_EQ(c->nnodes, 2);
  EXPECT_EQ(rank_list(*c), iota_vec(0, 8));
  const long pids[] = {25, 27, 29, 30, 175, 177, 179, 180};
  for (int r = 0; r < 8; ++r) {
    const RankInfo& ri = c->ranks.at(r);
    EXPECT_EQ(ri.host, r < 4 ? "tf2-horovod-w4gnl" : "tf2-horovod-0") << r;
    EXPECT_EQ(ri.cuda_dev, r % 4) << r;
    EXPECT_EQ(ri.pid, pids[r]) << r;
    EXPECT_TRUE(ri.init_complete) << r;
    EXPECT_EQ(ri.launcher_rank, r) << r;
  }
  EXPECT_EQ(log.network.at("tf2-horovod-w4gnl").ib_devices, Strs{"mlx5_3:1/IB"});
  EXPECT_EQ(log.network.at("tf2-horovod-0").ib_devices, Strs{"mlx5_2:1/IB"});
  EXPECT_EQ(log.network.at("tf2-horovod-w4gnl").bootstrap_ifs.size(), 2u);
  EXPECT_EQ(c->channels, 1);
  EXPECT_EQ(ring(*c, 0), (V{0, 1, 6, 7, 4, 5, 2, 3}));
  EXPECT_EQ(via(*c, 0, 0, 1), "P2P/IPC");
  EXPECT_EQ(via(*c, 0, 1, 6), "NET/IB/0");
  EXPECT_EQ(via(*c, 0, 6, 7), "P2P/IPC");
  EXPECT_EQ(via(*c, 0, 7, 4), "direct shared memory");
  EXPECT_EQ(via(*c, 0, 4, 5), "P2P/IPC");
  EXPECT_EQ(via(*c, 0, 5, 2), "NET/IB/0");
  EXPECT_EQ(via(*c, 0, 2, 3), "P2P/IPC");
  EXPECT_EQ(via(*c, 0, 3, 0), "direct shared memory");
  // 2.4 tree layout up->rank->downs: root 2 with children 3 and 6; 3->0->1; 6->7->4->5
  EXPECT_EQ(parent(*c, 0, 2), -1);
  EXPECT_EQ(children(*c, 0, 2), (S{3, 6}));
  EXPECT_EQ(children(*c, 0, 3), S{0});
  EXPECT_EQ(children(*c, 0, 0), S{1});
  EXPECT_EQ(children(*c, 0, 6), S{7});
  EXPECT_EQ(children(*c, 0, 7), S{4});
  EXPECT_EQ(children(*c, 0, 4), S{5});
  EXPECT_EQ(via(*c, 0, 2, 6), "NET/IB/0");
  // 144 benign WARN lines, 18 per rank (9 + 9)
  EXPECT_EQ(log.warn_count, 144);
  ASSERT_EQ(log.warnings.size(), 2u);
  for (const auto& w : log.warnings) {
    EXPECT_EQ(w.count, 72);
    EXPECT_EQ(w.where.size(), 8u);
    for (int n : w.where_count) EXPECT_EQ(n, 9);
  }
  EXPECT_EQ(log.warnings[0].location, "misc/ibvwrap.cc:212");
  EXPECT_EQ(log.warnings[0].example, "Call to ibv_open_device failed");
  auto ds = diagnose(log);
  EXPECT_FALSE(find_diag(ds, "system-error"));
  EXPECT_FALSE(find_diag(ds, "socket-with-ib"));
  EXPECT_FALSE(find_diag(ds, "missing-ranks"));
}

TEST(Corpus, Log002_v248_socket_no_banner) {
  HPDT_LOAD_CORPUS(log, "002_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->versions.empty());  // the banner is not in the excerpt
  EXPECT_NE(c->version_inferred.find("2.4"), std::string::npos) << c->version_inferred;
  EXPECT_EQ(c->nranks, 8);
  EXPECT_EQ(c->nnodes, 2);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(c->ranks.at(r).host, r < 4 ? "tf2-horovod-6qtzt" : "tf2-horovod-0");
    EXPECT_TRUE(c->ranks.at(r).init_complete);
  }
  EXPECT_TRUE(log.network.at("tf2-horovod-0").ib_no_device);
  EXPECT_EQ(log.network.at("tf2-horovod-0").selected, "Socket");
  EXPECT_EQ(c->channels, 1);
  EXPECT_EQ(ring(*c, 0), (V{0, 1, 2, 3, 4, 5, 6, 7}));
  const char* vias[] = {"P2P/IPC", "direct shared memory", "P2P/IPC", "NET/Socket/0",
                        "P2P/IPC", "direct shared memory", "P2P/IPC", "NET/Socket/0"};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(via(*c, 0, r, (r + 1) % 8), vias[r]) << r;
  EXPECT_EQ(parent(*c, 0, 0), -1);
  EXPECT_EQ(children(*c, 0, 0), (S{1, 4}));
  EXPECT_EQ(children(*c, 0, 1), S{2});
  EXPECT_EQ(children(*c, 0, 2), S{3});
  EXPECT_EQ(children(*c, 0, 4), S{5});
  EXPECT_EQ(children(*c, 0, 6), S{7});
  EXPECT_EQ(via(*c, 0, 0, 4), "NET/Socket/0");
  EXPECT_EQ(log.warn_count, 0);  // `include/net.h:19 -> 2` is an INFO trace, not a WARN
  EXPECT_GT(log.error_traces.at(2), 0);
  EXPECT_FALSE(find_diag(diagnose(log), "system-error"));
}

TEST(Corpus, Log004_v248_ofi_doc_excerpt) {
  HPDT_LOAD_CORPUS(log, "004_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->versions, Strs{"2.4.8+cuda10.0"});
  EXPECT_EQ(c->nranks, 16);
  EXPECT_EQ(rank_list(*c), iota_vec(1, 16));  // rank 0's Init COMPLETE was elided
  for (int r = 1; r < 16; ++r) {
    EXPECT_EQ(c->ranks.at(r).host, r < 8 ? "ip-172-31-41-105" : "ip-172-31-41-36");
    EXPECT_TRUE(c->ranks.at(r).init_complete);
  }
  EXPECT_EQ(log.nccl_tests_nranks, 16);
  EXPECT_EQ(log.nccl_tests_hosts, (Strs{"ip-172-31-41-105", "ip-172-31-41-36"}));
  const auto& plugins = log.network.at("ip-172-31-41-105").plugins;
  EXPECT_NE(std::find(plugins.begin(), plugins.end(), "aws-ofi-nccl provider efa"), plugins.end());
  bool tree_env = false;
  for (const auto& p : log.processes) tree_env |= p.env.count("NCCL_TREE_THRESHOLD") && p.env.at("NCCL_TREE_THRESHOLD") == "0";
  EXPECT_TRUE(tree_env);
  EXPECT_TRUE(c->connections.empty());
  EXPECT_TRUE(c->rings.empty());
  EXPECT_TRUE(log.failures.empty());  // the doc's "some output truncated" line is not NCCL output
  auto d = find_diag(diagnose(log), "missing-ranks");
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->summary.find("1 of 16"), std::string::npos) << d->summary;
}

TEST(Corpus, Log005_v278_indented_one_host) {
  HPDT_LOAD_CORPUS(log, "005_");
  EXPECT_EQ(log.bare_banners, Strs{"2.7.8+cuda11.0"});  // indented by 4 spaces
  ASSERT_EQ(log.processes.size(), 8u);
  std::set<long> pids;
  std::set<int> devs;
  for (const auto& p : log.processes) {
    EXPECT_EQ(p.host, "ip-172-31-70-88");
    pids.insert(p.pid);
    devs.insert(p.devs.begin(), p.devs.end());
  }
  EXPECT_EQ(*pids.begin(), 18546);
  EXPECT_EQ(*pids.rbegin(), 18556);
  EXPECT_EQ(devs, (S{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(log.nccl_tests_nranks, 16);
  EXPECT_EQ(log.nccl_tests_hosts.size(), 2u);
  const NetInfo& n = log.network.at("ip-172-31-70-88");
  EXPECT_EQ(n.selected, "AWS Libfabric");
  EXPECT_EQ(n.bootstrap_ifs.size(), 4u);
  for (const auto& c : log.comms) EXPECT_TRUE(c.rings.empty() && c.trees.empty());
  EXPECT_EQ(log.warn_count, 0);
  EXPECT_TRUE(find_diag(diagnose(log), "missing-ranks"));
}

void check_nccltests_2node(const Log& log, const std::string& comm_id, bool gdr) {
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->versions, Strs{"2.16.5+cuda11.8"});
  EXPECT_EQ(c->id, comm_id);
  EXPECT_EQ(c->nranks, 2);
  EXPECT_EQ(c->nnodes, 2);
  ASSERT_EQ(rank_list(*c), (V{0, 1}));
  EXPECT_EQ(c->ranks.at(0).host, "n013");
  EXPECT_EQ(c->ranks.at(1).host, "n014");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(c->ranks.at(r).bus_id, "81000");
    EXPECT_EQ(c->ranks.at(r).cuda_dev, 0);
    EXPECT_TRUE(c->ranks.at(r).init_complete);
    EXPECT_EQ(c->ranks.at(r).coll_channels, 2);
    EXPECT_EQ(c->ranks.at(r).p2p_channels, 2);
  }
  EXPECT_EQ(log.network.at("n013").ib_devices, Strs{"mlx5_2:1/IB"});
  EXPECT_EQ(c->channels, 2);
  EXPECT_EQ(ring(*c, 0), (V{0, 1}));
  EXPECT_EQ(parent(*c, 0, 0), -1);
  EXPECT_EQ(children(*c, 0, 0), S{1});
  EXPECT_EQ(parent(*c, 1, 1), -1);  // ch1 has 1 as the root
  const std::string v = gdr ? "NET/IB/0/GDRDMA" : "NET/IB/0";
  for (int ch = 0; ch < 2; ++ch) {
    EXPECT_EQ(via(*c, ch, 0, 1), v);
    EXPECT_EQ(via(*c, ch, 1, 0), v);
  }
  for (const auto& e : c->connections) {
    EXPECT_EQ(e.gdrdma, gdr);
    EXPECT_EQ(e.net, "IB");
    EXPECT_TRUE(e.send_seen && e.receive_seen);  // both ends printed it
  }
  EXPECT_EQ(log.warn_count, 0);
  EXPECT_EQ(log.nccl_tests_library, "2.16.5");
}

TEST(Corpus, Log007_v2165_ib_gdrdma) {
  HPDT_LOAD_CORPUS(log, "007_");
  check_nccltests_2node(log, "0x2ee226cbbb3e2340", true);
  EXPECT_GT(log.network.at("n013").gdr_enabled_lines, 0);
  EXPECT_FALSE(find_diag(diagnose(log), "gdr-off"));
}

TEST(Corpus, Log008_v2165_ib_no_gdr) {
  HPDT_LOAD_CORPUS(log, "008_");
  check_nccltests_2node(log, "0x277abd6b04d86d92", false);
  EXPECT_GT(log.network.at("n013").gdr_disabled_lines, 0);
  auto d = find_diag(diagnose(log), "gdr-off");
  ASSERT_TRUE(d.has_value());
  ASSERT_FALSE(d->evidence.empty());
  EXPECT_NE(d->evidence[0].find("distance 6 > 4"), std::string::npos);
}

TEST(Corpus, Log010_v219_spliced_subsys_all) {
  HPDT_LOAD_CORPUS(log, "010_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->versions.empty());
  EXPECT_NE(c->version_inferred.find("2.19"), std::string::npos) << c->version_inferred;
  EXPECT_EQ(c->hosts, Strs{"c0b58536a5f1"});  // splices glue junk to hostnames; they are undone
  EXPECT_EQ(c->nranks, 4);
  ASSERT_EQ(rank_list(*c), iota_vec(0, 4));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(c->ranks.at(r).pid, 324666 + r);
    EXPECT_EQ(c->ranks.at(r).cuda_dev, r);
  }
  EXPECT_EQ(c->channels, 16);
  for (int ch = 0; ch < 16; ++ch) EXPECT_EQ(ring(*c, ch), (V{0, 1, 2, 3})) << ch;
  for (int ch = 0; ch < 15; ++ch) {  // [15] is cut off by a splice
    EXPECT_EQ(parent(*c, ch, 3), 2) << ch;
    EXPECT_TRUE(children(*c, ch, 3).empty());
  }
  const NetInfo& n = log.network.at("c0b58536a5f1");
  EXPECT_EQ(n.selected, "Socket");
  EXPECT_TRUE(n.ib_no_device);
  auto has = [&](const char* s) {
    for (const auto& p : n.plugins)
      if (p.find(s) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has("NCCL RDMA Plugin"));
  EXPECT_TRUE(has("SHARP"));
  EXPECT_TRUE(has("IBext"));
  EXPECT_GT(log.spliced_records, 0u);
  EXPECT_TRUE(c->connections.empty());
  EXPECT_EQ(log.warn_count, 0);
}

void check_rank0_of_2(const Log& log, long pid) {
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->versions, Strs{"2.20.5+cuda12.4"});
  EXPECT_EQ(c->nranks, 2);
  EXPECT_EQ(c->nnodes, 1);
  ASSERT_EQ(rank_list(*c), V{0});
  const RankInfo& r0 = c->ranks.at(0);
  EXPECT_EQ(r0.host, "2e194b931ff6");
  EXPECT_EQ(r0.pid, pid);
  EXPECT_EQ(r0.cuda_dev, 0);
  EXPECT_EQ(r0.bus_id, "4f000");
  EXPECT_EQ(r0.local_ranks, 2);
  EXPECT_TRUE(r0.init_start && r0.init_complete && r0.aborted);
  EXPECT_EQ(r0.coll_channels, 2);
  EXPECT_EQ(r0.collnet_channels, 0);
  EXPECT_EQ(r0.nvls_channels, 0);
  EXPECT_EQ(r0.p2p_channels, 2);
  EXPECT_EQ(c->channels, 2);
  EXPECT_EQ(ring(*c, 0), (V{0, 1}));
  EXPECT_EQ(parent(*c, 0, 0), -1);
  EXPECT_EQ(children(*c, 0, 0), S{1});
  EXPECT_EQ(via(*c, 0, 0, 1), "SHM/direct/direct");
  EXPECT_EQ(log.warn_count, 0);
  EXPECT_TRUE(c->aborted);
  EXPECT_TRUE(find_diag(diagnose(log), "missing-ranks"));  // rank 1's file is not here
}

TEST(Corpus, Log011_v2205_coll_call_tuning) {
  HPDT_LOAD_CORPUS(log, "011_");
  check_rank0_of_2(log, 18226);
  const Communicator& c = log.comms[0];
  EXPECT_EQ(c.id, "0x55a8f3e7dd0eacd6");
  ASSERT_EQ(c.colls.size(), 1u);  // NCCL CALL lines (no [dev]) are not collectives
  EXPECT_EQ(c.colls[0].op, "AllReduce");
  EXPECT_EQ(c.colls[0].calls, 11);
  EXPECT_EQ(c.colls[0].count, 10u);
  EXPECT_EQ(c.colls[0].datatype, 7);
  EXPECT_EQ(c.colls[0].redop, 0);
  EXPECT_EQ(c.colls[0].bytes, 40u);
  ASSERT_EQ(c.tuning.size(), 1u);
  EXPECT_EQ(c.tuning[0].bytes, 40u);
  EXPECT_EQ(c.tuning[0].algo, "Ring");
  EXPECT_EQ(c.tuning[0].proto, "LL");
  EXPECT_EQ(c.tuning[0].calls, 11);
  EXPECT_EQ(c.collectives_last_opcount.begin()->second, 0xa);  // opCount is hex
}

TEST(Corpus, Log012_v2205_abort_after_opcount3) {
  HPDT_LOAD_CORPUS(log, "012_");
  check_rank0_of_2(log, 15263);
  const Communicator& c = log.comms[0];
  ASSERT_EQ(c.colls.size(), 2u);
  EXPECT_EQ(c.colls[0].count, 10u);
  EXPECT_EQ(c.colls[0].datatype, 7);
  EXPECT_EQ(c.colls[0].calls, 3);
  EXPECT_EQ(c.colls[1].count, 1u);
  EXPECT_EQ(c.colls[1].datatype, 1);
  EXPECT_EQ(c.colls[1].calls, 1);
  EXPECT_EQ(c.collectives_last_opcount.begin()->second, 3);
  auto d = find_diag(diagnose(log), "aborted");
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->summary.find("opCount 3"), std::string::npos) << d->summary;
}

TEST(Corpus, Log014_v2205_socket_interleaved_spliced) {
  HPDT_LOAD_CORPUS(log, "014_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(log.bare_banners, Strs{"2.20.5+cuda12.4"});
  EXPECT_EQ(c->id, "0xb4d6ac1c5ff8674d");
  EXPECT_EQ(c->nranks, 8);
  EXPECT_EQ(c->nnodes, 2);
  EXPECT_EQ(c->nnodes_printed, 2);
  EXPECT_EQ(c->hosts.size(), 2u);  // 9 spliced lines must not invent hosts
  EXPECT_EQ(log.network.size(), 2u);
  const char* bus[] = {"7000", "46000", "85000", "c7000"};
  ASSERT_EQ(rank_list(*c), iota_vec(0, 8));
  for (int r = 0; r < 8; ++r) {
    const RankInfo& ri = c->ranks.at(r);
    EXPECT_EQ(ri.host, r < 4 ? "x3006c0s1b1n0" : "x3006c0s25b0n0") << r;
    EXPECT_EQ(ri.cuda_dev, r % 4);
    EXPECT_EQ(ri.bus_id, bus[r % 4]);
    EXPECT_TRUE(ri.init_start && ri.init_complete && ri.aborted);
    EXPECT_EQ(ri.local_ranks, 4);
    EXPECT_EQ(ri.coll_channels, 4);
    EXPECT_EQ(ri.p2p_per_peer, 2);
    EXPECT_EQ(ri.thread_thresholds, "8/8/64 | 64/8/64 | 512 | 512");
  }
  const NetInfo& n = log.network.at("x3006c0s1b1n0");
  EXPECT_TRUE(n.ib_no_device);
  EXPECT_EQ(n.selected, "Socket");
  EXPECT_EQ(n.socket_ifs.size(), 3u);
  EXPECT_EQ(c->channels, 4);
  EXPECT_EQ(ring(*c, 0), (V{0, 2, 3, 7, 6, 4, 5, 1}));
  EXPECT_EQ(ring(*c, 2), ring(*c, 0));
  EXPECT_EQ(ring(*c, 1), (V{0, 1, 5, 4, 6, 7, 3, 2}));
  EXPECT_EQ(ring(*c, 3), ring(*c, 1));
  for (auto [a, b] : std::vector<std::pair<int, int>>{{0, 2}, {2, 3}, {7, 6}, {6, 4}, {4, 5}, {1, 0}})
    EXPECT_EQ(via(*c, 0, a, b), "P2P/CUMEM/read") << a << "->" << b;
  EXPECT_EQ(via(*c, 0, 3, 7), "NET/Socket/1");
  EXPECT_EQ(via(*c, 0, 5, 1), "NET/Socket/2");
  EXPECT_EQ(parent(*c, 0, 1), -1);
  EXPECT_EQ(children(*c, 0, 1), (S{2, 5}));
  EXPECT_EQ(children(*c, 0, 2), S{3});
  EXPECT_EQ(children(*c, 0, 3), S{0});
  EXPECT_EQ(children(*c, 0, 5), S{6});
  EXPECT_EQ(children(*c, 0, 6), S{7});
  EXPECT_EQ(children(*c, 0, 7), S{4});
  EXPECT_EQ(via(*c, 0, 1, 5), "NET/Socket/2");
  for (const auto& e : c->connections) EXPECT_NE(e.via, "P2P/C") << "a spliced connection line was taken";
  EXPECT_GT(log.spliced_records, 0u);
  EXPECT_EQ(log.warn_count, 0);
}

TEST(Corpus, Log015_v2215_cxi_rings_trees) {
  HPDT_LOAD_CORPUS(log, "015_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->nranks, 8);
  EXPECT_EQ(c->nnodes, 2);
  ASSERT_EQ(rank_list(*c), iota_vec(0, 8));
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(c->ranks.at(r).host, r < 4 ? "nid003981" : "nid004048");
    EXPECT_EQ(c->ranks.at(r).cuda_dev, r % 4);
  }
  EXPECT_EQ(c->channels, 8);
  EXPECT_EQ(ring(*c, 0), (V{0, 1, 2, 3, 7, 6, 5, 4}));
  EXPECT_EQ(ring(*c, 4), ring(*c, 0));
  EXPECT_EQ(ring(*c, 1), (V{0, 4, 5, 6, 7, 3, 2, 1}));
  EXPECT_EQ(ring(*c, 2), (V{0, 3, 1, 5, 4, 7, 6, 2}));
  EXPECT_EQ(ring(*c, 3), (V{0, 3, 2, 6, 4, 7, 5, 1}));
  EXPECT_EQ(parent(*c, 0, 0), -1);
  EXPECT_EQ(children(*c, 0, 0), (S{1, 4}));
  EXPECT_EQ(children(*c, 0, 1), S{2});
  EXPECT_EQ(children(*c, 0, 2), S{3});
  EXPECT_EQ(children(*c, 0, 4), S{5});
  EXPECT_EQ(children(*c, 0, 5), S{6});
  EXPECT_EQ(children(*c, 0, 6), S{7});
  ASSERT_FALSE(c->connections.empty());
  for (const auto& e : c->connections) {
    EXPECT_EQ(e.via, "P2P/CUMEM/read");
    EXPECT_EQ(c->ranks.at(e.src).host, c->ranks.at(e.dst).host);  // intra-node only
  }
  int gdr_env = 0;
  for (const auto& p : log.processes) gdr_env += p.env.count("NCCL_NET_GDR_LEVEL") && p.env.at("NCCL_NET_GDR_LEVEL") == "PHB";
  EXPECT_EQ(gdr_env, 8);
  EXPECT_EQ(log.warn_count, 0);
}

TEST(Corpus, Log016_v2215_ofi_register_mr_system_error) {
  HPDT_LOAD_CORPUS(log, "016_");
  EXPECT_EQ(log.warn_count, 22);
  ASSERT_EQ(log.warnings.size(), 1u);
  const WarningGroup& w = log.warnings[0];
  EXPECT_EQ(w.location, "register_mr_buffers:647");
  EXPECT_NE(w.example.find("NET/OFI Unable to register memory (type = 2)"), std::string::npos);
  std::map<std::string, int> per;  // host[dev] -> count
  for (size_t i = 0; i < w.where.size(); ++i) {
    std::string key = w.where[i];
    size_t open = key.find('(');
    if (open != std::string::npos) key = key.substr(open + 1, key.size() - open - 2);
    per[key] += w.where_count[i];
  }
  std::map<std::string, int> want = {{"nid003981[0]", 4}, {"nid003981[1]", 2}, {"nid003981[2]", 1}, {"nid003981[3]", 4},
                                     {"nid004048[0]", 4}, {"nid004048[1]", 1}, {"nid004048[2]", 2}, {"nid004048[3]", 4}};
  EXPECT_EQ(per, want);
  EXPECT_EQ(log.error_traces.at(2), 29);  // every `file:line -> 2` line
  bool unhandled = false;
  for (const auto& f : log.failures) unhandled |= f.text.find("unhandled system error") != std::string::npos;
  EXPECT_TRUE(unhandled);
  auto d = find_diag(diagnose(log), "system-error");
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->detail.find("register memory"), std::string::npos) << d->detail;  // the cause is named
}

TEST(Corpus, Log017_v278_node0_dualtree) {
  HPDT_LOAD_CORPUS(log, "017_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->versions, Strs{"2.7.8+cuda10.1"});
  EXPECT_EQ(c->nranks, 8);
  ASSERT_EQ(rank_list(*c), iota_vec(0, 4));
  const char* bus[] = {"18000", "1a000", "af000", "b1000"};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(c->ranks.at(r).host, "tesla-105");
    EXPECT_EQ(c->ranks.at(r).bus_id, bus[r]);
    EXPECT_TRUE(c->ranks.at(r).init_complete);
    EXPECT_EQ(c->ranks.at(r).coll_channels, 2);
    EXPECT_EQ(c->ranks.at(r).p2p_per_peer, 1);
    EXPECT_EQ(c->ranks.at(r).thread_thresholds, "8/8/64 | 64/8/64 | 8/8/64");
  }
  EXPECT_EQ(log.warn_count, 4);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_EQ(log.warnings[0].example, "Failed to open libibverbs.so[.1]");
  EXPECT_EQ(log.warnings[0].where.size(), 4u);
  EXPECT_EQ(c->channels, 2);
  EXPECT_EQ(ring(*c, 0), iota_vec(0, 8));
  EXPECT_EQ(ring(*c, 1), iota_vec(0, 8));
  EXPECT_EQ(parent(*c, 0, 0), -1);
  EXPECT_EQ(children(*c, 0, 0), S{1});
  EXPECT_EQ(parent(*c, 0, 1), 0);
  EXPECT_EQ(children(*c, 0, 1), (S{2, 4}));
  EXPECT_EQ(children(*c, 0, 2), S{3});
  EXPECT_EQ(via(*c, 0, 0, 1), "P2P/IPC");
  EXPECT_EQ(via(*c, 0, 1, 2), "direct shared memory");
  EXPECT_EQ(via(*c, 0, 2, 3), "P2P/IPC");
  EXPECT_EQ(via(*c, 0, 3, 4), "NET/Socket/0");
  EXPECT_EQ(via(*c, 0, 7, 0), "NET/Socket/0");
  EXPECT_EQ(via(*c, 0, 1, 4), "NET/Socket/0");
  auto ds = diagnose(log);
  auto m = find_diag(ds, "missing-ranks");
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->summary.find("4-7"), std::string::npos) << m->summary;
  EXPECT_TRUE(find_diag(ds, "socket-with-ib"));  // sockets, libibverbs missing
}

TEST(Corpus, Log017_023_together_make_the_job) {
  std::string why, a = corpus_file("017_", &why), b = corpus_file("023_", &why);
  if (a.empty() || b.empty()) GTEST_SKIP() << why;
  Log log = read_logs({a, b});
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(rank_list(*c), iota_vec(0, 8));
  EXPECT_EQ(c->nnodes, 2);
  EXPECT_EQ(c->versions, Strs{"2.7.8+cuda10.1"});  // only node 0 prints the banner
  // tree ch0: root 0 -> 1 -> {2 -> 3, 4 -> 5 -> 6 -> 7}; ch1: root 4 -> 5 -> {6 -> 7, 0 -> 1 -> 2 -> 3}
  EXPECT_EQ(children(*c, 0, 1), (S{2, 4}));
  EXPECT_EQ(parent(*c, 0, 4), 1);
  EXPECT_EQ(children(*c, 0, 5), S{6});
  EXPECT_EQ(parent(*c, 1, 4), -1);
  EXPECT_EQ(children(*c, 1, 5), (S{6, 0}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(via(*c, 0, r, (r + 1) % 8).empty(), false) << r;
  EXPECT_FALSE(find_diag(diagnose(log), "missing-ranks"));
  EXPECT_FALSE(find_diag(diagnose(log), "ring-crossings"));  // 0..7 crosses twice: the minimum
}

TEST(Corpus, Log018_v2223_nvls_tagged) {
  HPDT_LOAD_CORPUS(log, "018_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->nranks, 16);
  EXPECT_EQ(c->nnodes, 2);
  for (int r : iota_vec(0, 8)) {
    ASSERT_TRUE(c->ranks.count(r)) << r;
    EXPECT_EQ(c->ranks.at(r).host, "test-nccl-worker-0");
    EXPECT_EQ(c->ranks.at(r).cuda_dev, r % 8);
  }
  ASSERT_TRUE(c->ranks.count(15));
  EXPECT_EQ(c->ranks.at(15).host, "test-nccl-worker-1");
  EXPECT_EQ(c->ranks.at(15).cuda_dev, 7);
  ASSERT_EQ(c->nvls_heads.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(c->nvls_heads[static_cast<size_t>(h)], (V{h, h + 8})) << h;
  EXPECT_EQ(c->channels, 16);
  const V ring0{0, 7, 6, 5, 4, 3, 2, 1, 9, 10, 11, 12, 13, 14, 15, 8};
  EXPECT_EQ(ring(*c, 0), ring0);
  EXPECT_EQ(ring(*c, 8), ring0);
  EXPECT_EQ(parent(*c, 0, 0), -1);
  EXPECT_EQ(children(*c, 0, 0), (S{1, 8}));
  for (int r = 1; r < 7; ++r) EXPECT_EQ(children(*c, 0, r), S{r + 1}) << r;
  EXPECT_TRUE(children(*c, 0, 7).empty());
  EXPECT_EQ(parent(*c, 0, 15), 14);
  EXPECT_TRUE(children(*c, 0, 15).empty());
  std::map<std::string, std::string> env;
  for (const auto& p : log.processes) env.insert(p.env.begin(), p.env.end());
  EXPECT_EQ(env["NCCL_BUFFSIZE"], "8388608");
  EXPECT_EQ(env["NCCL_P2P_NET_CHUNKSIZE"], "524288");
  EXPECT_EQ(env["NCCL_NVLS_CHUNKSIZE"], "524288");
  // "16 collnet channels" is a print artifact: no CollNet connection exists
  for (const auto& e : c->connections) EXPECT_NE(e.kind, "COLLNET");
  EXPECT_EQ(log.warn_count, 0);
}

TEST(Corpus, Log020_v2277_single_process_two_gpus) {
  HPDT_LOAD_CORPUS(log, "020_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->versions, Strs{"2.27.7+cuda13.0"});
  EXPECT_EQ(c->id, "0x54fe282d32a87d85");
  EXPECT_EQ(c->nranks, 2);
  EXPECT_EQ(c->nnodes, 1);
  ASSERT_EQ(rank_list(*c), (V{0, 1}));
  EXPECT_EQ(c->ranks.at(0).pid, 64904);
  EXPECT_EQ(c->ranks.at(1).pid, 64904);  // one process, two ranks
  EXPECT_EQ(c->ranks.at(0).bus_id, "17000");
  EXPECT_EQ(c->ranks.at(1).bus_id, "65000");
  EXPECT_EQ(c->ranks.at(1).cuda_dev, 1);
  EXPECT_TRUE(c->ranks.at(0).init_start);
  const NetInfo& n = log.network.at("mew0");
  EXPECT_EQ(n.selected, "IB");
  EXPECT_EQ(n.ib_devices, (Strs{"mlx5_0:1/RoCE", "mlx5_1:1/RoCE"}));
  EXPECT_EQ(n.bootstrap_ifs, Strs{"eno8303:192.168.0.3<0>"});
  EXPECT_EQ(c->channels, 24);
  EXPECT_EQ(ring(*c, 0), (V{0, 1}));
  for (int ch = 0; ch < 24; ++ch) {
    int root = (ch % 12) < 6 ? 0 : 1;
    EXPECT_EQ(parent(*c, ch, root), -1) << ch;
    EXPECT_EQ(children(*c, ch, root), S{1 - root}) << ch;
  }
  EXPECT_TRUE(c->connections.empty());
  EXPECT_EQ(log.warn_count, 0);
}

TEST(Corpus, Log022_no_debug_lines_remote_error) {
  HPDT_LOAD_CORPUS(log, "022_");
  EXPECT_EQ(log.nccl_records, 0u);
  EXPECT_TRUE(log.comms.empty());
  EXPECT_EQ(log.nccl_tests_library, "2.28.7");
  EXPECT_EQ(log.nccl_tests_nranks, 8);
  EXPECT_EQ(log.nccl_tests_hosts, (Strs{"cnode2-001", "cnode2-003"}));
  auto ds = diagnose(log);
  EXPECT_TRUE(find_diag(ds, "no-nccl-output"));
  auto d = find_diag(ds, "remote-error");
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->summary.find("ncclRemoteError"), std::string::npos);
}

TEST(Corpus, Log023_v278_node1_no_banner) {
  HPDT_LOAD_CORPUS(log, "023_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->versions.empty());
  EXPECT_NE(c->version_inferred.find("2.5-2.7"), std::string::npos) << c->version_inferred;
  EXPECT_EQ(c->nranks, 8);
  ASSERT_EQ(rank_list(*c), iota_vec(4, 8));
  const char* bus[] = {"18000", "1a000", "af000", "b1000"};
  for (int r = 4; r < 8; ++r) {
    EXPECT_EQ(c->ranks.at(r).host, "tesla-106");
    EXPECT_EQ(c->ranks.at(r).bus_id, bus[r - 4]);
    EXPECT_EQ(c->ranks.at(r).coll_channels, 2);
  }
  EXPECT_EQ(log.warn_count, 4);
  EXPECT_TRUE(c->rings.empty());  // only rank 0 prints ring lists
  EXPECT_EQ(parent(*c, 0, 4), 1);
  EXPECT_EQ(children(*c, 0, 4), S{5});
  EXPECT_EQ(children(*c, 0, 5), S{6});
  EXPECT_EQ(children(*c, 0, 6), S{7});
  EXPECT_EQ(parent(*c, 1, 4), -1);
  EXPECT_EQ(children(*c, 1, 5), (S{6, 0}));
  for (auto [ch, a, b] : std::vector<std::tuple<int, int, int>>{{0, 3, 4}, {0, 1, 4}, {0, 4, 1}, {0, 7, 0},
                                                                {1, 3, 4}, {1, 0, 5}, {1, 5, 0}, {1, 7, 0}})
    EXPECT_EQ(via(*c, ch, a, b), "NET/Socket/0") << ch << ": " << a << "->" << b;
  EXPECT_EQ(via(*c, 0, 4, 5), "P2P/IPC");
  EXPECT_EQ(via(*c, 0, 6, 7), "P2P/IPC");
  EXPECT_EQ(via(*c, 0, 5, 6), "direct shared memory");
}

TEST(Corpus, Log024_v278_1node_4gpu) {
  HPDT_LOAD_CORPUS(log, "024_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->versions, Strs{"2.7.8+cuda10.1"});
  EXPECT_EQ(c->nranks, 4);
  ASSERT_EQ(rank_list(*c), iota_vec(0, 4));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(c->ranks.at(r).host, "tesla-106");
    EXPECT_TRUE(c->ranks.at(r).init_complete);  // some after application output
    EXPECT_EQ(c->ranks.at(r).coll_channels, 4);
    EXPECT_EQ(c->ranks.at(r).p2p_per_peer, 2);
    EXPECT_EQ(c->ranks.at(r).thread_thresholds, "8/8/64 | 32/8/64 | 8/8/64");
  }
  EXPECT_EQ(log.warn_count, 4);
  EXPECT_EQ(c->channels, 4);
  EXPECT_EQ(ring(*c, 0), (V{0, 1, 2, 3}));
  EXPECT_EQ(ring(*c, 2), (V{0, 1, 2, 3}));
  EXPECT_EQ(ring(*c, 1), (V{0, 3, 2, 1}));
  EXPECT_EQ(ring(*c, 3), (V{0, 3, 2, 1}));
  for (const auto& e : c->connections) {
    bool ipc_pair = (std::min(e.src, e.dst) == 0 && std::max(e.src, e.dst) == 1) ||
                    (std::min(e.src, e.dst) == 2 && std::max(e.src, e.dst) == 3);
    EXPECT_EQ(e.via, ipc_pair ? "P2P/IPC" : "direct shared memory") << e.src << "->" << e.dst;
  }
  EXPECT_EQ(parent(*c, 0, 0), -1);
  EXPECT_EQ(children(*c, 0, 0), S{2});
  EXPECT_EQ(children(*c, 0, 2), S{3});
  EXPECT_EQ(children(*c, 0, 3), S{1});
  EXPECT_TRUE(children(*c, 0, 1).empty());
  auto d = find_diag(diagnose(log), "p2p-disabled");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->severity, "info");
}

TEST(Corpus, Log025_v2103_single_rank_ofi_warn) {
  HPDT_LOAD_CORPUS(log, "025_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->versions, Strs{"2.10.3+cuda11.3"});
  EXPECT_EQ(c->nranks, 1);
  ASSERT_EQ(rank_list(*c), V{0});
  EXPECT_EQ(c->ranks.at(0).host, "7b6059672f82");
  EXPECT_EQ(c->ranks.at(0).pid, 104);
  EXPECT_EQ(c->ranks.at(0).bus_id, "170");
  EXPECT_TRUE(c->ranks.at(0).init_complete);
  EXPECT_EQ(c->ranks.at(0).coll_channels, 32);
  EXPECT_EQ(log.warn_count, 1);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_EQ(log.warnings[0].example, "NET/OFI Only EFA provider is supported");
  EXPECT_EQ(log.warnings[0].location, "ofi_init:1134");
  const NetInfo& n = log.network.at("7b6059672f82");
  EXPECT_TRUE(n.ib_no_device);
  EXPECT_EQ(n.selected, "Socket");
  EXPECT_EQ(n.socket_ifs.size(), 2u);
  EXPECT_EQ(c->channels, 32);
  for (int ch = 0; ch < 32; ++ch) {
    EXPECT_EQ(ring(*c, ch), V{0});
    EXPECT_EQ(parent(*c, ch, 0), -1);
    EXPECT_TRUE(children(*c, ch, 0).empty());
  }
  EXPECT_TRUE(c->connections.empty());
}

TEST(Corpus, Log028_v2223_init_timings) {
  HPDT_LOAD_CORPUS(log, "028_");
  const Communicator* c = only_comm(log);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->id, "0x363ac963d9c3b653");
  EXPECT_EQ(c->nranks, 16);
  EXPECT_EQ(c->nnodes, 2);
  ASSERT_EQ(rank_list(*c), iota_vec(0, 16));  // pids repeat across the two containers
  double lo = 1e9, hi = 0;
  int hi_rank = -1;
  for (int r = 0; r < 16; ++r) {
    const RankInfo& ri = c->ranks.at(r);
    EXPECT_EQ(ri.host, r < 8 ? "test-nccl-worker-0" : "test-nccl-worker-1") << r;
    EXPECT_EQ(ri.cuda_dev, r % 8);
    EXPECT_TRUE(ri.init_complete);
    lo = std::min(lo, ri.init_timing.total);
    if (ri.init_timing.total > hi) hi = ri.init_timing.total, hi_rank = r;
  }
  EXPECT_DOUBLE_EQ(lo, 3.36);
  EXPECT_DOUBLE_EQ(hi, 3.54);
  EXPECT_EQ(hi_rank, 0);
  EXPECT_DOUBLE_EQ(c->ranks.at(0).init_timing.parts.at("bootstrap"), 2.54);
  EXPECT_TRUE(c->nvls_comm);
  EXPECT_NE(c->version_inferred.find("2.22"), std::string::npos) << c->version_inferred;
  EXPECT_EQ(log.warn_count, 0);
}

}  // namespace
}  // namespace hpdt::nccl_log::test
