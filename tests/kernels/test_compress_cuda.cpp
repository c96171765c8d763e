// CUDA compression kernels against the CPU oracle, all compared bit for bit (tolerance: none):
//   topk_select   the same indices and values, in the same (index) order, also with heavy ties, zeros of
//                 both signs, inf and NaN, and k = 1, 1%, half, all;
//   QSGD          the same scales, packed bytes and residuals (same Philox numbers, same f32 roundings:
//                 hpdt/kernels/cpu/compress.h), and dequantisation (= and +=) to the same bits;
//   sparse_*      the same results;
//   powersgd_product  the CPU GEMM's bits (its order of FMAs and k blocks) at PowerSGD's shapes.
// f32 only: compression works on the f32 gradient buckets.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_oracle.h"
#include "hpdt/kernels/compress.h"
#include "hpdt/kernels/cpu/compress.h"

namespace {

using namespace hpdt;

::testing::AssertionResult same_bytes(const Tensor& want, const Tensor& got) {
  if (want.nbytes() != got.nbytes())
    return ::testing::AssertionFailure() << "sizes differ: " << want.str() << " vs " << got.str();
  const auto* a = static_cast<const uint8_t*>(want.data());
  const auto* b = static_cast<const uint8_t*>(got.data());
  for (size_t i = 0; i < want.nbytes(); ++i)
    if (a[i] != b[i])
      return ::testing::AssertionFailure()
             << "first difference at byte " << i << " (element " << i / dtype_size(want.dtype()) << "): want "
             << int(a[i]) << " got " << int(b[i]);
  return ::testing::AssertionSuccess();
}

class CompressCuda : public test::CudaOracleTest {
 protected:
  Tensor host(const Tensor& g) {
    Tensor c = g.to(Device::cpu(), stream);
    stream.synchronize();
    return c;
  }
  Tensor gpu(const Tensor& h) { return h.to(Device::cuda(0), stream); }

  // Top-k on both sides, compared exactly.
  void check_topk(const Tensor& x, int64_t k, const std::string& what) {
    SCOPED_TRACE(what + " n=" + std::to_string(x.numel()) + " k=" + std::to_string(k));
    Tensor ic = Tensor::empty({k}, DType::i32), vc = Tensor::empty({k}, DType::f32);
    kernels::topk_select(x, k, ic, vc, cpu);
    Tensor ig = poisoned({k}, DType::i32), vg = poisoned({k});
    kernels::topk_select(gpu(x), k, ig, vg, stream);
    EXPECT_TRUE(same_bytes(ic, host(ig))) << "indices";
    EXPECT_TRUE(same_bytes(vc, host(vg))) << "values";
  }

