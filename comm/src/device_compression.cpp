// fp16/bf16, top-k, QSGD and PowerSGD compression on the gradients' own device (compression.h: DeviceCompressor). The
// messages are kernels/compress.h's, which compute what comm's CPU compressors (compression.cpp: TopK, Qsgd) compute;
// the all-gather is the host one (allgather over the communicator's transport), so only the messages cross to the host.
// Every step mirrors the host compressor's, in the same order, so the results are the same bits.
#include <algorithm>
#include <cstring>

#include "compression_wire.h"
#include "hpdt/comm/compression.h"
#include "hpdt/core/error.h"
#include "hpdt/kernels/accumulate.h"
#include "hpdt/kernels/activation.h"
#include "hpdt/kernels/compress.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/optim.h"

namespace hpdt::comm {

namespace {

// A 1-D tensor of n elements on `device` (storage for at least one, so that n = 0 is a valid empty view).
Tensor vector_on(Device device, int64_t n, DType dt, const Stream& stream, bool pinned = false) {
  const AllocOptions o = device.is_cpu() ? AllocOptions{.pinned = pinned} : AllocOptions{.stream = &stream};
  return Tensor::empty({std::max<int64_t>(n, 1)}, dt, device, o).flat(0, n);
}

// x /= d on x's device (division, as the host compressors' kernels::divide_f32, the same bits).
void divide(Tensor& x, float d, const Stream& stream) {
  if (x.is_cpu()) {
    kernels::divide_f32(x.data<float>(), size_t(x.numel()), d);
    return;
  }
#if HPDT_HAVE_CUDA
  kernels::cuda::divide_f32(x.data<float>(), size_t(x.numel()), d, stream.handle());
#else
  (void)stream;
  HPDT_FAIL("DeviceCompressor: a tensor on ", x.device().str(), " in a build without CUDA");
#endif
}

void check_data(const DeviceCompressor& c, const Tensor& data, const Tensor& residual, const Stream& stream) {
  HPDT_CHECK(data.dtype() == DType::f32 && size_t(data.numel()) == c.count(), "DeviceCompressor ",
             compression_name(c.spec()), ": expects f32 [", c.count(), "], got ", data.str());
  HPDT_CHECK(data.device() == stream.device() && (!residual.defined() || residual.device() == data.device()),
             "DeviceCompressor ", compression_name(c.spec()), ": data on ", data.device().str(), ", stream on ",
             stream.device().str(), ", state on ", residual.defined() ? residual.device().str() : data.device().str());
}

// As compression.cpp's TopK: with error feedback e += g and the top-k of e are sent (and leave e); the
// (u32 index, f32 value) pairs of every rank are summed in rank order into zeros.
class DeviceTopK final : public DeviceCompressor {
 public:
  DeviceTopK(const CompressionSpec& s, size_t n, Device dev, const Stream& stream)
      : DeviceCompressor(s, n, dev, stream) {
    HPDT_CHECK(n <= size_t(INT32_MAX), "topk compression: ", n, " values exceed 31-bit indices; use smaller buckets");
    k_ = kernels::topk_count(int64_t(n), s.ratio);
    idx_ = vector_on(dev, k_, DType::i32, stream);
    val_ = vector_on(dev, k_, DType::f32, stream);
    host_idx_ = vector_on(Device::cpu(), k_, DType::i32, stream, true);
    host_val_ = vector_on(Device::cpu(), k_, DType::f32, stream, true);
    mine_.resize(size_t(k_));
  }
  void allreduce(Communicator& c, Tensor& data, ReduceOp op, Algorithm, const AllreduceOptions&,
                 const Stream& stream) override {
    check_data(*this, data, residual_, stream);
    const uint64_t b0 = c.bytes_sent();
    const int p = c.transport().size();
    Tensor acc = data;
    if (residual_.defined()) {
      kernels::add(residual_, data, residual_, stream);  // e += g (one rounding, as the host's +=)
      acc = residual_;
    }
    kernels::topk_select(acc, k_, idx_, val_, stream);
    if (residual_.defined()) kernels::sparse_fill(idx_, 0.0f, residual_, stream);
    copy(idx_, host_idx_, stream);
    copy(val_, host_val_, stream);
    stream.synchronize();
    for (int64_t j = 0; j < k_; ++j)
      mine_[size_t(j)] = {uint32_t(host_idx_.data<int32_t>()[j]), host_val_.data<float>()[j]};
    all_.resize(size_t(p) * size_t(k_));
    allgather(c, mine_.data(), all_.data(), size_t(k_) * sizeof(wire::TopkPair));
    // every rank's pairs back to the device, then summed in rank order into zeros
    const int64_t total = int64_t(p) * k_;
    if (!all_idx_.defined() || all_idx_.numel() != total) {
      all_idx_ = vector_on(data.device(), total, DType::i32, stream);
      all_val_ = vector_on(data.device(), total, DType::f32, stream);
      host_all_idx_ = vector_on(Device::cpu(), total, DType::i32, stream, true);
      host_all_val_ = vector_on(Device::cpu(), total, DType::f32, stream, true);
    }
    for (int64_t j = 0; j < total; ++j) {
      host_all_idx_.data<int32_t>()[j] = int32_t(all_[size_t(j)].index);
      host_all_val_.data<float>()[j] = all_[size_t(j)].value;
    }
    copy(host_all_idx_, all_idx_, stream);
    copy(host_all_val_, all_val_, stream);
    kernels::fill(data, 0.0f, stream);
    for (int q = 0; q < p; ++q)
      kernels::sparse_accumulate(all_idx_.flat(int64_t(q) * k_, k_), all_val_.flat(int64_t(q) * k_, k_), data, stream);
    if (op == ReduceOp::avg) divide(data, float(p), stream);
    stream.synchronize();
    wire_bytes_ = c.bytes_sent() - b0;
    ++calls_;
  }

