// Gradient compression: names, error bounds (fp16/bf16/qsgd), the error-feedback invariant
// (transmitted + new residual = input + old residual; nothing is lost over steps), PowerSGD's exact
// recovery of a low-rank matrix, identical results on every rank, wire bytes, checkpoint state, and
// GradientSync with compression, tensor-aligned buckets and overlap off.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "device_compression_check.h"
#include "hpdt/comm/compression.h"
#include "hpdt/comm/gradient_sync.h"
#include "hpdt/core/error.h"
#include "hpdt_test.h"

using namespace hpdt;
using namespace hpdt::comm;

namespace {

std::vector<float> random_values(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// The exact average over ranks, in double.
std::vector<double> exact_average(Communicator& c, const std::vector<float>& x) {
  std::vector<double> d(x.begin(), x.end()), out(x.size());
  MPI_Allreduce(d.data(), out.data(), int(d.size()), MPI_DOUBLE, MPI_SUM, c.comm());
  for (auto& v : out) v /= c.size();
  return out;
}

// Rank 0's copy of `x`, for "identical on every rank".
bool same_on_every_rank(Communicator& c, const std::vector<float>& x) {
  std::vector<float> root = x;
  MPI_Bcast(root.data(), int(root.size()), MPI_FLOAT, 0, c.comm());
  int ok = std::equal(x.begin(), x.end(), root.begin(), [](float a, float b) { return test::bits_of(a) == test::bits_of(b); });
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, c.comm());
  return ok == 1;
}

}  // namespace

TEST(Compression, NamesRoundTripAndBadNamesAreRefused) {
  for (const char* n : {"none", "fp16", "bf16", "topk:0.01", "topk:1", "qsgd:8", "qsgd:2", "powersgd:4", "topk:0.5,noef", "powersgd:1,noef"})
    EXPECT_EQ(compression_name(parse_compression(n)), n);
  for (const char* bad : {"", "zip", "topk", "topk:0", "topk:1.5", "topk:x", "qsgd:1", "qsgd:9", "qsgd:4.5", "powersgd:0", "fp16:2",
                          "fp16,noef", "topk:0.1,ef"}) {
    try {
      parse_compression(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected none, fp16, bf16"), std::string::npos) << e.what();
    }
  }
}

TEST(Compression, NoneIsExact) {
  Communicator c(MPI_COMM_WORLD);
  const size_t n = 1001;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(int((i * 7 + size_t(c.rank()) * 3) % 11) - 5);
  const auto want = exact_average(c, x);
  auto comp = make_compressor(parse_compression("none"), n);
  comp->allreduce(c, x.data(), ReduceOp::sum, Algorithm::ring, {});
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], float(want[i] * c.size())) << i;
}

TEST(Compression, HalfWireErrorBoundAndWireBytes) {
  Communicator c(MPI_COMM_WORLD);
  const int p = c.size();
  for (const char* name : {"fp16", "bf16"}) {
    const double eps = std::string(name) == "fp16" ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);  // unit roundoff
    for (size_t n : {size_t(0), size_t(1), size_t(3), size_t(100003)}) {
      auto x = random_values(n, unsigned(17 + c.rank()), 3.0f);
      const auto want = exact_average(c, x);
      double max_abs = 0;
      for (float v : x) max_abs = std::max(max_abs, double(std::fabs(v)));
      MPI_Allreduce(MPI_IN_PLACE, &max_abs, 1, MPI_DOUBLE, MPI_MAX, c.comm());
      auto comp = make_compressor(parse_compression(name), n);
      comp->allreduce(c, x.data(), ReduceOp::avg, Algorithm::ring, {});
      // Each input rounded once (<= eps |x|), the f32 sum of p terms, the average rounded once.
      for (size_t i = 0; i < n; ++i)
        ASSERT_LE(std::fabs(double(x[i]) - want[i]), eps * max_abs + eps * std::fabs(want[i]) + 1e-6 * max_abs) << name << " n " << n << " i " << i;
      EXPECT_TRUE(same_on_every_rank(c, x)) << name;
      if (p > 1 && n == 100003) {  // 2 bytes per value on the wire: half of an f32 ring's bytes
        const double raw = 2.0 * (p - 1) / p * double(n) * 4;
        EXPECT_NEAR(double(comp->wire_bytes()), raw / 2, raw * 0.01) << name;
      }
    }
  }
}

