// GPU max pool and global average pool (kernels/cuda/pool.cu) against the CPU oracle (kernels/cpu/pool.cpp):
// fresh Philox inputs rounded through the storage dtype for the oracle, GPU outputs poisoned first.
//
// Shapes: ResNet-50's stem pool (4x64x112x112, k3 s2 p1), ResNet-50's global pool (8x2048x7x7),
// ResNet-20's (128x64x8x8), odd ones (1x1x1x1; c = 3, 17; h*w = 1, 7^2, 9x11, 28^2) and windows that overlap
// heavily (k3 s1 p1, k5 s1 p2: an input element is in up to 25 windows) or not at all (k2 s2), with NaN and
// -inf inputs for the max pool.
//
// Tolerances:
//   max pool y and argmax: exact in every dtype (a selection among the very values the oracle sees, with
//     the CPU's scan order and tie rule; NaN wins);
//   max pool dx: exact against the oracle's f32 dx rounded through the dtype (the gather adds the windows in output
//     order from 0, as the CPU's scatter does, and rounds the f32 sum once);
//   average pool y: f32 rtol 1e-5 (another summation order over h*w <= 784 values), f16/bf16 the default;
//     dx exact in f32 (one division), the default otherwise.
// NHWC ([n, h, w, c], kernels/cpu/pool.cpp's NHWC functions as the oracle): the same cases and tolerances, with the
// exception that the NHWC average pool adds a channel's pixels in the CPU's order, so f32 y is exact too.
// The max-pool vector kernels (a 16-byte vector of channels a thread in NHWC; 4 inputs of a row a thread in NCHW's
// backward): the last cases have rows of a multiple of 4 and channels of a multiple of 8, with every overlap
// (k3 s1, k5 s2, k2 s3: inputs in no window); MaxPoolVectorKernelsGiveTheSameBits runs them with HPDT_POOL_VECTOR
// on and off and asserts the same bits and, on the emulator, which kernels ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cuda_oracle.h"
#include "hpdt/core/env.h"
#include "hpdt/kernels/channel_stats.h"
#include "hpdt/kernels/pool.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
using kernels::Layout;
using test::Tolerance;

struct MaxCase {
  Shape x;  // [n, c, h, w]; NHWC runs it as [n, h, w, c]
  int64_t k, stride, pad;
  std::string str() const {
    return x.str() + " k" + std::to_string(k) + " s" + std::to_string(stride) + " p" + std::to_string(pad);
  }
};

const MaxCase kMaxCases[] = {{{1, 1, 1, 1}, 1, 1, 0},    {{2, 3, 7, 7}, 3, 2, 1},   {{3, 17, 28, 28}, 2, 2, 0},
                             {{2, 5, 9, 11}, 3, 1, 1},   {{2, 3, 8, 8}, 4, 3, 2},   {{1, 2, 5, 5}, 5, 1, 2},
                             {{2, 3, 1, 1}, 3, 1, 1},    {{1, 17, 7, 7}, 7, 1, 0},  {{4, 64, 112, 112}, 3, 2, 1},
                             {{2, 16, 12, 16}, 3, 1, 1}, {{2, 8, 10, 20}, 5, 2, 2}, {{1, 24, 9, 12}, 3, 2, 1},
                             {{2, 8, 6, 8}, 2, 3, 0}};

