// The CPU oracle of the compression kernels (hpdt/kernels/compress.h): top-k selection on hand-made inputs
// and against a full sort, QSGD against comm's algorithm written out (comm/src/compression.cpp: chunk
// scales, Philox stochastic rounding, bit-packing) and its statistics (unbiased, within one level).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "hpdt/core/philox.h"
#include "hpdt/kernels/compress.h"
#include "hpdt/kernels/cpu/elementwise.h"
#include "hpdt/kernels/cpu/gemm.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
const Stream kCpu;

struct TopK {
  std::vector<int32_t> indices;
  std::vector<float> values;
};

TopK topk(const std::vector<float>& x, int64_t k) {
  Tensor t = Tensor::from_vector(x, {int64_t(x.size())});
  Tensor i = Tensor::empty({k}, DType::i32), v = Tensor::empty({k}, DType::f32);
  kernels::topk_select(t, k, i, v, kCpu);
  return {i.to_vector<int32_t>(), v.to_vector<float>()};
}

TEST(TopkCpu, HandMadeInputs) {
  const std::vector<float> x = {0.5f, -3.0f, 3.0f, 1.0f, -1.0f, 0.0f, 2.0f, -2.0f};
  TopK r = topk(x, 3);  // |3| twice, then the tie at 2 goes to the lower index (6)
  EXPECT_EQ(r.indices, (std::vector<int32_t>{1, 2, 6}));
  EXPECT_EQ(r.values, (std::vector<float>{-3.0f, 3.0f, 2.0f}));
  r = topk(x, 4);
  EXPECT_EQ(r.indices, (std::vector<int32_t>{1, 2, 6, 7}));
  r = topk(x, 8);  // everything, in index order
  EXPECT_EQ(r.indices, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(r.values, x);
  r = topk(x, 0);
  EXPECT_TRUE(r.indices.empty());
  // ties everywhere: the first k; -0 ties with +0
  EXPECT_EQ(topk({1, -1, 1, -1, 1}, 2).indices, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(topk({-0.0f, 0.0f, -0.0f}, 2).indices, (std::vector<int32_t>{0, 1}));
  // NaN above inf above the largest finite value
  const std::vector<float> special = {1.0f, NAN, -INFINITY, 3.4e38f, 2.0f};
  EXPECT_EQ(topk(special, 1).indices, (std::vector<int32_t>{1}));
  EXPECT_EQ(topk(special, 2).indices, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(topk(special, 3).indices, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(topk(special, 4).indices, (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST(TopkCpu, MatchesAFullStableSort) {
  for (int64_t n : {int64_t(1), int64_t(13), int64_t(1000), int64_t(65537)}) {
    Tensor t = Tensor::empty({n}, DType::f32);
    kernels::cpu::fill_uniform(t, -2, 2, 99, uint64_t(n));
    std::vector<float> x = t.to_vector<float>();
    for (size_t i = 0; i < x.size(); i += 2) x[i] = std::round(x[i] * 4) / 4;  // half of them tied
    std::vector<int32_t> order(x.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return std::fabs(x[size_t(a)]) > std::fabs(x[size_t(b)]); });
    for (int64_t k : {int64_t(1), (n + 99) / 100, n / 2, n}) {
      if (k < 1) continue;
      std::vector<int32_t> want(order.begin(), order.begin() + k);
      std::sort(want.begin(), want.end());
      TopK r = topk(x, k);
      ASSERT_EQ(r.indices, want) << "n=" << n << " k=" << k;
      for (int64_t j = 0; j < k; ++j) ASSERT_EQ(r.values[size_t(j)], x[size_t(want[size_t(j)])]);
    }
  }
}

// The selection is a radix select over the bits of |x| (11 + 11 + 9 bits): keys that differ only in the
// lowest digit, in the middle one, across exponents, and a threshold inside a long run of equal keys.
TEST(TopkCpu, RadixDigitsAndTiesAgainstASort) {
  auto check = [](const std::vector<float>& x, const char* what) {
    const int64_t n = int64_t(x.size());
    std::vector<int32_t> order(x.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return std::fabs(x[size_t(a)]) > std::fabs(x[size_t(b)]); });
    for (int64_t k : {int64_t(1), int64_t(2), n / 3, n / 2 + 1, n - 1, n}) {
      if (k < 1 || k > n) continue;
      std::vector<int32_t> want(order.begin(), order.begin() + k);
      std::sort(want.begin(), want.end());
      ASSERT_EQ(topk(x, k).indices, want) << what << " k=" << k;
    }
  };
  std::vector<float> low(3000), mid(3000), wide(3000), flat(3000, 1.5f);
  for (size_t i = 0; i < low.size(); ++i) {
    const uint32_t b = 0x3f800000u + uint32_t((i * 7919) % 512);  // 1.0 plus up to 511 ulps: lowest digit only
    std::memcpy(&low[i], &b, 4);
    const uint32_t m = 0x3f800000u + (uint32_t((i * 104729) % 2048) << 9);  // middle digit only
    std::memcpy(&mid[i], &m, 4);
    wide[i] = std::ldexp(float(int(i % 17) - 8), int((i * 31) % 60) - 30);  // 2^-30 .. 2^29, both signs, zeros
    if (i % 5 == 0) flat[i] = -1.5f;  // ties with +1.5
  }
  for (size_t i = 0; i < 40; ++i) flat[i * 71] = 2.0f;
  check(low, "low digit");
  check(mid, "middle digit");
  check(wide, "exponents");
  check(flat, "long tie run");
}

TEST(TopkCpu, CountAsComm) {
  EXPECT_EQ(kernels::topk_count(1000, 0.01), 10);
  EXPECT_EQ(kernels::topk_count(1001, 0.01), 11);  // ceil
  EXPECT_EQ(kernels::topk_count(10, 1e-6), 1);     // at least one
  EXPECT_EQ(kernels::topk_count(10, 1.0), 10);
  EXPECT_EQ(kernels::topk_count(0, 0.5), 0);
  HPDT_EXPECT_THROW_MSG(kernels::topk_count(10, 0.0), "must be in (0, 1]");
}

// ---- QSGD ------------------------------------------------------------------------------------------------

// comm's Qsgd::allreduce for one rank, written out: scale per 512 values, level sign(x) min(L, floor(|x|/s L
// + u)) with each product rounded to f32 (as comm's -march=native build computes it: the only FMA GCC forms
// there joins u's exact scaling by 2^-24 to the add), residual x - q (s/L), decode out + q (s/L) with one
// rounding (an FMA in comm's build). Volatile temporaries keep this copy from being contracted differently.
struct CommQsgd {
  std::vector<uint8_t> packed;
  std::vector<float> scales, residual;
};

void comm_put(uint8_t* buf, size_t i, int bits, uint32_t v) {  // comm's Qsgd::put
  const size_t bit = i * size_t(bits);
  uint32_t w = v << (bit & 7);
  for (size_t b = bit >> 3; w; ++b, w >>= 8) buf[b] |= uint8_t(w);
}
uint32_t comm_get(const uint8_t* buf, size_t i, int bits) {  // comm's Qsgd::get
  const size_t bit = i * size_t(bits), b = bit >> 3;
  uint32_t w = buf[b];
  if ((bit & 7) + size_t(bits) > 8) w |= uint32_t(buf[b + 1]) << 8;
  return (w >> (bit & 7)) & ((1u << bits) - 1);
}

CommQsgd comm_quantize(const std::vector<float>& x, int bits, uint64_t seed, uint64_t stream, uint64_t base) {
  const size_t n = x.size(), chunks = (n + 511) / 512;
  const int L = (1 << (bits - 1)) - 1;
  CommQsgd m;
  m.packed.assign((n * size_t(bits) + 7) / 8, 0);
  m.scales.resize(chunks);
  m.residual.resize(n);
  for (size_t ch = 0; ch < chunks; ++ch) {
    const size_t lo = ch * 512, hi = std::min(n, lo + 512);
    float s = 0;
    for (size_t i = lo; i < hi; ++i) s = std::max(s, std::fabs(x[i]));
    m.scales[ch] = s;
    for (size_t i = lo; i < hi; ++i) {
      int q = 0;
      if (s > 0) {
        const float u = u32_to_uniform(philox_u32(seed, stream, base + i));
        volatile float ratio = std::fabs(x[i]) / s;
        volatile float a = ratio * float(L);
        volatile float t = a + u;
        q = std::min(L, int(std::floor(t)));
        if (x[i] < 0) q = -q;
      }
      comm_put(m.packed.data(), i, bits, uint32_t(q + L));
      volatile float step = s / float(L);
      volatile float decoded = float(q) * step;
      m.residual[i] = x[i] - decoded;
    }
  }
  return m;
}

std::vector<float> random_vector(int64_t n, float lo, float hi, uint64_t seed) {
  Tensor t = Tensor::empty({n}, DType::f32);
  kernels::cpu::fill_uniform(t, lo, hi, seed, 0);
  return t.to_vector<float>();
}

struct Message {
  Tensor packed, scales, residual;
};

Message quantize(const std::vector<float>& x, int bits, const kernels::QsgdRandom& rng) {
  const int64_t n = int64_t(x.size());
  Message m{Tensor::empty({kernels::qsgd_packed_bytes(n, bits)}, DType::u8),
            Tensor::empty({kernels::qsgd_chunks(n)}, DType::f32), Tensor::empty({n}, DType::f32)};
  std::memset(m.packed.data(), 0xa5, m.packed.nbytes());  // every byte must be written
  kernels::qsgd_quantize(Tensor::from_vector(x, {n}), bits, rng, m.packed, m.scales, &m.residual, kCpu);
  return m;
}

TEST(QsgdCpu, SameMessageAsComm) {
  for (int64_t n : {int64_t(1), int64_t(9), int64_t(512), int64_t(1000), int64_t(5000)}) {
    std::vector<float> x = random_vector(n, -2, 2, 5);
    if (n > 600) std::fill(x.begin() + 512, x.begin() + 600, 0.0f);  // part of a chunk of zeros
    for (int bits = 2; bits <= 8; ++bits) {
      const uint64_t stream = (uint64_t(2) << 20) ^ 3u, base = 7 * ((uint64_t(n) + 3) & ~uint64_t(3));
      const CommQsgd want = comm_quantize(x, bits, 42, stream, base);
      const Message got = quantize(x, bits, {42, stream, base});
      ASSERT_EQ(got.packed.to_vector<uint8_t>(), want.packed) << "n=" << n << " bits=" << bits;
      ASSERT_EQ(got.scales.to_vector<float>(), want.scales);
      const std::vector<float> r = got.residual.to_vector<float>();
      for (size_t i = 0; i < size_t(n); ++i) ASSERT_EQ(test::bits_of(r[i]), test::bits_of(want.residual[i])) << i;
      // decoding: comm's out + q (s/L), one rounding, summed into what is there
      const int L = (1 << (bits - 1)) - 1;
      std::vector<float> base_values = random_vector(n, -1, 1, 6);
      Tensor out = Tensor::from_vector(base_values, {n});
      kernels::qsgd_dequantize(got.packed, got.scales, bits, out, true, kCpu);
      Tensor fresh = Tensor::from_vector(base_values, {n});
      kernels::qsgd_dequantize(got.packed, got.scales, bits, fresh, false, kCpu);
      for (size_t i = 0; i < size_t(n); ++i) {
        const float step = want.scales[i / 512] / float(L);
        const int q = int(comm_get(want.packed.data(), i, bits)) - L;
        ASSERT_EQ(test::bits_of(out.data<float>()[i]), test::bits_of(std::fma(float(q), step, base_values[i]))) << i;
        volatile float decoded = float(q) * step;
        ASSERT_EQ(test::bits_of(fresh.data<float>()[i]), test::bits_of(decoded)) << i;
        // the residual is what decoding leaves out
        ASSERT_EQ(test::bits_of(r[i]), test::bits_of(x[i] - decoded)) << i;
      }
    }
  }
}

TEST(QsgdCpu, PackingLayout) {
  // 3 values of 3 bits, levels q + L = 3, 6, 0 at bits 0-2, 3-5, 6-8: byte 0 = 3 | 6 << 3, byte 1 = 0
  const std::vector<float> x = {0.0f, 1.0f, -1.0f};
  const Message m = quantize(x, 3, {0, 0, 0});  // |x| = s gives the extreme levels whatever u is
  ASSERT_EQ(m.packed.numel(), 2);
  EXPECT_EQ(m.packed.data<uint8_t>()[0], uint8_t(3 | (6 << 3) | (0 << 6)));
  EXPECT_EQ(m.packed.data<uint8_t>()[1], 0) << "bit 8 (value 2's top bit) and the unused bits are 0";
  EXPECT_EQ(m.scales.data<float>()[0], 1.0f);
  // 13 values x 5 bits = 65 bits: 9 bytes, the last holding one bit
  EXPECT_EQ(kernels::qsgd_packed_bytes(13, 5), 9);
  EXPECT_EQ(kernels::qsgd_chunks(513), 2);
}

TEST(QsgdCpu, UnbiasedAndWithinOneLevel) {
  const int64_t n = 1500;
  const std::vector<float> x = random_vector(n, -1, 1, 11);
  for (int bits : {2, 4, 8}) {
    const int L = (1 << (bits - 1)) - 1;
    const int trials = 4000;
    std::vector<double> mean(size_t(n), 0.0);
    float max_scale = 0;
    for (int t = 0; t < trials; ++t) {
      const Message m = quantize(x, bits, {3, 1, uint64_t(t) * 1504});
      const std::vector<float> r = m.residual.to_vector<float>();
      for (int64_t c = 0; c < m.scales.numel(); ++c) max_scale = std::max(max_scale, m.scales.data<float>()[c]);
      for (size_t i = 0; i < size_t(n); ++i) {
        const double decoded = double(x[i]) - double(r[i]);
        const float s = m.scales.data<float>()[i / 512];
        ASSERT_LE(std::fabs(r[i]), s / float(L) * 1.0001f) << "more than one level off";
        mean[i] += decoded / trials;
      }
    }
    // E[decoded] = x; the variance of one draw is at most (s/L)^2 / 4
    const double sigma = double(max_scale) / L / 2 / std::sqrt(double(trials));
    for (size_t i = 0; i < size_t(n); ++i)
      ASSERT_NEAR(mean[i], x[i], 6 * sigma + 1e-6) << "bits=" << bits << " i=" << i;
  }
}

TEST(QsgdCpu, RandomStreamsAreSeparate) {
  const std::vector<float> x = random_vector(4096, -1, 1, 12);
  const Message a = quantize(x, 4, {1, 2, 0}), b = quantize(x, 4, {1, 2, 0});
  EXPECT_EQ(a.packed.to_vector<uint8_t>(), b.packed.to_vector<uint8_t>()) << "deterministic";
  for (kernels::QsgdRandom other :
       {kernels::QsgdRandom{2, 2, 0}, kernels::QsgdRandom{1, 3, 0}, kernels::QsgdRandom{1, 2, 4096}})
    EXPECT_NE(a.packed.to_vector<uint8_t>(), quantize(x, 4, other).packed.to_vector<uint8_t>());
}

TEST(SparseCpu, AccumulateAndFill) {
  Tensor out = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  Tensor idx = Tensor::from_vector<int32_t>({3, 0}, {2}), val = Tensor::from_vector<float>({0.5f, -1}, {2});
  kernels::sparse_accumulate(idx, val, out, kCpu);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0, 2, 3, 4.5f}));
  kernels::sparse_fill(idx, 0.0f, out, kCpu);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0, 2, 3, 0}));
  Tensor bad = Tensor::from_vector<int32_t>({4}, {1});
  HPDT_EXPECT_THROW_MSG(kernels::sparse_fill(bad, 0.0f, out, kCpu), "index 4 outside");
  HPDT_EXPECT_THROW_MSG(kernels::sparse_accumulate(bad, Tensor::from_vector<float>({1}, {1}), out, kCpu),
                        "index 4 outside");
}

