// GPU kernels against the CPU oracle: fresh random inputs, outputs poisoned (NaN) before each run,
// odd sizes. Tolerance: exact (bitwise) for fill, fill_uniform, axpy and cast, which do one rounding
// of the same f32 expression on both sides; sum within 1e-5 relative (different addition orders).
#include <gtest/gtest.h>

#include <cmath>

#include "hpdt/core/philox.h"
#include "hpdt/kernels/accumulate.h"
#include "hpdt/kernels/cpu/elementwise.h"
#include "hpdt/kernels/cpu/reduce.h"
#include "hpdt/kernels/cuda/spin.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/reduce.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
const int64_t kSizes[] = {1, 3, 31, 257, 4099, 1000003, (1 << 22) + 1};

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    HPDT_REQUIRE_GPU();
    stream = Stream::create_cuda(0);
  }
  Tensor to_gpu(const Tensor& t) {
    Tensor g = t.to(Device::cuda(0), stream);
    return g;
  }
  Tensor to_cpu(const Tensor& g) {
    Tensor c = g.to(Device::cpu(), stream);
    stream.synchronize();
    return c;
  }
  Tensor poisoned(const Shape& s, DType dt) {  // NaN (or 0xff bytes) everywhere
    Tensor g = Tensor::empty(s, dt, Device::cuda(0), AllocOptions{.stream = &stream});
    kernels::fill(g, NAN, stream);
    if (!is_floating(dt)) kernels::fill(g, 255, stream);
    return g;
  }
  static void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
    ASSERT_EQ(a.nbytes(), b.nbytes());
    const auto* pa = static_cast<const uint8_t*>(a.data());
    const auto* pb = static_cast<const uint8_t*>(b.data());
    for (size_t i = 0; i < a.nbytes(); ++i) ASSERT_EQ(pa[i], pb[i]) << what << ": first difference at byte " << i;
  }
  Stream stream;
  Stream cpu;
  uint64_t seed = uint64_t(::testing::UnitTest::GetInstance()->random_seed()) * 7919 + 1;
};

TEST_F(CudaKernels, Fill) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8}) {
    for (int64_t n : kSizes) {
      Tensor c = Tensor::empty({n}, dt);
      kernels::cpu::fill(c, 3.7f);
      Tensor g = poisoned({n}, dt);
      kernels::fill(g, 3.7f, stream);
      expect_same_bytes(c, to_cpu(g), std::string("fill ") + std::string(dtype_name(dt)));
    }
  }
}

TEST_F(CudaKernels, FillUniformSameBitsAsCpu) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : kSizes) {
      Tensor c = Tensor::empty({n}, dt);
      kernels::cpu::fill_uniform(c, -3, 5, seed, 12345);
      Tensor g = poisoned({n}, dt);
      kernels::fill_uniform(g, -3, 5, seed, 12345, stream);
      expect_same_bytes(c, to_cpu(g), "fill_uniform " + std::string(dtype_name(dt)) + " n=" + std::to_string(n));
    }
  }
}

TEST_F(CudaKernels, Axpy) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : kSizes) {
      Tensor x = Tensor::empty({n}, dt), y = Tensor::empty({n}, dt);
      kernels::cpu::fill_uniform(x, -1, 1, seed, 0);
      kernels::cpu::fill_uniform(y, -1, 1, seed + 1, 0);
      Tensor xg = to_gpu(x), yg = to_gpu(y);
      kernels::cpu::axpy(0.3f, x, y);
      kernels::axpy(0.3f, xg, yg, stream);
      expect_same_bytes(y, to_cpu(yg), "axpy " + std::string(dtype_name(dt)));
    }
  }
}

TEST_F(CudaKernels, CastEveryPairAndAllHalfPatterns) {
  const DType fl[] = {DType::f32, DType::f16, DType::bf16};
  for (DType from : fl) {
    for (DType to : fl) {
      for (int64_t n : kSizes) {
        Tensor x = Tensor::empty({n}, from);
        kernels::cpu::fill_uniform(x, -70000, 70000, seed, 0);  // beyond f16's range: overflow is tested too
        Tensor c = Tensor::empty({n}, to);
        kernels::cpu::cast(x, c);
        Tensor g = poisoned({n}, to);
        kernels::cast(to_gpu(x), g, stream);
        expect_same_bytes(c, to_cpu(g), "cast " + std::string(dtype_name(from)) + "->" + std::string(dtype_name(to)));
      }
    }
  }
  // Every 16-bit pattern (NaNs excluded: payload bits may differ by design, both stay NaN).
  for (DType half : {DType::f16, DType::bf16}) {
    Tensor h = Tensor::empty({65536}, half);
    for (int i = 0; i < 65536; ++i) static_cast<uint16_t*>(h.data())[i] = uint16_t(i);
    Tensor c = Tensor::empty({65536}, DType::f32);
    kernels::cpu::cast(h, c);
    Tensor g = poisoned({65536}, DType::f32);
    kernels::cast(to_gpu(h), g, stream);
    Tensor gc = to_cpu(g);
    for (int i = 0; i < 65536; ++i) {
      const float a = c.data<float>()[i], b = gc.data<float>()[i];
      if (std::isnan(a)) {
        ASSERT_TRUE(std::isnan(b)) << i;
        continue;
      }
      ASSERT_EQ(test::bits_of(a), test::bits_of(b)) << dtype_name(half) << " pattern " << i;
    }
  }
}