  void check_qsgd(const Tensor& x, int bits, const kernels::QsgdRandom& rng, const std::string& what) {
    const int64_t n = x.numel();
    SCOPED_TRACE(what + " n=" + std::to_string(n) + " bits=" + std::to_string(bits) +
                 " offset=" + std::to_string(rng.offset));
    const int64_t bytes = kernels::qsgd_packed_bytes(n, bits), chunks = kernels::qsgd_chunks(n);
    Tensor pc = Tensor::empty({bytes}, DType::u8), sc = Tensor::empty({chunks}, DType::f32),
           rc = Tensor::empty({n}, DType::f32);
    kernels::qsgd_quantize(x, bits, rng, pc, sc, &rc, cpu);
    Tensor pg = poisoned({bytes}, DType::u8), sg = poisoned({chunks}), rg = poisoned({n});
    kernels::qsgd_quantize(gpu(x), bits, rng, pg, sg, &rg, stream);
    EXPECT_TRUE(same_bytes(sc, host(sg))) << "scales";
    EXPECT_TRUE(same_bytes(pc, host(pg))) << "packed levels";
    EXPECT_TRUE(same_bytes(rc, host(rg))) << "residual";
    // without a residual: the same message
    Tensor pg2 = poisoned({bytes}, DType::u8), sg2 = poisoned({chunks});
    kernels::qsgd_quantize(gpu(x), bits, rng, pg2, sg2, nullptr, stream);
    EXPECT_TRUE(same_bytes(pc, host(pg2))) << "packed levels without residual";
    // decoding the oracle's message on the GPU, = and += (onto random values, not zeros)
    for (bool acc : {false, true}) {
      Tensor base = random({n}, -1.0f, 1.0f);
      Tensor oc = base.clone(cpu);
      kernels::qsgd_dequantize(pc, sc, bits, oc, acc, cpu);
      Tensor og = acc ? gpu(base) : poisoned({n});
      kernels::qsgd_dequantize(gpu(pc), gpu(sc), bits, og, acc, stream);
      EXPECT_TRUE(same_bytes(oc, host(og))) << (acc ? "dequantize +=" : "dequantize =");
    }
  }
};

// Values drawn from few magnitudes, so that the k-th largest sits inside a large group of ties; with
// zeros of both signs.
Tensor with_ties(const Tensor& x, float levels) {
  Tensor t = x.clone(Stream());
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::round(p[i] * levels) / levels;  // -0.0 from small negatives
  return t;
}

const int64_t kTopkSizes[] = {1, 7, 4095, 4096, 4097, 65537, 1000003};

TEST_F(CompressCuda, TopkMatchesOracle) {
  for (int64_t n : kTopkSizes) {
    const Tensor x = random({n}, -2.0f, 2.0f);
    const Tensor ties = with_ties(random({n}, -2.0f, 2.0f), 4.0f);
    for (int64_t k : {int64_t(1), int64_t(std::ceil(0.01 * double(n))), n / 2, n - 1, n}) {
      if (k <= 0) continue;
      check_topk(x, k, "uniform");
      check_topk(ties, k, "ties");
    }
  }
}

TEST_F(CompressCuda, TopkSpecialValues) {
  const int64_t n = 10007;
  // all equal: the first k indices
  Tensor same = Tensor::empty({n}, DType::f32);
  kernels::cpu::fill(same, -0.75f);
  check_topk(same, 37, "all equal");
  // all zeros of both signs
  Tensor zeros = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) zeros.data<float>()[i] = i % 3 == 0 ? -0.0f : 0.0f;
  check_topk(zeros, 100, "zeros");
  // inf and NaN count as the largest (NaN above inf), subnormals and the largest finite values
  Tensor x = random({n}, -1.0f, 1.0f);
  float* p = x.data<float>();
  p[5] = INFINITY, p[n - 1] = -INFINITY, p[77] = NAN, p[4096] = 3.4e38f, p[4097] = -3.4e38f, p[9000] = 1e-45f;
  for (int64_t k : {int64_t(1), int64_t(2), int64_t(3), int64_t(6), int64_t(5000)}) check_topk(x, k, "special");
}

TEST_F(CompressCuda, TopkResNet50Bucket) {
  const int64_t n = 25557032;
  check_topk(random({n}, -1.0f, 1.0f), kernels::topk_count(n, 0.01), "resnet-50 arena, 1%");
}

TEST_F(CompressCuda, QsgdMatchesOracle) {
  for (int64_t n :
       {int64_t(1), int64_t(7), int64_t(511), int64_t(512), int64_t(513), int64_t(4099), int64_t(1000003)}) {
    const Tensor x = random({n}, -3.0f, 3.0f);
    for (int bits = 2; bits <= 8; ++bits) {
      if (n == 1000003 && bits != 3 && bits != 8) continue;  // the large size twice
      // comm's stream is (bucket id << 20) ^ rank, its offset calls * round_up(n, 4); odd offsets too
      check_qsgd(x, bits, {seed, (uint64_t(3) << 20) ^ 1u, uint64_t(bits) * 1000004u}, "uniform");
      check_qsgd(x, bits, {seed + 1, 5, 4 * uint64_t(bits) + 3}, "odd offset");
    }
  }
}

TEST_F(CompressCuda, QsgdZeroChunksAndTies) {
  const int64_t n = 512 * 5 + 100;
  Tensor x = with_ties(random({n}, -1.0f, 1.0f), 2.0f);
  for (int64_t i = 512; i < 1024; ++i) x.data<float>()[i] = i % 2 ? 0.0f : -0.0f;  // a chunk of zeros: scale 0
  for (int bits : {2, 5, 8}) check_qsgd(x, bits, {seed, 0, 0}, "zero chunk");
}

TEST_F(CompressCuda, QsgdResNet50Bucket) {
  const int64_t n = 25557032;
  check_qsgd(random({n}, -1e-3f, 1e-3f), 4, {seed, 7, 0}, "resnet-50 arena");
}