class PoolCuda : public test::CudaOracleTest {
 protected:
  // Max pooling's y, dx (onto a poisoned tensor, so every element is written) and argmax as bits, forward and
  // backward on random inputs with NaN and -inf among them: what the A/B tests compare.
  std::vector<uint32_t> maxpool_bits(const MaxCase& c, DType dt, Layout layout) {
    const Shape xs = in_layout(c.x, layout), ys = in_layout(out_shape(c), layout);
    Tensor x = random(xs);
    for (int64_t i = 3; i < x.numel(); i += 29) x.data<float>()[i] = i % 2 ? NAN : -INFINITY;
    Tensor y = poisoned(ys, dt), am = poisoned(ys, DType::i32), dx = poisoned(xs, dt);
    kernels::maxpool2d_forward(to_gpu(x, dt), c.k, c.stride, c.pad, y, am, stream, layout);
    kernels::maxpool2d_backward(to_gpu(random(ys), dt), am, c.k, c.stride, c.pad, dx, stream, layout);
    const Tensor amc = am.to(Device::cpu(), stream);
    stream.synchronize();
    std::vector<uint32_t> bits;
    for (const Tensor& t : {to_cpu_f32(y), to_cpu_f32(dx)})
      for (int64_t i = 0; i < t.numel(); ++i) bits.push_back(test::bits_of(t.data<float>()[i]));
    for (int64_t i = 0; i < amc.numel(); ++i) bits.push_back(uint32_t(amc.data<int32_t>()[i]));
    return bits;
  }
  static Shape out_shape(const MaxCase& c) {
    return {c.x[0], c.x[1], (c.x[2] + 2 * c.pad - c.k) / c.stride + 1, (c.x[3] + 2 * c.pad - c.k) / c.stride + 1};
  }
  // An [n, c, h, w] shape in `layout`.
  static Shape in_layout(const Shape& s, Layout layout) {
    return layout == Layout::nhwc ? Shape{s[0], s[2], s[3], s[1]} : s;
  }
  void max_case(const MaxCase& c, DType dt, bool specials, Layout layout = Layout::nchw);
};

Tolerance exact() { return {0, 0}; }

void PoolCuda::max_case(const MaxCase& c, DType dt, bool specials, Layout layout) {
  SCOPED_TRACE(c.str() + " " + std::string(dtype_name(dt)) + (specials ? " with NaN/-inf " : " ") +
               kernels::layout_name(layout));
  const Shape xs = in_layout(c.x, layout);
  Tensor x = random(xs);
  if (specials) {  // a few NaN and -inf inputs (every 37th and 41st element)
    float* p = x.data<float>();
    for (int64_t i = 5; i < x.numel(); i += 37) p[i] = NAN;
    for (int64_t i = 7; i < x.numel(); i += 41) p[i] = -std::numeric_limits<float>::infinity();
  }
  const Shape ys = in_layout(out_shape(c), layout);
  // forward
  Tensor y = Tensor::empty(ys, DType::f32), am;
  kernels::maxpool2d_forward(round_through(x, dt), c.k, c.stride, c.pad, y, am, cpu, layout);
  Tensor yg = poisoned(ys, dt), amg = poisoned(ys, DType::i32);
  kernels::maxpool2d_forward(to_gpu(x, dt), c.k, c.stride, c.pad, yg, amg, stream, layout);
  EXPECT_TRUE(close(y, to_cpu_f32(yg), exact())) << "y";
  const Tensor amc = amg.to(Device::cpu(), stream);
  stream.synchronize();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < am.numel(); ++i)
    if (am.data<int32_t>()[i] != amc.data<int32_t>()[i]) ++bad, first = first < 0 ? i : first;
  EXPECT_EQ(bad, 0) << "argmax differs at " << bad << " outputs, first " << first;
  // backward (the CPU's argmax on both sides)
  const Tensor dy = random(ys);
  Tensor dx = Tensor::empty(xs, DType::f32);
  kernels::maxpool2d_backward(round_through(dy, dt), am, dx, cpu, layout);
  Tensor dxg = poisoned(xs, dt);
  kernels::maxpool2d_backward(to_gpu(dy, dt), am.to(Device::cuda(0), stream), c.k, c.stride, c.pad, dxg, stream,
                              layout);
  EXPECT_TRUE(close(round_through(dx, dt), to_cpu_f32(dxg), exact())) << "dx";
}

TEST_F(PoolCuda, MaxPoolForwardBackward) {
  for (DType dt : test::kCudaTestDtypes)
    for (const MaxCase& c : kMaxCases) max_case(c, dt, false);
}

TEST_F(PoolCuda, MaxPoolNanAndMinusInfinity) {
  for (DType dt : test::kCudaTestDtypes)
    for (const MaxCase& c : {kMaxCases[1], kMaxCases[3], kMaxCases[5], kMaxCases[10]}) max_case(c, dt, true);
}