// The order powersgd_product promises (kernels/compress.h) written out: an FMA chain from zero over each block of
// kGemmKChunk k values, the blocks added in order. The CUDA kernel is checked against the CPU one bit for bit
// (test_compress_cuda), so this pins what both compute.
TEST(PowersgdProductCpu, IsTheCpuGemmsOrderWrittenOut) {
  std::mt19937 gen(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{5, 3, 1}, {7, 4, 256}, {3, 2, 257}, {9, 3, 600}, {64, 4, 513}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + (ta ? " T" : " N") +
                     (tb ? "T" : "N"));
        Tensor a = Tensor::empty(ta ? Shape{k, m} : Shape{m, k}, DType::f32);
        Tensor b = Tensor::empty(tb ? Shape{n, k} : Shape{k, n}, DType::f32);
        for (Tensor* t : {&a, &b})
          for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = d(gen);
        Tensor c = Tensor::empty({m, n}, DType::f32);
        kernels::cpu::fill(c, NAN);  // poisoned
        kernels::powersgd_product(ta, tb, a, b, c, kCpu);
        const float* A = a.data<float>();
        const float* B = b.data<float>();
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            float sum = 0.0f;
            for (int64_t p0 = 0; p0 < k; p0 += kernels::cpu::kGemmKChunk) {
              float acc = 0.0f;
              for (int64_t p = p0; p < std::min(k, p0 + kernels::cpu::kGemmKChunk); ++p)
                acc = std::fma(ta ? A[p * m + i] : A[i * k + p], tb ? B[j * k + p] : B[p * n + j], acc);
              sum = p0 == 0 ? acc : sum + acc;
            }
            ASSERT_EQ(test::bits_of(c.data<float>()[i * n + j]), test::bits_of(sum)) << "element " << i << ", " << j;
          }
      }
}

