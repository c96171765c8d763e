// hpdt-scaling: strong/weak scaling tables from training runs, and predictions at larger scale.
//
//   hpdt-scaling report DIR [--mode strong|weak] [--json F] [--csv F]
//   hpdt-scaling run --ranks 1,2,4 --out DIR [--launcher "mpiexec -n {ranks}"] -- hpdt-train ARGS...
//   hpdt-scaling predict --compute-ms 40 --grad-bytes 44.7e6 --ranks-per-node 8
//       --intra-bw 450GB/s --inter-bw 4x400Gbit/s --ranks 8,16,...,1024 [--json F]
//   hpdt-scaling predict --explain DIR --ranks-per-node 2 --inter-bw 1gbit ...   (model vs measured)
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "hpdt/core/cli_checks.h"
#include "hpdt/core/error.h"
#include "hpdt/core/results.h"
#include "scaling.h"

using namespace hpdt;
using namespace hpdt::bench;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int> parse_ranks(const std::string& s) {
  std::vector<int> out;
  for (const auto& item : split(s)) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument("");
      out.push_back(v);
    } catch (const std::exception&) {
      HPDT_FAIL("--ranks: '", item, "' is not a positive integer (expected e.g. 1,2,4,8)");
    }
  }
  HPDT_CHECK(!out.empty(), "--ranks: empty list");
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int report(const std::string& dir, const std::string& mode, const std::string& json_out, const std::string& csv_out) {
  std::vector<std::string> skipped;
  const auto runs = load_runs(dir, &skipped);
  for (const auto& s : skipped) std::cerr << "hpdt-scaling: skipped " << s << "\n";
  HPDT_CHECK(!runs.empty(), "no training summaries found under ", dir,
             " (files *.jsonl/*.json with a {\"type\":\"summary\"} line, written by hpdt-train --metrics)");
  ScalingMode forced{};
  const ScalingMode* force = nullptr;
  if (!mode.empty()) {
    forced = mode == "strong" ? ScalingMode::strong : ScalingMode::weak;
    force = &forced;
  }
  const auto tables = build_tables(runs, force);
  nlohmann::json doc = {{"tool", "hpdt-scaling"}, {"dir", dir}, {"build", build_info_json()}};
  doc["tables"] = nlohmann::json::array();
  CsvWriter csv(csv_header());
  for (const auto& t : tables) {
    std::cout << format_table(t) << "\n";
    doc["tables"].push_back(to_json(t));
    for (const auto& row : csv_rows(t)) csv.add_row(row);
  }
  if (!json_out.empty()) write_file_atomic(json_out, doc.dump(2) + "\n");
  if (!csv_out.empty()) csv.write(csv_out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpdt-scaling: strong/weak scaling tables from hpdt-train runs, and alpha-beta predictions"};
  app.require_subcommand(1);

  std::string dir, mode, json_out, csv_out;
  auto* rep = app.add_subcommand("report", "tables from a directory of metrics files (JSON lines)");
  rep->add_option("dir", dir, "directory with the runs' --metrics files (searched recursively)")->required();
  rep->add_option("--mode", mode, "strong|weak (default: detected per group)")->check(CLI::IsMember({"strong", "weak"}));
  rep->add_option("--json", json_out, "write the tables as JSON");
  rep->add_option("--csv", csv_out, "write the tables as CSV");

  std::string ranks_text = "1,2,4", out_dir, launcher = "mpiexec -n {ranks}";
  std::vector<std::string> command;
  auto* run = app.add_subcommand("run", "run a command at each rank count with --metrics, then report");
  run->add_option("--ranks", ranks_text, "rank counts, comma separated")->capture_default_str();
  run->add_option("--out", out_dir, "directory for the metrics files")->required();
  run->add_option("--launcher", launcher, "launch prefix; {ranks} is replaced")->capture_default_str();
  run->add_option("command", command, "the training command (after --)")->required();

  PredictInput in;
  double compute_ms = 0, backward_ms = 0, intra_alpha_us = 1, inter_alpha_us = 5;
  std::string intra_bw = "450GB/s", inter_bw = "4x400Gbit/s", algos = "ring,tree,rhd,hier",
              compresses = "none,fp16,topk:0.01", explain_dir, predict_ranks = "8,16,32,64,128,256,512,1024",
              from_metrics;
  auto* pred = app.add_subcommand("predict", "alpha-beta prediction of weak-scaling efficiency at scale");
  pred->add_option("--compute-ms", compute_ms, "measured compute per step on one rank (fwd+bwd+opt), ms");
  pred->add_option("--backward-ms", backward_ms, "part of compute that can overlap the exchange, ms");
  pred->add_option("--from", from_metrics, "take compute and backward time (and grad bytes) from this 1-rank metrics file");
  pred->add_option("--overlap", in.overlap, "fraction of backward that hides communication (0..1)")
      ->check(hpdt::cli::in_range(0.0, 1.0))
      ->capture_default_str();
  pred->add_option("--grad-bytes", in.grad_bytes, "f32 gradient bytes exchanged per step");
  pred->add_option("--powersgd-ratio", in.powersgd_ratio, "wire/gradient ratio of powersgd:R for this model")
      ->capture_default_str();
  pred->add_option("--ranks-per-node", in.net.ranks_per_node, "GPUs (ranks) per node")->capture_default_str();
  pred->add_option("--intra-bw", intra_bw, "per-rank intra-node bandwidth")->capture_default_str();
  pred->add_option("--inter-bw", inter_bw, "per-NODE inter-node bandwidth, e.g. 4x400Gbit/s")->capture_default_str();
  pred->add_option("--intra-alpha-us", intra_alpha_us, "intra-node latency per message, us")->capture_default_str();
  pred->add_option("--inter-alpha-us", inter_alpha_us, "inter-node latency per message, us")->capture_default_str();
  pred->add_option("--algo", algos, "algorithms")->capture_default_str();
  pred->add_option("--compress", compresses, "compressions")->capture_default_str();
  pred->add_option("--ranks", predict_ranks, "rank counts")->capture_default_str();
  pred->add_option("--explain", explain_dir, "instead: model vs measurement for the runs in this directory");
  pred->add_option("--json", json_out, "write the predictions as JSON");

  try {
    CLI11_PARSE(app, argc, argv);
    if (*rep) return report(dir, mode, json_out, csv_out);
    if (*run) {
      std::filesystem::create_directories(out_dir);
      for (int w : parse_ranks(ranks_text)) {
        std::string pre = launcher;
        for (size_t pos; (pos = pre.find("{ranks}")) != std::string::npos;) pre.replace(pos, 7, std::to_string(w));
        std::string cmd = pre;
        for (const auto& c : command) cmd += " " + shell_quote(c);
        cmd += " --metrics " + shell_quote(out_dir + "/ranks" + std::to_string(w) + ".jsonl");
        std::cerr << "hpdt-scaling: " << cmd << "\n";
        const int rc = std::system(cmd.c_str());
        HPDT_CHECK(rc == 0, "the run at ", w, " ranks failed (exit status ", rc, "): ", cmd);
      }
      return report(out_dir, "", out_dir + "/scaling.json", out_dir + "/scaling.csv");
    }
    // predict
    in.net.intra_bw_Bps = parse_bandwidth(intra_bw);
    in.net.inter_bw_Bps = parse_bandwidth(inter_bw);
    in.net.intra_alpha_s = intra_alpha_us * 1e-6;
    in.net.inter_alpha_s = inter_alpha_us * 1e-6;
    HPDT_CHECK(in.net.ranks_per_node >= 1, "--ranks-per-node must be >= 1");
    nlohmann::json doc = {{"tool", "hpdt-scaling predict"},
                          {"network",
                           {{"ranks_per_node", in.net.ranks_per_node}, {"intra_bw_Bps", in.net.intra_bw_Bps},
                            {"inter_bw_Bps_per_node", in.net.inter_bw_Bps}, {"intra_alpha_s", in.net.intra_alpha_s},
                            {"inter_alpha_s", in.net.inter_alpha_s}}}};
    if (!explain_dir.empty()) {
      const auto runs = load_runs(explain_dir);
      HPDT_CHECK(!runs.empty(), "no training summaries found under ", explain_dir);
      const auto rows = explain(runs, in.net, in.grad_bytes, in.powersgd_ratio);
      std::cout << format_explained(rows);
      return 0;
    }
    if (!from_metrics.empty()) {
      const RunSummary r = load_summary(from_metrics);
      if (compute_ms <= 0) compute_ms = 1e3 * (r.forward_s + r.backward_s + r.optimizer_s + r.data_wait_s);
      if (backward_ms <= 0) backward_ms = 1e3 * r.backward_s;
      if (in.grad_bytes <= 0) in.grad_bytes = r.grad_bytes;
    }
    in.compute_s = compute_ms * 1e-3;
    in.backward_s = backward_ms * 1e-3;
    in.algos = split(algos);
    in.compresses = split(compresses);
    in.ranks = parse_ranks(predict_ranks);
    for (const auto& a : in.algos) HPDT_CHECK(is_known_algorithm(a), "--algo: unknown algorithm '", a, "'");
    for (const auto& c : in.compresses) (void)wire_format(c, in.powersgd_ratio);  // validates
    const auto rows = predict(in);
    std::cout << "# weak scaling prediction: compute " << compute_ms << " ms/step, gradient " << in.grad_bytes / 1e6
              << " MB, " << in.net.ranks_per_node << " ranks/node, intra " << intra_bw << " (alpha " << intra_alpha_us
              << " us), inter " << inter_bw << " per node (alpha " << inter_alpha_us << " us), overlap " << in.overlap
              << "\n"
              << format_predictions(rows);
    if (!json_out.empty()) {
      doc["compute_s"] = in.compute_s;
      doc["grad_bytes"] = in.grad_bytes;
      doc["overlap"] = in.overlap;
      doc["rows"] = nlohmann::json::array();
      for (const auto& r : rows) doc["rows"].push_back(to_json(r));
      write_file_atomic(json_out, doc.dump(2) + "\n");
    }
    return 0;
  } catch (const hpdt::Error& e) {
    std::cerr << "hpdt-scaling: error: " << e.message() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "hpdt-scaling: error: " << e.what() << "\n";
    return 1;
  }
}
