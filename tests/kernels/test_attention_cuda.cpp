// GPU flash-style attention (kernels/cuda/attention.cu) against the CPU oracle (kernels/cpu/attention.cpp),
// the way cuda_oracle.h says: fresh Philox inputs rounded through the storage dtype for the oracle, GPU
// outputs poisoned (NaN) before each run. Every case runs through the public entry points (variant 0,
// auto) and through each numbered variant that applies: v1 (SIMT, every dtype), v2 (tensor cores,
// f16/bf16 with a head dim that is a multiple of 8) and v3 (v2 with the one-pass backward).
//
// Checked: out and dqkv (q, k, v parts separately) against the oracle; lse against log(sum(exp(scores)))
// computed here in double from the same rounded inputs (the CPU's probabilities are not compared).
// Shapes: b in {1, 3}, heads in {1, 3, 12}, head dims 16, 24, 32, 64, 128 and odd ones (7, 20: v1 only;
// 40, 80: on the padded 64 and 128 kernels), t in {1, 2, 17, 50, 65, 197} (ViT on 28x28: 17 or 50;
// ViT-B/16 at 224: 197; 65: one past a 64-row tile) and long t = 300, 700 (many key blocks: the online
// rescaling and the prefetch pipeline);
// q and k scaled by 8 (scores of +-60: the running max changes a lot between key blocks); a misaligned
// view (auto falls back to v1's scalar loads); determinism; bad-input errors.
//
// Tolerances, |got - want| <= atol + rtol |want|, with why:
//   lse (f32 whatever the storage): rtol 2e-5, atol 1e-4: one f32 dot product per score and an f32 sum of
//     exponentials, against double;
//   out: f32 rtol 1e-4, atol 2e-5 (another summation order, exp2 of a pre-scaled score instead of exp);
//     f16 rtol 2e-3, atol 1e-3 and bf16 rtol 1.6e-2, atol 6e-3: out is stored in 16 bits (2^-11, 2^-8
//     relative), and v2 rounds P to 16 bits before P V (an error of about 2^-9 max|v| for bf16);
//   dq, dk, dv, each against its own largest magnitude M (floored at 1e-2, so that t = 1, where dq and dk
//     are exactly 0 on the CPU, is not held to zero): f32 rtol 1e-4, atol 2e-5 M; f16 rtol 4e-3,
//     atol 4e-3 M; bf16 rtol 2.5e-2, atol 2.5e-2 M: the GPU forms D = rowsum(dout * out) from the stored
//     (rounded) out and v2 rounds P and dS to 16 bits for the tile products, as FlashAttention-2 does;
//   scores of +-60 (q, k x 8): the f32 dot products of 8-sized values round to ~3e-5 absolute, which
//     moves P by as much relative, and P nearly one-hot makes dS = P (dP - D) a cancellation: out x10,
//     gradients x50 in f32; f16/bf16 x2 and x4 (D from the 16-bit out against dP of +-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_oracle.h"
#include "hpdt/core/env.h"
#include "hpdt/kernels/attention.h"
#include "hpdt_test.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/attention.h"
#endif

namespace {

using namespace hpdt;
using test::Tolerance;

struct Case {
  int64_t b, t, heads, dh;
  float qk_scale = 1.0f;  // q and k multiplied by this (large scores)
  std::string str() const {
    return "b=" + std::to_string(b) + " t=" + std::to_string(t) + " heads=" + std::to_string(heads) +
           " dh=" + std::to_string(dh) + (qk_scale != 1.0f ? " qk x" + std::to_string(int(qk_scale)) : "");
  }
};

// The rows [b, t] of part `which` (0 q, 1 k, 2 v) of a packed [b, t, 3 d] f32 tensor, as [b, t, d].
Tensor part(const Tensor& packed, int which) {
  const int64_t rows = packed.size(0) * packed.size(1), d = packed.size(2) / 3;
  Tensor p = Tensor::empty({packed.size(0), packed.size(1), d}, DType::f32);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(p.data<float>() + r * d, packed.data<float>() + r * 3 * d + which * d, size_t(d) * sizeof(float));
  return p;
}

double max_abs(const Tensor& x) {
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, double(std::fabs(x.data<float>()[i])));
  return m;
}

Tolerance out_tolerance(DType dt, bool large) {
  Tolerance t = dt == DType::f32   ? Tolerance{1e-4, 2e-5}
                : dt == DType::f16 ? Tolerance{2e-3, 1e-3}
                                   : Tolerance{1.6e-2, 6e-3};
  if (large) t = dt == DType::f32 ? Tolerance{t.rtol * 10, t.atol * 10} : Tolerance{t.rtol * 2, t.atol * 2};
  return t;
}

// Relative to the largest magnitude M of the gradient part (see the top of the file).
Tolerance grad_tolerance(DType dt, bool large, double m) {
  m = std::max(m, 1e-2);
  double r = dt == DType::f32 ? 1e-4 : dt == DType::f16 ? 4e-3 : 2.5e-2;
  double a = dt == DType::f32 ? 2e-5 : r;
  if (large) {
    const double widen = dt == DType::f32 ? 50 : 4;
    r *= widen;
    a *= widen;
  }
  return {r, a * m};
}

constexpr Tolerance kLseTolerance{2e-5, 1e-4};

class AttentionCuda : public test::CudaOracleTest {
 protected:
  struct Oracle {
    Tensor qkv, dout, out, dqkv, lse;  // f32 CPU; lse from double
  };

