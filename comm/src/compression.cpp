// Gradient compression: fp16/bf16 on the wire, top-k, QSGD and PowerSGD, with error feedback.
#include "hpdt/comm/compression.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "algorithms.h"
#include "compression_wire.h"
#include "hpdt/core/error.h"
#include "hpdt/core/philox.h"
#include "hpdt/kernels/accumulate.h"
#include "hpdt/kernels/compress.h"
#include "hpdt/kernels/cpu/compress.h"
#include "hpdt/kernels/cpu/gemm.h"

namespace hpdt::comm {

// ---- names ----------------------------------------------------------------------------------------

namespace {
constexpr const char* kForms = "none, fp16, bf16, topk:R (0 < R <= 1), qsgd:B (2 <= B <= 8) or powersgd:R (R >= 1), optionally with ,noef";

[[noreturn]] void bad_spec(std::string_view text, std::string_view why) {
  HPDT_FAIL("compression '", text, "': ", why, " (expected ", kForms, ")");
}
}  // namespace

CompressionSpec parse_compression(std::string_view text) {
  CompressionSpec s;
  std::string_view body = text;
  if (const size_t comma = body.find(','); comma != std::string_view::npos) {
    if (body.substr(comma + 1) != "noef") bad_spec(text, "the only suffix is ',noef'");
    s.error_feedback = false;
    body = body.substr(0, comma);
  }
  const size_t colon = body.find(':');
  const std::string_view name = body.substr(0, colon);
  const std::string arg = colon == std::string_view::npos ? std::string() : std::string(body.substr(colon + 1));
  auto number = [&](bool integer) {
    if (arg.empty()) bad_spec(text, "missing the number after ':'");
    char* end = nullptr;
    const double v = std::strtod(arg.c_str(), &end);
    if (end != arg.c_str() + arg.size() || !std::isfinite(v)) bad_spec(text, "'" + arg + "' is not a number");
    if (integer && v != std::floor(v)) bad_spec(text, "'" + arg + "' is not an integer");
    return v;
  };
  if (name == "none" || name == "fp16" || name == "bf16") {
    if (colon != std::string_view::npos) bad_spec(text, std::string(name) + " takes no argument");
    s.kind = name == "none" ? CompressionKind::none : name == "fp16" ? CompressionKind::fp16 : CompressionKind::bf16;
    if (!s.error_feedback) bad_spec(text, "',noef' applies to topk, qsgd and powersgd only");
    s.error_feedback = false;
  } else if (name == "topk") {
    s.kind = CompressionKind::topk;
    s.ratio = number(false);
    if (!(s.ratio > 0 && s.ratio <= 1)) bad_spec(text, "the top-k ratio must be in (0, 1]");
  } else if (name == "qsgd") {
    s.kind = CompressionKind::qsgd;
    const double b = number(true);
    if (b < 2 || b > 8) bad_spec(text, "QSGD bits must be 2..8");
    s.bits = int(b);
  } else if (name == "powersgd") {
    s.kind = CompressionKind::powersgd;
    const double r = number(true);
    if (r < 1 || r > 1024) bad_spec(text, "the PowerSGD rank must be 1..1024");
    s.rank = int(r);
  } else {
    bad_spec(text, "unknown method '" + std::string(name) + "'");
  }
  return s;
}

std::string compression_name(const CompressionSpec& s) {
  std::string n;
  switch (s.kind) {
    case CompressionKind::none: return "none";
    case CompressionKind::fp16: return "fp16";
    case CompressionKind::bf16: return "bf16";
    case CompressionKind::topk: {
      char buf[64];
      for (int digits = 1; digits <= 17; ++digits) {  // the shortest text that reads back as the same ratio
        std::snprintf(buf, sizeof buf, "%.*g", digits, s.ratio);
        if (std::strtod(buf, nullptr) == s.ratio) break;
      }
      n = std::string("topk:") + buf;
      break;
    }
    case CompressionKind::qsgd: n = "qsgd:" + std::to_string(s.bits); break;
    case CompressionKind::powersgd: n = "powersgd:" + std::to_string(s.rank); break;
  }
  return s.error_feedback ? n : n + ",noef";
}

// ---- shared machinery ---------------------------------------------------------------------------------

Compressor::Compressor(const CompressionSpec& spec, size_t count) : spec_(spec), count_(count) {
  if (spec_.error_feedback && spec_.kind != CompressionKind::none) residual_.assign(count, 0.0f);
}

std::vector<float> Compressor::state() const {
  std::vector<float> s(residual_);
  wire::append_calls(s, calls_);  // QSGD's random stream position
  return s;
}

void Compressor::set_state(const std::vector<float>& s) {
  HPDT_CHECK(s.size() == residual_.size() + 2, "compression state of ", s.size(), " values does not fit ", compression_name(spec_),
             " over ", count_, " values (expected ", residual_.size() + 2, ")");
  std::copy(s.begin(), s.end() - 2, residual_.begin());
  calls_ = wire::read_calls(s.data() + s.size() - 2);
}

std::vector<std::vector<float>> split_compression_state(const std::vector<float>& state,
                                                        const std::vector<size_t>& sizes, const std::string& what) {
  size_t total = 0;
  for (size_t n : sizes) total += n;
  HPDT_CHECK(total == state.size(), what, ": compression state of ", state.size(), " values does not match the ", total,
             " expected");
  std::vector<std::vector<float>> parts;
  size_t off = 0;
  for (size_t n : sizes) {
    parts.emplace_back(state.begin() + long(off), state.begin() + long(off + n));
    off += n;
  }
  return parts;
}

namespace wire {

HalfPart half_part(const Transport& t, size_t n) {
  const size_t p = size_t(t.size()), r = size_t(t.rank());
  return {detail::part_begin(n, p, r), detail::part_begin(n, p, r + 1)};
}

void half_reduce_scatter(Transport& t, const uint16_t* wire, uint16_t* incoming, size_t n) {
  const int p = t.size(), r = t.rank();
  const HalfPart mine = half_part(t, n);
  if (p > 1 && n > 0) {  // rank q receives everybody's part q
    for (int q = 0; q < p; ++q)
      if (q != r) t.irecv(incoming + size_t(q) * mine.size(), mine.size() * 2, q, 311);
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      const size_t ql = detail::part_begin(n, size_t(p), size_t(q)),
                   qh = detail::part_begin(n, size_t(p), size_t(q) + 1);
      t.isend(wire + ql, (qh - ql) * 2, q, 311);
    }
    t.wait_all();
  }
  if (mine.size() > 0)  // fewer elements than ranks: this rank's part is empty and incoming may have no storage
    std::memcpy(incoming + size_t(r) * mine.size(), wire + mine.lo, mine.size() * 2);
}

void half_allgather(Transport& t, uint16_t* wire, size_t n) {
  const int p = t.size(), r = t.rank();
  if (p == 1 || n == 0) return;
  const HalfPart mine = half_part(t, n);
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    const size_t ql = detail::part_begin(n, size_t(p), size_t(q)), qh = detail::part_begin(n, size_t(p), size_t(q) + 1);
    t.irecv(wire + ql, (qh - ql) * 2, q, 312);
  }
  for (int q = 0; q < p; ++q)
    if (q != r) t.isend(wire + mine.lo, mine.size() * 2, q, 312);
  t.wait_all();
}

