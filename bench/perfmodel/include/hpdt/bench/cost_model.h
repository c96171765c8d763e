// The alpha-beta cost model of the all-reduce family (Thakur, Rabenseifner & Gropp 2005; Patarasuk &
// Yuan 2009), written as t = A(p)*alpha + B(p)*n*beta for an n-byte message on p ranks:
//
//   ring  2(p-1) alpha + 2(p-1)/p n beta               reduce-scatter + all-gather around a ring
//   tree  2 ceil(lg p) alpha + 2 n beta                 pipelined reduce + broadcast (segments hide depth)
//   rhd   2 ceil(lg p) alpha + 2(p-1)/p n beta         Rabenseifner; +2 alpha + n beta when p is not a power of two
//   mpi   fitted like rhd (what Open MPI's tuned module picks for large messages)
//   nccl  like ring
//   hier  ring inside each node, then across nodes on the node's shard (see hier_time)
//
// The reduction cost (gamma) is folded into beta: the fit measures them together, and with a
// memory-bound sum they scale alike. Each algorithm's structural coefficients A(p), B(p) are fixed;
// alpha and beta are either fitted to measurements at one p (fit_alpha_beta) or taken from network
// figures (Network) to predict other p.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hpdt::bench {

// Structural coefficients of t = A*alpha + B*n*beta for a flat (single-level) algorithm on p ranks.
struct Coefficients {
  double a = 0;  // multiplies alpha (seconds per message)
  double b = 0;  // multiplies n*beta (n in bytes, beta seconds per byte)
};
// Known names: ring, tree, rhd, mpi, nccl, hier (hier on one level = ring). Throws on others.
Coefficients flat_coefficients(const std::string& algo, int p);
bool is_known_algorithm(const std::string& algo);

// alpha, beta fitted to (bytes, seconds) samples by least squares on t = A alpha + B n beta, with
// both constrained to be >= 0 (a negative latency is noise, not physics).
struct AlphaBeta {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double rms_rel_error = 0;  // root-mean-square of (model - measured) / measured over the samples
  size_t samples = 0;
  double predict_s(const Coefficients& c, double bytes) const { return c.a * alpha_s + c.b * bytes * beta_s_per_byte; }
};
struct TimeSample {
  double bytes;
  double seconds;
};
AlphaBeta fit_alpha_beta(const Coefficients& c, const std::vector<TimeSample>& samples);
nlohmann::json to_json(const AlphaBeta& f);

// A two-level machine: nodes of `ranks_per_node` ranks joined by a faster intra-node fabric.
struct Network {
  int ranks_per_node = 1;
  double intra_alpha_s = 1e-6;
  double intra_bw_Bps = 450e9;   // per rank, e.g. NVLink 450 GB/s
  double inter_alpha_s = 5e-6;
  double inter_bw_Bps = 200e9;   // per NODE, shared by its ranks, e.g. 4x400 Gbit/s = 200 GB/s
};

// Predicted all-reduce time of `bytes` on `ranks` ranks laid out node by node on `net`.
// Flat algorithms whose ring/tree crosses nodes run at the inter-node figures (a flat ring
// spanning nodes is limited by the node's links: every node both sends and receives the full
// ring traffic of its boundary ranks, so the per-node bandwidth is what counts). hier adds the two
// intra-node phases and runs the inter-node phase on the node's 1/G shard with all G ranks sharing
// the node's links.
double predict_allreduce_s(const std::string& algo, int ranks, double bytes, const Network& net);

// What travels for a compression spec, relative to the uncompressed f32 gradient, and whether it
// travels as an all-gather (sparse formats) rather than an all-reduce.
//   none 1 | fp16, bf16 0.5 | qsgd:B  B/32 (+ one f32 scale) | topk:R  all-gather of R*n (value,index)
//   pairs = 2R | powersgd:R  `powersgd_ratio` (depends on the layer shapes; the caller supplies it)
struct WireFormat {
  double ratio = 1;       // wire bytes / (4 * elements)
  bool allgather = false;
};
WireFormat wire_format(const std::string& compress, double powersgd_ratio = 0.01);

// Predicted communication time for one gradient exchange of `grad_bytes` (f32) with compression.
// An all-gather of m bytes per rank costs (p-1) alpha + (p-1) m beta on a ring: it grows with p,
// which is why sparse formats stop paying off at scale.
double predict_exchange_s(const std::string& algo, const std::string& compress, int ranks, double grad_bytes,
                          const Network& net, double powersgd_ratio = 0.01);

}  // namespace hpdt::bench