  Oracle oracle(const Case& c, DType dt) {
    const int64_t d = c.heads * c.dh;
    Oracle o;
    Tensor qkv = random({c.b, c.t, 3 * d});
    if (c.qk_scale != 1.0f)
      for (int64_t r = 0; r < c.b * c.t; ++r)
        for (int64_t i = 0; i < 2 * d; ++i) qkv.data<float>()[r * 3 * d + i] *= c.qk_scale;
    o.qkv = round_through(qkv, dt);
    o.dout = round_through(random({c.b, c.t, d}), dt);
    kernels::AttentionSaved saved;
    o.out = Tensor::empty({c.b, c.t, d}, DType::f32);
    kernels::attention_forward(o.qkv, c.heads, saved, o.out, cpu);
    o.dqkv = Tensor::empty(o.qkv.shape(), DType::f32);
    kernels::attention_backward(o.qkv, saved, o.out, o.dout, c.heads, o.dqkv, cpu);
    // lse = log(sum_j exp(q_i . k_j / sqrt(dh))) in double
    o.lse = Tensor::empty({c.b, c.heads, c.t}, DType::f32);
    const float* x = o.qkv.data<float>();
    const double scale = 1.0 / std::sqrt(double(c.dh));
    std::vector<double> s(size_t(c.t));
    for (int64_t bi = 0; bi < c.b; ++bi)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t i = 0; i < c.t; ++i) {
          const float* q = x + (bi * c.t + i) * 3 * d + h * c.dh;
          double mx = -INFINITY;
          for (int64_t j = 0; j < c.t; ++j) {
            const float* k = x + (bi * c.t + j) * 3 * d + d + h * c.dh;
            double acc = 0;
            for (int64_t e = 0; e < c.dh; ++e) acc += double(q[e]) * double(k[e]);
            s[size_t(j)] = acc * scale;
            mx = std::max(mx, s[size_t(j)]);
          }
          double sum = 0;
          for (double v : s) sum += std::exp(v - mx);
          o.lse.data<float>()[(bi * c.heads + h) * c.t + i] = float(mx + std::log(sum));
        }
    return o;
  }

  // One forward + backward on the GPU with `variant` (0: the public entry points) against the oracle.
  void check(const Case& c, DType dt, int variant, const Oracle& o, const Tensor& qkv_g) {
    const std::string label = std::string(dtype_name(dt)) + " v" + std::to_string(variant) + " " + c.str();
    SCOPED_TRACE(label);
    const int64_t d = c.heads * c.dh;
    kernels::AttentionSaved saved;
    saved.lse = poisoned({c.b, c.heads, c.t});
    Tensor out_g = poisoned({c.b, c.t, d}, dt);
    forward(qkv_g, c.heads, saved, out_g, variant);
    Tensor dout_g = to_gpu(o.dout, dt);
    Tensor dqkv_g = poisoned(o.qkv.shape(), dt);
    backward(qkv_g, saved, out_g, dout_g, c.heads, dqkv_g, variant);

    const bool large = c.qk_scale != 1.0f;
    EXPECT_TRUE(close(o.lse, to_cpu_f32(saved.lse), kLseTolerance)) << "lse";
    EXPECT_TRUE(close(o.out, to_cpu_f32(out_g), out_tolerance(dt, large))) << "out";
    const Tensor got = to_cpu_f32(dqkv_g);
    const char* names[] = {"dq", "dk", "dv"};
    // dq and dk come from dS = P * (dP - D) with dP = dO . V and D = rowsum(dO * O), which cancel: at t = 1
    // (P = 1, O = V) dq = dk = 0 exactly, while the kernel's D and dP, summed in other orders, leave ~1e-7.
    // Their error scales with the cancelled terms, of the order of dv = P^T dO, not with dq itself.
    const double dv_scale = max_abs(part(o.dqkv, 2));
    for (int w = 0; w < 3; ++w) {
      const Tensor want = part(o.dqkv, w);
      const double m = w < 2 ? std::max(max_abs(want), dv_scale) : max_abs(want);
      EXPECT_TRUE(close(want, part(got, w), grad_tolerance(dt, large, m))) << names[w];
    }
  }

  void forward(const Tensor& qkv, int64_t heads, kernels::AttentionSaved& saved, Tensor& out, int variant) {
#if HPDT_HAVE_CUDA
    if (variant != 0) return kernels::cuda::attention_forward(qkv, heads, saved.lse, out, stream, variant);
#else
    (void)variant;  // (a CPU-only build: only the public entry points)
#endif
    kernels::attention_forward(qkv, heads, saved, out, stream);
  }
  void backward(const Tensor& qkv, const kernels::AttentionSaved& saved, const Tensor& out, const Tensor& dout,
                int64_t heads, Tensor& dqkv, int variant) {
#if HPDT_HAVE_CUDA
    if (variant != 0) return kernels::cuda::attention_backward(qkv, saved.lse, out, dout, heads, dqkv, stream, variant);
#else
    (void)variant;
#endif
    kernels::attention_backward(qkv, saved, out, dout, heads, dqkv, stream);
  }

  // dqkv (f32, on the host) of one forward and backward of `variant` (0: the public entry points), outputs poisoned.
  Tensor grads_of(const Case& c, DType dt, const Tensor& qkv_g, const Tensor& dout_g, int variant) {
    kernels::AttentionSaved saved;
    saved.lse = poisoned({c.b, c.heads, c.t});
    Tensor out_g = poisoned({c.b, c.t, c.heads * c.dh}, dt), dqkv_g = poisoned(qkv_g.shape(), dt);
    forward(qkv_g, c.heads, saved, out_g, variant);
    backward(qkv_g, saved, out_g, dout_g, c.heads, dqkv_g, variant);
    return to_cpu_f32(dqkv_g);
  }

  // FusedBackwardMatchesTwoPassDkDv's checks (below).
  void expect_fused_backward_matches_v2();

  static std::vector<int> variants(const Tensor& qkv_g, int64_t heads) {
    std::vector<int> v = {0, 1};
#if HPDT_HAVE_CUDA
    if (kernels::cuda::attention_variant_supported(2, qkv_g, heads)) v.push_back(2);
    if (kernels::cuda::attention_variant_supported(3, qkv_g, heads)) v.push_back(3);
#else
    (void)qkv_g, (void)heads;
#endif
    return v;
  }

  // Every dtype and every variant that applies, on one case.
  void check_all(const Case& c) {
    for (DType dt : test::kCudaTestDtypes) {
      const Oracle o = oracle(c, dt);
      const Tensor qkv_g = to_gpu(o.qkv, dt);
      for (int v : variants(qkv_g, c.heads)) check(c, dt, v, o, qkv_g);
    }
  }
};

