#include "scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "hpdt/core/error.h"

namespace hpdt::bench {

namespace {

double num(const nlohmann::json& j, const char* key, const std::string& file, bool required, double dflt = 0) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) HPDT_FAIL("summary in ", file, " has no field '", key, "'");
    return dflt;
  }
  if (!it->is_number()) HPDT_FAIL("summary in ", file, ": field '", key, "' is not a number (", it->dump(), ")");
  return it->get<double>();
}
std::string str(const nlohmann::json& j, const char* key, const std::string& dflt) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return dflt;
  return it->get<std::string>();
}
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

RunSummary parse_summary(const nlohmann::json& j, const std::string& file) {
  HPDT_CHECK(j.is_object() && j.value("type", "") == "summary", "not a summary object in ", file);
  RunSummary r;
  r.file = file;
  r.model = str(j, "model", "?");
  r.algo = str(j, "algo", "none");
  r.compress = str(j, "compress", "none");
  r.git_commit = str(j, "git_commit", "");
  r.ranks = int(num(j, "ranks", file, true));
  HPDT_CHECK(r.ranks >= 1, "summary in ", file, ": ranks must be >= 1, got ", r.ranks);
  r.nodes = int(num(j, "nodes", file, false, 1));
  r.per_rank_batch = num(j, "per_rank_batch", file, true);
  r.global_batch = num(j, "global_batch", file, false, r.per_rank_batch * r.ranks);
  r.steps = long(num(j, "steps", file, false));
  r.step_time_s = num(j, "step_time_s", file, true);
  HPDT_CHECK(r.step_time_s > 0, "summary in ", file, ": step_time_s must be > 0, got ", r.step_time_s);
  r.throughput_img_s = num(j, "throughput_img_s", file, false, r.global_batch / r.step_time_s);
  r.forward_s = num(j, "forward_s", file, false);
  r.backward_s = num(j, "backward_s", file, false);
  r.exposed_comm_s = num(j, "exposed_comm_s", file, false);
  r.optimizer_s = num(j, "optimizer_s", file, false);
  r.data_wait_s = num(j, "data_wait_s", file, false);
  r.bytes_sent_per_step = num(j, "bytes_sent_per_step", file, false);
  r.test_accuracy = num(j, "test_accuracy", file, false, -1);
  // f32 gradient bytes: "grad_bytes", else 4 x the parameter count (hpdt-train writes "parameters")
  r.grad_bytes = num(j, "grad_bytes", file, false,
                     4.0 * num(j, "parameters", file, false, num(j, "params", file, false, 0)));
  if (auto it = j.find("hosts"); it != j.end() && it->is_array())
    for (const auto& h : *it)
      if (h.is_string()) r.hosts.push_back(h.get<std::string>());
  return r;
}

RunSummary load_summary(const std::string& path) {
  std::ifstream in(path);
  HPDT_CHECK(in.good(), "cannot open metrics file ", path);
  std::string line, last;
  long lineno = 0, last_no = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find("\"summary\"") != std::string::npos) {
      last = line;
      last_no = lineno;
    }
  }
  if (last.empty()) {  // maybe one pretty-printed JSON object
    std::ifstream again(path);
    std::stringstream ss;
    ss << again.rdbuf();
    nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("type", "") == "summary") return parse_summary(j, path);
    HPDT_FAIL("no {\"type\":\"summary\"} line in ", path, " (did the run finish?)");
  }
  nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
  if (j.is_discarded()) HPDT_FAIL("line ", last_no, " of ", path, " is not valid JSON");
  return parse_summary(j, path + ":" + std::to_string(last_no));
}