// The vector kernels against the one-value-a-thread kernels (HPDT_POOL_VECTOR=off), bit for bit: y, argmax, dx
// (dx onto a poisoned tensor, so every element is written), with NaN and -inf inputs.
TEST_F(PoolCuda, MaxPoolVectorKernelsGiveTheSameBits) {
  auto run = [&](const MaxCase& c, DType dt, Layout layout, const char* vector) {
    const ScopedEnv env("HPDT_POOL_VECTOR", vector);
    return maxpool_bits(c, dt, layout);
  };
  for (DType dt : test::kCudaTestDtypes)
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (const MaxCase& c : kMaxCases) {
        SCOPED_TRACE(c.str() + " " + std::string(dtype_name(dt)) + " " + kernels::layout_name(layout));
        const int64_t vec = 16 / int64_t(dtype_size(dt));
        const bool nhwc = layout == Layout::nhwc;
        // the kernels that run a vector a thread: NHWC forward and backward where c % vec == 0; NCHW backward
        // where w % 4 == 0
        const unsigned expect = nhwc ? (c.x[1] % vec == 0 ? 2u : 0u) : (c.x[3] % 4 == 0 ? 1u : 0u);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        auto vector_launches = [] {
          return cuda_emu::launches_named("maxpool") - cuda_emu::launches_named("maxpool_forward_kernel") -
                 cuda_emu::launches_named("int V = 1;");
        };
        const unsigned long long v0 = vector_launches();
#endif
        const uint64_t inputs = draw_position();
        const std::vector<uint32_t> on = run(c, dt, layout, "on");
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        EXPECT_EQ(vector_launches() - v0, expect) << "vector kernels";
        const unsigned long long v1 = vector_launches();
#else
        (void)expect;
#endif
        rewind(inputs);  // the same inputs
        const std::vector<uint32_t> off = run(c, dt, layout, "off");
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        EXPECT_EQ(vector_launches(), v1) << "HPDT_POOL_VECTOR=off";
#endif
        ASSERT_EQ(on.size(), off.size());
        for (size_t i = 0; i < on.size(); ++i) ASSERT_EQ(on[i], off[i]) << "value " << i << " of y, dx, argmax";
      }
  const Tensor x = to_gpu(random({1, 4, 4, 8}), DType::bf16);
  Tensor y = poisoned({1, 2, 2, 8}, DType::bf16), am = poisoned({1, 2, 2, 8}, DType::i32);
  const ScopedEnv bad("HPDT_POOL_VECTOR", "yes");
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_forward(x, 2, 2, 0, y, am, stream, Layout::nhwc),
                        "HPDT_POOL_VECTOR=yes: expected on or off");
}

// Max pooling's 64-bit flat indices (taken past 2^31 values, forced by HPDT_POOL_INDEX=64) against the 32-bit ones,
// bit for bit: y, argmax, dx, every kernel (one value a thread and vectors), both layouts, every dtype. No tensor a
// test can hold reaches them otherwise (scripts/gpu/kernel_instances.py listed their 21 instances as never launched).
// On the emulator, that the 64-bit kernels ran. A bad value is an error naming the variable.
TEST_F(PoolCuda, MaxPoolWideIndicesGiveTheSameBits) {
  for (DType dt : test::kCudaTestDtypes)
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (const MaxCase& c : kMaxCases) {
        if (c.x.numel() > 100000) continue;  // ResNet's stem: the 32-bit kernels' test above has it
        SCOPED_TRACE(c.str() + " " + std::string(dtype_name(dt)) + " " + kernels::layout_name(layout));
        std::vector<uint32_t> bits[2];
        const uint64_t inputs = draw_position();
        for (int wide = 0; wide < 2; ++wide) {
          const ScopedEnv env("HPDT_POOL_INDEX", wide ? "64" : "32");
          const int64_t wide0 = test::emu_launches("Index = long");
          rewind(inputs);  // the same inputs
          bits[wide] = maxpool_bits(c, dt, layout);
          if (wide0 >= 0) {
            EXPECT_EQ(test::emu_launches("Index = long") - wide0 > 0, wide == 1) << "64-bit kernels";
          }
        }
        ASSERT_EQ(bits[0].size(), bits[1].size());
        for (size_t i = 0; i < bits[0].size(); ++i)
          ASSERT_EQ(bits[0][i], bits[1][i]) << "value " << i << " of y, dx, argmax";
      }
  const Tensor x = to_gpu(random({1, 4, 4, 8}), DType::bf16);
  Tensor y = poisoned({1, 2, 2, 8}, DType::bf16), am = poisoned({1, 2, 2, 8}, DType::i32);
  const ScopedEnv bad("HPDT_POOL_INDEX", "16");
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_forward(x, 2, 2, 0, y, am, stream, Layout::nhwc),
                        "HPDT_POOL_INDEX=16: expected 32 or 64");
}