// The all-reduce family's device kernels (kernels/cuda/accumulate.cu: the NCCL transport's reductions, the device
// all-reduce's conversions), bit for bit the CPU's: dst += src, x /= d, and every conversion between f32, f16 and
// bf16 (a copy where the types match). Until 2026-12-01 only the MPI test launched them, so no compute-sanitizer run
// (single-process binaries only) reached them; here every one does.
TEST_F(CudaKernels, AllReduceAccumulateDivideConvertMatchCpuBitwise) {
#if HPDT_HAVE_CUDA  // (kernels::cuda exists only where CUDA is built; without it the fixture has skipped the case)
  const DType fl[] = {DType::f32, DType::f16, DType::bf16};
  for (int64_t n : kSizes) {
    const size_t un = size_t(n);
    Tensor a = Tensor::empty({n}, DType::f32), b = Tensor::empty({n}, DType::f32);
    kernels::cpu::fill_uniform(a, -70000, 70000, seed, 0);  // beyond f16's range: overflow converts too
    kernels::cpu::fill_uniform(b, -3, 5, seed, 1);
    Tensor ga = to_gpu(a), gb = to_gpu(b);
    kernels::accumulate_f32(a.data<float>(), b.data<float>(), un);
    kernels::cuda::accumulate_f32(ga.data<float>(), gb.data<float>(), un, stream.handle());
    expect_same_bytes(a, to_cpu(ga), "accumulate_f32, n " + std::to_string(n));
    kernels::divide_f32(a.data<float>(), un, 3.0f);
    kernels::cuda::divide_f32(ga.data<float>(), un, 3.0f, stream.handle());
    expect_same_bytes(a, to_cpu(ga), "divide_f32, n " + std::to_string(n));
    for (DType from : fl) {
      Tensor x = Tensor::empty({n}, from);
      kernels::convert(x.data(), from, a.data(), DType::f32, un);
      const Tensor gx = to_gpu(x);
      for (DType to : fl) {
        Tensor want = Tensor::empty({n}, to);
        kernels::convert(want.data(), to, x.data(), from, un);
        Tensor got = poisoned({n}, to);
        kernels::cuda::convert(got.data(), to, gx.data(), from, un, stream.handle());
        expect_same_bytes(want, to_cpu(got),
                          "convert " + std::string(dtype_name(from)) + "->" + std::string(dtype_name(to)) + ", n " +
                              std::to_string(n));
      }
    }
  }
#endif
}

TEST_F(CudaKernels, SumMatchesCpuAndIsDeterministic) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : kSizes) {
      Tensor x = Tensor::empty({n}, dt);
      kernels::cpu::fill_uniform(x, -1, 1, seed, 0);
      Tensor c = Tensor::empty({1}, DType::f32);
      kernels::cpu::sum(x, c);
      Tensor xg = to_gpu(x);
      Tensor g1 = poisoned({1}, DType::f32), g2 = poisoned({1}, DType::f32);
      kernels::sum(xg, g1, stream);
      kernels::sum(xg, g2, stream);
      const float a = c.data<float>()[0], b = to_cpu(g1).data<float>()[0], b2 = to_cpu(g2).data<float>()[0];
      EXPECT_NEAR(b, a, 1e-5 * std::sqrt(double(n)) + 1e-5) << dtype_name(dt) << " n=" << n;
      EXPECT_EQ(test::bits_of(b), test::bits_of(b2)) << "run-to-run difference, n=" << n;
    }
  }
}

// spin() holds its stream for its time: events around it are at least that far apart (the global timer steps by
// ~1 us), and on a GPU, work queued behind it has not run when the host has queued it: the benchmarks' timed calls
// rely on that (bench/kernels/gpu_timing.h). The emulator runs a launch at once, so there only the time is checked.
TEST_F(CudaKernels, SpinHoldsItsStreamForItsTime) {
#if HPDT_HAVE_CUDA  // (kernels::cuda::spin is defined only where CUDA is built; without it the fixture has skipped)
  Event before(Device::cuda(0)), after(Device::cuda(0));
  before.record(stream);
  kernels::cuda::spin(2e-3, stream);
  after.record(stream);
  after.synchronize();
  EXPECT_GE(before.elapsed_ms(after), 1.99);
  EXPECT_LT(before.elapsed_ms(after), 1000.0);
  if (test::emu_launches("spin_kernel") < 0) {  // a GPU
    Tensor y = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0), AllocOptions{.stream = &stream});
    kernels::cuda::spin(0.2, stream);
    before.record(stream);
    kernels::fill(y, 1, stream);
    after.record(stream);
    EXPECT_FALSE(before.query()) << "the work behind spin(0.2 s) started within the time the host took to queue it";
    // "not ready" is no error: the next launch's check must not report it (detail::cuda_query_done clears it)
    EXPECT_NO_THROW(kernels::fill(y, 2, stream));
    after.synchronize();
  } else {
    EXPECT_EQ(test::emu_launches("spin_kernel"), 1);
  }
  HPDT_EXPECT_THROW_MSG(kernels::cuda::spin(-1, stream), "spin: -1 s is outside [0, 1]");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::spin(2, stream), "spin: 2 s is outside [0, 1]");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::spin(std::nan(""), stream), "outside [0, 1]");
#endif
}

TEST_F(CudaKernels, ErrorsNameTheOperation) {
  Tensor a = Tensor::empty({4}, DType::f32, Device::cuda(0)), b = Tensor::empty({4}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::axpy(1, a, b, stream), "axpy: tensors on different devices");
  HPDT_EXPECT_THROW_MSG(kernels::fill(a, 1, cpu), "fill: tensors on cuda:0 need a CUDA stream");
}

}  // namespace
