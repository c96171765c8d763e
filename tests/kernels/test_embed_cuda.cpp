// GPU ViT token embedding and class-token select (kernels/cuda/embed.cu) against the CPU oracle
// (kernels/cpu/embed.cpp): fresh Philox inputs rounded through the storage dtype for the oracle, GPU outputs
// poisoned first, dcls/dpos pre-filled with random values (they accumulate).
//
// Shapes [b, d, gh, gw]: 1x1x1x1, 2x5x3x3, 17x33x4x4 (odd, tiles cut at both edges), ViT-Ti on 28x28 with
// patch 4 (3x192x7x7: 50 tokens), ViT-Ti/16 at 224 (8x192x14x14: 197 tokens), ViT-B/16 (4x768x14x14) and
// batches of 16 and 64 with few tiles, where the batch is split over blocks and the partial sums are added
// in split order.
//
// Tolerances:
//   tokens_forward: f32 exact (one f32 addition, as the CPU), else the dtype's default (one rounding);
//   dpatches and cls_select (copies): exact in every dtype;
//   dcls, dpos: f32 exact when the batch is not split (the CPU's order from the old value), else rtol 1e-5,
//     atol 1e-6 sqrt(b) (partial sums over the batch in another order); f16/bf16 the default plus that atol.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda_oracle.h"
#include "hpdt/kernels/embed.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
using test::Tolerance;

const Shape kShapes[] = {{1, 1, 1, 1},     {2, 5, 3, 3},     {17, 33, 4, 4}, {3, 192, 7, 7},
                         {8, 192, 14, 14}, {4, 768, 14, 14}, {16, 64, 7, 7}, {64, 192, 14, 14}};

Tolerance exact() { return {0, 0}; }

class EmbedCuda : public test::CudaOracleTest {};

TEST_F(EmbedCuda, TokensForwardBackward) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
      const int64_t b = s[0], d = s[1], p = s[2] * s[3];
      const Tensor x = random(s), cls = random({d}), pos = random({p + 1, d});
      Tensor y = Tensor::empty({b, p + 1, d}, DType::f32);
      kernels::tokens_forward(round_through(x, dt), round_through(cls, dt), round_through(pos, dt), y, cpu);
      Tensor yg = poisoned({b, p + 1, d}, dt);
      kernels::tokens_forward(to_gpu(x, dt), to_gpu(cls, dt), to_gpu(pos, dt), yg, stream);
      EXPECT_TRUE(close(y, to_cpu_f32(yg), dt == DType::f32 ? exact() : test::default_tolerance(dt))) << "y";

      const Tensor dy = random({b, p + 1, d}), dcls0 = random({d}), dpos0 = random({p + 1, d});
      Tensor dx = Tensor::empty(s, DType::f32), dcls = round_through(dcls0, dt), dpos = round_through(dpos0, dt);
      kernels::tokens_backward(round_through(dy, dt), dx, dcls, dpos, cpu);
      Tensor dxg = poisoned(s, dt), dclsg = to_gpu(dcls0, dt), dposg = to_gpu(dpos0, dt);
      kernels::tokens_backward(to_gpu(dy, dt), dxg, dclsg, dposg, stream);
      EXPECT_TRUE(close(dx, to_cpu_f32(dxg), exact())) << "dpatches";
      Tolerance t = dt == DType::f32 ? Tolerance{1e-5, 0} : test::default_tolerance(dt);
      t.atol += 1e-6 * std::sqrt(double(b));
      if (dt == DType::f32 && b < 16) t = exact();  // one split: the CPU's addition order
      EXPECT_TRUE(close(dcls, to_cpu_f32(dclsg), t)) << "dcls";
      EXPECT_TRUE(close(dpos, to_cpu_f32(dposg), t)) << "dpos";
    }
}

TEST_F(EmbedCuda, TokensBackwardIsDeterministic) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : {Shape{64, 192, 14, 14}, Shape{4, 768, 14, 14}}) {
      const int64_t b = s[0], d = s[1], p = s[2] * s[3];
      const Tensor dy = to_gpu(random({b, p + 1, d}), dt), dcls0 = random({d}), dpos0 = random({p + 1, d});
      Tensor out[2][3];
      for (auto& o : out) {
        Tensor dx = poisoned(s, dt), dcls = to_gpu(dcls0, dt), dpos = to_gpu(dpos0, dt);
        kernels::tokens_backward(dy, dx, dcls, dpos, stream);
        o[0] = to_cpu_f32(dx), o[1] = to_cpu_f32(dcls), o[2] = to_cpu_f32(dpos);
      }
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(close(out[0][i], out[1][i], exact())) << s.str() << " output " << i;
    }
}

TEST_F(EmbedCuda, ClsSelect) {
  for (DType dt : test::kCudaTestDtypes)
    for (const Shape& s : {Shape{1, 1, 1}, Shape{3, 17, 5}, Shape{8, 197, 192}, Shape{64, 50, 768}}) {
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
      const Tensor x = random(s), dy = random({s[0], s[2]});
      Tensor y = Tensor::empty({s[0], s[2]}, DType::f32), dx = Tensor::empty(s, DType::f32);
      kernels::cls_select_forward(round_through(x, dt), y, cpu);
      kernels::cls_select_backward(round_through(dy, dt), dx, cpu);
      Tensor yg = poisoned({s[0], s[2]}, dt), dxg = poisoned(s, dt);
      kernels::cls_select_forward(to_gpu(x, dt), yg, stream);
      kernels::cls_select_backward(to_gpu(dy, dt), dxg, stream);
      EXPECT_TRUE(close(y, to_cpu_f32(yg), exact())) << "y";
      EXPECT_TRUE(close(dx, to_cpu_f32(dxg), exact())) << "dx";
    }
}

TEST_F(EmbedCuda, BadInputsNameTheOp) {
  const Device dev = Device::cuda(0);
  const AllocOptions o{.stream = &stream};
  Tensor x = Tensor::zeros({2, 8, 3, 3}, DType::bf16, dev, o), cls = Tensor::zeros({8}, DType::bf16, dev, o);
  Tensor pos = Tensor::zeros({10, 8}, DType::bf16, dev, o), y = Tensor::zeros({2, 10, 8}, DType::bf16, dev, o);
  Tensor pos_bad = Tensor::zeros({9, 8}, DType::bf16, dev, o), cls_f = Tensor::zeros({8}, DType::f32, dev, o);
  kernels::tokens_forward(x, cls, pos, y, stream);
  HPDT_EXPECT_THROW_MSG(kernels::tokens_forward(x, cls, pos_bad, y, stream),
                        "tokens_forward: pos has shape [9, 8], expected [10, 8]");
  HPDT_EXPECT_THROW_MSG(kernels::tokens_forward(x, cls_f, pos, y, stream), "has dtype f32");
  Tensor ys = Tensor::zeros({2, 7}, DType::bf16, dev, o);
  HPDT_EXPECT_THROW_MSG(kernels::cls_select_forward(y, ys, stream),
                        "cls_select_forward: y has shape [2, 7], expected [2, 8]");
}

}  // namespace