 private:
  int64_t k_ = 0;
  Tensor idx_, val_, host_idx_, host_val_;                  // this rank's selection
  Tensor all_idx_, all_val_, host_all_idx_, host_all_val_;  // every rank's, in rank order
  std::vector<wire::TopkPair> mine_, all_;
};

// As compression.cpp's Qsgd: the message is the chunks' f32 scales, then the bit-packed levels, padded with zeros
// to a multiple of 8 bytes; every rank's message is decoded and summed in rank order into zeros.
class DeviceQsgd final : public DeviceCompressor {
 public:
  DeviceQsgd(const CompressionSpec& s, size_t n, Device dev, const Stream& stream, uint64_t seed, uint64_t id)
      : DeviceCompressor(s, n, dev, stream), seed_(seed), id_(id) {
    const wire::QsgdMessage m = wire::qsgd_message(n, s.bits);
    chunks_ = int64_t(m.chunks), packed_bytes_ = int64_t(m.packed_bytes), message_bytes_ = int64_t(m.bytes);
    acc_ = vector_on(dev, int64_t(n), DType::f32, stream);
    scales_ = vector_on(dev, chunks_, DType::f32, stream);
    packed_ = vector_on(dev, packed_bytes_, DType::u8, stream);
    msg_ = vector_on(Device::cpu(), message_bytes_, DType::u8, stream, true);
    std::memset(msg_.data(), 0, size_t(message_bytes_));  // the padding stays zero
  }
  void allreduce(Communicator& c, Tensor& data, ReduceOp op, Algorithm, const AllreduceOptions&,
                 const Stream& stream) override {
    check_data(*this, data, residual_, stream);
    const uint64_t b0 = c.bytes_sent();
    const int64_t n = int64_t(count_);
    const int p = c.size(), r = c.rank();
    Tensor x = data;
    if (residual_.defined()) {
      kernels::add(data, residual_, acc_, stream);  // g + e
      x = acc_;
    }
    kernels::qsgd_quantize(x, spec_.bits, wire::qsgd_random(seed_, id_, r, calls_, size_t(n)), packed_, scales_,
                           residual_.defined() ? &residual_ : nullptr, stream);
    Tensor msg_scales = Tensor::wrap(msg_.data(), {chunks_}, DType::f32);
    Tensor msg_packed = Tensor::wrap(static_cast<uint8_t*>(msg_.data()) + chunks_ * 4, {packed_bytes_}, DType::u8);
    copy(scales_, msg_scales, stream);
    copy(packed_, msg_packed, stream);
    stream.synchronize();
    const int64_t total = int64_t(p) * message_bytes_;
    if (!all_.defined() || all_.numel() != total) {
      all_ = vector_on(data.device(), total, DType::u8, stream);
      host_all_ = vector_on(Device::cpu(), total, DType::u8, stream, true);
    }
    allgather(c, msg_.data(), host_all_.data(), size_t(message_bytes_));
    copy(host_all_, all_, stream);
    kernels::fill(data, 0.0f, stream);
    for (int q = 0; q < p; ++q) {  // decode and sum in rank order
      uint8_t* m = static_cast<uint8_t*>(all_.data()) + int64_t(q) * message_bytes_;
      const Tensor sc = Tensor::wrap(m, {chunks_}, DType::f32, data.device());
      const Tensor pk = Tensor::wrap(m + chunks_ * 4, {packed_bytes_}, DType::u8, data.device());
      kernels::qsgd_dequantize(pk, sc, spec_.bits, data, /*accumulate=*/true, stream);
    }
    if (op == ReduceOp::avg) divide(data, float(p), stream);
    stream.synchronize();
    wire_bytes_ = c.bytes_sent() - b0;
    ++calls_;
  }