std::vector<RunSummary> load_runs(const std::string& dir, std::vector<std::string>* skipped) {
  namespace fs = std::filesystem;
  std::error_code ec;
  HPDT_CHECK(fs::is_directory(dir, ec), "not a directory: ", dir);
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const auto ext = it->path().extension().string();
    if (it->is_regular_file() && (ext == ".jsonl" || ext == ".json")) files.push_back(it->path().string());
  }
  HPDT_CHECK(!ec, "cannot list ", dir, ": ", ec.message());
  std::sort(files.begin(), files.end());
  std::vector<RunSummary> runs;
  for (const auto& f : files) {
    try {
      runs.push_back(load_summary(f));
    } catch (const Error& e) {
      if (skipped) skipped->push_back(f + ": " + e.message());
    }
  }
  return runs;
}

const char* mode_name(ScalingMode m) { return m == ScalingMode::strong ? "strong" : "weak"; }

double law_speedup(ScalingMode mode, double f, double w) {
  return mode == ScalingMode::strong ? 1.0 / ((1.0 - f) + f / w) : (1.0 - f) + f * w;
}

double fit_parallel_fraction(ScalingMode mode, const std::vector<std::pair<double, double>>& pts,
                             double* rms_rel_error) {
  // Both laws are linear in f after a transform:
  //   strong: 1/S = 1 - f (1 - 1/W)     weak: S - 1 = f (W - 1)
  double sxx = 0, sxy = 0;
  for (auto [w, s] : pts) {
    if (w <= 1 || s <= 0) continue;
    const double x = mode == ScalingMode::strong ? 1.0 - 1.0 / w : w - 1.0;
    const double y = mode == ScalingMode::strong ? 1.0 - 1.0 / s : s - 1.0;
    sxx += x * x;
    sxy += x * y;
  }
  double f = sxx > 0 ? sxy / sxx : 1.0;
  f = std::clamp(f, 0.0, 1.0);
  if (rms_rel_error) {
    double e = 0;
    size_t n = 0;
    for (auto [w, s] : pts) {
      if (s <= 0) continue;
      e += std::pow((law_speedup(mode, f, w) - s) / s, 2);
      ++n;
    }
    *rms_rel_error = n ? std::sqrt(e / double(n)) : 0.0;
  }
  return f;
}

std::vector<ScalingTable> build_tables(const std::vector<RunSummary>& runs, const ScalingMode* forced) {
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<const RunSummary*>> groups;
  for (const auto& r : runs) groups[{r.model, r.algo, r.compress}].push_back(&r);
  std::vector<ScalingTable> tables;
  for (auto& [key, members] : groups) {
    ScalingTable t;
    std::tie(t.model, t.algo, t.compress) = key;
    // mode
    auto all_same = [&](auto get) {
      for (auto* r : members)
        if (std::abs(get(r) - get(members.front())) > 1e-9) return false;
      return true;
    };
    const bool same_global = all_same([](const RunSummary* r) { return r->global_batch; });
    const bool same_per_rank = all_same([](const RunSummary* r) { return r->per_rank_batch; });
    if (forced) {
      t.mode = *forced;
    } else if (same_global && !same_per_rank) {
      t.mode = ScalingMode::strong;
    } else if (same_per_rank && !same_global) {
      t.mode = ScalingMode::weak;
    } else if (same_global && same_per_rank) {
      t.mode = ScalingMode::strong;  // one rank count only: either reading is the same
    } else {
      std::string files;
      for (auto* r : members) files += "\n  " + r->file + " (ranks " + std::to_string(r->ranks) + ", per-rank batch " +
                                       fmt("%g", r->per_rank_batch) + ", global " + fmt("%g", r->global_batch) + ")";
      HPDT_FAIL("runs of model ", t.model, " algo ", t.algo, " compress ", t.compress,
                " keep neither the global batch (strong scaling) nor the per-rank batch (weak scaling) fixed; "
                "put each sweep in its own directory or pass --mode:",
                files);
    }
    // one run per rank count: the median step time of repeats
    std::map<int, std::vector<const RunSummary*>> by_ranks;
    for (auto* r : members) by_ranks[r->ranks].push_back(r);
    for (auto& [w, reps] : by_ranks) {
      std::sort(reps.begin(), reps.end(), [](auto* a, auto* b) { return a->step_time_s < b->step_time_s; });
      const RunSummary* r = reps[reps.size() / 2];
      ScalingRow row;
      row.ranks = w;
      row.nodes = r->nodes;
      row.per_rank_batch = r->per_rank_batch;
      row.global_batch = r->global_batch;
      row.step_time_s = r->step_time_s;
      row.throughput_img_s = r->throughput_img_s;
      row.comm_share = r->exposed_comm_s / r->step_time_s;
      row.data_share = r->data_wait_s / r->step_time_s;
      row.test_accuracy = r->test_accuracy;
      row.forward_s = r->forward_s;
      row.backward_s = r->backward_s;
      row.exposed_comm_s = r->exposed_comm_s;
      row.optimizer_s = r->optimizer_s;
      row.data_wait_s = r->data_wait_s;
      row.file = r->file;
      t.rows.push_back(row);
    }
    const ScalingRow& base = t.rows.front();
    std::vector<std::pair<double, double>> pts;
    for (auto& row : t.rows) {
      row.speedup = base.ranks * row.throughput_img_s / base.throughput_img_s;
      row.efficiency = row.speedup / row.ranks;
      pts.emplace_back(row.ranks, row.speedup);
    }
    t.parallel_fraction = fit_parallel_fraction(t.mode, pts, &t.fit_rms_error);
    for (auto& row : t.rows) row.amdahl_speedup = law_speedup(t.mode, t.parallel_fraction, row.ranks);
    tables.push_back(std::move(t));
  }
  return tables;
}