// For every method with error feedback: transmitted + new residual == input + old residual, and over
// many steps sum(outputs) + avg(final residuals) == sum(average inputs).
TEST(Compression, ErrorFeedbackLosesNothing) {
  Communicator c(MPI_COMM_WORLD);
  const size_t rows = 24, cols = 20, n = rows * cols + 13;
  for (const char* name : {"topk:0.05", "qsgd:4", "qsgd:2", "powersgd:1", "powersgd:2"}) {
    auto comp = make_compressor(parse_compression(name), n, {{0, rows, cols}, {rows * cols, 1, 13}}, 7, 3);
    comp->record_transmitted(true);
    std::vector<double> sum_out(n, 0), sum_in(n, 0);
    for (int step = 0; step < 6; ++step) {
      auto x = random_values(n, unsigned(1000 * step + c.rank()));
      const auto avg = exact_average(c, x);
      for (size_t i = 0; i < n; ++i) sum_in[i] += avg[i];
      const std::vector<float> old_res = comp->residual(), in = x;
      ASSERT_EQ(old_res.size(), n);
      comp->allreduce(c, x.data(), ReduceOp::avg, Algorithm::rhd, {});
      const auto& res = comp->residual();
      const auto& sent = comp->transmitted();
      for (size_t i = 0; i < n; ++i) {
        const double lhs = double(sent[i]) + double(res[i]), rhs = double(in[i]) + double(old_res[i]);
        ASSERT_NEAR(lhs, rhs, 1e-6 * (1 + std::fabs(rhs))) << name << " step " << step << " i " << i;
      }
      EXPECT_TRUE(same_on_every_rank(c, x)) << name;
      for (size_t i = 0; i < n; ++i) sum_out[i] += x[i];
    }
    std::vector<float> res = comp->residual();
    const auto res_avg = exact_average(c, res);
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(sum_out[i] + res_avg[i] - sum_in[i]));
    EXPECT_LT(worst, 1e-4) << name;
  }
}

TEST(Compression, TopKKeepsTheLargestAndRatioOneIsExact) {
  Communicator c(MPI_COMM_WORLD);
  const size_t n = 1000;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(int((i * 31 + size_t(c.rank()) * 7) % 23) - 11);
  const auto want = exact_average(c, x);
  auto all = make_compressor(parse_compression("topk:1"), n);
  std::vector<float> y = x;
  all->allreduce(c, y.data(), ReduceOp::avg, Algorithm::ring, {});
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], want[i], 1e-6) << i;
  // ratio 0.01 keeps exactly the 10 largest |x| of this rank.
  auto top = make_compressor(parse_compression("topk:0.01,noef"), n);
  top->record_transmitted(true);
  std::vector<float> v(n, 0.5f);
  for (size_t j = 0; j < 10; ++j) v[j * 97 + size_t(c.rank())] = -float(10 + j);
  top->allreduce(c, v.data(), ReduceOp::sum, Algorithm::ring, {});
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) kept += top->transmitted()[i] != 0;
  EXPECT_EQ(kept, 10u);
  for (size_t j = 0; j < 10; ++j) EXPECT_EQ(top->transmitted()[j * 97 + size_t(c.rank())], -float(10 + j));
  EXPECT_TRUE(top->residual().empty());
  if (c.size() > 1) {
    EXPECT_EQ(top->wire_bytes(), uint64_t(c.size() - 1) * 10 * 8);  // ring all-gather of (u32, f32) pairs
  }
}