 private:
  uint64_t seed_, id_;
  int64_t chunks_ = 0, packed_bytes_ = 0, message_bytes_ = 0;
  Tensor acc_, scales_, packed_, msg_, all_, host_all_;
};

// As compression.cpp's HalfWire: each rank's values cast to 16 bits, the parts exchanged directly (the host's
// wire::half_reduce_scatter and half_allgather over pinned buffers), part j summed on rank j in f32 in rank order,
// averaged by division and cast back to 16 bits. The casts and the sums run on the device: the host only moves the
// 16-bit bytes (down n x 2, up n x 2 for the reduce-scatter, down n/p x 2 and up n x 2 for the all-gather, against
// the host mirror's n x 4 each way and its casts and sums on one core).
class DeviceHalfWire final : public DeviceCompressor {
 public:
  DeviceHalfWire(const CompressionSpec& s, size_t n, Device dev, const Stream& stream)
      : DeviceCompressor(s, n, dev, stream), wire_type_(s.kind == CompressionKind::bf16 ? DType::bf16 : DType::f16) {
    wire_ = vector_on(dev, int64_t(n), wire_type_, stream);
    host_wire_ = vector_on(Device::cpu(), int64_t(n), wire_type_, stream, true);
  }
  void allreduce(Communicator& c, Tensor& data, ReduceOp op, Algorithm, const AllreduceOptions&,
                 const Stream& stream) override {
    check_data(*this, data, residual_, stream);
    const uint64_t b0 = c.bytes_sent();
    const int64_t n = int64_t(count_);
    Transport& t = c.transport();
    const int p = t.size();
    const wire::HalfPart part = wire::half_part(t, size_t(n));
    const int64_t mine = int64_t(part.size()), lo = int64_t(part.lo);
    if (!incoming_.defined() || incoming_.numel() != int64_t(p) * mine) {
      incoming_ = vector_on(data.device(), int64_t(p) * mine, wire_type_, stream);
      host_incoming_ = vector_on(Device::cpu(), int64_t(p) * mine, wire_type_, stream, true);
      sum_ = vector_on(data.device(), mine, DType::f32, stream);
      part_ = vector_on(data.device(), mine, DType::f32, stream);
    }
    kernels::cast(data, wire_, stream);
    copy(wire_, host_wire_, stream);
    stream.synchronize();
    t.set_context({"compressed allreduce " + compression_name(spec_) + " of " + std::to_string(n) + " x f32 (device)"});
    wire::half_reduce_scatter(t, static_cast<const uint16_t*>(host_wire_.data()),
                              static_cast<uint16_t*>(host_incoming_.data()), size_t(n));
    copy(host_incoming_, incoming_, stream);
    kernels::fill(sum_, 0.0f, stream);
    for (int q = 0; q < p; ++q) {  // rank order, one rounding an add, as the host's accumulate_f32
      kernels::cast(incoming_.flat(int64_t(q) * mine, mine), part_, stream);
      kernels::add(sum_, part_, sum_, stream);
    }
    if (op == ReduceOp::avg) divide(sum_, float(p), stream);
    Tensor reduced = wire_.flat(lo, mine), host_reduced = host_wire_.flat(lo, mine);
    kernels::cast(sum_, reduced, stream);
    copy(reduced, host_reduced, stream);
    stream.synchronize();
    wire::half_allgather(t, static_cast<uint16_t*>(host_wire_.data()), size_t(n));
    copy(host_wire_, wire_, stream);
    kernels::cast(wire_, data, stream);
    stream.synchronize();
    wire_bytes_ = c.bytes_sent() - b0;
    ++calls_;
  }