PowerSgdLayout powersgd_layout(size_t n, size_t R, std::vector<MatrixView> views, uint64_t seed, uint64_t id) {
  PowerSgdLayout l;
  if (views.empty() && n > 0) {  // the whole range as one near-square matrix, padded with zeros
    const size_t cols = size_t(std::ceil(std::sqrt(double(n))));
    views.push_back({0, (n + cols - 1) / cols, cols});
  }
  std::sort(views.begin(), views.end(), [](const MatrixView& a, const MatrixView& b) { return a.offset < b.offset; });
  std::vector<char> covered(n, 0);
  size_t prev_end = 0;
  for (const MatrixView& v : views) {
    const size_t sz = v.rows * v.cols;
    HPDT_CHECK(v.offset >= prev_end && v.offset <= n, "powersgd: matrices overlap or lie outside the range of ", n,
               " values");
    prev_end = v.offset + sz;
    const size_t avail = n - v.offset;
    const bool gains = std::min(v.rows, v.cols) > R && (v.rows + v.cols) * R < v.rows * v.cols;
    if (!gains) continue;
    HPDT_CHECK(sz <= avail || (views.size() == 1 && v.offset == 0), "powersgd: matrix at ", v.offset, " of ", v.rows,
               "x", v.cols, " exceeds the range of ", n, " values");
    l.mats.push_back({v.offset, v.rows, v.cols, std::min(sz, avail), l.p_total, l.q_total});
    for (size_t i = 0; i < v.cols * R; ++i)
      l.q.push_back(philox_normal(seed, (id << 20) | 0xfffffu, l.q_total + i));  // the same on every rank
    l.q_total += v.cols * R;
    l.p_total += v.rows * R;
    std::fill(covered.begin() + long(v.offset), covered.begin() + long(v.offset + l.mats.back().size), 1);
  }
  for (size_t i = 0; i < n; ++i)
    if (!covered[i]) l.rest.push_back(i);
  return l;
}