TEST(Compression, QsgdIsBoundedAndUnbiased) {
  Communicator c(MPI_COMM_WORLD);
  const size_t n = 1500;  // 3 chunks, the last short
  const auto x = random_values(n, 5);  // same on every rank
  for (int bits : {2, 4, 8}) {
    auto q = make_compressor(parse_compression("qsgd:" + std::to_string(bits) + ",noef"), n, {}, 11, 0);
    q->record_transmitted(true);
    const double L = (1 << (bits - 1)) - 1;
    std::vector<double> mean(n, 0);
    const int trials = 200;
    for (int t = 0; t < trials; ++t) {
      std::vector<float> y = x;
      q->allreduce(c, y.data(), ReduceOp::avg, Algorithm::ring, {});
      for (size_t ch = 0; ch < n; ch += 512) {
        double s = 0;
        for (size_t i = ch; i < std::min(n, ch + 512); ++i) s = std::max(s, double(std::fabs(x[i])));
        for (size_t i = ch; i < std::min(n, ch + 512); ++i) ASSERT_LE(std::fabs(q->transmitted()[i] - x[i]), s / L * (1 + 1e-6)) << bits;
      }
      for (size_t i = 0; i < n; ++i) mean[i] += y[i] / trials;
      if (t == 0) {
        EXPECT_TRUE(same_on_every_rank(c, y));
        if (c.size() > 1) {
          const uint64_t msg = ((3 * 4 + (n * size_t(bits) + 7) / 8) + 7) / 8 * 8;
          EXPECT_EQ(q->wire_bytes(), uint64_t(c.size() - 1) * msg);
        }
      }
    }
    // Unbiased: the mean of `trials` independent roundings (times the ranks') is close to x.
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(mean[i] - x[i]));
    EXPECT_LT(worst, 4.0 / L / std::sqrt(double(trials * c.size())) * 4) << bits;  // max |x| ~ 3.5
  }
}

TEST(Compression, PowerSgdRecoversALowRankMatrixExactly) {
  Communicator c(MPI_COMM_WORLD);
  const int p = c.size();
  const size_t rows = 40, cols = 30, n = rows * cols + 7;
  // Rank r holds a_r b^T (rank 1) and a vector: the average is rank <= p; rank p+1 recovers it.
  const auto a = random_values(rows, unsigned(100 + c.rank()));
  const auto b = random_values(cols, 99);
  std::vector<float> x(n);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) x[i * cols + j] = a[i] * b[j];
  for (size_t j = 0; j < 7; ++j) x[rows * cols + j] = float(j) + float(c.rank());
  const auto want = exact_average(c, x);
  auto comp = make_compressor(parse_compression("powersgd:" + std::to_string(p + 1)), n, {{0, rows, cols}, {rows * cols, 1, 7}}, 3, 0);
  comp->allreduce(c, x.data(), ReduceOp::avg, Algorithm::ring, {});
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(x[i], want[i], 2e-5 * scale) << i;
  for (size_t j = 0; j < 7; ++j) EXPECT_EQ(x[rows * cols + j], float(want[rows * cols + j])) << "vectors go uncompressed";
  EXPECT_TRUE(same_on_every_rank(c, x));
  if (p > 1) {  // P (40 x R + 7) and Q (30 x R) through the ring, not the 1207 values
    const double raw = 2.0 * (p - 1) / p * double(n) * 4, sent = 2.0 * (p - 1) / p * double(70 * (p + 1) + 7) * 4;
    EXPECT_NEAR(double(comp->wire_bytes()), sent, 64);
    EXPECT_LT(double(comp->wire_bytes()), raw);
  }
}

TEST(Compression, StateRoundTripContinuesIdentically) {
  Communicator c(MPI_COMM_WORLD);
  const size_t n = 600;
  for (const char* name : {"topk:0.1", "qsgd:4", "powersgd:2"}) {
    auto a = make_compressor(parse_compression(name), n, {{0, 20, 30}}, 5, 1);
    for (int s = 0; s < 2; ++s) {
      auto x = random_values(n, unsigned(s * 10 + c.rank()));
      a->allreduce(c, x.data(), ReduceOp::avg, Algorithm::ring, {});
    }
    auto b = make_compressor(parse_compression(name), n, {{0, 20, 30}}, 5, 1);
    b->set_state(a->state());
    auto x = random_values(n, unsigned(77 + c.rank())), y = x;
    a->allreduce(c, x.data(), ReduceOp::avg, Algorithm::ring, {});
    b->allreduce(c, y.data(), ReduceOp::avg, Algorithm::ring, {});
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(test::bits_of(x[i]), test::bits_of(y[i])) << name << " " << i;
    EXPECT_THROW(b->set_state(std::vector<float>(3)), Error);
  }
}

