// Synthetic NCCL_DEBUG logs written by this project in NCCL's formats (docs: ../shared/nccl_logs/GRAMMAR.md),
// one construct each, so the parser is tested without the third-party corpus.
#pragma once

#include <string>

namespace hpdt::nccl_log::test {

// A complete 2-node x 2-GPU job in the 2.20 layout: one line list per rank, rank order 0..3.
// ranks 0,1 on node-a (pids 100,101), ranks 2,3 on node-b (pids 200,201); IB with GDRDMA between
// nodes, P2P/CUMEM/read inside; 2 channels, ring 0 1 2 3, tree root 0 -> {1, 2}, 2 -> 3.
std::string job_2x2(const std::string& version = "2.20.5+cuda12.4");

// The lines of one rank of job_2x2 (rank 0..3), for per-rank files and interleaving tests.
std::string job_2x2_rank(int rank, const std::string& version = "2.20.5+cuda12.4");

}  // namespace hpdt::nccl_log::test