TEST_F(AttentionCuda, HeadDimsAndLengths) {
  const int64_t pairs[][2] = {{1, 1}, {3, 3}, {1, 12}, {3, 1}, {1, 3}, {3, 12}};  // (b, heads)
  int k = 0;
  for (int64_t dh : {16, 24, 32, 64, 128})
    for (int64_t t : {1, 2, 17, 50, 65, 197}) {
      const auto& p = pairs[k++ % 6];
      // The CUDA emulator runs every thread in turn (racecheck nearly so): t = 197 there with one batch of two heads,
      // not 36 heads.
      if (test::small_shapes() && t == 197)
        check_all({1, t, 2, dh});
      else
        check_all({p[0], t, p[1], dh});
    }
}

#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
// On the emulator, which counts shared-memory bank conflicts (docs/cuda-emulator.md): the v2 kernels' cp.async
// tile loads and ldmatrix reads are conflict-free for every compiled head dim (dh 16 and 32 had 2-way
// conflicted loads before their lane order changed).
TEST_F(AttentionCuda, EmulatedSharedMemoryAccessesAreConflictFree) {
  for (int64_t dh : {16, 32, 64, 128}) {
    SCOPED_TRACE("dh " + std::to_string(dh));
    test::expect_conflict_free_shared_memory([&] { check_all({1, 33, 2, dh}); });
  }
}
#endif

TEST_F(AttentionCuda, VisionTransformerShapes) {
  check_all({2, 17, 3, 64});    // ViT-Ti on 28x28, patch 7: d = 192
  check_all({2, 50, 3, 64});    // ViT-Ti on 28x28, patch 4
  check_all({2, 197, 12, 64});  // ViT-B/16 at 224: d = 768
  check_all({2, 197, 6, 64});   // ViT-S/16 at 224: d = 384
}

TEST_F(AttentionCuda, OddHeadDims) {  // 7, 20: v1 only (not a multiple of 8); 40, 80: padded to 64, 128
  for (int64_t dh : {7, 20, 40, 80}) {
    check_all({2, 17, 3, dh});
    check_all({1, 65, 2, dh});
  }
}

TEST_F(AttentionCuda, LargeScoresExerciseOnlineRescaling) {
  for (int64_t dh : {64, 128})
    for (int64_t t : {65, 197}) check_all({2, t, 3, dh, 8.0f});
}

TEST_F(AttentionCuda, LongSequence) {
  check_all({1, 700, 2, 64});
  check_all({1, 300, 1, 128, 8.0f});
}

#if HPDT_HAVE_CUDA
// v2's two tile shapes where both exist (kernels/cuda/attention.cu), each pinned by HPDT_ATTENTION_V2_TILES:
//   the dh-128 forward (MmaForwardTile): wide, the default (2 m-tiles a warp, 32 keys a step, Q's fragments
//     re-read from shared memory), and narrow (1 m-tile, 64 keys, Q in registers);
//   the dh 32 and 64 backward (MmaBackwardTile): wide, the default (2 m-tiles of keys (dK/dV) or queries (dQ) a
//     warp, 32 rows of the other side a step), and narrow (1 m-tile, 64 a step); at dh 128 the dQ pass only
//     (dK/dV has the narrow tile alone there);
// against the oracle: t one past a 32-row step, a 64-row block and a 128-row block, dh 80 (padded to 128) and 40
// (padded to 64), large scores over many blocks. On the emulator, also which kernels ran.
TEST_F(AttentionCuda, BothV2TileShapes) {
  const Case cases[] = {{1, 33, 2, 128}, {2, 65, 1, 128}, {1, 129, 1, 128}, {1, 97, 2, 80}, {1, 200, 1, 128, 8.0f},
                        {1, 33, 2, 64},  {2, 65, 1, 64},  {1, 129, 1, 32},  {1, 97, 2, 40}, {1, 200, 1, 64, 8.0f}};
  for (const bool wide : {true, false}) {
    SCOPED_TRACE(wide ? "wide" : "narrow");
    const ScopedEnv tiles("HPDT_ATTENTION_V2_TILES", wide ? "wide" : "narrow");
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
    // Kernel names as the emulator records them (__PRETTY_FUNCTION__): [0] runs under this setting, [1] must not.
    const char* fwd[2] = {"MmaForwardTile<2, 32, false>", "MmaForwardTile<1, 64, true>"};
    const char* bwd[2] = {"DHP = 64; Tile = MmaBackwardTile<2, 32>", "DHP = 64; Tile = MmaBackwardTile<1, 64>"};
    if (!wide) std::swap(fwd[0], fwd[1]), std::swap(bwd[0], bwd[1]);
    const char* bwd128_wide = "DHP = 128; Tile = MmaBackwardTile<2, 32>";
    const char* bwd128_narrow = "DHP = 128; Tile = MmaBackwardTile<1, 32>";
    unsigned long long before[6];
    for (int k = 0; k < 4; ++k) before[k] = cuda_emu::launches_named(k < 2 ? fwd[k] : bwd[k - 2]);
    before[4] = cuda_emu::launches_named(bwd128_wide), before[5] = cuda_emu::launches_named(bwd128_narrow);
#endif
    for (const Case& c : cases) check_all(c);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
    // dh 128 forwards: 5 cases x 2 16-bit dtypes x (auto, v2, v3: v3's forward is v2's); dh 64 (and 40)
    // backwards: 4 cases x 2 x (auto and v2: 2 kernels each; v3: 1, the dK/dV kernel with the dQ step)
    EXPECT_EQ(cuda_emu::launches_named(fwd[0]) - before[0], 30u);
    EXPECT_EQ(cuda_emu::launches_named(fwd[1]) - before[1], 0u);
    EXPECT_EQ(cuda_emu::launches_named(bwd[0]) - before[2], 40u);
    EXPECT_EQ(cuda_emu::launches_named(bwd[1]) - before[3], 0u);
    // dh 128 backwards (5 cases x 2): dK/dV always narrow (auto, v2, and v3's one kernel); dQ wide or narrow
    EXPECT_EQ(cuda_emu::launches_named(bwd128_wide) - before[4], wide ? 20u : 0u);
    EXPECT_EQ(cuda_emu::launches_named(bwd128_narrow) - before[5], wide ? 30u : 50u);
#endif
  }
  const ScopedEnv bad("HPDT_ATTENTION_V2_TILES", "medium");
  const Oracle o = oracle({1, 5, 1, 128}, DType::bf16);
  const Tensor qkv_g = to_gpu(o.qkv, DType::bf16);
  Tensor lse, out = Tensor::empty({1, 5, 128}, DType::bf16, Device::cuda(0), AllocOptions{.stream = &stream});
  HPDT_EXPECT_THROW_MSG(kernels::cuda::attention_forward(qkv_g, 1, lse, out, stream, 2),
                        "HPDT_ATTENTION_V2_TILES=medium: expected narrow or wide");
}
#endif