// Tensors one element past a 16-byte boundary (views into larger buffers): the kernels then take one value a thread
// (the vector ones would load across it), with the same bits as on aligned tensors.
TEST_F(PoolCuda, MaxPoolOnMisalignedViews) {
  const MaxCase c{{2, 16, 12, 16}, 3, 2, 1};
  // a GPU copy of `host` as `dt`, one element into a poisoned buffer when `misaligned`
  const auto place = [&](const Tensor& host, DType dt, bool misaligned) {
    if (!misaligned) return to_gpu(host, dt);
    Tensor v = poisoned({host.numel() + 8}, dt).flat(1, host.numel()).view(host.shape());
    copy(to_gpu(host, dt), v, stream);
    return v;
  };
  const auto out = [&](const Shape& sh, DType dt, bool misaligned) {
    return misaligned ? poisoned({sh.numel() + 8}, dt).flat(1, sh.numel()).view(sh) : poisoned(sh, dt);
  };
  for (DType dt : test::kCudaTestDtypes)
    for (Layout layout : {Layout::nchw, Layout::nhwc}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + kernels::layout_name(layout));
      const Shape xs = in_layout(c.x, layout), ys = in_layout(out_shape(c), layout);
      const Tensor x = random(xs), dy = random(ys);
      std::vector<float> results[2];
      for (int misaligned = 0; misaligned < 2; ++misaligned) {
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        const unsigned long long v0 = cuda_emu::launches_named("int V = 4;") + cuda_emu::launches_named("int V = 8;");
#endif
        Tensor y = out(ys, dt, misaligned), am = poisoned(ys, DType::i32), dx = out(xs, dt, misaligned);
        kernels::maxpool2d_forward(place(x, dt, misaligned), c.k, c.stride, c.pad, y, am, stream, layout);
        kernels::maxpool2d_backward(place(dy, dt, misaligned), am, c.k, c.stride, c.pad, dx, stream, layout);
        for (const Tensor& t : {to_cpu_f32(y), to_cpu_f32(dx)})
          results[misaligned].insert(results[misaligned].end(), t.data<float>(), t.data<float>() + t.numel());
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        const unsigned long long vectors =
            cuda_emu::launches_named("int V = 4;") + cuda_emu::launches_named("int V = 8;") - v0;
        EXPECT_EQ(vectors, misaligned ? 0u : (layout == Layout::nhwc ? 2u : 1u)) << "vector kernels";
#endif
      }
      ASSERT_EQ(results[0].size(), results[1].size());
      for (size_t i = 0; i < results[0].size(); ++i)
        ASSERT_EQ(test::bits_of(results[0][i]), test::bits_of(results[1][i])) << "value " << i << " of y, dx";
    }
}

TEST_F(PoolCuda, MaxPoolBackwardIsDeterministic) {
  const MaxCase c{{4, 16, 28, 28}, 3, 1, 1};
  for (DType dt : test::kCudaTestDtypes) {
    const Shape ys = out_shape(c);
    Tensor xg = to_gpu(random(c.x), dt), yg = poisoned(ys, dt), am;
    kernels::maxpool2d_forward(xg, c.k, c.stride, c.pad, yg, am, stream);
    ASSERT_TRUE(am.is_cuda());
    const Tensor dy = to_gpu(random(ys), dt);
    Tensor a = poisoned(c.x, dt), b = poisoned(c.x, dt);
    kernels::maxpool2d_backward(dy, am, c.k, c.stride, c.pad, a, stream);
    kernels::maxpool2d_backward(dy, am, c.k, c.stride, c.pad, b, stream);
    EXPECT_TRUE(close(to_cpu_f32(a), to_cpu_f32(b), exact())) << dtype_name(dt);
  }
}