 private:
  DType wire_type_;
  Tensor wire_, host_wire_;          // this rank's values in 16 bits; after the all-gather, the result
  Tensor incoming_, host_incoming_;  // every rank's copy of this rank's part, in rank order
  Tensor sum_, part_;                // this rank's part in f32
};

// As compression.cpp's PowerSgd (the same layout, initial Q and orthonormalisation: compression_wire.h): the three
// products on the device (kernels::powersgd_product: the CPU GEMM's bits), P and Q (rows x R, cols x R a matrix: small)
// all-reduced and P orthonormalised on the host, the approximation, the residual and the result on the device. The
// values outside the matrices (vectors, small tensors) cross to the host and back, exactly, with P.
class DevicePowerSgd final : public DeviceCompressor {
 public:
  DevicePowerSgd(const CompressionSpec& s, size_t n, Device dev, const Stream& stream, std::vector<MatrixView> views,
                 uint64_t seed, uint64_t id)
      : DeviceCompressor(s, n, dev, stream),
        layout_(wire::powersgd_layout(n, size_t(s.rank), std::move(views), seed, id)) {
    for (size_t i : layout_.rest) {  // the rest as runs of consecutive indices: one copy each
      if (!rest_runs_.empty() && rest_runs_.back().first + rest_runs_.back().second == i)
        ++rest_runs_.back().second;
      else
        rest_runs_.push_back({i, 1});
    }
    int64_t largest = 0;
    bool padded = false;
    for (const wire::PowerSgdMatrix& m : layout_.mats) {
      largest = std::max(largest, int64_t(m.rows * m.cols));
      padded = padded || m.size < m.rows * m.cols;
    }
    const int64_t q_total = int64_t(layout_.q_total), p_total = int64_t(layout_.p_total);
    acc_ = vector_on(dev, int64_t(n), DType::f32, stream);
    q_ = vector_on(dev, q_total, DType::f32, stream);
    q_new_ = vector_on(dev, q_total, DType::f32, stream);
    p_ = vector_on(dev, p_total, DType::f32, stream);
    approx_ = vector_on(dev, largest, DType::f32, stream);
    if (padded) padded_ = vector_on(dev, largest, DType::f32, stream);
    host_p_ = vector_on(Device::cpu(), p_total + int64_t(layout_.rest.size()), DType::f32, stream, true);
    host_q_ = vector_on(Device::cpu(), q_total, DType::f32, stream, true);
    std::copy(layout_.q.begin(), layout_.q.end(), host_q_.data<float>());
    copy(host_q_, q_, stream);
    stream.synchronize();  // host_q_ is written again before the copy would have run
    layout_.q = {};        // the device's q_ holds Q from here on
  }