#if HPDT_HAVE_CUDA
// The dK/dV pass at dh 128 with 64 queries a step (HPDT_ATTENTION_V2_DKDV_STEP=64, BackwardTileTall128) where the
// default takes 32: against the oracle (check_all: auto, v2 and v3, both 16-bit dtypes) on t one past a 32-row
// step, a 64-row block and a 128-row block, t = 1, dh 80 (padded to 128), large scores over many blocks, under both
// of v2's tile settings; and against the step of 32, v2 and v3 each: dq, dk, dv the same values (every sum adds the
// same 16-query products in the same order; a masked query past t adds zeros, so only a zero's sign may differ). On
// the emulator, also which kernels ran.
TEST_F(AttentionCuda, TallDkDvStepAtDh128) {
  const Case cases[] = {{1, 33, 2, 128}, {2, 65, 1, 128}, {1, 129, 1, 128},
                        {1, 1, 2, 128},  {1, 97, 2, 80},  {1, 200, 1, 128, 8.0f}};
  for (const char* tiles : {"wide", "narrow"}) {
    SCOPED_TRACE(tiles);
    const ScopedEnv pin("HPDT_ATTENTION_V2_TILES", tiles);
    {
      const ScopedEnv tall("HPDT_ATTENTION_V2_DKDV_STEP", "64");
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      const char* tall_name = "DHP = 128; Tile = MmaBackwardTile<1, 64>";
      const char* step32_name = "DHP = 128; Tile = MmaBackwardTile<1, 32>";
      const unsigned long long tall_before = cuda_emu::launches_named(tall_name);
      const unsigned long long step32_before = cuda_emu::launches_named(step32_name);
#endif
      for (const Case& c : cases) check_all(c);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      // 6 cases x 2 dtypes x (auto, v2, v3): one dK/dV launch each, all tall; the narrow setting's dQ passes
      // (<1, 32> as before: the switch is the dK/dV pass's) are auto's and v2's
      EXPECT_EQ(cuda_emu::launches_named(tall_name) - tall_before, 36u);
      EXPECT_EQ(cuda_emu::launches_named(step32_name) - step32_before, std::strcmp(tiles, "narrow") == 0 ? 24u : 0u);
#endif
    }
    for (const Case& c : cases) {
      SCOPED_TRACE(c.str());
      const DType dt = DType::bf16;
      const Oracle o = oracle(c, dt);
      const Tensor qkv_g = to_gpu(o.qkv, dt), dout_g = to_gpu(o.dout, dt);
      for (int v : {kernels::cuda::kAttentionTensorCore, kernels::cuda::kAttentionFusedBackward}) {
        Tensor grads[2];
        // (v3 in key order: rotated, a key block's first query block depends on how many it has, 32 or 64 rows)
        const ScopedEnv keys("HPDT_ATTENTION_V3_ORDER", "keys");
        for (int k = 0; k < 2; ++k) {
          const ScopedEnv step("HPDT_ATTENTION_V2_DKDV_STEP", k == 0 ? "32" : "64");
          grads[k] = grads_of(c, dt, qkv_g, dout_g, v);
        }
        const float* a = grads[0].data<float>();
        const float* b = grads[1].data<float>();
        int64_t differ = 0;
        for (int64_t i = 0; i < grads[0].numel(); ++i) differ += a[i] != b[i];
        EXPECT_EQ(differ, 0) << "v" << v << ": of " << grads[0].numel() << " gradients, 64 queries a step against 32";
      }
    }
  }
  const ScopedEnv bad("HPDT_ATTENTION_V2_DKDV_STEP", "128");
  const Case c{1, 5, 1, 128};
  const Oracle o = oracle(c, DType::bf16);
  const Tensor qkv_g = to_gpu(o.qkv, DType::bf16), dout_g = to_gpu(o.dout, DType::bf16);
  HPDT_EXPECT_THROW_MSG(grads_of(c, DType::bf16, qkv_g, dout_g, kernels::cuda::kAttentionTensorCore),
                        "HPDT_ATTENTION_V2_DKDV_STEP=128: expected 32 or 64");
}
#endif