TEST(CompressCpu, BadArguments) {
  Tensor x = Tensor::zeros({100}, DType::f32), i = Tensor::empty({10}, DType::i32), v = Tensor::empty({10}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::topk_select(x, 101, i, v, kCpu), "must be in [0, 100]");
  HPDT_EXPECT_THROW_MSG(kernels::topk_select(x, 9, i, v, kCpu), "must hold k = 9");
  Tensor packed = Tensor::empty({50}, DType::u8), scales = Tensor::empty({1}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::qsgd_quantize(x, 1, {}, packed, scales, nullptr, kCpu), "QSGD bits 1 must be 2..8");
  HPDT_EXPECT_THROW_MSG(kernels::qsgd_quantize(x, 3, {}, packed, scales, nullptr, kCpu), "must hold 38 bytes");
  Tensor r = Tensor::empty({99}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::qsgd_quantize(x, 4, {}, packed, scales, &r, kCpu), "element counts differ");
  Tensor m = Tensor::zeros({6, 5}, DType::f32), q = Tensor::zeros({5, 2}, DType::f32),
         p = Tensor::zeros({6, 2}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::powersgd_product(true, false, m, q, p, kCpu),
                        "powersgd_product: op(a) 5 x 6 times op(b) 5 x 2 does not give c");
  HPDT_EXPECT_THROW_MSG(kernels::powersgd_product(false, false, x, q, p, kCpu), "a, b and c must be matrices");
  Tensor p16 = Tensor::zeros({6, 2}, DType::f16);
  HPDT_EXPECT_THROW_MSG(kernels::powersgd_product(false, false, m, q, p16, kCpu), "c has dtype f16, expected f32");
}

}  // namespace