// ResNet's stem: max pool's backward hands the batch norm before it (whose fused ReLU output is the pool's input) its
// backward sums (kernels::ChannelGradSums), in both layouts: dx is dz = (y > 0 ? g : 0), g the plain backward's
// gradient (the same bits), and the partials add up, per channel, to sum dz and sum dz (x - mean) of dz as stored
// (against double sums: f32 accumulation). Without y (no ReLU) dz is g. HPDT_CONV_BN_STATS=separate computes none,
// nor NHWC where a pixel's channel vectors outnumber a block's threads (257 channels of f32, one a thread): the sums
// are cleared and dx is g. Shapes: NCHW one value a thread (w = 7) and four (w % 4 == 0), one image a split and
// several (n = 40 at c = 64: 20 splits of 2); NHWC 3, 16 and 64 channels (1, 2 to 4, 8 vectors a pixel).
TEST_F(PoolCuda, MaxPoolBackwardHandsTheBatchNormItsSums) {
  const test::EpilogueBnReductions epilogue_reductions;

  const MaxCase cases[] = {{{2, 3, 7, 7}, 3, 2, 1}, {{3, 16, 12, 16}, 3, 2, 1}, {{40, 64, 8, 8}, 3, 2, 1}};
  for (DType dt : {DType::f32, DType::bf16, DType::f16})  // (f16 since 2026-12-01: its instances ran nowhere)
    for (const MaxCase& c : cases)
      for (Layout layout : {Layout::nchw, Layout::nhwc})
        for (bool relu : {true, false}) {
          SCOPED_TRACE(c.str() + " " + std::string(dtype_name(dt)) + " " + kernels::layout_name(layout) +
                       (relu ? " with ReLU" : " without ReLU"));
          const Shape xs = in_layout(c.x, layout), ys = in_layout(out_shape(c), layout);
          const int64_t ch = c.x[1];
          // the batch norm's input x, its output y (a ReLU's: a third of it zero) and saved mean
          Tensor xh = random(xs), yh = random(xs, -0.5f, 1.0f), mean_h = random({ch});
          for (int64_t i = 0; i < yh.numel(); ++i) yh.data<float>()[i] = std::max(yh.data<float>()[i], 0.0f);
          const Tensor x = to_gpu(xh, dt), y = to_gpu(yh, dt), mean = to_gpu(mean_h);
          Tensor pooled = poisoned(ys, dt), am = poisoned(ys, DType::i32);
          kernels::maxpool2d_forward(y, c.k, c.stride, c.pad, pooled, am, stream, layout);
          const Tensor dy = to_gpu(random(ys), dt);
          Tensor g = poisoned(xs, dt), dz = poisoned(xs, dt);
          kernels::maxpool2d_backward(dy, am, c.k, c.stride, c.pad, g, stream, layout);
          kernels::ChannelGradSums sums;
          sums.x = x, sums.mean = mean;
          if (relu) sums.y = y;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
          const unsigned long long sums0 = cuda_emu::launches_named("maxpool_backward_sums");
#endif
          kernels::maxpool2d_backward(dy, am, c.k, c.stride, c.pad, dz, stream, layout, &sums);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
          EXPECT_EQ(cuda_emu::launches_named("maxpool_backward_sums") - sums0, 1u);
#endif
          const Tensor gc = to_cpu_f32(g), dzc = to_cpu_f32(dz), yc = to_cpu_f32(y), xc = to_cpu_f32(x);
          for (int64_t i = 0; i < gc.numel(); ++i) {
            const float want = relu && !(yc.data<float>()[i] > 0.0f) ? 0.0f : gc.data<float>()[i];
            ASSERT_EQ(test::bits_of(dzc.data<float>()[i]), test::bits_of(want)) << "dz[" << i << "]";
          }
          ASSERT_TRUE(sums.describe(dz, ch)) << "the sums describe dx";
          const Tensor part = sums.partial.to(Device::cpu(), stream);
          stream.synchronize();
          // per channel: the double sums of dz and dz (x - mean), and of their magnitudes (the f32 error's scale)
          std::vector<double> want(2 * ch, 0.0), scale(2 * ch, 0.0);
          const int64_t hw = c.x[2] * c.x[3];
          for (int64_t i = 0; i < dzc.numel(); ++i) {
            const int64_t k = layout == Layout::nchw ? (i / hw) % ch : i % ch;
            const double v = dzc.data<float>()[i], d = v * (double(xc.data<float>()[i]) - mean_h.data<float>()[k]);
            want[2 * k] += v, want[2 * k + 1] += d;
            scale[2 * k] += std::abs(v), scale[2 * k + 1] += std::abs(d);
          }
          for (int64_t k = 0; k < ch; ++k)
            for (int w = 0; w < 2; ++w) {
              double got = 0;
              for (int64_t sp = 0; sp < sums.splits; ++sp) got += part.data<float>()[(k * sums.splits + sp) * 2 + w];
              EXPECT_NEAR(got, want[2 * k + w], 1e-5 * scale[2 * k + w] + 1e-6)
                  << (w ? "sum dz (x - mean)" : "sum dz") << " of channel " << k;
            }
        }
  {  // NHWC, 257 channels of f32 (one a thread): more channel vectors than a block's threads, none
    const Tensor y = to_gpu(random({1, 4, 4, 257}));
    Tensor pooled = poisoned({1, 2, 2, 257}), am = poisoned({1, 2, 2, 257}, DType::i32);
    kernels::maxpool2d_forward(y, 2, 2, 0, pooled, am, stream, Layout::nhwc);
    Tensor dz = poisoned({1, 4, 4, 257});
    kernels::ChannelGradSums sums;
    sums.x = to_gpu(random({1, 4, 4, 257})), sums.y = y, sums.mean = to_gpu(random({257}));
    kernels::maxpool2d_backward(to_gpu(random({1, 2, 2, 257})), am, 2, 2, 0, dz, stream, Layout::nhwc, &sums);
    EXPECT_FALSE(sums.partial.defined()) << "257 channel vectors a pixel";
  }
  // HPDT_CONV_BN_STATS=separate: none, and dx is the plain gradient
  const ScopedEnv off("HPDT_CONV_BN_STATS", "separate");
  const Tensor y = to_gpu(random({2, 3, 8, 8}), DType::bf16);
  Tensor pooled = poisoned({2, 3, 4, 4}, DType::bf16), am = poisoned({2, 3, 4, 4}, DType::i32);
  kernels::maxpool2d_forward(y, 3, 2, 1, pooled, am, stream);
  const Tensor dy = to_gpu(random({2, 3, 4, 4}), DType::bf16);
  Tensor g = poisoned({2, 3, 8, 8}, DType::bf16), dz = poisoned({2, 3, 8, 8}, DType::bf16);
  kernels::maxpool2d_backward(dy, am, 3, 2, 1, g, stream);
  kernels::ChannelGradSums sums;
  sums.x = to_gpu(random({2, 3, 8, 8}), DType::bf16), sums.y = y, sums.mean = to_gpu(random({3}));
  kernels::maxpool2d_backward(dy, am, 3, 2, 1, dz, stream, Layout::nchw, &sums);
  EXPECT_FALSE(sums.partial.defined()) << "HPDT_CONV_BN_STATS=separate";
  const Tensor gc = to_cpu_f32(g), dzc = to_cpu_f32(dz);
  for (int64_t i = 0; i < gc.numel(); ++i)
    ASSERT_EQ(test::bits_of(dzc.data<float>()[i]), test::bits_of(gc.data<float>()[i]));
  // bad input names the op and the tensor
  sums.mean = to_gpu(random({4}));
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_backward(dy, am, 3, 2, 1, dz, stream, Layout::nchw, &sums),
                        "maxpool2d_backward: bn_grad.mean must be f32 [3]");
  sums.mean = to_gpu(random({3})), sums.x = to_gpu(random({2, 3, 8, 7}), DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_backward(dy, am, 3, 2, 1, dz, stream, Layout::nchw, &sums),
                        "maxpool2d_backward: bn_grad.x has shape [2, 3, 8, 7], expected [2, 3, 8, 8]");
}

