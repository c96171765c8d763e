#include "hpdt/nccl_log/report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace hpdt::nccl_log {

namespace {

std::string join_ints(const std::vector<int>& v, const char* sep = " ") {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += sep;
    s += std::to_string(x);
  }
  return s;
}
std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += sep;
    s += x;
  }
  return s;
}
std::string tree_text(const std::map<int, TreeLinks>& t) {  // "root 0; 0->{1,4}; 1->{2}"
  std::map<int, std::set<int>> kids;  // from children lists and from parent pointers
  std::string roots;
  for (const auto& [r, l] : t) {
    if (l.parent < 0) {
      if (!roots.empty()) roots += ',';
      roots += std::to_string(r);
    } else {
      kids[l.parent].insert(r);
    }
    for (int k : l.children) kids[r].insert(k);
  }
  std::string out = roots.empty() ? "" : "root " + roots;
  for (const auto& [p, ks] : kids) {
    if (!out.empty()) out += "; ";
    out += std::to_string(p) + "->{" + join_ints(std::vector<int>(ks.begin(), ks.end()), ",") + "}";
  }
  return out;
}
std::string bytes_text(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", double(b) / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

// Transport per ring edge of a channel: the connection line whose src/dst match.
std::string edge_via(const Communicator& c, int ch, int a, int b) {
  for (const auto& e : c.connections)
    if (e.channel == ch && e.src == a && e.dst == b) return e.via;
  return "";
}

}  // namespace

std::string host_of(const Communicator& c, int rank) {
  auto it = c.ranks.find(rank);
  return it == c.ranks.end() ? std::string() : it->second.host;
}

