#include "synthetic.h"

#include <string>

namespace hpdt::nccl_log::test {

namespace {
const char* kHosts[] = {"node-a", "node-a", "node-b", "node-b"};
const int kPids[] = {100, 101, 200, 201};
const char* kBus[] = {"1b000", "43000", "1b000", "43000"};
}  // namespace

std::string job_2x2_rank(int r, const std::string& version) {
  const int dev = r % 2;
  const std::string p = std::string(kHosts[r]) + ":" + std::to_string(kPids[r]) + ":" + std::to_string(kPids[r] + 7) + " [" +
                        std::to_string(dev) + "] NCCL INFO ";
  const std::string comm = "0x55500000000" + std::to_string(r);
  const std::string rs = std::to_string(r);
  std::string s;
  s += p + "NCCL version " + version + "\n";
  s += p + "cudaDriverVersion 12040\n";
  s += p + "Bootstrap : Using ib0:10.0.0." + std::to_string(r / 2 + 1) + "<0>\n";
  s += p + "NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0." + std::to_string(r / 2 + 1) + "<0>\n";
  s += p + "Using network IB\n";
  s += p + "comm " + comm + " rank " + rs + " nranks 4 cudaDev " + std::to_string(dev) + " nvmlDev " + std::to_string(dev) +
       " busId " + kBus[r] + " commId 0xabcdef0123456789 - Init START\n";
  s += p + "GPU Direct RDMA Enabled for GPU " + kBus[r] + " / HCA 0 (distance 3 <= 4), read 1\n";
  s += p + "comm " + comm + " rank " + rs + " nRanks 4 nNodes 2 localRanks 2 localRank " + std::to_string(dev) + " MNNVL 0\n";
  if (r == 0) {
    s += p + "Channel 00/02 :    0   1   2   3\n";
    s += p + "Channel 01/02 :    0   1   2   3\n";
  }
  // tree: 0 root with children 1 and 2; 2 -> 3 (2.8+ layout: children -> rank -> parent)
  static const char* kTrees[] = {"1/2/-1->0->-1", "-1/-1/-1->1->0", "3/-1/-1->2->0", "-1/-1/-1->3->2"};
  s += p + "Trees [0] " + kTrees[r] + " [1] " + kTrees[r] + "\n";
  s += p + "P2P Chunksize set to 131072\n";
  const int next = (r + 1) % 4, prev = (r + 3) % 4;
  for (int ch = 0; ch < 2; ++ch) {
    const std::string c = "Channel 0" + std::to_string(ch) + "/0 : ";
    if (r == 0 || r == 2) {  // same node: P2P to next
      s += p + c + rs + "[" + std::to_string(dev) + "] -> " + std::to_string(next) + "[" + std::to_string(next % 2) +
           "] via P2P/CUMEM/read\n";
    } else {  // 1 -> 2 and 3 -> 0 cross nodes
      s += p + c + rs + "[" + std::to_string(dev) + "] -> " + std::to_string(next) + "[" + std::to_string(next % 2) +
           "] [send] via NET/IB/0/GDRDMA\n";
    }
    if (r == 0 || r == 2) {  // receivers of the cross-node hops
      s += p + c + std::to_string(prev) + "[" + std::to_string(prev % 2) + "] -> " + rs + "[" + std::to_string(dev) +
           "] [receive] via NET/IB/0/GDRDMA\n";
    }
  }
  s += p + "Connected all rings\n";
  s += p + "Connected all trees\n";
  s += p + "threadThresholds 8/8/64 | 32/8/64 | 512 | 512\n";
  s += p + "2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer\n";
  s += p + "comm " + comm + " rank " + rs + " nranks 4 cudaDev " + std::to_string(dev) + " nvmlDev " + std::to_string(dev) +
       " busId " + kBus[r] + " commId 0xabcdef0123456789 - Init COMPLETE\n";
  s += p + "Init timings: rank " + rs + " nranks 4 total 0.5" + rs + " (kernels 0.10, bootstrap 0.20, allgathers 0.01, topo 0.10, graphs 0.01, connections 0.08, rest 0.00)\n";
  return s;
}

std::string job_2x2(const std::string& version) {
  std::string s;
  for (int r = 0; r < 4; ++r) s += job_2x2_rank(r, version);
  return s;
}

}  // namespace hpdt::nccl_log::test
