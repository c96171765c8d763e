#include "hpdt/nccl_log/diagnose.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace hpdt::nccl_log {

namespace {

bool contains(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }

std::string nccl_part(const std::string& v) { return v.substr(0, v.find('+')); }

std::string rank_host(const Communicator& c, int r) {
  auto it = c.ranks.find(r);
  return it == c.ranks.end() ? std::string() : it->second.host;
}

std::string ranges(const std::vector<int>& v) {  // 0,1,2,5 -> "0-2, 5"
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(v[i]);
    if (j > i) out += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return out;
}

using Rule = std::function<void(const Log&, std::vector<Diagnosis>&)>;

void no_nccl_output(const Log& log, std::vector<Diagnosis>& out) {
  if (log.nccl_records > 0) return;
  Diagnosis d{"no-nccl-output", log.failures.empty() ? "warning" : "error", "",
              "no NCCL debug lines in the input",
              "The input holds no `host:pid:tid [dev] NCCL INFO|WARN` lines, so nothing can be said about topology or transports.",
              "Run again with NCCL_DEBUG=INFO (and NCCL_DEBUG_FILE=dir/nccl.%h.%p.log to keep one file per process).", {}};
  if (!log.nccl_tests_library.empty()) d.evidence.push_back("nccl-tests reports NCCL library " + log.nccl_tests_library);
  out.push_back(d);
}

void version_mismatch(const Log& log, std::vector<Diagnosis>& out) {
  std::map<std::string, std::vector<std::string>> who;  // NCCL version -> processes
  for (const auto& p : log.processes)
    for (const auto& v : p.versions) who[nccl_part(v)].push_back(p.host + ":" + std::to_string(p.pid));
  for (const auto& v : log.bare_banners) who[nccl_part(v)].push_back("banner");
  if (!log.nccl_tests_library.empty()) who[log.nccl_tests_library].push_back("nccl-tests header (library)");
  if (who.size() < 2) return;
  Diagnosis d{"version-mismatch", "error", "", "different NCCL versions in one job",
              "Ranks that load different NCCL libraries may disagree on protocols and hang or fail at init "
              "(\"NCCL version mismatch with remote peer\").",
              "Make every node load the same libnccl (check LD_LIBRARY_PATH, containers, module loads, and the "
              "NCCL bundled with PyTorch wheels).", {}};
  for (const auto& [v, ps] : who)
    d.evidence.push_back(v + ": " + ps.front() + (ps.size() > 1 ? " and " + std::to_string(ps.size() - 1) + " more" : ""));
  out.push_back(d);
}

void socket_with_ib(const Log& log, std::vector<Diagnosis>& out) {
  std::vector<std::string> ib_hosts;
  bool ibverbs_missing = false;
  for (const auto& [h, n] : log.network) {
    if (!n.ib_devices.empty()) ib_hosts.push_back(h + " " + n.ib_devices.front());
    ibverbs_missing |= n.ibverbs_missing;
  }
  std::string ib_disable;
  for (const auto& p : log.processes) {
    auto it = p.env.find("NCCL_IB_DISABLE");
    if (it != p.env.end() && it->second != "0") ib_disable = "NCCL_IB_DISABLE set by environment to " + it->second;
  }
  for (const auto& c : log.comms) {
    std::vector<std::string> socket_edges;
    for (const auto& e : c.connections)
      if (e.kind == "NET" && e.net == "Socket") socket_edges.push_back("channel " + std::to_string(e.channel) + ": " +
                                                                       std::to_string(e.src) + " -> " + std::to_string(e.dst) + " via " + e.via);
    bool selected_socket = false;
    for (const auto& h : c.hosts) {
      auto n = log.network.find(h);
      if (n != log.network.end() && n->second.selected == "Socket") selected_socket = true;
    }
    if (socket_edges.empty() && !(selected_socket && c.nnodes > 1)) continue;
    Diagnosis d;
    d.rule = "socket-with-ib";
    d.comm = c.id;
    if (!ib_hosts.empty() || !ib_disable.empty()) {
      d.severity = "warning";
      d.summary = "inter-node traffic goes over TCP sockets although InfiniBand/RoCE is available";
      d.detail = "NET/Socket is usually several times slower than NET/IB for large messages.";
      d.next_step = ib_disable.empty() ? "Check why the IB devices listed are not used (NCCL_IB_HCA, NCCL_NET, a network plugin taking over)."
                                       : "Unset NCCL_IB_DISABLE unless IB is known to be broken.";
      for (const auto& h : ib_hosts) d.evidence.push_back("IB device on " + h);
      if (!ib_disable.empty()) d.evidence.push_back(ib_disable);
    } else if (ibverbs_missing) {
      d.severity = "info";
      d.summary = "inter-node traffic goes over TCP sockets; libibverbs could not be loaded";
      d.detail = "NCCL found no verbs library, so it could not even look for InfiniBand/RoCE NICs.";
      d.next_step = "If these nodes have InfiniBand or RoCE NICs, install rdma-core/libibverbs (or mount it into the container).";
    } else {
      continue;
    }
    for (size_t i = 0; i < socket_edges.size() && i < 3; ++i) d.evidence.push_back(socket_edges[i]);
    out.push_back(d);
  }
}

void p2p_disabled(const Log& log, std::vector<Diagnosis>& out) {
  std::string env;
  for (const auto& p : log.processes)
    for (const char* k : {"NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"}) {
      auto it = p.env.find(k);
      if (it != p.env.end()) env = std::string(k) + "=" + it->second;
    }
  for (const auto& c : log.comms) {
    std::set<std::pair<int, int>> pairs;
    for (const auto& e : c.connections)
      if (e.kind == "SHM") pairs.insert({std::min(e.src, e.dst), std::max(e.src, e.dst)});
    if (pairs.empty()) continue;
    Diagnosis d;
    d.rule = "p2p-disabled";
    d.comm = c.id;
    d.severity = env.empty() ? "info" : "warning";
    d.summary = std::to_string(pairs.size()) + " GPU pair(s) in a node talk through shared memory (SHM), not P2P";
    d.detail = env.empty() ? "NCCL found no usable CUDA P2P path between these GPUs (typically GPUs under different CPU "
                             "sockets, or P2P blocked by the platform or container), so data is staged in host memory."
                           : "P2P was restricted by the environment, so data between these GPUs is staged in host memory.";
    d.next_step = env.empty() ? "Check `nvidia-smi topo -m`; if the GPUs should reach each other (NVLink/PIX), look at IOMMU/ACS "
                                "settings and the container's IPC namespace (--ipc=host)."
                              : "Remove " + env + " unless it works around a known problem, and compare bandwidth.";
    if (!env.empty()) d.evidence.push_back(env);
    int n = 0;
    for (auto [a, b] : pairs) {
      if (n++ == 4) break;
      d.evidence.push_back("ranks " + std::to_string(a) + " and " + std::to_string(b) + " on " + rank_host(c, a));
    }
    out.push_back(d);
  }
}

void gdr_off(const Log& log, std::vector<Diagnosis>& out) {
  for (const auto& c : log.comms) {
    bool ib_net = false, no_gdr = false, gdr = false;
    for (const auto& e : c.connections) {
      if (e.kind != "NET" || e.net == "Socket") continue;
      ib_net = true;
      (e.gdrdma ? gdr : no_gdr) = true;
    }
    std::string example;
    bool module = false;
    int disabled = 0;
    for (const auto& h : c.hosts) {
      auto n = log.network.find(h);
      if (n == log.network.end()) continue;
      disabled += n->second.gdr_disabled_lines;
      module |= n->second.gdr_module;
      if (example.empty()) example = n->second.gdr_disabled_example;
      ib_net |= !n->second.ib_devices.empty() && c.nnodes > 1 && c.connections.empty();
    }
    if (!ib_net || gdr) continue;
    if (!(no_gdr || disabled > 0)) continue;
    if (disabled == 0 && !module) continue;
    Diagnosis d{"gdr-off", "warning", c.id, "GPU Direct RDMA is off on the network connections",
                "Without GPUDirect RDMA the NIC reads and writes GPU memory through a bounce buffer in host memory, "
                "which costs bandwidth and CPU.",
                "If the NIC and GPU share a PCIe switch and nvidia-peermem (or DMA-BUF) is available, raise "
                "NCCL_NET_GDR_LEVEL (e.g. PHB or SYS) and compare busbw with nccl-tests.", {}};
    if (!example.empty()) d.evidence.push_back(example);
    if (module) d.evidence.push_back("NET/IB : GPU Direct RDMA Enabled for HCA (the kernel module is present)");
    out.push_back(d);
  }
}

void few_channels(const Log& log, std::vector<Diagnosis>& out) {
  for (const auto& c : log.comms) {
    std::map<int, std::vector<int>> by_count;
    for (const auto& [r, ri] : c.ranks)
      if (ri.coll_channels >= 0) by_count[ri.coll_channels].push_back(r);
    if (by_count.size() > 1) {
      Diagnosis d{"few-channels", "warning", c.id, "ranks of one communicator report different channel counts",
                  "Every rank should build the same number of channels; fewer on some ranks means their topology "
                  "detection saw fewer or slower links.",
                  "Compare the `Pattern`/topology lines of the ranks with fewer channels (NCCL_DEBUG_SUBSYS=INIT,GRAPH).", {}};
      for (const auto& [n, rs] : by_count) {
        std::vector<int> v = rs;
        d.evidence.push_back(std::to_string(n) + " coll channels: ranks " + ranges(v));
      }
      out.push_back(d);
    }
  }
  // communicators of the same shape in the input
  for (const auto& a : log.comms)
    for (const auto& b : log.comms) {
      if (&a == &b || a.nranks <= 0 || a.nranks != b.nranks || a.nnodes != b.nnodes) continue;
      if (a.channels > 0 && b.channels > a.channels) {
        out.push_back({"few-channels", "warning", a.id,
                       "fewer channels (" + std::to_string(a.channels) + ") than communicator " + b.id + " of the same setup (" +
                           std::to_string(b.channels) + ")",
                       "Same rank and node count but fewer channels usually means a slower path was detected (a NIC or "
                       "NVLink missing, a different NCCL_* setting).",
                       "Diff the environment (NCCL_* lines) and the topology lines of both runs.",
                       {}});
      }
    }
}

void ring_crossings(const Log& log, std::vector<Diagnosis>& out) {
  for (const auto& c : log.comms) {
    if (c.nnodes < 2) continue;
    for (const auto& [ch, order] : c.rings) {
      if (static_cast<int>(order.size()) != c.nranks) continue;
      std::set<std::string> hosts;
      int cross = 0;
      bool known = true;
      for (size_t i = 0; i < order.size(); ++i) {
        std::string h1 = rank_host(c, order[i]), h2 = rank_host(c, order[(i + 1) % order.size()]);
        if (h1.empty() || h2.empty()) known = false;
        hosts.insert(h1);
        if (h1 != h2) ++cross;
      }
      if (!known || hosts.size() < 2 || cross <= static_cast<int>(hosts.size())) continue;
      std::string ring;
      for (int r : order) {
        if (!ring.empty()) ring += ' ';
        ring += std::to_string(r);
      }
      out.push_back({"ring-crossings", "warning", c.id,
                     "ring of channel " + std::to_string(ch) + " crosses nodes " + std::to_string(cross) + " times (" +
                         std::to_string(hosts.size()) + " would do)",
                     "Each extra crossing puts another inter-node hop in every ring step; usually ranks are not numbered "
                     "node by node.",
                     "Place ranks contiguously per node (e.g. srun/mpirun --map-by node vs slot) or check NCCL_TOPO_FILE.",
                     {"ring " + ring}});
      break;  // one per communicator is enough
    }
  }
}

void missing_ranks(const Log& log, std::vector<Diagnosis>& out) {
  if (log.comms.empty() && log.nccl_tests_nranks > 0 && !log.processes.empty() &&
      static_cast<int>(log.processes.size()) < log.nccl_tests_nranks) {
    std::set<std::string> hosts;
    for (const auto& p : log.processes) hosts.insert(p.host);
    out.push_back({"missing-ranks", "warning", "",
                   "NCCL lines from " + std::to_string(log.processes.size()) + " process(es) on " + std::to_string(hosts.size()) +
                       " host(s), but nccl-tests lists " + std::to_string(log.nccl_tests_nranks) + " ranks on " +
                       std::to_string(log.nccl_tests_hosts.size()) + " host(s)",
                   "The capture is incomplete, so rings, trees and transports are only partly known.",
                   "Collect every rank's output (NCCL_DEBUG_FILE=dir/nccl.%h.%p.log, or each node's launcher output).",
                   {}});
  }
  for (const auto& c : log.comms) {
    int n = c.nranks > 0 ? c.nranks : log.nccl_tests_nranks;
    if (n <= 0 || n > 1000000) continue;
    // the gaps between the ranks that printed (O(printed ranks), whatever nranks claims)
    std::string gaps;
    int missing = 0, expect = 0, listed = 0;
    auto gap = [&](int a, int b) {  // ranks a..b-1 missing
      if (a >= b) return;
      missing += b - a;
      if (listed++ == 16) gaps += ", ...";
      if (listed > 16) return;
      if (!gaps.empty()) gaps += ", ";
      gaps += std::to_string(a);
      if (b - a > 1) gaps += "-" + std::to_string(b - 1);
    };
    for (const auto& [r, ri] : c.ranks) {
      if (r >= n) break;
      gap(expect, r);
      expect = r + 1;
    }
    gap(expect, n);
    if (missing == 0) continue;
    out.push_back({"missing-ranks", "warning", c.id,
                   std::to_string(missing) + " of " + std::to_string(n) + " ranks printed nothing: " + gaps,
                   "The capture is incomplete (other nodes' output, an excerpt, or ranks that died before init), so "
                   "rings, trees and transports are only partly known.",
                   "Collect every rank's output: NCCL_DEBUG_FILE=dir/nccl.%h.%p.log on a shared file system, or the "
                   "launcher's output of every node.",
                   {}});
  }
}

struct FailureKind {
  const char* rule;
  std::vector<const char*> needles;
  int result;
  const char* summary;
  const char* detail;
  const char* next;
};

const std::vector<FailureKind>& failure_kinds() {
  static const std::vector<FailureKind> k = {
      {"system-error", {"unhandled system error", "ncclSystemError"}, 2, "NCCL failed with a system error (ncclSystemError)",
       "A system call or a network/plugin operation failed (socket, memory registration, shared memory).",
       "Read the first WARN lines before the failure; they name the call that failed. Check `ulimit -l`, /dev/shm, and the NIC/plugin."},
      {"remote-error", {"remote process exited or there was a network error", "ncclRemoteError"}, 6,
       "a peer exited or the network failed (ncclRemoteError)",
       "Another rank died (often an out-of-memory kill or an exception) or the connection to it broke.",
       "Find the first rank that failed in the other nodes' logs (dmesg for OOM kills, the job's stderr) and check NIC links."},
      {"timeout", {"Watchdog caught collective operation timeout", "timed out", "Timeout"}, -1, "a collective timed out",
       "Usually a hang: ranks called different collectives (desync) or one rank is stuck or dead.",
       "Compare the last COLL lines of every rank (NCCL_DEBUG_SUBSYS=COLL) and look for a rank that stopped early."},
      {"out-of-memory", {"out of memory", "Failed to CUDA calloc", "cudaErrorMemoryAllocation"}, 1, "GPU memory ran out",
       "NCCL or the application could not allocate device memory.",
       "Reduce batch size or NCCL buffers (NCCL_BUFFSIZE, fewer channels), and check other processes on the GPU."},
      {"duplicate-gpu", {"Duplicate GPU detected"}, 5, "two ranks use the same GPU",
       "NCCL refuses two ranks of one communicator on one device (ncclInvalidUsage).",
       "Set the device per local rank (torch.cuda.set_device(local_rank), CUDA_VISIBLE_DEVICES per rank)."},
      {"shm-space", {"posix_fallocate failed", "Error while creating shared memory segment", "No space left on device"}, 2,
       "shared memory (/dev/shm) is too small",
       "The SHM transport needs room in /dev/shm; containers default to 64 MB.",
       "Run the container with --shm-size=1g (or --ipc=host), or enlarge /dev/shm."},
      {"peer-connection-closed", {"Connection closed by remote peer", "socketProgress", "Connection reset by peer"}, 6,
       "a peer closed its connection",
       "The process on the other side ended or crashed during a collective.",
       "Look at that peer's log for the first error."},
      {"version-mismatch-peer", {"version mismatch"}, 3, "NCCL refused a peer with another version",
       "Processes load different NCCL libraries.", "Use the same NCCL everywhere."},
  };
  return k;
}

void known_failures(const Log& log, std::vector<Diagnosis>& out) {
  for (const auto& fk : failure_kinds()) {
    std::vector<std::string> ev;
    auto hit = [&](const std::string& t) {
      for (const char* n : fk.needles)
        if (contains(t, n)) return true;
      return false;
    };
    for (const auto& f : log.failures)
      if (hit(f.text) && ev.size() < 3) ev.push_back(f.source + ":" + std::to_string(f.line_no) + ": " + f.text);
    for (const auto& w : log.warnings)
      if (hit(w.example) && ev.size() < 3) ev.push_back("WARN " + w.example + " (" + std::to_string(w.count) + "x)");
    auto tr = log.error_traces.find(fk.result);
    if (ev.empty() && !(fk.result == 2 && tr != log.error_traces.end() && !log.warnings.empty() && fk.rule == std::string("system-error")))
      continue;
    Diagnosis d{fk.rule, "error", "", fk.summary, fk.detail, fk.next, ev};
    if (tr != log.error_traces.end())
      d.evidence.push_back(std::to_string(tr->second) + " error trace line(s) `file:line -> " + std::to_string(fk.result) + "` (" +
                           nccl_result_name(fk.result) + ")");
    if (fk.result == 2 && !log.warnings.empty()) {  // the WARNs are the likely cause
      const WarningGroup* top = &log.warnings.front();
      for (const auto& w : log.warnings)
        if (w.count > top->count) top = &w;
      d.detail += " Most frequent WARN: \"" + top->example + "\" (" + std::to_string(top->count) + "x).";
    }
    out.push_back(d);
  }
}

void aborted(const Log& log, std::vector<Diagnosis>& out) {
  for (const auto& c : log.comms) {
    if (!c.aborted) continue;
    std::string last;
    for (const auto& [who, op] : c.collectives_last_opcount) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%x", op);
      if (!last.empty()) last += ", ";
      last += buf;
    }
    out.push_back({"aborted", "info", c.id,
                   last.empty() ? "communicator was aborted" : "communicator was aborted after its last collective (opCount " + last + ")",
                   "ncclCommAbort ends a communicator without waiting for peers. PyTorch also aborts at exit, so an abort "
                   "alone is not a failure; if the job failed, the last collective is where it stopped.",
                   "If the job failed: compare the last opCount of every rank; the rank with the smallest one stopped first.",
                   {}});
  }
}

const std::vector<std::pair<std::string, Rule>>& rules() {
  static const std::vector<std::pair<std::string, Rule>> r = {
      {"no-nccl-output", no_nccl_output}, {"version-mismatch", version_mismatch}, {"socket-with-ib", socket_with_ib},
      {"p2p-disabled", p2p_disabled},     {"gdr-off", gdr_off},                   {"few-channels", few_channels},
      {"ring-crossings", ring_crossings}, {"missing-ranks", missing_ranks},       {"known-failures", known_failures},
      {"aborted", aborted},
  };
  return r;
}

}  // namespace

const std::vector<std::string>& diagnosis_rules() {
  static const std::vector<std::string> ids = [] {
    std::vector<std::string> v;
    for (const auto& [id, f] : rules()) v.push_back(id);
    return v;
  }();
  return ids;
}

std::vector<Diagnosis> diagnose(const Log& log) {
  std::vector<Diagnosis> out;
  for (const auto& [id, f] : rules()) f(log, out);
  return out;
}

}  // namespace hpdt::nccl_log