TEST_F(CompressCuda, SparseAccumulateAndFill) {
  const int64_t n = 100003;
  const Tensor x = random({n}, -1.0f, 1.0f);
  const int64_t k = kernels::topk_count(n, 0.05);
  Tensor idx = Tensor::empty({k}, DType::i32), val = Tensor::empty({k}, DType::f32);
  kernels::topk_select(x, k, idx, val, cpu);
  // decode two "ranks" in order into random values
  const Tensor base = random({n});
  Tensor oc = base.clone(cpu), og = gpu(base);
  for (int r = 0; r < 2; ++r) {
    kernels::sparse_accumulate(idx, val, oc, cpu);
    kernels::sparse_accumulate(gpu(idx), gpu(val), og, stream);
  }
  EXPECT_TRUE(same_bytes(oc, host(og)));
  Tensor rc = x.clone(cpu), rg = gpu(x);
  kernels::sparse_fill(idx, 0.0f, rc, cpu);
  kernels::sparse_fill(gpu(idx), 0.0f, rg, stream);
  EXPECT_TRUE(same_bytes(rc, host(rg)));
}

// PowerSGD's three products at the shapes comm gives them (M [rows x cols], rank R: P = M Q, Q = M^T P, P Q^T) and
// every transpose at k around the CPU GEMM's block of 256: the CPU's bits.
TEST_F(CompressCuda, PowersgdProductIsTheCpuGemmBitForBit) {
  auto check = [&](bool ta, bool tb, const Tensor& a, const Tensor& b, int64_t m, int64_t n, const std::string& what) {
    SCOPED_TRACE(what);
    Tensor want = Tensor::empty({m, n}, DType::f32);
    kernels::powersgd_product(ta, tb, a, b, want, cpu);
    Tensor got = poisoned({m, n});
    kernels::powersgd_product(ta, tb, gpu(a), gpu(b), got, stream);
    EXPECT_TRUE(same_bytes(want, host(got)));
  };
  for (const auto& [rows, cols, R] :
       {std::array<int64_t, 3>{64, 576, 2}, {2048, 4608, 4}, {771, 257, 3}, {1000, 10, 1}}) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols) + " R" + std::to_string(R);
    const Tensor M = random({rows, cols}), Q = random({cols, R}), P = random({rows, R});
    check(false, false, M, Q, rows, R, "P = M Q, " + shape);
    check(true, false, M, P, cols, R, "Q = M^T P, " + shape);
    check(false, true, P, Q, rows, cols, "P Q^T, " + shape);
  }
  for (int64_t k : {int64_t(1), int64_t(255), int64_t(256), int64_t(257), int64_t(1000)})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t m = 37, n = 5;
        const Tensor a = random(ta ? Shape{k, m} : Shape{m, k}), b = random(tb ? Shape{n, k} : Shape{k, n});
        check(ta, tb, a, b, m, n, "k " + std::to_string(k) + (ta ? " T" : " N") + (tb ? "T" : "N"));
      }
}

TEST_F(CompressCuda, BadArgumentsOnGpu) {
  Tensor x = poisoned({100}), x16 = poisoned({100}, DType::f16);
  Tensor idx = poisoned({10}, DType::i32), val = poisoned({10});
  HPDT_EXPECT_THROW_MSG(kernels::topk_select(x16, 10, idx, val, stream), "x has dtype f16, expected f32");
  HPDT_EXPECT_THROW_MSG(kernels::topk_select(x, 10, val, val, stream), "indices has dtype f32, expected i32");
  HPDT_EXPECT_THROW_MSG(kernels::topk_select(x, 11, idx, val, stream), "must hold k = 11");
  HPDT_EXPECT_THROW_MSG(kernels::topk_select(x, 101, idx, val, stream), "must be in [0, 100]");
  Tensor packed = poisoned({kernels::qsgd_packed_bytes(100, 4)}, DType::u8), scales = poisoned({1});
  HPDT_EXPECT_THROW_MSG(kernels::qsgd_quantize(x, 9, {}, packed, scales, nullptr, stream), "QSGD bits 9 must be 2..8");
  HPDT_EXPECT_THROW_MSG(kernels::qsgd_quantize(x, 3, {}, packed, scales, nullptr, stream),
                        "bytes for 100 values of 3 bits");
  Tensor two = poisoned({2});
  HPDT_EXPECT_THROW_MSG(kernels::qsgd_quantize(x, 4, {}, packed, two, nullptr, stream), "one per 512");
  Tensor host_scales = Tensor::empty({1}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::qsgd_quantize(x, 4, {}, packed, host_scales, nullptr, stream), "different devices");
  HPDT_EXPECT_THROW_MSG(kernels::qsgd_dequantize(packed, scales, 4, x16, false, stream), "out has dtype f16");
  HPDT_EXPECT_THROW_MSG(kernels::sparse_accumulate(idx, poisoned({9}), x, stream), "element counts differ");
}

}  // namespace
