// comm::DeviceCompressor against comm::Compressor of the same spec, seed and id (compression.h: the same messages,
// results and state, bit for bit), on tensors of `device` (the CPU, or a GPU: tests/comm/test_compression.cpp,
// tests/comm/test_device_allreduce.cpp). PowerSGD (one near-square matrix, padded, and a layer layout), fp16 and bf16
// (inputs reaching past f16's range and into both formats' subnormals), top-k and QSGD with and without error feedback,
// sums and averages, sizes around QSGD's 512-value chunks and 0; three calls each (inputs differing by rank and call:
// the residuals and QSGD's random stream advance), then the states, and a device compressor restored from the host's
// state continuing as the host's does. Every rank calls it (the compressors all-gather).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "hpdt/comm/compression.h"
#include "hpdt_test.h"

namespace hpdt::test {

inline std::vector<float> compression_input(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// compression_input with the values of rank r's element i scaled by (i + r) % 3: 0 made positive and scaled to
// 0..~1.5e5, past f16's largest (65504: +inf on the wire; positive so that no rank's +inf meets another's -inf, whose
// NaN's bits a GPU and a CPU write differently), 1 left, 2 into f16's subnormals or (f32 subnormals) bf16's: the
// casts' edges, and at 3 ranks f32 sums of a large, a middling and a tiny 16-bit value, which round. (Rounded again
// to 16 bits, such sums hardly ever show the rank order: summing in reverse order passed at np 3.)
inline std::vector<float> half_wire_input(size_t n, unsigned seed, int rank) {
  std::vector<float> v = compression_input(n, seed);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = (i + size_t(rank)) % 3;
    if (k == 0) v[i] = std::fabs(v[i]) * 4.0e4f;
    if (k == 2) v[i] *= i % 2 ? 3.0e-6f : 2.0e-39f;
  }
  return v;
}

inline void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(bits_of(got[i]), bits_of(want[i]))
        << what << ": element " << i << " got " << got[i] << " want " << want[i];
}

inline void expect_device_compressors_match_host(comm::Communicator& c, Device device, const Stream& stream) {
  const int r = c.rank();
  auto run_device = [&](comm::DeviceCompressor& d, const std::vector<float>& x, comm::ReduceOp op) {
    Tensor t = Tensor::from_vector(x, {int64_t(x.size())}).to(device, stream);
    d.allreduce(c, t, op, comm::Algorithm::ring, {}, stream);
    const Tensor back = t.to(Device::cpu(), stream);
    stream.synchronize();
    return back.to_vector<float>();
  };
  for (const char* name : {"fp16", "bf16", "topk:0.1", "topk:0.01,noef", "qsgd:4", "qsgd:2,noef", "qsgd:8",
                           "powersgd:2", "powersgd:3,noef"}) {
    const comm::CompressionSpec spec = comm::parse_compression(name);
    const bool half = spec.kind == comm::CompressionKind::fp16 || spec.kind == comm::CompressionKind::bf16;
    auto input = [&](size_t n, unsigned seed) {
      return half ? half_wire_input(n, seed, r) : compression_input(n, seed);
    };
    for (size_t n : {size_t(0), size_t(1), size_t(511), size_t(513), size_t(5000)})
      for (comm::ReduceOp op : {comm::ReduceOp::sum, comm::ReduceOp::avg}) {
        const std::string what =
            std::string(name) + " n=" + std::to_string(n) + " " + std::string(comm::reduce_op_name(op));
        SCOPED_TRACE(what);
        auto host = comm::make_compressor(spec, n, {}, 7, 3);
        auto dev = comm::make_device_compressor(spec, n, device, stream, 7, 3);
        for (unsigned call = 0; call < 3; ++call) {
          const std::vector<float> x = input(n, 1000u * unsigned(r) + call);
          std::vector<float> want = x;
          host->allreduce(c, want.data(), op, comm::Algorithm::ring, {});
          expect_same_bits(run_device(*dev, x, op), want, "call " + std::to_string(call));
          EXPECT_EQ(dev->wire_bytes(), host->wire_bytes()) << "call " << call;
        }
        const std::vector<float> state = host->state();
        expect_same_bits(dev->state(stream), state, "state");
        auto restored = comm::make_device_compressor(spec, n, device, stream, 7, 3);
        restored->set_state(state, stream);
        const std::vector<float> x = input(n, 1000u * unsigned(r) + 77);
        std::vector<float> want = x;
        host->allreduce(c, want.data(), op, comm::Algorithm::ring, {});
        expect_same_bits(run_device(*restored, x, op), want, "restored from the host's state");
      }
  }
  // PowerSGD over a layer layout: matrices that gain, one that does not (6 x 2 at rank 2), gaps between them and a
  // tail (the uncompressed values), a sum over ranks and a restored state (Q included).
  {
    const std::vector<comm::MatrixView> layout = {{0, 40, 50}, {2010, 6, 2}, {2100, 30, 60}, {4000, 10, 90}};
    const comm::CompressionSpec spec = comm::parse_compression("powersgd:2");
    const size_t n = 5000;
    auto host = comm::make_compressor(spec, n, layout, 5, 1);
    auto dev = comm::make_device_compressor(spec, n, device, stream, 5, 1, layout);
    for (unsigned call = 0; call < 3; ++call) {
      SCOPED_TRACE("powersgd:2 over a layout, call " + std::to_string(call));
      const std::vector<float> x = compression_input(n, 500u * unsigned(r) + call);
      std::vector<float> want = x;
      host->allreduce(c, want.data(), comm::ReduceOp::sum, comm::Algorithm::ring, {});
      expect_same_bits(run_device(*dev, x, comm::ReduceOp::sum), want, "result");
      EXPECT_EQ(dev->wire_bytes(), host->wire_bytes());
    }
    expect_same_bits(dev->state(stream), host->state(), "powersgd state over a layout");
    EXPECT_EQ(dev->state_size(), host->state().size());
    HPDT_EXPECT_THROW_MSG(dev->set_state(std::vector<float>(5), stream),
                          "compression state of 5 values does not fit powersgd:2 over 5000 values (expected");
  }
  HPDT_EXPECT_THROW_MSG(comm::make_device_compressor(comm::parse_compression("none"), 8, device, stream),
                        "make_device_compressor: 'none' is not a lossy compression");
  auto d = comm::make_device_compressor(comm::parse_compression("topk:0.5"), 8, device, stream);
  Tensor wrong = Tensor::zeros({9}, DType::f32).to(device, stream);
  HPDT_EXPECT_THROW_MSG(d->allreduce(c, wrong, comm::ReduceOp::sum, comm::Algorithm::ring, {}, stream),
                        "DeviceCompressor topk:0.5: expects f32 [8], got");
  HPDT_EXPECT_THROW_MSG(d->set_state(std::vector<float>(3), stream),
                        "compression state of 3 values does not fit topk:0.5 over 8 values (expected 10)");
}

}  // namespace hpdt::test
