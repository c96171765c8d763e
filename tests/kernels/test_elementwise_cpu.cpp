// CPU elementwise kernels against plain scalar loops, on sizes that hit the vector tails and the
// OpenMP threshold, for every dtype.
#include <gtest/gtest.h>

#include <cmath>

#include "hpdt/core/philox.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/reduce.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
const Stream kCpu;
const int64_t kSizes[] = {0, 1, 7, 8, 9, 4095, 4097, 100003, (1 << 15) + 3};

template <class T>
std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  const T* p = t.data<T>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = to_f32(p[i]);
  return v;
}

std::vector<float> to_floats(const Tensor& t) {
  return dispatch_floating(t.dtype(), "to_floats", [&](auto tag) { return as_f32<decltype(tag)>(t); });
}

TEST(ElementwiseCpu, FillAllDtypes) {
  for (int64_t n : kSizes) {
    Tensor a = Tensor::empty({n}, DType::f32), b = Tensor::empty({n}, DType::bf16);
    Tensor c = Tensor::empty({n}, DType::i32), d = Tensor::empty({n}, DType::u8), e = Tensor::empty({n}, DType::f16);
    kernels::fill(a, 0.1f, kCpu);
    kernels::fill(b, 0.1f, kCpu);
    kernels::fill(c, 7.9f, kCpu);
    kernels::fill(d, 200.0f, kCpu);
    kernels::fill(e, 0.1f, kCpu);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(a.data<float>()[i], 0.1f);
      ASSERT_EQ(b.data<bf16_t>()[i].bits, bf16_t(0.1f).bits);
      ASSERT_EQ(c.data<int32_t>()[i], 7);
      ASSERT_EQ(d.data<uint8_t>()[i], 200);
      ASSERT_EQ(e.data<f16_t>()[i].bits, f16_t(0.1f).bits);
    }
  }
}

TEST(ElementwiseCpu, FillUniformFollowsPhilox) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : kSizes) {
      Tensor t = Tensor::empty({n}, dt);
      kernels::fill_uniform(t, -2.0f, 3.0f, 1234, 77, kCpu);
      const auto v = to_floats(t);
      for (int64_t i = 0; i < n; ++i) {
        const float expect = std::fma(5.0f, philox_uniform(1234, 0, 77 + uint64_t(i)), -2.0f);  // the kernel's one fused step
        const float rounded = dispatch_floating(dt, "t", [&](auto tag) { return to_f32(from_f32<decltype(tag)>(expect)); });
        ASSERT_EQ(v[size_t(i)], rounded) << dtype_name(dt) << " i=" << i;
      }
    }
  }
  Tensor t = Tensor::empty({4}, DType::i32);
  HPDT_EXPECT_THROW_MSG(kernels::fill_uniform(t, 0, 1, 1, 0, kCpu), "fill_uniform: dtype i32 is not supported");
  Tensor f = Tensor::empty({4}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::fill_uniform(f, 1, 0, 1, 0, kCpu), "lo 1 > hi 0");
}

TEST(ElementwiseCpu, AxpyMatchesScalarLoop) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : kSizes) {
      Tensor x = Tensor::empty({n}, dt), y = Tensor::empty({n}, dt);
      kernels::fill_uniform(x, -1, 1, 1, 0, kCpu);
      kernels::fill_uniform(y, -1, 1, 2, 0, kCpu);
      const auto xv = to_floats(x), yv = to_floats(y);
      kernels::axpy(-0.75f, x, y, kCpu);
      const auto out = to_floats(y);
      for (size_t i = 0; i < out.size(); ++i) {
        const float expect = dispatch_floating(dt, "t", [&](auto tag) {
          // one fused multiply-add, as the kernel (and its CUDA twin) compute it: a*x + y written out is
          // contracted to an fma only when the compiler optimises (Release), not in Debug
          return to_f32(from_f32<decltype(tag)>(std::fma(-0.75f, xv[i], yv[i])));
        });
        ASSERT_EQ(out[i], expect) << dtype_name(dt) << " n=" << n << " i=" << i;
      }
    }
  }
  Tensor a = Tensor::empty({4}, DType::f32), b = Tensor::empty({5}, DType::f32), c = Tensor::empty({4}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::axpy(1, a, b, kCpu), "axpy: element counts differ");
  HPDT_EXPECT_THROW_MSG(kernels::axpy(1, a, c, kCpu), "axpy: dtype mismatch");
}

