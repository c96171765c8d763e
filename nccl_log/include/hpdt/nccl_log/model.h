// What a set of NCCL_DEBUG logs says: processes, communicators (ranks, rings, trees, transports),
// network, tuning, collectives, warnings and failures. Built by LogParser (parser.h), read by the
// diagnoses (diagnose.h) and the writers (report.h).
//
// Conventions: -1 means "not in the log" for numbers, "" for strings. Rank numbers are NCCL's.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace hpdt::nccl_log {

// One peer connection as printed by a `Ring NN :`/`Channel NN[/c] :` line (grammar §8), with its
// send/receive twins merged.
struct Connection {
  int channel = -1;
  int conn_index = -1;       // the `/c` after the channel number (2.12+ NET, 2.14+ P2P)
  int src = -1, dst = -1;
  std::string via;           // exactly as logged: "P2P/IPC", "NET/IB/0/GDRDMA", "direct shared memory", ...
  std::string kind;          // "P2P", "SHM", "NET", "COLLNET" or "" (unknown)
  bool gdrdma = false;       // NET with /GDRDMA
  std::string net;           // NET: "IB", "Socket", "AWS Libfabric", ...; else ""
  bool send_seen = false, receive_seen = false;  // which ends printed it (NET lines only)
};

struct TreeLinks {
  int parent = -1;            // -1: root
  std::vector<int> children;  // at most 3
};

struct InitTiming {
  double total = -1;
  std::map<std::string, double> parts;  // kernels, alloc, bootstrap, allgathers, topo, graphs, connections, rest
};

// What one rank of a communicator printed about itself.
struct RankInfo {
  int rank = -1;
  std::string host;
  long pid = -1;
  int cuda_dev = -1, nvml_dev = -1;
  std::string bus_id;         // hex as printed ("81000")
  std::string comm_ptr;       // "0x…"
  int local_rank = -1, local_ranks = -1;
  bool init_start = false, init_complete = false, aborted = false, destroyed = false;
  InitTiming init_timing;
  int coll_channels = -1, nvls_channels = -1, collnet_channels = -1, p2p_channels = -1, p2p_per_peer = -1;
  std::string thread_thresholds;
  int launcher_rank = -1;
};

struct CollStat {             // NCCL_DEBUG_SUBSYS=COLL lines with the same signature
  std::string op;             // AllReduce, Broadcast, ...
  uint64_t count = 0;         // elements
  int datatype = -1, redop = -1;
  uint64_t bytes = 0;         // count * element size (0 when the datatype is unknown)
  int calls = 0;
  std::set<int> ranks;
};

struct TuningChoice {         // TUNING `Bytes -> Algo … proto …` lines with the same decision
  std::string op;             // "" before 2.23 (not printed)
  uint64_t bytes = 0;
  std::string algo, proto;    // names (numeric ids are translated)
  int calls = 0;
};

struct Communicator {
  std::string id;             // commId ("0x…") when logged, else "comm-K" in order of appearance
  bool id_from_log = false;
  std::vector<std::string> versions;    // NCCL versions printed by its processes (banners)
  std::string version_inferred;         // "2.19.x (…)" when no banner names it
  int nranks = -1;                       // from Init lines, nRanks, [nranks=N]; -1 unknown
  int nnodes = -1;                       // printed nNodes, else distinct hosts
  int nnodes_printed = -1;
  std::vector<std::string> hosts;
  std::map<int, RankInfo> ranks;         // ranks that printed something, by rank
  int unknown_rank_contexts = 0;         // processes whose rank could not be told
  int channels = -1;                     // collective channels
  std::string channels_source;           // "channel list", "trees", "coll channels", "connections"
  std::map<int, std::vector<int>> rings; // channel -> ring order starting at rank 0
  std::map<int, bool> ring_inferred;     // channel -> rebuilt from edges, not rank 0's list
  std::map<int, std::map<int, TreeLinks>> trees;  // channel -> rank -> links
  std::vector<Connection> connections;   // sorted by channel, src, dst
  std::vector<std::vector<int>> nvls_heads;       // `NVLS Head h: a b`
  bool nvls_comm = false;                // `NVLS comm … headRank` seen
  std::map<std::string, int> collectives_last_opcount;  // by comm pointer
  std::vector<CollStat> colls;
  std::vector<TuningChoice> tuning;
  bool aborted = false;
};

// Network facts one host printed (union over its processes).
struct NetInfo {
  std::string selected;                  // `Using network X` / inferred from NET/X lines
  std::vector<std::string> ib_devices;   // "mlx5_0:1/IB", "mlx5_0:1/RoCE"
  std::vector<std::string> socket_ifs;   // "eth0:10.0.0.1<0>"
  std::vector<std::string> bootstrap_ifs;
  std::vector<std::string> plugins;      // loaded net/coll/tuner plugins and OFI providers
  bool ib_no_device = false;             // `NET/IB : No device found.`
  bool ibverbs_missing = false;          // `Failed to open libibverbs.so`
  bool gdr_module = false;               // `GPU Direct RDMA Enabled for HCA` (nv_peer_mem / dmabuf present)
  int gdr_enabled_lines = 0, gdr_disabled_lines = 0;  // per GPU/HCA pair lines
  std::string gdr_disabled_example;
};

struct Process {
  std::string host;
  long pid = -1;
  std::vector<std::string> versions;     // banner(s) printed by this process
  int cuda_driver = -1;                  // `cudaDriverVersion N`
  std::map<std::string, std::string> env;  // `X set by environment to Y`
  std::set<int> devs;
  size_t records = 0;
};

struct WarningGroup {
  std::string key;                       // message with numbers replaced by N
  std::string example;                   // the first message as logged
  std::string location;                  // file:line of the first one
  int count = 0;
  std::vector<std::string> where;        // "rank 3 (host[dev])" or "host[dev]", unique, in order
  std::vector<int> where_count;          // how many of the group's lines each `where` printed
};

struct Failure {                         // a line saying something failed (NCCL or application)
  std::string source;
  size_t line_no = 0;
  std::string text;
  int result = -1;                       // ncclResult_t when known (2 system, 6 remote, ...)
};

struct Log {
  std::vector<std::string> sources;
  size_t lines = 0, nccl_records = 0, spliced_records = 0;
  std::vector<std::string> bare_banners; // `NCCL version X` without host prefix, in order
  std::vector<Process> processes;
  std::map<std::string, NetInfo> network;  // by host
  std::vector<Communicator> comms;
  int warn_count = 0;
  std::vector<WarningGroup> warnings;
  std::map<int, int> error_traces;       // ncclResult_t -> number of `file:line -> N` lines
  std::vector<Failure> failures;
  // nccl-tests header, when present
  std::string nccl_tests_version;
  std::string nccl_tests_library;        // "2.28.7" from nccl-library=22807
  int nccl_tests_nranks = -1;
  std::vector<std::string> nccl_tests_hosts;
};

const char* datatype_name(int datatype);  // "float32", ... or "?"
int datatype_size(int datatype);          // bytes, 0 when unknown
const char* redop_name(int op);
const char* nccl_result_name(int result); // "ncclSystemError", ...

}  // namespace hpdt::nccl_log