#if HPDT_HAVE_CUDA
// Variant 3 (the one-pass backward, kernels/cuda/attention.cu) in key order: its dK and dV are v2's bit for bit
// (the same dK/dV kernel and tile, the query blocks visited in the same order), its dQ the oracle's (check_all
// above), from one kernel launch. Cases: one key block (the block stores dQ itself), several key blocks and query
// blocks (the turns: store, adds, the last add's scaled store; t = 700 is 6 key blocks at dh 64, 11 at dh 128), a
// ragged last query block, and v2's narrow tiles. (The rotated order: FusedBackwardRotatedOrder.)
void AttentionCuda::expect_fused_backward_matches_v2() {
  const Case cases[] = {{2, 50, 3, 64}, {1, 700, 2, 64}, {1, 300, 2, 128}, {2, 97, 1, 32}, {1, 130, 2, 16}};
  const ScopedEnv keys("HPDT_ATTENTION_V3_ORDER", "keys");
  for (const char* tiles : {"wide", "narrow"}) {
    const ScopedEnv pin("HPDT_ATTENTION_V2_TILES", tiles);
    for (const Case& c : cases) {
      SCOPED_TRACE(c.str() + " " + tiles);
      const DType dt = DType::bf16;
      const Oracle o = oracle(c, dt);
      const Tensor qkv_g = to_gpu(o.qkv, dt), dout_g = to_gpu(o.dout, dt);
      Tensor grads[2];
      for (int k = 0; k < 2; ++k) {
        const int v = k == 0 ? kernels::cuda::kAttentionTensorCore : kernels::cuda::kAttentionFusedBackward;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        const unsigned long long dq_before = cuda_emu::launches_named("attention_backward_dq_v2_kernel");
        const unsigned long long fused_before = cuda_emu::launches_named("FUSED_DQ = true");
#endif
        grads[k] = grads_of(c, dt, qkv_g, dout_g, v);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        EXPECT_EQ(cuda_emu::launches_named("attention_backward_dq_v2_kernel") - dq_before, k == 0 ? 1u : 0u);
        EXPECT_EQ(cuda_emu::launches_named("FUSED_DQ = true") - fused_before, k == 0 ? 0u : 1u);
#endif
      }
      const char* names[] = {"dq", "dk", "dv"};
      for (int w = 1; w < 3; ++w) {
        const Tensor a = part(grads[0], w), b = part(grads[1], w);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.nbytes())) << names[w] << ": v3 differs from v2";
      }
      const double m = std::max(max_abs(part(o.dqkv, 0)), max_abs(part(o.dqkv, 2)));
      EXPECT_TRUE(close(part(o.dqkv, 0), part(grads[1], 0), grad_tolerance(dt, false, m))) << "dq";
    }
  }
}

TEST_F(AttentionCuda, FusedBackwardMatchesTwoPassDkDv) { expect_fused_backward_matches_v2(); }

#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
// The same with blocks side by side (the emulator's CUDA_EMU_RESIDENT; by default it runs one block after another,
// so each turn wait of v3 finds the block before it already done): key blocks now reach their dQ adds before the
// one before them has added, and wait. Without the waits this fails, where the test above passes.
TEST_F(AttentionCuda, FusedBackwardOrderHoldsWithBlocksSideBySide) {
  const ScopedEnv resident("CUDA_EMU_RESIDENT", "3");
  const unsigned long long yields = cuda_emu::block_yields();
  expect_fused_backward_matches_v2();
  EXPECT_GT(cuda_emu::block_yields(), yields) << "no block let another run: the blocks did not interleave";
}

// And with blocks dispatched from the last one (CUDA_EMU_DISPATCH=reverse; CUDA promises no order): v3 takes its
// key blocks by ticket, in the order blocks start, so key block 0 still goes first. With the key block taken from
// blockIdx.x, the last key block would wait for good here (the emulator stops the run).
TEST_F(AttentionCuda, FusedBackwardTakesKeyBlocksInTheOrderBlocksStart) {
  const ScopedEnv reverse("CUDA_EMU_DISPATCH", "reverse");
  for (const char* resident : {"1", "3"}) {
    SCOPED_TRACE(std::string("resident blocks: ") + resident);
    const ScopedEnv r("CUDA_EMU_RESIDENT", resident);
    expect_fused_backward_matches_v2();
  }
}
#endif

