// hpdt-scaling's logic: read the summary lines of training runs (hpdt-train --metrics), build strong-
// and weak-scaling tables with speedup, efficiency, communication and data-wait shares and an Amdahl
// fit, and predict efficiency at larger scale from the alpha-beta model (cost_model.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpdt/bench/cost_model.h"

namespace hpdt::bench {

// One training run: the `{"type":"summary", ...}` line hpdt-train writes last.
struct RunSummary {
  std::string file;
  std::string model, algo = "none", compress = "none", git_commit;
  int ranks = 0, nodes = 1;
  double per_rank_batch = 0, global_batch = 0;
  long steps = 0;
  double step_time_s = 0, throughput_img_s = 0;
  double forward_s = 0, backward_s = 0, exposed_comm_s = 0, optimizer_s = 0, data_wait_s = 0;
  double bytes_sent_per_step = 0;
  double test_accuracy = -1;  // -1: not reported
  double grad_bytes = 0;      // 0: not reported (optional field "grad_bytes" or "params")
  std::vector<std::string> hosts;
};

// Parses one summary object; throws hpdt::Error naming `file` and the missing or bad field.
RunSummary parse_summary(const nlohmann::json& j, const std::string& file);
// The last summary line of a JSON-lines file (or a .json file holding one summary object).
RunSummary load_summary(const std::string& path);
// Every *.jsonl / *.json under `dir` (recursively) that holds a summary; files without one are
// reported in `skipped` (path: reason) rather than failing, since job output dirs hold other JSON too.
std::vector<RunSummary> load_runs(const std::string& dir, std::vector<std::string>* skipped = nullptr);

enum class ScalingMode { strong, weak };
const char* mode_name(ScalingMode m);

struct ScalingRow {
  int ranks = 0, nodes = 0;
  double per_rank_batch = 0, global_batch = 0;
  double step_time_s = 0, throughput_img_s = 0;
  double speedup = 0, efficiency = 0;
  double comm_share = 0, data_share = 0;  // exposed comm / step, data wait / step
  double amdahl_speedup = 0;              // the fitted law at this W
  double forward_s = 0, backward_s = 0, exposed_comm_s = 0, optimizer_s = 0, data_wait_s = 0;
  double test_accuracy = -1;
  std::string file;
};

struct ScalingTable {
  std::string model, algo, compress;
  ScalingMode mode = ScalingMode::strong;
  std::vector<ScalingRow> rows;  // by ranks
  // Strong: Amdahl S(W) = 1 / ((1-f) + f/W). Weak: Gustafson S(W) = (1-f) + f W.
  // f = parallel fraction (least squares on S). max_speedup = 1/(1-f) for strong, inf for weak.
  double parallel_fraction = 0;
  double fit_rms_error = 0;  // rms of (fitted S - measured S) / measured S
};

// Groups runs by (model, algo, compress) and builds one table per group. The mode is detected per
// group (constant global batch = strong, constant per-rank batch = weak) unless `forced` is given;
// a group that is neither is an error naming its files. Repeats at one rank count: the run with the
// median step time is used. Speedup is the throughput ratio X(W)/X(W0) scaled by W0 (so for strong
// scaling S = T(W0) W0 / T(W) ... = T1/TW when W0 = 1, and for weak scaling S = W T1/TW); E = S/W.
std::vector<ScalingTable> build_tables(const std::vector<RunSummary>& runs, const ScalingMode* forced = nullptr);

std::string format_table(const ScalingTable& t);
nlohmann::json to_json(const ScalingTable& t);
std::vector<std::string> csv_header();
std::vector<std::vector<std::string>> csv_rows(const ScalingTable& t);

// Least-squares parallel fraction for Amdahl (strong) or Gustafson (weak) on (W, S) points.
double fit_parallel_fraction(ScalingMode mode, const std::vector<std::pair<double, double>>& w_speedup,
                             double* rms_rel_error = nullptr);
double law_speedup(ScalingMode mode, double f, double w);

// Bandwidth text: "450GB/s", "4x400Gbit/s", "1Gb/s", "100MB/s", "125e6" (bytes/s). Throws on bad input.
double parse_bandwidth(const std::string& text);

// Predict mode: weak scaling (fixed per-rank batch) from a measured per-step compute time.
struct PredictInput {
  double compute_s = 0;    // forward + backward + optimizer (+ data wait) per step on one rank
  double backward_s = 0;   // part of compute the exchange can overlap with
  double overlap = 0;      // fraction of backward_s that hides communication (0 = none hidden)
  double grad_bytes = 0;   // f32 gradient bytes exchanged per step
  double powersgd_ratio = 0.01;
  Network net;
  std::vector<std::string> algos, compresses;
  std::vector<int> ranks;
};
struct PredictRow {
  int ranks = 0, nodes = 0;
  std::string algo, compress;
  double comm_s = 0, exposed_comm_s = 0, step_s = 0, efficiency = 0, speedup = 0;
};
std::vector<PredictRow> predict(const PredictInput& in);
std::string format_predictions(const std::vector<PredictRow>& rows);
nlohmann::json to_json(const PredictRow& r);

// Explains measured runs: for each run the model's exposed communication (no overlap assumed) next
// to the measured one, using the run's own compute time and `grad_bytes` (or the run's own).
struct Explained {
  RunSummary run;
  double predicted_comm_s = 0, predicted_step_s = 0;
};
std::vector<Explained> explain(const std::vector<RunSummary>& runs, const Network& net, double grad_bytes,
                               double powersgd_ratio = 0.01);
std::string format_explained(const std::vector<Explained>& rows);

}  // namespace hpdt::bench
