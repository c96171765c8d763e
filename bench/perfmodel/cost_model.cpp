#include "hpdt/bench/cost_model.h"

#include <algorithm>
#include <cmath>

#include "hpdt/core/error.h"

namespace hpdt::bench {

namespace {
double ceil_lg(int p) { return p <= 1 ? 0.0 : std::ceil(std::log2(double(p))); }
bool is_pow2(int p) { return p > 0 && (p & (p - 1)) == 0; }
}  // namespace

bool is_known_algorithm(const std::string& algo) {
  return algo == "ring" || algo == "tree" || algo == "rhd" || algo == "mpi" || algo == "nccl" || algo == "hier";
}

Coefficients flat_coefficients(const std::string& algo, int p) {
  HPDT_CHECK(p >= 1, "rank count must be >= 1, got ", p);
  HPDT_CHECK(is_known_algorithm(algo), "no cost model for algorithm '", algo, "' (known: ring tree rhd mpi nccl hier)");
  if (p == 1) return {0, 0};
  const double pm = double(p - 1) / p;
  if (algo == "ring" || algo == "nccl" || algo == "hier") return {2.0 * (p - 1), 2.0 * pm};
  if (algo == "tree") return {2.0 * ceil_lg(p), 2.0};
  // rhd, mpi: Rabenseifner; a non-power-of-two count folds the extra ranks in first and out last.
  Coefficients c{2.0 * std::floor(std::log2(double(p))), 2.0 * pm};
  if (!is_pow2(p)) {
    c.a += 2;
    c.b += 1;
  }
  return c;
}

AlphaBeta fit_alpha_beta(const Coefficients& c, const std::vector<TimeSample>& samples) {
  AlphaBeta f;
  f.samples = samples.size();
  if (samples.empty() || (c.a == 0 && c.b == 0)) return f;
  // Least squares on relative error (each sample weighted by 1/t^2), so that the microsecond-scale
  // small messages and the second-scale large ones both count: minimise sum ((x_i.theta - t_i)/t_i)^2.
  double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
  for (const auto& s : samples) {
    if (!(s.seconds > 0)) continue;
    const double w = 1.0 / (s.seconds * s.seconds);
    const double x1 = c.a, x2 = c.b * s.bytes;
    s11 += w * x1 * x1;
    s12 += w * x1 * x2;
    s22 += w * x2 * x2;
    r1 += w * x1 * s.seconds;
    r2 += w * x2 * s.seconds;
  }
  const double det = s11 * s22 - s12 * s12;
  double alpha = 0, beta = 0;
  if (det > 1e-12 * s11 * s22 && det > 0) {
    alpha = (r1 * s22 - r2 * s12) / det;
    beta = (s11 * r2 - s12 * r1) / det;
  }
  // Constrained to >= 0: when the unconstrained optimum has a negative part, the best
  // non-negative fit lies on a boundary (one parameter zero); take the better of the two.
  if (!(alpha >= 0 && beta >= 0)) {
    const double a_only = s11 > 0 ? std::max(0.0, r1 / s11) : 0.0;
    const double b_only = s22 > 0 ? std::max(0.0, r2 / s22) : 0.0;
    auto cost = [&](double a, double b) {
      double e = 0;
      for (const auto& s : samples)
        if (s.seconds > 0) e += std::pow((c.a * a + c.b * s.bytes * b - s.seconds) / s.seconds, 2);
      return e;
    };
    if (cost(a_only, 0) <= cost(0, b_only)) {
      alpha = a_only;
      beta = 0;
    } else {
      alpha = 0;
      beta = b_only;
    }
  }
  f.alpha_s = alpha;
  f.beta_s_per_byte = beta;
  double e2 = 0;
  size_t m = 0;
  for (const auto& s : samples) {
    if (!(s.seconds > 0)) continue;
    e2 += std::pow((f.predict_s(c, s.bytes) - s.seconds) / s.seconds, 2);
    ++m;
  }
  f.rms_rel_error = m ? std::sqrt(e2 / double(m)) : 0.0;
  return f;
}

nlohmann::json to_json(const AlphaBeta& f) {
  return {{"alpha_us", f.alpha_s * 1e6},
          {"beta_ns_per_byte", f.beta_s_per_byte * 1e9},
          {"bandwidth_GBps", f.beta_s_per_byte > 0 ? 1e-9 / f.beta_s_per_byte : 0.0},
          {"rms_rel_error", f.rms_rel_error},
          {"samples", f.samples}};
}

double predict_allreduce_s(const std::string& algo, int ranks, double bytes, const Network& net) {
  HPDT_CHECK(ranks >= 1, "rank count must be >= 1, got ", ranks);
  HPDT_CHECK(net.ranks_per_node >= 1, "ranks per node must be >= 1, got ", net.ranks_per_node);
  HPDT_CHECK(net.intra_bw_Bps > 0 && net.inter_bw_Bps > 0, "bandwidths must be > 0");
  if (ranks == 1) return 0.0;
  const int g = std::min(ranks, net.ranks_per_node);
  const int nodes = (ranks + g - 1) / g;
  const double n = bytes;
  if (nodes == 1) {  // everything inside one node
    const Coefficients c = flat_coefficients(algo, ranks);
    return c.a * net.intra_alpha_s + c.b * n / net.intra_bw_Bps;
  }
  const double B = net.inter_bw_Bps;  // per node
  if (algo == "hier") {
    const double gm = double(g - 1) / g, nm = double(nodes - 1) / nodes;
    const double intra = 2.0 * ((g - 1) * net.intra_alpha_s + gm * n / net.intra_bw_Bps);
    // inter phase: every one of the g ranks runs a ring over the nodes on its n/g shard; the g
    // rings share the node's links, so together they move 2(N-1)/N * n bytes through them.
    const double inter = 2.0 * (nodes - 1) * net.inter_alpha_s + 2.0 * nm * n / B;
    return intra + inter;
  }
  if (algo == "rhd" || algo == "mpi") {
    // Rabenseifner with recursive halving from distance p/2 (MPICH order): the first lg N steps
    // pair ranks on different nodes, all g ranks of a node at once, moving n/2 + n/4 + ... = (N-1)/N n
    // each; the node's links carry g times that. Intra-node steps are cheap in comparison.
    const Coefficients c = flat_coefficients(algo, ranks);
    const double nm = double(nodes - 1) / nodes, gm = double(g - 1) / g;
    const double inter_bytes = 2.0 * nm * n * g;
    const double intra_bytes = 2.0 * gm * n / nodes;
    return c.a * net.inter_alpha_s + inter_bytes / B + intra_bytes / net.intra_bw_Bps;
  }
  const Coefficients c = flat_coefficients(algo, ranks);
  if (algo == "tree") {
    // Our tree is a heap-numbered binary tree over the node-ordered ranks: beyond the first node
    // every rank's parent and children live on other nodes, so each of the node's g ranks moves its
    // pipelined segments over the node's links: n up to its parent and 2n down to its children
    // (and as much in), 3 g n per direction in all.
    return c.a * net.inter_alpha_s + 3.0 * g * n / B;
  }
  // ring, nccl: a ring over the node-ordered ranks crosses each node boundary once, so the node's
  // links carry one rank's share of the traffic: B(p) n over the node bandwidth.
  return c.a * net.inter_alpha_s + c.b * n / B;
}

WireFormat wire_format(const std::string& compress, double powersgd_ratio) {
  auto param = [&](const std::string& prefix) -> double {
    const std::string v = compress.substr(prefix.size());
    try {
      size_t used = 0;
      const double x = std::stod(v, &used);
      if (used == v.size()) return x;
    } catch (const std::exception&) {
    }
    HPDT_FAIL("bad compression '", compress, "': '", v, "' after '", prefix, "' is not a number");
  };
  if (compress == "none" || compress.empty()) return {1.0, false};
  if (compress == "fp16" || compress == "bf16") return {0.5, false};
  if (compress.rfind("topk:", 0) == 0) {
    const double r = param("topk:");
    HPDT_CHECK(r > 0 && r <= 1, "bad compression '", compress, "': the kept fraction must be in (0, 1]");
    return {2.0 * r, true};  // value (f32) + index (i32) per kept element
  }
  if (compress.rfind("qsgd:", 0) == 0) {
    const double b = param("qsgd:");
    HPDT_CHECK(b >= 1 && b <= 32, "bad compression '", compress, "': bits must be 1..32");
    return {b / 32.0, false};
  }
  if (compress.rfind("powersgd:", 0) == 0) {
    HPDT_CHECK(param("powersgd:") >= 1, "bad compression '", compress, "': rank must be >= 1");
    return {powersgd_ratio, false};
  }
  HPDT_FAIL("unknown compression '", compress, "' (known: none fp16 bf16 topk:R qsgd:B powersgd:R)");
}

double predict_exchange_s(const std::string& algo, const std::string& compress, int ranks, double grad_bytes,
                          const Network& net, double powersgd_ratio) {
  const WireFormat w = wire_format(compress, powersgd_ratio);
  const double m = grad_bytes * w.ratio;
  if (!w.allgather) return predict_allreduce_s(algo, ranks, m, net);
  if (ranks == 1) return 0.0;
  const int g = std::min(ranks, net.ranks_per_node);
  const int nodes = (ranks + g - 1) / g;
  if (nodes == 1) return (ranks - 1) * (net.intra_alpha_s + m / net.intra_bw_Bps);
  // ring all-gather: every boundary link carries the other p-1 ranks' m bytes
  return (ranks - 1) * (net.inter_alpha_s + m / net.inter_bw_Bps);
}

}  // namespace hpdt::bench
