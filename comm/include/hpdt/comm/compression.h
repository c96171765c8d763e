// Gradient compression above the all-reduce family.
//
//   none       the all-reduce as chosen (lossless)
//   fp16/bf16  each rank's values cast to 16 bits on the wire; direct reduce-scatter (contributions
//              summed in f32 in rank order) + all-gather of the 16-bit reduced parts; no error feedback
//   topk:R     each rank keeps the ceil(R*n) largest |g + e| (0 < R <= 1), all-gathers (index, value)
//              pairs and sums them in rank order; error feedback keeps what was not sent
//   qsgd:B     B-bit (2..8, sign included) stochastic rounding to 2^(B-1)-1 levels per chunk of 512
//              values scaled by the chunk's max |x|; all-gathered bit-packed with the f32 scales, decoded
//              and summed in rank order; error feedback keeps the rounding error
//   powersgd:R rank-R PowerSGD (Vogels et al. 2019) on every matrix of the buffer that gains from it
//              (min(rows, cols) > R and (rows + cols) R < rows cols): P = avg(M Q), orthonormalise P,
//              Q = avg(M^T P), M ~ P Q^T; Q is kept between steps (warm start); vectors, small tensors
//              and everything outside the given matrices go uncompressed with the P all-reduce; error
//              feedback keeps M - P Q^T
//
// Error feedback (topk, qsgd, powersgd; off with ",noef", e.g. "topk:0.01,noef"): each call compresses
// g + e, where e is what earlier calls did not transmit, and sets e = (g + e) - transmitted, so nothing
// is lost, only delayed. "transmitted" is what this rank's message decodes to (topk, qsgd) or, for
// PowerSGD, the averaged approximation every rank receives.
//
// Every compressed result is bitwise identical on all ranks (sums formed in rank order, or by the
// deterministic all-reduce family). Buffers are f32 host memory. One Compressor holds the state of one
// fixed range (a gradient bucket) and must see the same range every step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hpdt/comm/allreduce.h"
#include "hpdt/comm/communicator.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::comm {

enum class CompressionKind { none, fp16, bf16, topk, qsgd, powersgd };

struct CompressionSpec {
  CompressionKind kind = CompressionKind::none;
  double ratio = 0;            // topk: fraction of the elements sent, (0, 1]
  int bits = 0;                // qsgd: bits per value, sign included, 2..8
  int rank = 0;                // powersgd: approximation rank, >= 1
  bool error_feedback = true;  // topk, qsgd, powersgd
  bool lossless() const { return kind == CompressionKind::none; }
};

// "none", "fp16", "bf16", "topk:R", "qsgd:B", "powersgd:R", optionally followed by ",noef".
// Throws hpdt::Error naming the text and the accepted forms.
CompressionSpec parse_compression(std::string_view text);
std::string compression_name(const CompressionSpec& spec);  // parse_compression(compression_name(s)) == s

// A row-major matrix inside a buffer: elements [offset, offset + rows * cols).
struct MatrixView {
  size_t offset = 0, rows = 0, cols = 0;
};

class Compressor {
 public:
  virtual ~Compressor() = default;
  // All-reduces data[0, count) (f32, this rank's values in; the sum or average over ranks out, identical
  // on every rank). `algorithm`/`options` serve the uncompressed parts and PowerSGD's P and Q.
  virtual void allreduce(Communicator& comm, float* data, ReduceOp op, Algorithm algorithm, const AllreduceOptions& options) = 0;

  size_t count() const { return count_; }
  const CompressionSpec& spec() const { return spec_; }
  // Bytes this rank put on the wire in the last call (MPI_Allreduce counted as ring would send).
  uint64_t wire_bytes() const { return wire_bytes_; }
  // Error-feedback residual e (count() values; empty without error feedback).
  const std::vector<float>& residual() const { return residual_; }
  // Keep a copy of what this rank transmitted in the last call (for tests of the error-feedback invariant).
  void record_transmitted(bool on) { record_ = on; }
  const std::vector<float>& transmitted() const { return transmitted_; }

  // Everything carried between calls (residual, PowerSGD's Q, the call counter), for checkpoints.
  virtual std::vector<float> state() const;
  virtual void set_state(const std::vector<float>& s);