TEST_F(PoolCuda, GlobalAveragePool) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : {Shape{1, 1, 1, 1}, Shape{3, 17, 1, 1}, Shape{2, 3, 7, 7}, Shape{2, 3, 28, 28},
                           Shape{2, 5, 9, 11}, Shape{128, 64, 8, 8}, Shape{8, 2048, 7, 7}}) {
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
      const Shape ys{s[0], s[1]};
      const Tensor x = random(s), dy = random(ys);
      Tensor y = Tensor::empty(ys, DType::f32), dx = Tensor::empty(s, DType::f32);
      kernels::global_avgpool_forward(round_through(x, dt), y, cpu);
      kernels::global_avgpool_backward(round_through(dy, dt), dx, cpu);
      Tensor yg = poisoned(ys, dt), dxg = poisoned(s, dt);
      kernels::global_avgpool_forward(to_gpu(x, dt), yg, stream);
      kernels::global_avgpool_backward(to_gpu(dy, dt), dxg, stream);
      const Tolerance ty = dt == DType::f32 ? Tolerance{1e-5, 1e-6} : test::default_tolerance(dt);
      EXPECT_TRUE(close(y, to_cpu_f32(yg), ty)) << "y";
      EXPECT_TRUE(close(dx, to_cpu_f32(dxg), dt == DType::f32 ? exact() : test::default_tolerance(dt))) << "dx";
      Tensor yg2 = poisoned(ys, dt);
      kernels::global_avgpool_forward(to_gpu(x, dt), yg2, stream);
      EXPECT_TRUE(close(to_cpu_f32(yg), to_cpu_f32(yg2), exact())) << "run to run";
    }
}