// Variant 3's rotated order (the default where a head's key blocks fit on the GPU together; on the emulator with
// CUDA_EMU_RESIDENT blocks side by side, 24 here: up to 12 key blocks): against the oracle (dq, dk, dv), the same
// bits on a second run and with the blocks dispatched from the last (the order is fixed by the key blocks, not by
// which CTA starts first), and on the emulator blocks that really interleaved. Cases: dh 128 (5 key blocks of 64, 10
// query blocks of 32), dh 64 wide (6 of 128, 22 of 32) and narrow (11 of 64, 11 of 64), dh 16 (3 of 64 and 3 query
// blocks of 64: each key block one step behind the one before), dh 128 with 64 queries a step (4 and 4, large
// scores). Then where it does not run: HPDT_ATTENTION_V3_ORDER=keys, one key block, and on the emulator too few
// resident blocks (9: under twice the key blocks); a bad value is an error naming the variable. Any order of the
// adds gives the right dq, and dq is stored in 16 bits, where sums in another order rarely differ: whether the
// ranks are the order of arrival (the point of the rotation: speed) is test_attention_schedule's check, on the CPU.
TEST_F(AttentionCuda, FusedBackwardRotatedOrder) {
  struct Setting {
    Case c;
    const char* tiles;
    const char* step;
  };
  const Setting settings[] = {{{1, 300, 2, 128}, "wide", "32"},
                              {{1, 700, 2, 64}, "wide", "32"},
                              {{1, 700, 1, 64}, "narrow", "32"},
                              {{2, 130, 2, 16}, "wide", "32"},
                              {{1, 200, 1, 128, 8.0f}, "wide", "64"}};
  const ScopedEnv resident("CUDA_EMU_RESIDENT", "24");
  const DType dt = DType::bf16;
  for (const Setting& st : settings) {
    const Case& c = st.c;
    SCOPED_TRACE(c.str() + " " + st.tiles + ", " + st.step + " a step");
    const ScopedEnv tiles("HPDT_ATTENTION_V2_TILES", st.tiles), step("HPDT_ATTENTION_V2_DKDV_STEP", st.step);
    const Oracle o = oracle(c, dt);
    const Tensor qkv_g = to_gpu(o.qkv, dt), dout_g = to_gpu(o.dout, dt);
    ASSERT_TRUE(kernels::cuda::attention_v3_rotated(qkv_g, c.heads));
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
    const unsigned long long yields = cuda_emu::block_yields();
#endif
    check(c, dt, kernels::cuda::kAttentionFusedBackward, o, qkv_g);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
    EXPECT_GT(cuda_emu::block_yields(), yields) << "no block let another run: the blocks did not interleave";
#endif
    const Tensor first = grads_of(c, dt, qkv_g, dout_g, kernels::cuda::kAttentionFusedBackward);
    Tensor again, reversed;
    again = grads_of(c, dt, qkv_g, dout_g, kernels::cuda::kAttentionFusedBackward);
    {
      const ScopedEnv reverse("CUDA_EMU_DISPATCH", "reverse");
      reversed = grads_of(c, dt, qkv_g, dout_g, kernels::cuda::kAttentionFusedBackward);
    }
    EXPECT_EQ(0, std::memcmp(first.data(), again.data(), first.nbytes())) << "a second run differs";
    EXPECT_EQ(0, std::memcmp(first.data(), reversed.data(), first.nbytes()))
        << "blocks dispatched from the last differ";
  }
  const Case c{1, 300, 2, 128};
  const Oracle o = oracle(c, dt);
  const Tensor qkv_g = to_gpu(o.qkv, dt), dout_g = to_gpu(o.dout, dt);
  {
    const ScopedEnv keys("HPDT_ATTENTION_V3_ORDER", "keys");
    EXPECT_FALSE(kernels::cuda::attention_v3_rotated(qkv_g, c.heads));
  }
  {
    const ScopedEnv rotated("HPDT_ATTENTION_V3_ORDER", "rotated");
    EXPECT_TRUE(kernels::cuda::attention_v3_rotated(qkv_g, c.heads));
  }
  const Tensor one = to_gpu(oracle({1, 50, 2, 128}, dt).qkv, dt);  // 1 key block: nothing to rotate
  EXPECT_FALSE(kernels::cuda::attention_v3_rotated(one, 2));
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
  {
    const ScopedEnv few("CUDA_EMU_RESIDENT", "9");  // 5 key blocks need 10
    EXPECT_FALSE(kernels::cuda::attention_v3_rotated(qkv_g, c.heads));
    check(c, dt, kernels::cuda::kAttentionFusedBackward, o, qkv_g);  // in key order, as the emulator can
  }
#endif
  const ScopedEnv bad("HPDT_ATTENTION_V3_ORDER", "diagonal");
  HPDT_EXPECT_THROW_MSG(grads_of(c, dt, qkv_g, dout_g, kernels::cuda::kAttentionFusedBackward),
                        "HPDT_ATTENTION_V3_ORDER=diagonal: expected rotated or keys");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::attention_v3_rotated(qkv_g, c.heads),
                        "HPDT_ATTENTION_V3_ORDER=diagonal: expected rotated or keys");
}

// HPDT_ATTENTION_BACKWARD=v3 makes auto's (the layers') tensor-core backward v3, bit for bit the explicit variant 3;
// v2 and unset leave it v2; it changes no explicit variant, and a bad value is an error naming the variable. On the
// emulator also the kernels that ran (v2's and v3's dQ may round alike, on a GPU too: the bits alone cannot tell).
TEST_F(AttentionCuda, BackwardVariantOfAutoFromTheEnvironment) {
  const Case c{1, 300, 2, 64};
  const DType dt = DType::f16;
  const Oracle o = oracle(c, dt);
  const Tensor qkv_g = to_gpu(o.qkv, dt), dout_g = to_gpu(o.dout, dt);
  // grads_of(variant); fused: whether the backward ran v3's one-pass kernel (checked on the emulator)
  auto run = [&](int variant, bool fused) {
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
    const unsigned long long before = cuda_emu::launches_named("FUSED_DQ = true");
#endif
    Tensor g = grads_of(c, dt, qkv_g, dout_g, variant);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
    EXPECT_EQ(cuda_emu::launches_named("FUSED_DQ = true") - before, fused ? 1u : 0u) << "variant " << variant;
#else
    (void)fused;
#endif
    return g;
  };
  auto same = [](const Tensor& a, const Tensor& b) { return std::memcmp(a.data(), b.data(), a.nbytes()) == 0; };
  const Tensor v2 = run(kernels::cuda::kAttentionTensorCore, false);
  const Tensor v3 = run(kernels::cuda::kAttentionFusedBackward, true);
  {
    const ScopedEnv pin("HPDT_ATTENTION_BACKWARD", "v3");
    EXPECT_TRUE(same(run(0, true), v3)) << "auto under v3";
    EXPECT_TRUE(same(run(kernels::cuda::kAttentionTensorCore, false), v2)) << "an explicit variant 2 under v3";
  }
  {
    const ScopedEnv pin("HPDT_ATTENTION_BACKWARD", "v2");
    EXPECT_TRUE(same(run(0, false), v2)) << "auto under v2";
  }
  EXPECT_TRUE(same(run(0, false), v2)) << "auto, unset";
  const ScopedEnv bad("HPDT_ATTENTION_BACKWARD", "fused");
  HPDT_EXPECT_THROW_MSG(run(0, false), "HPDT_ATTENTION_BACKWARD=fused: expected v2 or v3");
}
#endif