std::string text_report(const Log& log, const std::vector<Diagnosis>& diagnoses) {
  std::ostringstream o;
  o << "NCCL log report: " << log.sources.size() << " source(s), " << log.lines << " lines, " << log.nccl_records
    << " NCCL records";
  if (log.spliced_records) o << " (" << log.spliced_records << " cut by other writers)";
  o << "\n";
  if (!log.nccl_tests_version.empty() || !log.nccl_tests_library.empty())
    o << "nccl-tests " << log.nccl_tests_version << ", NCCL library " << (log.nccl_tests_library.empty() ? "?" : log.nccl_tests_library)
      << (log.nccl_tests_nranks > 0 ? ", " + std::to_string(log.nccl_tests_nranks) + " ranks on " + join(log.nccl_tests_hosts) : "")
      << "\n";
  if (!log.processes.empty()) {
    std::map<std::string, std::pair<int, std::set<int>>> per_host;
    for (const auto& p : log.processes) {
      ++per_host[p.host].first;
      per_host[p.host].second.insert(p.devs.begin(), p.devs.end());
    }
    o << "Processes    : " << log.processes.size() << " on " << per_host.size() << " host(s):";
    for (const auto& [h, pd] : per_host)
      o << " " << h << " (" << pd.first << " process(es), GPUs " << join_ints(std::vector<int>(pd.second.begin(), pd.second.end()), ",") << ")";
    o << "\n";
  }
  for (const auto& c : log.comms) {
    o << "\nCommunicator " << c.id << "\n";
    o << "  NCCL version : " << (c.versions.empty() ? (c.version_inferred.empty() ? "unknown" : "inferred " + c.version_inferred) : join(c.versions)) << "\n";
    std::set<int> drivers;
    for (const auto& p : log.processes)
      if (p.cuda_driver > 0 && std::find(c.hosts.begin(), c.hosts.end(), p.host) != c.hosts.end()) drivers.insert(p.cuda_driver);
    if (!drivers.empty()) {
      std::string d;
      for (int v : drivers) {
        if (!d.empty()) d += ", ";
        d += std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
      }
      o << "  CUDA driver  : " << d << "\n";
    }
    o << "  ranks        : " << (c.nranks > 0 ? std::to_string(c.nranks) : "?") << " (" << c.ranks.size() << " printed)"
      << ", nodes: " << c.nnodes << " (" << join(c.hosts) << ")\n";
    for (const auto& [r, ri] : c.ranks) {
      o << "    rank " << r << ": " << ri.host << " pid " << ri.pid << " cudaDev " << ri.cuda_dev;
      if (ri.nvml_dev >= 0) o << " nvmlDev " << ri.nvml_dev;
      if (!ri.bus_id.empty()) o << " busId " << ri.bus_id;
      if (ri.local_rank >= 0) o << " localRank " << ri.local_rank;
      if (ri.init_timing.total >= 0) {
        char b[32];
        std::snprintf(b, sizeof b, "%.2f", ri.init_timing.total);
        o << " init " << b << " s";
      }
      o << (ri.init_complete ? "" : " (no Init COMPLETE)") << (ri.aborted ? " aborted" : "") << "\n";
    }
    std::set<std::string> nets, ibs, socks, plugins;
    for (const auto& h : c.hosts) {
      auto n = log.network.find(h);
      if (n == log.network.end()) continue;
      if (!n->second.selected.empty()) nets.insert(n->second.selected);
      for (const auto& d : n->second.ib_devices) ibs.insert(h + " " + d);
      for (const auto& d : n->second.socket_ifs) socks.insert(d.substr(0, d.find(':')));
      for (const auto& d : n->second.plugins) plugins.insert(d);
    }
    if (!nets.empty()) o << "  network      : " << join(std::vector<std::string>(nets.begin(), nets.end())) << "\n";
    if (!ibs.empty()) o << "  IB/RoCE      : " << join(std::vector<std::string>(ibs.begin(), ibs.end())) << "\n";
    if (!socks.empty()) o << "  sockets      : " << join(std::vector<std::string>(socks.begin(), socks.end())) << "\n";
    if (!plugins.empty()) o << "  plugins      : " << join(std::vector<std::string>(plugins.begin(), plugins.end())) << "\n";
    o << "  channels     : " << (c.channels >= 0 ? std::to_string(c.channels) + " (from " + c.channels_source + ")" : "?") << "\n";
    for (const auto& [ch, order] : c.rings) {
      if (ch >= 4 && c.rings.size() > 4) {
        o << "    ... " << c.rings.size() - 4 << " more ring(s)\n";
        break;
      }
      o << "    ring " << ch << ": " << join_ints(order) << (c.ring_inferred.count(ch) ? " (rebuilt from neighbour lines)" : "") << "\n";
      std::string edges;
      for (size_t i = 0; i < order.size(); ++i) {
        int a = order[i], b = order[(i + 1) % order.size()];
        std::string v = edge_via(c, ch, a, b);
        if (v.empty()) continue;
        if (!edges.empty()) edges += ", ";
        edges += std::to_string(a) + "->" + std::to_string(b) + " " + v;
      }
      if (!edges.empty()) o << "      via: " << edges << "\n";
    }
    int shown = 0;
    for (const auto& [ch, t] : c.trees) {
      if (shown++ == 2) {
        o << "    ... trees of " << c.trees.size() - 2 << " more channel(s)\n";
        break;
      }
      o << "    tree " << ch << ": " << tree_text(t) << "\n";
    }
    std::map<std::string, int> vias;
    for (const auto& e : c.connections) ++vias[e.via];
    if (!vias.empty()) {
      o << "  transports   :";
      for (const auto& [v, n] : vias) o << " " << v << " x" << n << ";";
      o << "\n";
    }
    if (!c.nvls_heads.empty() || c.nvls_comm) o << "  NVLS         : " << c.nvls_heads.size() << " head(s)" << (c.nvls_comm ? ", NVLS buffers set up" : "") << "\n";
    int coll = -1, collnet = -1, nvls = -1, p2p = -1;
    std::string thr;
    for (const auto& [r, ri] : c.ranks) {
      coll = std::max(coll, ri.coll_channels), collnet = std::max(collnet, ri.collnet_channels);
      nvls = std::max(nvls, ri.nvls_channels), p2p = std::max(p2p, ri.p2p_channels);
      if (thr.empty()) thr = ri.thread_thresholds;
    }
    if (coll >= 0)
      o << "  printed      : " << coll << " coll, " << (collnet >= 0 ? std::to_string(collnet) + " collnet (printed value), " : "")
        << (nvls >= 0 ? std::to_string(nvls) + " nvls, " : "") << p2p << " p2p channels\n";
    if (!thr.empty()) o << "  thresholds   : " << thr << "\n";
    if (!c.tuning.empty()) {
      o << "  tuning       :";
      for (const auto& t : c.tuning)
        o << " " << (t.op.empty() ? "" : t.op + " ") << bytes_text(t.bytes) << " -> " << t.algo << "/" << t.proto << " x" << t.calls << ";";
      o << "\n";
    }
    for (const auto& s : c.colls)
      o << "  collective   : " << s.op << " count " << s.count << " " << datatype_name(s.datatype) << " " << redop_name(s.redop) << " ("
        << bytes_text(s.bytes) << ") x" << s.calls << "\n";
  }
  if (!log.warnings.empty()) {
    o << "\nWarnings: " << log.warn_count << " WARN line(s)\n";
    for (const auto& w : log.warnings) {
      o << "  " << w.count << "x " << w.example << (w.location.empty() ? "" : "  [" + w.location + "]") << "\n";
      std::vector<std::string> where(w.where.begin(), w.where.begin() + std::min<size_t>(w.where.size(), 8));
      o << "     on " << join(where) << (w.where.size() > 8 ? ", ..." : "") << "\n";
    }
  }
  if (!log.failures.empty()) {
    o << "\nFailure lines:\n";
    for (size_t i = 0; i < log.failures.size() && i < 10; ++i)
      o << "  " << log.failures[i].source << ":" << log.failures[i].line_no << ": " << log.failures[i].text << "\n";
  }
  if (!diagnoses.empty()) {
    o << "\nDiagnoses:\n";
    for (const auto& d : diagnoses) {
      o << "  [" << d.severity << "] " << d.rule << (d.comm.empty() ? "" : " (" + d.comm + ")") << ": " << d.summary << "\n";
      o << "      " << d.detail << "\n      next: " << d.next_step << "\n";
      for (const auto& e : d.evidence) o << "      - " << e << "\n";
    }
  } else {
    o << "\nDiagnoses: none\n";
  }
  return o.str();
}

