#include "hpdt/core/tensor.h"

#include <gtest/gtest.h>

#include "hpdt/core/allocator.h"
#include "hpdt/core/stream.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;

TEST(Shape, Basics) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);  // a 0-d shape is a scalar
  EXPECT_EQ((Shape{0, 5}).numel(), 0);
  EXPECT_TRUE((Shape{2, 3} == Shape{2, 3}));
  EXPECT_FALSE((Shape{2, 3} == Shape{3, 2}));
  HPDT_EXPECT_THROW_MSG((Shape{2, -1}), "negative dimension");
  HPDT_EXPECT_THROW_MSG((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), "at most 8");
  HPDT_EXPECT_THROW_MSG(s[3], "out of range");
}

TEST(Tensor, EmptyIsAlignedAndTyped) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8}) {
    Tensor t = Tensor::empty({3, 5, 7}, dt);
    EXPECT_TRUE(t.defined());
    EXPECT_TRUE(t.is_owning());
    EXPECT_EQ(t.numel(), 105);
    EXPECT_EQ(t.nbytes(), 105 * dtype_size(dt));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % kHostAlignment, 0u) << dtype_name(dt);
  }
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(Tensor().str(), "Tensor(undefined)");
}

TEST(Tensor, ZerosAndFromVector) {
  Tensor z = Tensor::zeros({4, 4}, DType::f32);
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  Tensor t = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.data<int32_t>()[5], 6);
  HPDT_EXPECT_THROW_MSG(t.data<float>(), "accessed as f32");
  HPDT_EXPECT_THROW_MSG(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), "3 values for shape [2, 2]");
}

TEST(Tensor, StridesAreContiguousRowMajor) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::f32);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{12, 4, 1}));
}

TEST(Tensor, ViewsShareMemory) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor v = t.view({4, -1});
  EXPECT_EQ(v.shape(), (Shape{4, 3}));
  EXPECT_EQ(v.data(), t.data());
  Tensor rows = t.slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 4}));
  EXPECT_EQ(rows.data<float>()[0], 4.0f);
  Tensor f = t.flat(5, 4);
  EXPECT_EQ(f.shape(), (Shape{4}));
  EXPECT_EQ(f.data<float>()[0], 5.0f);
  f.data<float>()[0] = 50.0f;
  EXPECT_EQ(t.data<float>()[5], 50.0f);
  HPDT_EXPECT_THROW_MSG(t.view({5, 2}), "element counts differ");
  HPDT_EXPECT_THROW_MSG(t.view({-1, -1}), "more than one dimension is -1");
  HPDT_EXPECT_THROW_MSG(t.view({5, -1}), "cannot infer");
  HPDT_EXPECT_THROW_MSG(t.slice(2, 4), "out of range");
  HPDT_EXPECT_THROW_MSG(t.flat(10, 3), "out of range");
}

TEST(Tensor, ViewKeepsStorageAlive) {
  Tensor v;
  {
    Tensor t = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
    v = t.slice(2, 4);
  }
  EXPECT_EQ(v.data<float>()[1], 4.0f);  // under ASan a use-after-free would be reported here
}

TEST(Tensor, WrapDoesNotOwn) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  Tensor w = Tensor::wrap(buf, {2, 3}, DType::f32);
  EXPECT_FALSE(w.is_owning());
  EXPECT_EQ(w.data<float>()[4], 5.0f);
  HPDT_EXPECT_THROW_MSG(Tensor::wrap(nullptr, {2}, DType::f32), "null pointer");
}

TEST(Tensor, CopyAndClone) {
  const Stream cpu;
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = a.clone(cpu);
  EXPECT_NE(a.data(), b.data());
  EXPECT_EQ(b.to_vector<float>(), a.to_vector<float>());
  Tensor c = Tensor::empty({4}, DType::f32);
  copy(a, c, cpu);  // shapes may differ, counts may not
  EXPECT_EQ(c.to_vector<float>(), a.to_vector<float>());
  Tensor d = Tensor::empty({3}, DType::f32), e = Tensor::empty({4}, DType::f16);
  HPDT_EXPECT_THROW_MSG(copy(a, d, cpu), "element counts differ");
  HPDT_EXPECT_THROW_MSG(copy(a, e, cpu), "dtype mismatch");
}

TEST(Tensor, PinnedRequestWithoutGpuFallsBackToPageable) {
  Tensor t = Tensor::empty({1024}, DType::f32, Device::cpu(), AllocOptions{.pinned = true});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % kHostAlignment, 0u);
  t.data<float>()[1023] = 1.0f;
}

TEST(Tensor, DeviceTensorWithoutGpuIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present; this checks the no-GPU message";
  HPDT_EXPECT_THROW_MSG(Tensor::empty({4}, DType::f32, Device::cuda(0)), "cuda:0");
}

TEST(Tensor, ChecksNameTheOperation) {
  Tensor a = Tensor::empty({2, 3}, DType::f32);
  HPDT_EXPECT_THROW_MSG(check_shape("conv2d_forward", "weight", a, Shape{3, 2}), "conv2d_forward: weight has shape [2, 3], expected [3, 2]");
  HPDT_EXPECT_THROW_MSG(check_dtype("linear", "x", a, DType::bf16), "linear: x has dtype f32, expected bf16");
}

TEST(DTypeAndDevice, Parse) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  HPDT_EXPECT_THROW_MSG(parse_dtype("f64"), "unknown dtype 'f64'");
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  HPDT_EXPECT_THROW_MSG(parse_device("gpu"), "unknown device 'gpu'");
  HPDT_EXPECT_THROW_MSG(parse_device("cuda:x"), "unknown device");
}

TEST(Stream, CpuEventsTime) {
  const Stream cpu;
  Event a, b;
  a.record(cpu);
  b.record(cpu);
  EXPECT_GE(a.elapsed_ms(b), 0.0f);
  EXPECT_TRUE(b.query());
  Event never;
  HPDT_EXPECT_THROW_MSG(never.elapsed_ms(b), "never recorded");
}

}  // namespace