#if HPDT_HAVE_CUDA
// Every tensor-core kernel instance once, on small cases: racecheck's attention part (scripts/gpu/sanitize.txt), whose
// cost grows with the launches (~0.16 s each under racecheck on the H200, 2026-11-27), so each instance runs on the
// fewest and smallest cases that still take its code paths; scripts/gpu/sanitizer_coverage.py checks that it reaches
// them all. Against the oracle, both 16-bit dtypes, v2 and v3 (rotated where the GPU holds a head's key blocks, on
// the emulator with 24 blocks resident; auto runs v2's kernels), under both of v2's tile settings, dh 16, 32, 64 and
// 128 (and 128 with 64 queries a dK/dV step). t = 130: two or three key blocks (v3's turns), a last query block of 2
// rows. Large scores (the online rescaling's branch) at dh 64 and 128, wide tiles.
TEST_F(AttentionCuda, EveryKernelInstanceOnSmallCases) {
  const ScopedEnv resident("CUDA_EMU_RESIDENT", "24");
  for (const char* tiles : {"wide", "narrow"}) {
    const ScopedEnv pin("HPDT_ATTENTION_V2_TILES", tiles);
    for (const char* step : {"32", "64"})
      for (int64_t dh : {16, 32, 64, 128}) {
        if (dh != 128 && std::strcmp(step, "64") == 0) continue;  // the step applies at dh 128 only
        SCOPED_TRACE(std::string(tiles) + ", " + step + " queries a dK/dV step");
        const ScopedEnv dkdv("HPDT_ATTENTION_V2_DKDV_STEP", step);
        std::vector<Case> cases{{1, 130, 1, dh}};
        if (dh >= 64 && std::strcmp(step, "32") == 0 && std::strcmp(tiles, "wide") == 0)
          cases.push_back({1, 130, 1, dh, 8.0f});
        for (const Case& c : cases)
          for (DType dt : {DType::bf16, DType::f16}) {
            const Oracle o = oracle(c, dt);
            const Tensor qkv_g = to_gpu(o.qkv, dt);
            for (int v : variants(qkv_g, c.heads))  // v1 (SIMT): OddHeadDims' part
              if (v == kernels::cuda::kAttentionTensorCore || v == kernels::cuda::kAttentionFusedBackward)
                check(c, dt, v, o, qkv_g);
          }
      }
  }
}
#endif

TEST_F(AttentionCuda, MisalignedViewFallsBackToSimt) {
  const Case c{2, 50, 3, 64};
  for (DType dt : test::kCudaTestDtypes) {
    const Oracle o = oracle(c, dt);
    // The packed qkv one element past a 16-byte boundary: no vector loads, auto picks v1.
    const Tensor host = o.qkv;
    Tensor big = Tensor::empty({host.numel() + 1}, DType::f32);
    std::memcpy(big.data<float>() + 1, host.data<float>(), host.nbytes());
    const Tensor big_g = to_gpu(big, dt);
    const Tensor qkv_g = big_g.flat(1, host.numel()).view(host.shape());
#if HPDT_HAVE_CUDA
    EXPECT_FALSE(kernels::cuda::attention_variant_supported(2, qkv_g, c.heads));
#endif
    check(c, dt, 0, o, qkv_g);
    check(c, dt, 1, o, qkv_g);
  }
}

TEST_F(AttentionCuda, DeterministicBits) {
  const Case c{2, 197, 3, 64};
  for (DType dt : test::kCudaTestDtypes) {
    const Oracle o = oracle(c, dt);
    const Tensor qkv_g = to_gpu(o.qkv, dt), dout_g = to_gpu(o.dout, dt);
    for (int v : variants(qkv_g, c.heads)) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " v" + std::to_string(v));
      Tensor runs[2][3];  // out, lse, dqkv of two runs
      for (auto& r : runs) {
        kernels::AttentionSaved saved;
        saved.lse = poisoned({c.b, c.heads, c.t});
        Tensor out_g = poisoned({c.b, c.t, c.heads * c.dh}, dt), dqkv_g = poisoned(o.qkv.shape(), dt);
        forward(qkv_g, c.heads, saved, out_g, v);
        backward(qkv_g, saved, out_g, dout_g, c.heads, dqkv_g, v);
        r[0] = out_g.to(Device::cpu(), stream);
        r[1] = saved.lse.to(Device::cpu(), stream);
        r[2] = dqkv_g.to(Device::cpu(), stream);
      }
      stream.synchronize();
      const char* names[] = {"out", "lse", "dqkv"};
      for (int k = 0; k < 3; ++k) {
        ASSERT_EQ(runs[0][k].nbytes(), runs[1][k].nbytes());
        EXPECT_EQ(0, std::memcmp(runs[0][k].data(), runs[1][k].data(), runs[0][k].nbytes()))
            << names[k] << " differs between two runs";
      }
    }
  }
}