  void allreduce(Communicator& c, Tensor& data, ReduceOp op, Algorithm a, const AllreduceOptions& o,
                 const Stream& stream) override {
    check_data(*this, data, residual_, stream);
    const uint64_t b0 = c.bytes_sent();
    uint64_t extra = 0;
    const int64_t R = spec_.rank, p_total = int64_t(layout_.p_total);
    if (residual_.defined())
      kernels::add(data, residual_, acc_, stream);  // g + e
    else
      copy(data, acc_, stream);
    // P = M Q for every matrix; P and the uncompressed values to the host for one all-reduce.
    std::vector<Tensor> ms;  // each matrix's values (the padded one, at most one, built once a call)
    for (const wire::PowerSgdMatrix& m : layout_.mats) ms.push_back(matrix(m, stream));
    for (size_t i = 0; i < ms.size(); ++i) {
      Tensor p = p_of(layout_.mats[i]);
      kernels::powersgd_product(false, false, ms[i], q_of(q_, layout_.mats[i]), p, stream);
    }
    float* host_p = host_p_.data<float>();
    Tensor host_pv = host_p_.flat(0, p_total);
    copy(p_, host_pv, stream);
    int64_t j = p_total;
    for (const auto& [begin, len] : rest_runs_) {  // exact: no error feedback needed
      Tensor dst = host_p_.flat(j, int64_t(len));
      copy(data.flat(int64_t(begin), int64_t(len)), dst, stream);
      j += int64_t(len);
    }
    stream.synchronize();
    extra += wire::counted_allreduce(c, host_p, size_t(host_p_.numel()), ReduceOp::avg, a, o);
    // Each P orthonormalised (identical on every rank), back up; Q = M^T P, the second all-reduce.
    for (const wire::PowerSgdMatrix& m : layout_.mats)
      wire::powersgd_orthonormalise(host_p + m.p_offset, m.rows, size_t(R));
    copy(host_pv, p_, stream);
    for (size_t i = 0; i < ms.size(); ++i) {
      Tensor q = q_of(q_new_, layout_.mats[i]);
      kernels::powersgd_product(true, false, ms[i], p_of(layout_.mats[i]), q, stream);
    }
    copy(q_new_, host_q_, stream);
    stream.synchronize();
    extra += wire::counted_allreduce(c, host_q_.data<float>(), size_t(host_q_.numel()), ReduceOp::avg, a, o);
    copy(host_q_, q_, stream);  // Q kept for the next call
    // M ~ P Q^T (the average): the residual (g + e) - P Q^T and the result, matrix by matrix.
    const float sum_scale = op == ReduceOp::sum ? float(c.size()) : 1.0f;
    for (const wire::PowerSgdMatrix& m : layout_.mats) {
      Tensor full = approx_.flat(0, int64_t(m.rows * m.cols)).view({int64_t(m.rows), int64_t(m.cols)});
      kernels::powersgd_product(false, true, p_of(m), q_of(q_, m), full, stream);
      const Tensor approx = approx_.flat(0, int64_t(m.size));
      if (residual_.defined()) {
        Tensor e = residual_.flat(int64_t(m.offset), int64_t(m.size));
        copy(acc_.flat(int64_t(m.offset), int64_t(m.size)), e, stream);
        kernels::axpy(-1.0f, approx, e, stream);  // (g + e) - approx, one rounding as the host's subtraction
      }
      Tensor out = data.flat(int64_t(m.offset), int64_t(m.size));
      copy(approx, out, stream);
      if (sum_scale != 1.0f) kernels::scale(out, sum_scale, stream);
    }
    // The uncompressed values: their average (times p for a sum) back up; no residual there.
    j = p_total;
    for (const auto& [begin, len] : rest_runs_) {
      for (size_t i = 0; i < len; ++i) host_p[size_t(j) + i] *= sum_scale;
      Tensor out = data.flat(int64_t(begin), int64_t(len));
      copy(host_p_.flat(j, int64_t(len)), out, stream);
      if (residual_.defined()) {
        Tensor e = residual_.flat(int64_t(begin), int64_t(len));
        kernels::fill(e, 0.0f, stream);
      }
      j += int64_t(len);
    }
    stream.synchronize();
    wire_bytes_ = c.bytes_sent() - b0 + extra;
    ++calls_;
  }

  std::vector<float> state(const Stream& stream) const override {
    std::vector<float> s = DeviceCompressor::state(stream);
    const size_t base = s.size();
    s.resize(base + layout_.q_total);
    Tensor host = Tensor::wrap(s.data() + base, {int64_t(layout_.q_total)}, DType::f32);
    copy(q_, host, stream);
    stream.synchronize();
    return s;
  }
  void set_state(const std::vector<float>& s, const Stream& stream) override {
    HPDT_CHECK(s.size() == state_size(), "compression state of ", s.size(), " values does not fit ",
               compression_name(spec_), " over ", count_, " values (expected ", state_size(), ")");
    DeviceCompressor::set_state(std::vector<float>(s.begin(), s.begin() + long(base_state_size())), stream);
    const Tensor host =
        Tensor::wrap(const_cast<float*>(s.data()) + base_state_size(), {int64_t(layout_.q_total)}, DType::f32);
    copy(host, q_, stream);
    stream.synchronize();
  }
  size_t state_size() const override { return base_state_size() + layout_.q_total; }