std::string format_table(const ScalingTable& t) {
  std::ostringstream os;
  os << "# " << mode_name(t.mode) << " scaling: model " << t.model << ", algo " << t.algo << ", compress " << t.compress
     << (t.mode == ScalingMode::strong ? " (fixed global batch)" : " (fixed per-rank batch)") << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "# %5s %5s %7s %8s %11s %12s %8s %6s %6s %6s %8s\n", "ranks", "nodes", "batch",
                "global", "step(ms)", "img/s", "S", "E", "comm", "data", "S(law)");
  os << line;
  for (const auto& r : t.rows) {
    std::snprintf(line, sizeof line, "  %5d %5d %7g %8g %11.3f %12.1f %8.3f %6.3f %5.1f%% %5.1f%% %8.3f\n", r.ranks,
                  r.nodes, r.per_rank_batch, r.global_batch, r.step_time_s * 1e3, r.throughput_img_s, r.speedup,
                  r.efficiency, 100 * r.comm_share, 100 * r.data_share, r.amdahl_speedup);
    os << line;
  }
  if (t.mode == ScalingMode::strong) {
    os << "# Amdahl fit: parallel fraction f = " << fmt("%.4f", t.parallel_fraction) << ", max speedup 1/(1-f) = "
       << (t.parallel_fraction < 1 ? fmt("%.1f", 1 / (1 - t.parallel_fraction)) : std::string("inf"))
       << ", rms error " << fmt("%.1f", 100 * t.fit_rms_error) << "%\n";
  } else {
    os << "# Gustafson fit: parallel fraction f = " << fmt("%.4f", t.parallel_fraction)
       << " (scaled speedup (1-f) + f W), rms error " << fmt("%.1f", 100 * t.fit_rms_error) << "%\n";
  }
  return os.str();
}

nlohmann::json to_json(const ScalingTable& t) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : t.rows)
    rows.push_back({{"ranks", r.ranks}, {"nodes", r.nodes}, {"per_rank_batch", r.per_rank_batch},
                    {"global_batch", r.global_batch}, {"step_time_s", r.step_time_s},
                    {"throughput_img_s", r.throughput_img_s}, {"speedup", r.speedup}, {"efficiency", r.efficiency},
                    {"exposed_comm_share", r.comm_share}, {"data_wait_share", r.data_share},
                    {"law_speedup", r.amdahl_speedup}, {"test_accuracy", r.test_accuracy}, {"forward_s", r.forward_s},
                    {"backward_s", r.backward_s}, {"exposed_comm_s", r.exposed_comm_s}, {"optimizer_s", r.optimizer_s},
                    {"data_wait_s", r.data_wait_s}, {"file", r.file}});
  return {{"model", t.model}, {"algo", t.algo}, {"compress", t.compress}, {"mode", mode_name(t.mode)},
          {"parallel_fraction", t.parallel_fraction}, {"law", t.mode == ScalingMode::strong ? "amdahl" : "gustafson"},
          {"fit_rms_rel_error", t.fit_rms_error}, {"rows", rows}};
}

