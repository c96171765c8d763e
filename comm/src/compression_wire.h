// What the host compressors (compression.cpp) and the device ones (device_compression.cpp) must agree on, bit for
// bit, to interoperate: the messages' layouts, QSGD's random stream, and the call counter in the saved state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hpdt/comm/compression.h"
#include "hpdt/comm/transport.h"
#include "hpdt/kernels/compress.h"

namespace hpdt::comm::wire {

// A top-k message entry.
struct TopkPair {
  uint32_t index;
  float value;
};
static_assert(sizeof(TopkPair) == 8);

// A QSGD message of n values: the chunks' f32 scales, then the bit-packed levels, padded with zeros to a multiple of
// 8 bytes.
struct QsgdMessage {
  size_t chunks = 0, packed_bytes = 0, bytes = 0;
};
inline QsgdMessage qsgd_message(size_t n, int bits) {
  QsgdMessage m;
  m.chunks = size_t(kernels::qsgd_chunks(int64_t(n)));
  m.packed_bytes = size_t(kernels::qsgd_packed_bytes(int64_t(n), bits));
  m.bytes = (m.chunks * sizeof(float) + m.packed_bytes + 7) / 8 * 8;
  return m;
}

// QSGD's random numbers of compressor `id` on `rank` at its call `calls` over n values: a stream per (compressor,
// rank), its position advancing with each call (reproducible, and independent across ranks and buckets).
inline kernels::QsgdRandom qsgd_random(uint64_t seed, uint64_t id, int rank, uint64_t calls, size_t n) {
  return {seed, (id << 20) ^ uint64_t(rank), calls * ((uint64_t(n) + 3) & ~uint64_t(3))};
}

// fp16/bf16: the 16-bit wire of n values is exchanged directly, part q ([part_begin(n, p, q), part_begin(n, p, q + 1)))
// summed on rank q. What sums and casts the parts is the caller's (host or device); these two move the bytes.
// Reduce-scatter: every rank's copy of this rank's part into incoming (p x mine, in rank order, this rank's own
// included).
void half_reduce_scatter(Transport& t, const uint16_t* wire, uint16_t* incoming, size_t n);
// All-gather: this rank's reduced part of `wire` to every rank, theirs into `wire`.
void half_allgather(Transport& t, uint16_t* wire, size_t n);
// This rank's part of n values among the transport's ranks: [lo, hi).
struct HalfPart {
  size_t lo = 0, hi = 0;
  size_t size() const { return hi - lo; }
};
HalfPart half_part(const Transport& t, size_t n);

// PowerSGD's matrices in a range of n values at rank R (compression.h: each matrix that gains from it; without views
// the range as one near-square matrix, zero-padded), the values outside them (sent uncompressed), and every
// matrix's initial Q (Philox normals, the same on every rank and device).
struct PowerSgdMatrix {
  size_t offset, rows, cols, size;  // size: values of the range it covers (< rows * cols when padded)
  size_t p_offset, q_offset;        // its P (rows x R) and Q (cols x R) in the buffers of all matrices' P and Q
};
struct PowerSgdLayout {
  std::vector<PowerSgdMatrix> mats;
  std::vector<size_t> rest;  // indices outside every matrix, increasing
  size_t p_total = 0, q_total = 0;
  std::vector<float> q;  // [q_total]
};
PowerSgdLayout powersgd_layout(size_t n, size_t R, std::vector<MatrixView> views, uint64_t seed, uint64_t id);
// P (rows x R, row-major) orthonormalised in place, as every rank does after P's all-reduce.
void powersgd_orthonormalise(float* P, size_t rows, size_t R);

// allreduce() of a host buffer, returning the bytes MPI_Allreduce and shm (whose traffic the transports cannot see)
// would have sent as ring: what the compressors add to their wire bytes.
uint64_t counted_allreduce(Communicator& c, float* data, size_t n, ReduceOp op, Algorithm a, const AllreduceOptions& o);

// The call counter at the end of a compressor's state: two exact f32 halves of 24 bits each.
inline void append_calls(std::vector<float>& state, uint64_t calls) {
  state.push_back(float(calls & 0xffffffu));
  state.push_back(float((calls >> 24) & 0xffffffu));
}
inline uint64_t read_calls(const float* two) { return uint64_t(two[0]) | uint64_t(two[1]) << 24; }

}  // namespace hpdt::comm::wire