TEST_F(AttentionCuda, LseIsAllocatedOrReplaced) {
  const Case c{1, 17, 3, 16};
  const Oracle o = oracle(c, DType::f32);
  const Tensor qkv_g = to_gpu(o.qkv);
  Tensor out_g = poisoned({1, 17, 48});
  kernels::AttentionSaved saved;  // no lse: allocated
  kernels::attention_forward(qkv_g, 3, saved, out_g, stream);
  ASSERT_TRUE(saved.lse.defined());
  EXPECT_EQ(saved.lse.shape(), Shape({1, 3, 17}));
  EXPECT_TRUE(saved.lse.is_cuda());
  EXPECT_TRUE(close(o.lse, to_cpu_f32(saved.lse), kLseTolerance));
  saved.lse = poisoned({2, 3, 17}, DType::bf16);  // wrong shape and dtype: replaced
  kernels::attention_forward(qkv_g, 3, saved, out_g, stream);
  EXPECT_EQ(saved.lse.shape(), Shape({1, 3, 17}));
  EXPECT_EQ(saved.lse.dtype(), DType::f32);
  EXPECT_TRUE(close(o.lse, to_cpu_f32(saved.lse), kLseTolerance));
}

TEST_F(AttentionCuda, ErrorsNameTheProblem) {
  const Device g = Device::cuda(0);
  const AllocOptions on{.stream = &stream};
  Tensor qkv = Tensor::zeros({2, 5, 36}, DType::f32, g, on), out = Tensor::zeros({2, 5, 12}, DType::f32, g, on);
  Tensor out16 = Tensor::zeros({2, 5, 12}, DType::bf16, g, on);
  kernels::AttentionSaved saved;
  HPDT_EXPECT_THROW_MSG(kernels::attention_forward(qkv, 3, saved, out16, stream),
                        "on CUDA all tensors of this op share one of f32, f16, bf16");
  Tensor wrong = Tensor::zeros({2, 5, 13}, DType::f32, g, on);
  HPDT_EXPECT_THROW_MSG(kernels::attention_forward(qkv, 3, saved, wrong, stream),
                        "attention_forward: out has shape [2, 5, 13], expected [2, 5, 12]");
  HPDT_EXPECT_THROW_MSG(kernels::attention_forward(qkv, 5, saved, out, stream), "divisible by 5 heads");
  HPDT_EXPECT_THROW_MSG(kernels::attention_forward(qkv, 3, saved, out, cpu), "need a CUDA stream");
  Tensor wide = Tensor::zeros({1, 4, 3 * 160}, DType::f32, g, on),
         wide_out = Tensor::zeros({1, 4, 160}, DType::f32, g, on);
  HPDT_EXPECT_THROW_MSG(kernels::attention_forward(wide, 1, saved, wide_out, stream),
                        "head dim 160 is not supported on CUDA (at most 128)");

  Tensor dqkv = Tensor::zeros({2, 5, 36}, DType::f32, g, on);
  kernels::AttentionSaved none;
  HPDT_EXPECT_THROW_MSG(kernels::attention_backward(qkv, none, out, out, 3, dqkv, stream),
                        "attention_backward: no saved log-sum-exp (run attention_forward on CUDA first)");
  kernels::AttentionSaved host;
  host.lse = Tensor::zeros({2, 3, 5}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::attention_backward(qkv, host, out, out, 3, dqkv, stream),
                        "run attention_forward on CUDA first");
  kernels::AttentionSaved bad;
  bad.lse = Tensor::zeros({2, 3, 5}, DType::bf16, g, on);
  HPDT_EXPECT_THROW_MSG(kernels::attention_backward(qkv, bad, out, out, 3, dqkv, stream),
                        "attention_backward: lse has dtype bf16, expected f32");
  bad.lse = Tensor::zeros({2, 3, 4}, DType::f32, g, on);
  HPDT_EXPECT_THROW_MSG(kernels::attention_backward(qkv, bad, out, out, 3, dqkv, stream),
                        "attention_backward: lse has shape [2, 3, 4], expected [2, 3, 5]");
  kernels::attention_forward(qkv, 3, saved, out, stream);
  Tensor dqkv16 = Tensor::zeros({2, 5, 36}, DType::f16, g, on);
  HPDT_EXPECT_THROW_MSG(kernels::attention_backward(qkv, saved, out, out, 3, dqkv16, stream),
                        "on CUDA all tensors of this op share one of f32, f16, bf16");
  Tensor dqkv_wrong = Tensor::zeros({2, 5, 33}, DType::f32, g, on);
  HPDT_EXPECT_THROW_MSG(kernels::attention_backward(qkv, saved, out, out, 3, dqkv_wrong, stream),
                        "attention_backward: dqkv has shape [2, 5, 33], expected [2, 5, 36]");
#if HPDT_HAVE_CUDA
  HPDT_EXPECT_THROW_MSG(kernels::cuda::attention_forward(qkv, 3, saved.lse, out, stream, 2),
                        "variant 2 (tensor cores) needs f16 or bf16");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::attention_backward(qkv, saved.lse, out, out, 3, dqkv, stream, 3),
                        "attention_backward: variant 3 (tensor cores) needs f16 or bf16");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::attention_forward(qkv, 3, saved.lse, out, stream, 7),
                        "no variant 7 (1: SIMT, 2: tensor cores, 3: tensor cores with a one-pass backward)");
#endif
}

}  // namespace