nlohmann::json json_report(const Log& log, const std::vector<Diagnosis>& diagnoses) {
  using nlohmann::json;
  json j;
  j["schema"] = "hpdt-nccl-log/1";
  j["sources"] = log.sources;
  j["lines"] = log.lines;
  j["nccl_records"] = log.nccl_records;
  j["spliced_records"] = log.spliced_records;
  j["bare_banners"] = log.bare_banners;
  if (!log.nccl_tests_version.empty() || !log.nccl_tests_library.empty())
    j["nccl_tests"] = {{"version", log.nccl_tests_version}, {"library", log.nccl_tests_library},
                       {"nranks", log.nccl_tests_nranks}, {"hosts", log.nccl_tests_hosts}};
  json procs = json::array();
  for (const auto& p : log.processes) {
    json e = {{"host", p.host}, {"pid", p.pid}, {"versions", p.versions}, {"devs", std::vector<int>(p.devs.begin(), p.devs.end())},
              {"records", p.records}, {"env", p.env}};
    if (p.cuda_driver > 0) e["cuda_driver"] = p.cuda_driver;
    procs.push_back(e);
  }
  j["processes"] = procs;
  json net = json::object();
  for (const auto& [h, n] : log.network)
    net[h] = {{"selected", n.selected}, {"ib_devices", n.ib_devices}, {"socket_interfaces", n.socket_ifs},
              {"bootstrap_interfaces", n.bootstrap_ifs}, {"plugins", n.plugins}, {"ib_no_device", n.ib_no_device},
              {"ibverbs_missing", n.ibverbs_missing}, {"gdr_module", n.gdr_module}, {"gdr_enabled_lines", n.gdr_enabled_lines},
              {"gdr_disabled_lines", n.gdr_disabled_lines}};
  j["network"] = net;
  json comms = json::array();
  for (const auto& c : log.comms) {
    json cj;
    cj["id"] = c.id;
    cj["id_from_log"] = c.id_from_log;
    cj["versions"] = c.versions;
    cj["version_inferred"] = c.version_inferred;
    cj["nranks"] = c.nranks;
    cj["nnodes"] = c.nnodes;
    cj["nnodes_printed"] = c.nnodes_printed;
    cj["hosts"] = c.hosts;
    json ranks = json::array();
    for (const auto& [r, ri] : c.ranks) {
      json rj = {{"rank", r}, {"host", ri.host}, {"pid", ri.pid}, {"cuda_dev", ri.cuda_dev}, {"nvml_dev", ri.nvml_dev},
                 {"bus_id", ri.bus_id}, {"comm", ri.comm_ptr}, {"local_rank", ri.local_rank}, {"init_complete", ri.init_complete},
                 {"aborted", ri.aborted}, {"coll_channels", ri.coll_channels}, {"nvls_channels", ri.nvls_channels},
                 {"collnet_channels_printed", ri.collnet_channels}, {"p2p_channels", ri.p2p_channels},
                 {"thread_thresholds", ri.thread_thresholds}};
      if (ri.init_timing.total >= 0) rj["init_timing"] = {{"total", ri.init_timing.total}, {"parts", ri.init_timing.parts}};
      ranks.push_back(rj);
    }
    cj["ranks"] = ranks;
    cj["unknown_rank_contexts"] = c.unknown_rank_contexts;
    cj["channels"] = c.channels;
    cj["channels_source"] = c.channels_source;
    json rings = json::object();
    for (const auto& [ch, order] : c.rings) rings[std::to_string(ch)] = {{"order", order}, {"inferred", c.ring_inferred.count(ch) > 0}};
    cj["rings"] = rings;
    json trees = json::object();
    for (const auto& [ch, t] : c.trees) {
      json tj = json::object();
      for (const auto& [r, l] : t) tj[std::to_string(r)] = {{"parent", l.parent}, {"children", l.children}};
      trees[std::to_string(ch)] = tj;
    }
    cj["trees"] = trees;
    json conns = json::array();
    for (const auto& e : c.connections)
      conns.push_back({{"channel", e.channel}, {"conn_index", e.conn_index}, {"src", e.src}, {"dst", e.dst}, {"via", e.via},
                       {"kind", e.kind}, {"net", e.net}, {"gdrdma", e.gdrdma}});
    cj["connections"] = conns;
    cj["nvls"] = {{"heads", c.nvls_heads}, {"comm_setup", c.nvls_comm}};
    json colls = json::array();
    for (const auto& s : c.colls)
      colls.push_back({{"op", s.op}, {"count", s.count}, {"datatype", s.datatype}, {"datatype_name", datatype_name(s.datatype)},
                       {"redop", s.redop}, {"bytes", s.bytes}, {"calls", s.calls}, {"ranks", std::vector<int>(s.ranks.begin(), s.ranks.end())}});
    cj["collectives"] = colls;
    cj["last_opcount"] = c.collectives_last_opcount;
    json tuning = json::array();
    for (const auto& t : c.tuning)
      tuning.push_back({{"op", t.op}, {"bytes", t.bytes}, {"algo", t.algo}, {"proto", t.proto}, {"calls", t.calls}});
    cj["tuning"] = tuning;
    cj["aborted"] = c.aborted;
    comms.push_back(cj);
  }
  j["communicators"] = comms;
  j["warn_count"] = log.warn_count;
  json warns = json::array();
  for (const auto& w : log.warnings)
    warns.push_back({{"key", w.key}, {"example", w.example}, {"location", w.location}, {"count", w.count}, {"where", w.where}, {"where_count", w.where_count}});
  j["warnings"] = warns;
  json traces = json::object();
  for (const auto& [code, n] : log.error_traces) traces[std::to_string(code)] = n;
  j["error_traces"] = traces;
  json fails = json::array();
  for (const auto& f : log.failures)
    fails.push_back({{"source", f.source}, {"line", f.line_no}, {"text", f.text}, {"result", f.result}});
  j["failures"] = fails;
  json diags = json::array();
  for (const auto& d : diagnoses)
    diags.push_back({{"rule", d.rule}, {"severity", d.severity}, {"communicator", d.comm}, {"summary", d.summary},
                     {"detail", d.detail}, {"next_step", d.next_step}, {"evidence", d.evidence}});
  j["diagnoses"] = diags;
  return j;
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string dot_report(const Log& log, int max_channels) {
  auto q = [](const std::string& s) {  // a DOT string literal
    std::string out = "\"";
    for (char ch : s) {
      if (ch == '\n') {
        out += "\\n";
        continue;
      }
      if (ch == '"' || ch == '\\') out += '\\';
      if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
    }
    return out + "\"";
  };
  std::ostringstream o;
  o << "digraph nccl {\n  graph [rankdir=LR, fontname=\"Helvetica\", compound=true];\n  node [shape=box, fontname=\"Helvetica\"];\n"
       "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  int ci = 0;
  for (const auto& c : log.comms) {
    const std::string cp = "c" + std::to_string(ci++);
    o << "  subgraph cluster_" << cp << " {\n    label=" << q("communicator " + c.id + " (" + std::to_string(c.nranks) + " ranks)") << ";\n";
    std::set<int> ranks;
    for (const auto& [r, ri] : c.ranks) ranks.insert(r);
    for (const auto& [ch, order] : c.rings)
      for (int r : order) ranks.insert(r);
    for (const auto& [ch, t] : c.trees)
      for (const auto& [r, l] : t) {
        ranks.insert(r);
        for (int k : l.children) ranks.insert(k);
      }
    std::map<std::string, std::vector<int>> by_host;
    for (int r : ranks) {
      if (r < 0 || r > 1000000) continue;
      by_host[host_of(c, r).empty() ? "?" : host_of(c, r)].push_back(r);
    }
    int hi = 0;
    for (const auto& [h, rs] : by_host) {
      o << "    subgraph cluster_" << cp << "_h" << hi++ << " {\n      label=" << q(h) << "; style=rounded;\n";
      for (int r : rs) {
        auto it = c.ranks.find(r);
        std::string label = "rank " + std::to_string(r);
        if (it != c.ranks.end() && it->second.cuda_dev >= 0) label += "\\nGPU " + std::to_string(it->second.cuda_dev);
        o << "      " << cp << "_r" << r << " [label=\"" << label << "\"];\n";
      }
      o << "    }\n";
    }
    static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
    int n = 0;
    for (const auto& [ch, order] : c.rings) {
      if (n++ >= max_channels) break;
      for (size_t i = 0; i < order.size(); ++i) {
        int a = order[i], b = order[(i + 1) % order.size()];
        std::string via = edge_via(c, ch, a, b);
        o << "    " << cp << "_r" << a << " -> " << cp << "_r" << b << " [color=" << q(kColors[ch % 6])
          << ", label=" << q("ring " + std::to_string(ch) + (via.empty() ? "" : "\n" + via)) << "];\n";
      }
    }
    n = 0;
    for (const auto& [ch, t] : c.trees) {
      if (n++ >= max_channels) break;
      for (const auto& [r, l] : t)
        for (int k : l.children)
          o << "    " << cp << "_r" << r << " -> " << cp << "_r" << k << " [style=dashed, color=" << q(kColors[(ch + 3) % 6])
            << ", label=" << q("tree " + std::to_string(ch)) << "];\n";
    }
    o << "  }\n";
  }
  o << "}\n";
  return o.str();
}

}  // namespace hpdt::nccl_log