std::vector<std::string> csv_header() {
  return {"model", "algo", "compress", "mode", "ranks", "nodes", "per_rank_batch", "global_batch", "step_time_s",
          "throughput_img_s", "speedup", "efficiency", "exposed_comm_share", "data_wait_share", "law_speedup",
          "parallel_fraction"};
}

std::vector<std::vector<std::string>> csv_rows(const ScalingTable& t) {
  std::vector<std::vector<std::string>> out;
  for (const auto& r : t.rows)
    out.push_back({t.model, t.algo, t.compress, mode_name(t.mode), std::to_string(r.ranks), std::to_string(r.nodes),
                   fmt("%g", r.per_rank_batch), fmt("%g", r.global_batch), fmt("%.6g", r.step_time_s),
                   fmt("%.6g", r.throughput_img_s), fmt("%.4f", r.speedup), fmt("%.4f", r.efficiency),
                   fmt("%.4f", r.comm_share), fmt("%.4f", r.data_share), fmt("%.4f", r.amdahl_speedup),
                   fmt("%.4f", t.parallel_fraction)});
  return out;
}

double parse_bandwidth(const std::string& text) {
  std::string s = text;
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  double mult = 1;
  if (auto x = s.find_first_of("x*"); x != std::string::npos) {
    try {
      size_t used = 0;
      mult = std::stod(s.substr(0, x), &used);
      if (used != x) throw std::invalid_argument("");
    } catch (const std::exception&) {
      HPDT_FAIL("bad bandwidth '", text, "': expected e.g. 4x400Gbit/s");
    }
    s = s.substr(x + 1);
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    HPDT_FAIL("bad bandwidth '", text, "': expected a number with a unit, e.g. 450GB/s, 400Gbit/s, 1Gb/s");
  }
  std::string unit = s.substr(used);
  static const std::map<std::string, double> units = {
      {"", 1},          {"B/s", 1},         {"KB/s", 1e3},     {"MB/s", 1e6},       {"GB/s", 1e9},
      {"TB/s", 1e12},   {"bit/s", 0.125},   {"Kbit/s", 125},   {"Mbit/s", 1.25e5},  {"Gbit/s", 1.25e8},
      {"Tbit/s", 1.25e11}, {"Kb/s", 125},   {"Mb/s", 1.25e5},  {"Gb/s", 1.25e8},    {"kbit", 125},
      {"mbit", 1.25e5}, {"gbit", 1.25e8},   {"GiB/s", 1073741824.0}, {"MiB/s", 1048576.0}};
  auto it = units.find(unit);
  HPDT_CHECK(it != units.end(), "bad bandwidth '", text, "': unknown unit '", unit,
             "' (use B/s, MB/s, GB/s, GiB/s, Mbit/s, Gbit/s, Gb/s, or tc's mbit/gbit)");
  const double bps = mult * v * it->second;
  HPDT_CHECK(bps > 0, "bad bandwidth '", text, "': must be > 0");
  return bps;
}