TEST(GradientSyncCompression, TensorAlignedBucketsOverlapOffAndCompression) {
  Communicator c(MPI_COMM_WORLD);
  // Tensors: 64x50 matrix, a 50-vector, 32x64, 7-vector: 3200 + 50 + 2048 + 7.
  const std::vector<MatrixView> tensors = {{0, 64, 50}, {3200, 1, 50}, {3250, 32, 64}, {5298, 1, 7}};
  const size_t n = 5305;
  for (const char* name : {"none", "fp16", "topk:0.2", "qsgd:8", "powersgd:2"}) {
    for (bool overlap : {true, false}) {
      GradientSyncOptions o;
      o.bucket_bytes = 1000 * 4;  // cuts fall inside tensors and move to their ends
      o.algorithm = Algorithm::ring;
      o.tensors = tensors;
      o.compression = parse_compression(name);
      o.overlap = overlap;
      std::vector<float> g(n);
      GradientSync sync(c, g.data(), n, DType::f32, o);
      EXPECT_EQ(sync.bucket_offsets(), (std::vector<size_t>{0, 3200, 5298})) << name;
      for (int step = 0; step < 3; ++step) {
        auto x = random_values(n, unsigned(step * 100 + c.rank()));
        g = x;
        const auto want = exact_average(c, x);
        sync.begin_step();
        for (size_t off = n; off > 0;) {  // backward order: from the end, in pieces of 500
          const size_t lo = off > 500 ? off - 500 : 0;
          sync.notify_ready(lo, off - lo);
          off = lo;
        }
        sync.wait();
        EXPECT_TRUE(same_on_every_rank(c, g)) << name;
        if (std::string(name) == "none") {
          for (size_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], want[i], 1e-5) << i;
        }
        if (std::string(name) == "powersgd:2") {  // vectors are never approximated
          for (size_t i = 3200; i < 3250; ++i) ASSERT_NEAR(g[i], want[i], 1e-5) << i;
        }
        if (c.size() > 1 && std::string(name) != "none") {
          EXPECT_LT(sync.bytes_sent(), sync.raw_bytes()) << name;
        }
      }
      EXPECT_EQ(sync.compression_state().empty(), std::string(name) == "none") << name;
    }
  }
  GradientSyncOptions bad;
  bad.compression = parse_compression("topk:0.1");
  std::vector<uint16_t> h(10);
  EXPECT_THROW(GradientSync(c, h.data(), 10, DType::f16, bad), Error);
  bad.compression = {};
  bad.tensors = {{5, 2, 5}};
  EXPECT_THROW(GradientSync(c, h.data(), 10, DType::f16, bad), Error);
}

TEST(Compression, TinyCountsWorkForEveryMethod) {
  Communicator c(MPI_COMM_WORLD);
  for (const char* name : {"fp16", "bf16", "topk:0.01", "topk:0.5,noef", "qsgd:2", "qsgd:8", "powersgd:1", "powersgd:3"}) {
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(7), size_t(513)}) {
      auto comp = make_compressor(parse_compression(name), n, {}, 1, 0);
      for (int step = 0; step < 2; ++step) {
        std::vector<float> x(n);
        for (size_t i = 0; i < n; ++i) x[i] = float(int(i % 5) - 2 + c.rank());
        comp->allreduce(c, x.data(), ReduceOp::avg, Algorithm::tree, {});
        for (float v : x) ASSERT_TRUE(std::isfinite(v)) << name << " n " << n;
        EXPECT_TRUE(same_on_every_rank(c, x)) << name << " n " << n;
      }
    }
  }
}

// comm::DeviceCompressor on CPU tensors (the CUDA case: test_device_allreduce.cpp) is the host compressor, bit for bit.
TEST(Compression, DeviceCompressorOnCpuTensorsMatchesTheHostCompressor) {
  Communicator c(MPI_COMM_WORLD);
  test::expect_device_compressors_match_host(c, Device::cpu(), Stream());
}