 protected:
  Compressor(const CompressionSpec& spec, size_t count);
  CompressionSpec spec_;
  size_t count_;
  uint64_t wire_bytes_ = 0;
  uint64_t calls_ = 0;
  std::vector<float> residual_;
  bool record_ = false;
  std::vector<float> transmitted_;
};

// fp16/bf16, top-k and QSGD on a tensor where it lives (a CUDA device, or the CPU): the same messages, results and
// state as the Compressor of the same spec, seed and id, bit for bit (kernels/compress.h computes the messages as this
// file's CPU code does), so GPU and CPU ranks interoperate and checkpoints carry over. g + e, the cast, selection or
// quantisation, the error feedback and the decode-and-sum in rank order run on the tensor's device (kernels::cast,
// add, topk_select, qsgd_quantize, sparse_accumulate, qsgd_dequantize); only this rank's message goes to the host for
// the exchange, and what it receives comes back: on a GPU, ~2 k x 8 bytes (top-k), n B / 8 bytes (QSGD) or about
// 2n bytes (fp16/bf16: the 16-bit values, then the parts to sum) each way instead of 4n, and no host pass over it.
class DeviceCompressor {
 public:
  virtual ~DeviceCompressor() = default;
  // All-reduces data (f32 [count()], contiguous, on the stream's device) as Compressor::allreduce does (the
  // algorithm and options: PowerSGD's P and Q all-reduces); returns when the result is in `data` (the stream
  // synchronised).
  virtual void allreduce(Communicator& comm, Tensor& data, ReduceOp op, Algorithm algorithm,
                         const AllreduceOptions& options, const Stream& stream) = 0;
  size_t count() const { return count_; }
  const CompressionSpec& spec() const { return spec_; }
  uint64_t wire_bytes() const { return wire_bytes_; }
  // As Compressor::state / set_state: the residual, then the call counter, then PowerSGD's Q (copied from and to the
  // device).
  virtual std::vector<float> state(const Stream& stream) const;
  virtual void set_state(const std::vector<float>& s, const Stream& stream);
  virtual size_t state_size() const { return base_state_size(); }

 protected:
  DeviceCompressor(const CompressionSpec& spec, size_t count, Device device, const Stream& stream);
  size_t base_state_size() const { return (residual_.defined() ? count_ : 0) + 2; }  // the residual and the calls
  CompressionSpec spec_;
  size_t count_;
  uint64_t wire_bytes_ = 0;
  uint64_t calls_ = 0;
  Tensor residual_;  // f32 [count] on the device (undefined without error feedback)
};

// Whether make_device_compressor takes the spec: every lossy one (fp16, bf16, topk, qsgd, powersgd).
bool device_compression_supported(const CompressionSpec& spec);
// A DeviceCompressor for `count` values on `device` (its residual zeroed on `stream`); matrices, seed and id as for
// make_compressor. Throws unless device_compression_supported(spec).
std::unique_ptr<DeviceCompressor> make_device_compressor(const CompressionSpec& spec, size_t count, Device device,
                                                         const Stream& stream, uint64_t seed = 0, uint64_t id = 0,
                                                         std::vector<MatrixView> matrices = {});

// A checkpoint's compression state (its compressors' states back to back, GradientSync::compression_state) cut
// into the states of the given sizes, in order; throws, naming `what` (who restores it, for what), unless the sizes
// add up to the state's.
std::vector<std::vector<float>> split_compression_state(const std::vector<float>& state,
                                                        const std::vector<size_t>& sizes, const std::string& what);

// A compressor for `count` values. `matrices` (offsets relative to the range, non-overlapping) tell
// PowerSGD where the matrices are; without them the whole range is treated as one near-square matrix.
// `seed` drives QSGD's rounding and PowerSGD's initial Q; `id` (e.g. the bucket index) separates the
// random streams of different compressors.
std::unique_ptr<Compressor> make_compressor(const CompressionSpec& spec, size_t count, std::vector<MatrixView> matrices = {},
                                            uint64_t seed = 0, uint64_t id = 0);

}  // namespace hpdt::comm