 private:
  // The matrix's values of acc_ (rows x cols), zero-padded when the range ends inside it (only ever the one matrix of
  // a range without views: padded_ holds it).
  Tensor matrix(const wire::PowerSgdMatrix& m, const Stream& stream) {
    const Shape shape{int64_t(m.rows), int64_t(m.cols)};
    if (m.size == m.rows * m.cols) return acc_.flat(int64_t(m.offset), int64_t(m.size)).view(shape);
    Tensor full = padded_.flat(0, int64_t(m.rows * m.cols));
    kernels::fill(full, 0.0f, stream);
    Tensor head = full.flat(0, int64_t(m.size));
    copy(acc_.flat(int64_t(m.offset), int64_t(m.size)), head, stream);
    return full.view(shape);
  }
  Tensor p_of(const wire::PowerSgdMatrix& m) const {
    const int64_t R = spec_.rank;
    return p_.flat(int64_t(m.p_offset), int64_t(m.rows) * R).view({int64_t(m.rows), R});
  }
  Tensor q_of(const Tensor& q, const wire::PowerSgdMatrix& m) const {
    const int64_t R = spec_.rank;
    return q.flat(int64_t(m.q_offset), int64_t(m.cols) * R).view({int64_t(m.cols), R});
  }

  wire::PowerSgdLayout layout_;
  std::vector<std::pair<size_t, size_t>> rest_runs_;  // (first index, length)
  Tensor acc_, q_, q_new_, p_, approx_, padded_;      // on the device
  Tensor host_p_, host_q_;                            // pinned: P then the uncompressed values; Q
};

}  // namespace

DeviceCompressor::DeviceCompressor(const CompressionSpec& spec, size_t count, Device device, const Stream& stream)
    : spec_(spec), count_(count) {
  HPDT_CHECK(device.is_cpu() || stream.device() == device, "DeviceCompressor: a stream on ", stream.device().str(),
             " for state on ", device.str());
  if (spec_.error_feedback) {
    residual_ = vector_on(device, int64_t(count), DType::f32, stream);
    kernels::fill(residual_, 0.0f, stream);
  }
}

std::vector<float> DeviceCompressor::state(const Stream& stream) const {
  std::vector<float> s(residual_.defined() ? count_ : 0);
  if (!s.empty()) {
    Tensor host = Tensor::wrap(s.data(), {int64_t(s.size())}, DType::f32);
    copy(residual_, host, stream);
    stream.synchronize();
  }
  wire::append_calls(s, calls_);  // as Compressor::state
  return s;
}

void DeviceCompressor::set_state(const std::vector<float>& s, const Stream& stream) {
  const size_t n = base_state_size() - 2;
  HPDT_CHECK(s.size() == base_state_size(), "compression state of ", s.size(), " values does not fit ",
             compression_name(spec_), " over ", count_, " values (expected ", base_state_size(), ")");
  if (n > 0) {
    const Tensor host = Tensor::wrap(const_cast<float*>(s.data()), {int64_t(n)}, DType::f32);
    copy(host, residual_, stream);
    stream.synchronize();  // s may go before the copy would have run
  }
  calls_ = wire::read_calls(s.data() + n);
}

bool device_compression_supported(const CompressionSpec& spec) { return !spec.lossless(); }

std::unique_ptr<DeviceCompressor> make_device_compressor(const CompressionSpec& spec, size_t count, Device device,
                                                         const Stream& stream, uint64_t seed, uint64_t id,
                                                         std::vector<MatrixView> matrices) {
  switch (spec.kind) {
    case CompressionKind::fp16:
    case CompressionKind::bf16:
      return std::make_unique<DeviceHalfWire>(spec, count, device, stream);
    case CompressionKind::topk:
      return std::make_unique<DeviceTopK>(spec, count, device, stream);
    case CompressionKind::qsgd:
      return std::make_unique<DeviceQsgd>(spec, count, device, stream, seed, id);
    case CompressionKind::powersgd:
      return std::make_unique<DevicePowerSgd>(spec, count, device, stream, std::move(matrices), seed, id);
    default:
      HPDT_FAIL("make_device_compressor: '", compression_name(spec),
                "' is not a lossy compression (device compression: ", "fp16, bf16, topk, qsgd and powersgd)");
  }
}

}  // namespace hpdt::comm