std::vector<PredictRow> predict(const PredictInput& in) {
  HPDT_CHECK(in.compute_s > 0, "predict needs the measured compute time per step (> 0)");
  HPDT_CHECK(in.grad_bytes > 0, "predict needs the gradient size in bytes (> 0)");
  HPDT_CHECK(in.overlap >= 0 && in.overlap <= 1, "overlap must be in [0, 1], got ", in.overlap);
  std::vector<PredictRow> out;
  for (int w : in.ranks) {
    HPDT_CHECK(w >= 1, "rank counts must be >= 1, got ", w);
    for (const auto& a : in.algos)
      for (const auto& c : in.compresses) {
        PredictRow r;
        r.ranks = w;
        r.nodes = (w + in.net.ranks_per_node - 1) / in.net.ranks_per_node;
        r.algo = a;
        r.compress = c;
        r.comm_s = predict_exchange_s(a, c, w, in.grad_bytes, in.net, in.powersgd_ratio);
        r.exposed_comm_s = std::max(0.0, r.comm_s - in.overlap * in.backward_s);
        r.step_s = in.compute_s + r.exposed_comm_s;
        r.efficiency = in.compute_s / r.step_s;  // weak scaling: T1/TW
        r.speedup = w * r.efficiency;
        out.push_back(r);
      }
  }
  return out;
}

std::string format_predictions(const std::vector<PredictRow>& rows) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "# %6s %5s %-6s %-12s %11s %11s %11s %7s %9s\n", "ranks", "nodes", "algo", "compress",
                "comm(ms)", "exposed(ms)", "step(ms)", "E", "S");
  os << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "  %6d %5d %-6s %-12s %11.3f %11.3f %11.3f %7.3f %9.1f\n", r.ranks, r.nodes,
                  r.algo.c_str(), r.compress.c_str(), r.comm_s * 1e3, r.exposed_comm_s * 1e3, r.step_s * 1e3,
                  r.efficiency, r.speedup);
    os << line;
  }
  return os.str();
}

nlohmann::json to_json(const PredictRow& r) {
  return {{"ranks", r.ranks},   {"nodes", r.nodes},   {"algo", r.algo},       {"compress", r.compress},
          {"comm_s", r.comm_s}, {"exposed_comm_s", r.exposed_comm_s}, {"step_s", r.step_s},
          {"efficiency", r.efficiency}, {"speedup", r.speedup}};
}

std::vector<Explained> explain(const std::vector<RunSummary>& runs, const Network& net, double grad_bytes,
                               double powersgd_ratio) {
  std::vector<Explained> out;
  for (const auto& r : runs) {
    const double g = r.grad_bytes > 0 ? r.grad_bytes : grad_bytes;
    HPDT_CHECK(g > 0, "run ", r.file, " does not say its gradient size; pass --grad-bytes");
    Network n = net;
    n.ranks_per_node = std::max(1, r.ranks / std::max(1, r.nodes));
    Explained e;
    e.run = r;
    const std::string algo = (r.algo == "auto" || r.algo == "none") ? "ring" : r.algo;
    e.predicted_comm_s = r.ranks > 1 ? predict_exchange_s(algo, r.compress, r.ranks, g, n, powersgd_ratio) : 0.0;
    e.predicted_step_s = r.forward_s + r.backward_s + r.optimizer_s + r.data_wait_s + e.predicted_comm_s;
    out.push_back(e);
  }
  return out;
}

std::string format_explained(const std::vector<Explained>& rows) {
  std::ostringstream os;
  char line[320];
  std::snprintf(line, sizeof line, "# %5s %5s %-6s %-12s %13s %13s %12s %12s  %s\n", "ranks", "nodes", "algo", "compress",
                "comm meas(ms)", "comm model(ms)", "step meas(ms)", "step model(ms)", "file");
  os << line;
  for (const auto& e : rows) {
    std::snprintf(line, sizeof line, "  %5d %5d %-6s %-12s %13.3f %14.3f %13.3f %14.3f  %s\n", e.run.ranks, e.run.nodes,
                  e.run.algo.c_str(), e.run.compress.c_str(), e.run.exposed_comm_s * 1e3, e.predicted_comm_s * 1e3,
                  e.run.step_time_s * 1e3, e.predicted_step_s * 1e3, e.run.file.c_str());
    os << line;
  }
  return os.str();
}

}  // namespace hpdt::bench