// Modified Gram-Schmidt on the R columns of a rows x R row-major matrix, in double; a column that
// lies in the span of the earlier ones (rank-deficient P) becomes zero.
void powersgd_orthonormalise(float* P, size_t rows, size_t R) {
  for (size_t j = 0; j < R; ++j) {
    double before = 0;
    for (size_t i = 0; i < rows; ++i) before += double(P[i * R + j]) * double(P[i * R + j]);
    for (size_t k = 0; k < j; ++k) {
      double dot = 0;
      for (size_t i = 0; i < rows; ++i) dot += double(P[i * R + j]) * double(P[i * R + k]);
      for (size_t i = 0; i < rows; ++i) P[i * R + j] = float(double(P[i * R + j]) - dot * double(P[i * R + k]));
    }
    double norm = 0;
    for (size_t i = 0; i < rows; ++i) norm += double(P[i * R + j]) * double(P[i * R + j]);
    norm = std::sqrt(norm);
    // What is left of a column inside the span of the earlier ones is rounding noise: drop it.
    const double inv = norm > 1e-5 * std::sqrt(before) && norm > 1e-30 ? 1.0 / norm : 0.0;
    for (size_t i = 0; i < rows; ++i) P[i * R + j] = float(double(P[i * R + j]) * inv);
  }
}

uint64_t counted_allreduce(Communicator& c, float* data, size_t n, ReduceOp op, Algorithm a, const AllreduceOptions& o) {
  allreduce(c, data, data, n, DType::f32, op, a, o);
  Algorithm used = a == Algorithm::automatic ? resolve_auto(c, n * sizeof(float), o).algorithm : a;
  const int p = c.size();
  // MPI_Allreduce and shm move no bytes through our transports: count what ring would send.
  return used == Algorithm::mpi || used == Algorithm::shm ? ring_allreduce_bytes(p, n * sizeof(float)) : 0;
}

}  // namespace wire