TEST_F(PoolCuda, NhwcMaxPool) {
  for (DType dt : test::kCudaTestDtypes) {
    for (const MaxCase& c : kMaxCases) max_case(c, dt, false, Layout::nhwc);
    for (const MaxCase& c : {kMaxCases[1], kMaxCases[3], kMaxCases[5]}) max_case(c, dt, true, Layout::nhwc);
  }
}

TEST_F(PoolCuda, NhwcGlobalAveragePool) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : {Shape{1, 1, 1, 1}, Shape{3, 1, 1, 17}, Shape{2, 7, 7, 3}, Shape{2, 28, 28, 3},
                           Shape{2, 9, 11, 5}, Shape{128, 8, 8, 64}, Shape{8, 7, 7, 2048}}) {
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)) + " nhwc");
      const Shape ys{s[0], s[3]};
      const Tensor x = random(s), dy = random(ys);
      Tensor y = Tensor::empty(ys, DType::f32), dx = Tensor::empty(s, DType::f32);
      kernels::global_avgpool_forward(round_through(x, dt), y, cpu, Layout::nhwc);
      kernels::global_avgpool_backward(round_through(dy, dt), dx, cpu, Layout::nhwc);
      Tensor yg = poisoned(ys, dt), dxg = poisoned(s, dt);
      kernels::global_avgpool_forward(to_gpu(x, dt), yg, stream, Layout::nhwc);
      kernels::global_avgpool_backward(to_gpu(dy, dt), dxg, stream, Layout::nhwc);
      const Tolerance t = dt == DType::f32 ? exact() : test::default_tolerance(dt);
      EXPECT_TRUE(close(y, to_cpu_f32(yg), t)) << "y";
      EXPECT_TRUE(close(dx, to_cpu_f32(dxg), t)) << "dx";
    }
}

TEST_F(PoolCuda, BadInputsNameTheOp) {
  const Device dev = Device::cuda(0);
  const AllocOptions o{.stream = &stream};
  Tensor x = Tensor::zeros({2, 3, 8, 8}, DType::bf16, dev, o), y = Tensor::zeros({2, 3, 4, 4}, DType::bf16, dev, o);
  Tensor yf = Tensor::zeros({2, 3, 4, 4}, DType::f32, dev, o), ybad = Tensor::zeros({2, 3, 3, 4}, DType::bf16, dev, o);
  Tensor am;
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_forward(x, 3, 2, 1, yf, am, stream), "maxpool2d_forward: tensor");
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_forward(x, 3, 2, 1, ybad, am, stream),
                        "maxpool2d_forward: y has shape [2, 3, 3, 4], expected [2, 3, 4, 4]");
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_forward(x, 3, 2, 2, y, am, stream), "unsupported window 3 stride 2 pad 2");
  kernels::maxpool2d_forward(x, 3, 2, 1, y, am, stream);
  ASSERT_TRUE(am.is_cuda());
  Tensor dx = Tensor::zeros({2, 3, 8, 8}, DType::bf16, dev, o);
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_backward(y, am, dx, stream), "on CUDA pass the window");
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_backward(y, am, 2, 1, 0, dx, stream),
                        "dy has shape [2, 3, 4, 4], expected [2, 3, 7, 7]");
  Tensor am_f = Tensor::zeros({2, 3, 4, 4}, DType::f32, dev, o);
  HPDT_EXPECT_THROW_MSG(kernels::maxpool2d_backward(y, am_f, 3, 2, 1, dx, stream),
                        "argmax has dtype f32, expected i32");
  Tensor yavg = Tensor::zeros({2, 4}, DType::bf16, dev, o);
  HPDT_EXPECT_THROW_MSG(kernels::global_avgpool_forward(x, yavg, stream), "global_avgpool_forward: y has shape [2, 4]");
}

}  // namespace