TEST(ElementwiseCpu, CastEveryPairAndEveryHalfPattern) {
  // All 65,536 f16 and bf16 patterns through the kernel (the vectorised F16C path and its tail).
  for (DType half : {DType::f16, DType::bf16}) {
    Tensor h = Tensor::empty({65536 + 5}, half);
    auto* bits = static_cast<uint16_t*>(h.data());
    for (int64_t i = 0; i < h.numel(); ++i) bits[i] = uint16_t(i);
    Tensor f = Tensor::empty({h.numel()}, DType::f32);
    kernels::cast(h, f, kCpu);
    Tensor back = Tensor::empty({h.numel()}, half);
    kernels::cast(f, back, kCpu);
    const auto* bb = static_cast<const uint16_t*>(back.data());
    for (int64_t i = 0; i < h.numel(); ++i) {
      const float expect = half == DType::f16 ? f16_bits_to_f32(bits[i]) : bf16_bits_to_f32(bits[i]);
      if (std::isnan(expect)) {
        ASSERT_TRUE(std::isnan(f.data<float>()[i]));
        continue;
      }
      ASSERT_EQ(test::bits_of(f.data<float>()[i]), test::bits_of(expect)) << i;
      ASSERT_EQ(bb[i], bits[i]) << i;
    }
  }
  // f32 -> f16/bf16 on random bit patterns against the scalar rule (the kernel's vector path).
  Tensor src = Tensor::empty({100003}, DType::f32);
  Rng rng(3);
  for (int64_t i = 0; i < src.numel(); ++i) {
    uint32_t u = rng.next_u32();
    std::memcpy(&src.data<float>()[i], &u, 4);
  }
  Tensor h16 = Tensor::empty({src.numel()}, DType::f16), hb = Tensor::empty({src.numel()}, DType::bf16);
  kernels::cast(src, h16, kCpu);
  kernels::cast(src, hb, kCpu);
  for (int64_t i = 0; i < src.numel(); ++i) {
    ASSERT_EQ(h16.data<f16_t>()[i].bits, f32_to_f16_bits(src.data<float>()[i])) << i;
    ASSERT_EQ(hb.data<bf16_t>()[i].bits, f32_to_bf16_bits(src.data<float>()[i])) << i;
  }
  // f16 <-> bf16 directly.
  Tensor b2 = Tensor::empty({src.numel()}, DType::bf16);
  kernels::cast(h16, b2, kCpu);
  for (int64_t i = 0; i < src.numel(); i += 97)
    ASSERT_EQ(b2.data<bf16_t>()[i].bits, f32_to_bf16_bits(f16_bits_to_f32(h16.data<f16_t>()[i].bits))) << i;
  Tensor i32 = Tensor::empty({src.numel()}, DType::i32);
  HPDT_EXPECT_THROW_MSG(kernels::cast(src, i32, kCpu), "cast (output): dtype i32 is not supported");
}

TEST(ReduceCpu, SumIsAccurateAndDeterministic) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : kSizes) {
      Tensor x = Tensor::empty({n}, dt);
      kernels::fill_uniform(x, -1, 1, 11, 0, kCpu);
      const auto v = to_floats(x);
      double ref = 0;
      for (float f : v) ref += f;
      Tensor out = Tensor::empty({1}, DType::f32), again = Tensor::empty({1}, DType::f32);
      kernels::sum(x, out, kCpu);
      kernels::sum(x, again, kCpu);
      EXPECT_NEAR(out.data<float>()[0], ref, 1e-6 * std::sqrt(double(n) + 1) * 10 + 1e-6) << dtype_name(dt) << " n=" << n;
      EXPECT_EQ(test::bits_of(out.data<float>()[0]), test::bits_of(again.data<float>()[0]));
    }
  }
  Tensor x = Tensor::empty({3}, DType::f32), bad = Tensor::empty({2}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::sum(x, bad, kCpu), "sum: out must have one element");
}

TEST(Dispatch, CudaTensorsWithCpuStreamAreRejected) {
  if (!cuda_available()) GTEST_SKIP() << "needs a GPU to create a device tensor: " << cuda_unavailable_reason();
  Tensor g = Tensor::empty({4}, DType::f32, Device::cuda(0));
  HPDT_EXPECT_THROW_MSG(kernels::fill(g, 1, kCpu), "need a CUDA stream");
}

}  // namespace