namespace {

// g + e into `out` (or g when there is no error feedback).
void add_residual(const float* g, const std::vector<float>& e, float* out, size_t n) {
  if (e.empty()) {
    if (out != g) std::memcpy(out, g, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = g[i] + e[i];
}

class NoCompression final : public Compressor {
 public:
  NoCompression(const CompressionSpec& s, size_t n) : Compressor(s, n) {}
  void allreduce(Communicator& c, float* data, ReduceOp op, Algorithm a, const AllreduceOptions& o) override {
    const uint64_t b0 = c.bytes_sent();
    const uint64_t extra = wire::counted_allreduce(c, data, count_, op, a, o);
    wire_bytes_ = c.bytes_sent() - b0 + extra;
    if (record_) transmitted_.assign(data, data + count_);
    ++calls_;
  }
};

// fp16/bf16: direct reduce-scatter of 16-bit values (part j summed on rank j in f32, in rank order) and
// direct all-gather of the 16-bit results (wire::half_reduce_scatter, half_allgather). Casts by kernels::convert
// (F16C for f16 where available).
class HalfWire final : public Compressor {
 public:
  HalfWire(const CompressionSpec& s, size_t n) : Compressor(s, n) {}
  void allreduce(Communicator& c, float* data, ReduceOp op, Algorithm, const AllreduceOptions& o) override {
    const uint64_t b0 = c.bytes_sent();
    const DType wire_type = spec_.kind == CompressionKind::bf16 ? DType::bf16 : DType::f16;
    const size_t n = count_;
    wire_.resize(n);
    kernels::convert(wire_.data(), wire_type, data, DType::f32, n);
    if (record_) {
      transmitted_.resize(n);
      kernels::convert(transmitted_.data(), DType::f32, wire_.data(), wire_type, n);
    }
    Transport& t = c.transport();
    const int p = t.size();
    t.set_context({"compressed allreduce " + compression_name(spec_) + " of " + std::to_string(n) + " x f32", o.bucket});
    const wire::HalfPart part = wire::half_part(t, n);
    const size_t mine = part.size();
    incoming_.resize(size_t(p) * mine);
    wire::half_reduce_scatter(t, wire_.data(), incoming_.data(), n);
    sum_.assign(mine, 0.0f);
    part_.resize(mine);
    for (int q = 0; q < p; ++q) {  // rank order
      kernels::convert(part_.data(), DType::f32, incoming_.data() + size_t(q) * mine, wire_type, mine);
      kernels::accumulate_f32(sum_.data(), part_.data(), mine);
    }
    // Average by division, as allreduce() does, so avg of equal values is exact.
    if (op == ReduceOp::avg) kernels::divide_f32(sum_.data(), mine, float(p));
    kernels::convert(wire_.data() + part.lo, wire_type, sum_.data(), DType::f32, mine);
    wire::half_allgather(t, wire_.data(), n);
    kernels::convert(data, DType::f32, wire_.data(), wire_type, n);
    wire_bytes_ = c.bytes_sent() - b0;
    ++calls_;
  }

 private:
  std::vector<uint16_t> wire_, incoming_;
  std::vector<float> sum_, part_;
};

// Top-k by magnitude (kernels::cpu::topk_select: ties to the lower index, so the choice is a pure function
// of the values) with (u32 index, f32 value) pairs all-gathered and summed in rank order into zeros.
class TopK final : public Compressor {
 public:
  TopK(const CompressionSpec& s, size_t n) : Compressor(s, n) {
    HPDT_CHECK(n <= size_t(INT32_MAX), "topk compression: ", n, " values exceed 31-bit indices; use smaller buckets");
    k_ = size_t(kernels::topk_count(int64_t(n), s.ratio));
  }
  void allreduce(Communicator& c, float* data, ReduceOp op, Algorithm, const AllreduceOptions&) override {
    const uint64_t b0 = c.bytes_sent();
    const size_t n = count_;
    // With error feedback the accumulated gradient lives in the residual: what is sent leaves it.
    float* acc = data;
    if (!residual_.empty()) {
      for (size_t i = 0; i < n; ++i) residual_[i] += data[i];
      acc = residual_.data();
    }
    idx_.resize(k_);
    val_.resize(k_);
    kernels::cpu::topk_select(int64_t(n), acc, int64_t(k_), idx_.data(), val_.data());
    mine_.resize(k_);
    for (size_t j = 0; j < k_; ++j) mine_[j] = {uint32_t(idx_[j]), val_[j]};
    if (!residual_.empty()) kernels::cpu::sparse_fill(int64_t(k_), idx_.data(), 0.0f, residual_.data());
    if (record_) {
      transmitted_.assign(n, 0.0f);
      for (size_t j = 0; j < k_; ++j) transmitted_[size_t(idx_[j])] = val_[j];
    }
    const int p = c.transport().size();
    all_.resize(size_t(p) * k_);
    allgather(c, mine_.data(), all_.data(), k_ * sizeof(wire::TopkPair));
    std::fill(data, data + n, 0.0f);
    for (const wire::TopkPair& q : all_) data[q.index] += q.value;  // rank order
    if (op == ReduceOp::avg) kernels::divide_f32(data, n, float(p));
    wire_bytes_ = c.bytes_sent() - b0;
    ++calls_;
  }

 private:
  size_t k_ = 0;
  std::vector<int32_t> idx_;
  std::vector<float> val_;
  std::vector<wire::TopkPair> mine_, all_;
};

// QSGD: per chunk of kChunk values a scale s = max |x|; x -> sign(x) floor(|x| / s * L + u), u ~ U[0, 1),
// L = 2^(B-1) - 1; stored as q + L in B bits, bit-packed. The arithmetic is kernels::cpu::qsgd_quantize's and
// qsgd_dequantize's (kernels/cpu/compress.h: every rounding explicit, so the bits do not depend on whether the
// compiler contracts a product into an add; the decode sums with one rounding a value), which the CUDA kernels of
// DeviceCompressor share.
class Qsgd final : public Compressor {
 public:
  Qsgd(const CompressionSpec& s, size_t n, uint64_t seed, uint64_t id)
      : Compressor(s, n), seed_(seed), id_(id), msg_(wire::qsgd_message(n, s.bits)) {}
  void allreduce(Communicator& c, float* data, ReduceOp op, Algorithm, const AllreduceOptions&) override {
    const uint64_t b0 = c.bytes_sent();
    const size_t n = count_;
    const int bits = spec_.bits;
    const int p = c.size(), r = c.rank();
    acc_.resize(n);
    add_residual(data, residual_, acc_.data(), n);
    std::vector<uint8_t> msg(msg_.bytes, 0);
    float* scales = reinterpret_cast<float*>(msg.data());
    uint8_t* packed = msg.data() + msg_.chunks * sizeof(float);
    kernels::cpu::qsgd_quantize(int64_t(n), acc_.data(), bits, wire::qsgd_random(seed_, id_, r, calls_, n), packed,
                                scales, residual_.empty() ? nullptr : residual_.data());
    if (record_) {
      transmitted_.resize(n);
      kernels::cpu::qsgd_dequantize(int64_t(n), packed, scales, bits, transmitted_.data(), false);
    }
    all_.resize(size_t(p) * msg_.bytes);
    allgather(c, msg.data(), all_.data(), msg_.bytes);
    std::fill(data, data + n, 0.0f);
    for (int q = 0; q < p; ++q) {  // decode and sum in rank order
      const uint8_t* m = all_.data() + size_t(q) * msg_.bytes;
      kernels::cpu::qsgd_dequantize(int64_t(n), m + msg_.chunks * sizeof(float), reinterpret_cast<const float*>(m),
                                    bits, data, true);
    }
    if (op == ReduceOp::avg) kernels::divide_f32(data, n, float(p));
    wire_bytes_ = c.bytes_sent() - b0;
    ++calls_;
  }

 private:
  uint64_t seed_, id_;
  wire::QsgdMessage msg_;
  std::vector<float> acc_;
  std::vector<uint8_t> all_;
};

// PowerSGD with warm start and error feedback.
class PowerSgd final : public Compressor {
 public:
  PowerSgd(const CompressionSpec& s, size_t n, std::vector<MatrixView> views, uint64_t seed, uint64_t id) : Compressor(s, n) {
    wire::PowerSgdLayout layout = wire::powersgd_layout(n, size_t(s.rank), std::move(views), seed, id);
    for (const wire::PowerSgdMatrix& g : layout.mats) {
      Matrix m{g, {}, {}};
      m.q.assign(layout.q.begin() + long(g.q_offset), layout.q.begin() + long(g.q_offset + g.cols * size_t(s.rank)));
      mats_.push_back(std::move(m));
    }
    rest_ = std::move(layout.rest);
    p_total_ = layout.p_total;
    q_total_ = layout.q_total;
    if (!spec_.error_feedback) residual_.clear();
  }

  void allreduce(Communicator& c, float* data, ReduceOp op, Algorithm a, const AllreduceOptions& o) override {
    const uint64_t b0 = c.bytes_sent();
    uint64_t extra = 0;
    const size_t R = size_t(spec_.rank), n = count_;
    const int p = c.size();
    acc_.resize(n);
    add_residual(data, residual_, acc_.data(), n);
    // P = M Q for every matrix, followed by the uncompressed values: one all-reduce.
    buf_.assign(p_total_ + rest_.size(), 0.0f);
    size_t off = 0;
    for (Matrix& m : mats_) {
      const float* M = padded(m);
      kernels::cpu::gemm<float>(false, false, int64_t(m.rows), int64_t(R), int64_t(m.cols), 1.0f, M, int64_t(m.cols), m.q.data(),
                                int64_t(R), 0.0f, buf_.data() + off, int64_t(R));
      off += m.rows * R;
    }
    for (size_t j = 0; j < rest_.size(); ++j) buf_[p_total_ + j] = data[rest_[j]];  // exact: no error feedback needed
    extra += wire::counted_allreduce(c, buf_.data(), buf_.size(), ReduceOp::avg, a, o);
    // Orthonormalise each P (identical on every rank), then Q = M^T P: the second all-reduce.
    qbuf_.assign(q_total_, 0.0f);
    off = 0;
    size_t qoff = 0;
    for (Matrix& m : mats_) {
      wire::powersgd_orthonormalise(buf_.data() + off, m.rows, R);
      const float* M = padded(m);
      kernels::cpu::gemm<float>(true, false, int64_t(m.cols), int64_t(R), int64_t(m.rows), 1.0f, M, int64_t(m.cols), buf_.data() + off,
                                int64_t(R), 0.0f, qbuf_.data() + qoff, int64_t(R));
      off += m.rows * R;
      qoff += m.cols * R;
    }
    extra += wire::counted_allreduce(c, qbuf_.data(), qbuf_.size(), ReduceOp::avg, a, o);
    // M ~ P Q^T (the average); Q kept for the next call.
    const float sum_scale = op == ReduceOp::sum ? float(p) : 1.0f;
    off = 0;
    qoff = 0;
    for (Matrix& m : mats_) {
      std::copy(qbuf_.begin() + long(qoff), qbuf_.begin() + long(qoff + m.cols * R), m.q.begin());
      approx_.resize(m.rows * m.cols);
      kernels::cpu::gemm<float>(false, true, int64_t(m.rows), int64_t(m.cols), int64_t(R), 1.0f, buf_.data() + off, int64_t(R),
                                m.q.data(), int64_t(R), 0.0f, approx_.data(), int64_t(m.cols));
      for (size_t i = 0; i < m.size; ++i) {
        const size_t e = m.offset + i;
        if (!residual_.empty()) residual_[e] = acc_[e] - approx_[i];
        data[e] = approx_[i] * sum_scale;
      }
      off += m.rows * R;
      qoff += m.cols * R;
    }
    for (size_t j = 0; j < rest_.size(); ++j) {
      if (!residual_.empty()) residual_[rest_[j]] = 0;
      data[rest_[j]] = buf_[p_total_ + j] * sum_scale;
    }
    if (record_) {  // what this rank "transmitted": the shared approximation, and its own exact rest
      transmitted_.resize(n);
      for (size_t i = 0; i < n; ++i) transmitted_[i] = data[i] / sum_scale;
      for (size_t j : rest_) transmitted_[j] = acc_[j];
    }
    wire_bytes_ = c.bytes_sent() - b0 + extra;
    ++calls_;
  }

  std::vector<float> state() const override {
    std::vector<float> s = Compressor::state();
    for (const Matrix& m : mats_) s.insert(s.end(), m.q.begin(), m.q.end());
    return s;
  }
  void set_state(const std::vector<float>& s) override {
    HPDT_CHECK(s.size() == residual_.size() + 2 + q_total_, "compression state of ", s.size(), " values does not fit ",
               compression_name(spec_), " over ", count_, " values (expected ", residual_.size() + 2 + q_total_, ")");
    Compressor::set_state(std::vector<float>(s.begin(), s.begin() + long(residual_.size() + 2)));
    size_t off = residual_.size() + 2;
    for (Matrix& m : mats_) {
      std::copy(s.begin() + long(off), s.begin() + long(off + m.q.size()), m.q.begin());
      off += m.q.size();
    }
  }

 private:
  struct Matrix : wire::PowerSgdMatrix {
    std::vector<float> q;  // cols x R
    std::vector<float> scratch;
  };
  // The matrix's values of acc_, zero-padded when the range ends inside it.
  const float* padded(Matrix& m) {
    if (m.size == m.rows * m.cols) return acc_.data() + m.offset;
    m.scratch.assign(m.rows * m.cols, 0.0f);
    std::copy(acc_.begin() + long(m.offset), acc_.begin() + long(m.offset + m.size), m.scratch.begin());
    return m.scratch.data();
  }
  std::vector<Matrix> mats_;
  std::vector<size_t> rest_;
  size_t p_total_ = 0, q_total_ = 0;
  std::vector<float> acc_, buf_, qbuf_, approx_;
};

}  // namespace

std::unique_ptr<Compressor> make_compressor(const CompressionSpec& spec, size_t count, std::vector<MatrixView> matrices, uint64_t seed,
                                            uint64_t id) {
  switch (spec.kind) {
    case CompressionKind::none: return std::make_unique<NoCompression>(spec, count);
    case CompressionKind::fp16:
    case CompressionKind::bf16: return std::make_unique<HalfWire>(spec, count);
    case CompressionKind::topk: return std::make_unique<TopK>(spec, count);
    case CompressionKind::qsgd: return std::make_unique<Qsgd>(spec, count, seed, id);
    case CompressionKind::powersgd: return std::make_unique<PowerSgd>(spec, count, std::move(matrices), seed, id);
  }
  HPDT_FAIL("make_compressor: unknown compression kind");
}

}  // namespace hpdt::comm
