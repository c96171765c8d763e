// CUDA optimizer steps, loss-scale helpers and the fused mixed-precision step against the CPU oracle.
//
// Tolerance: none, for every step. Both sides run the same per-element functions
// (hpdt/kernels/math/optim_math.h: explicit fma, IEEE division and square root, nothing left for a compiler
// to contract), so f32 results are compared bit for bit; with f16/bf16 parameters the GPU computes in f32 on
// the same (rounded) inputs as the oracle and rounds once, so its result is the oracle's rounded through the
// dtype, again bit for bit. The only inexact quantity is the sum of squares (global_norm, grad_stats): both
// sum in double but in different orders, so they agree to 1e-12 relative; where a clip coefficient depends
// on it, the oracle is given the GPU's sum so that both clip by the same f32 factor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda_oracle.h"
#include "hpdt/kernels/cpu/elementwise.h"
#include "hpdt/kernels/cpu/optim.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/math/optim_math.h"
#include "hpdt/kernels/optim.h"

namespace {

using namespace hpdt;
using kernels::AdamWOptions;
using kernels::FusedStepBuffers;
using kernels::FusedStepOptions;
using kernels::GradStats;
using kernels::OptimizerKind;
using kernels::SgdOptions;

const int64_t kSizes[] = {1, 7, 1000003};  // one element, one partial group of 4, a large prime
constexpr int64_t kResNet50Params = 25557032;

// Byte-for-byte equality of two CPU tensors of one dtype; reports the first differing element.
::testing::AssertionResult same_bits(const Tensor& want, const Tensor& got) {
  if (want.dtype() != got.dtype() || want.numel() != got.numel())
    return ::testing::AssertionFailure() << "different tensors: " << want.str() << " vs " << got.str();
  const size_t es = dtype_size(want.dtype());
  const auto* a = static_cast<const uint8_t*>(want.data());
  const auto* b = static_cast<const uint8_t*>(got.data());
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::memcmp(a + size_t(i) * es, b + size_t(i) * es, es) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  auto value = [&](const uint8_t* p) {
    Tensor one = Tensor::wrap(const_cast<uint8_t*>(p + size_t(first) * es), {1}, want.dtype());
    Tensor f = Tensor::empty({1}, DType::f32);
    kernels::cpu::cast(one, f);
    return f.data<float>()[0];
  };
  return ::testing::AssertionFailure() << bad << " of " << want.numel() << " elements differ; first at " << first
                                       << ": want " << value(a) << " got " << value(b);
}

class OptimCuda : public test::CudaOracleTest {
 protected:
  // f32 host values stored as dt (a CPU tensor of dtype dt).
  Tensor narrow(const Tensor& f32, DType dt) {
    if (dt == DType::f32) return f32.clone(cpu);
    Tensor t = Tensor::empty(f32.shape(), dt);
    kernels::cpu::cast(f32, t);
    return t;
  }
  Tensor gpu(const Tensor& host) { return host.to(Device::cuda(0), stream); }
  Tensor host(const Tensor& g) {
    Tensor c = g.to(Device::cpu(), stream);
    stream.synchronize();
    return c;
  }
  // The oracle's f32 result as the GPU must have stored it in dt.
  Tensor expected_in(const Tensor& f32, DType dt) { return narrow(f32, dt); }
};

// ---- sgd_step / adamw_step / scale -------------------------------------------------------------------------

TEST_F(OptimCuda, SgdStepEveryVariant) {
  struct Variant {
    const char* name;
    SgdOptions o;
    bool first_step;
  };
  const Variant variants[] = {
      {"plain", {0.1f, 0.0f, 0.0f, 0.0f, false}, false},
      {"momentum first step + wd", {0.05f, 0.9f, 0.0f, 1e-4f, false}, true},
      {"momentum + dampening + wd", {0.05f, 0.9f, 0.1f, 5e-4f, false}, false},
      {"nesterov + wd", {0.1f, 0.9f, 0.0f, 1e-2f, true}, false},
  };
  for (DType dt : test::kCudaTestDtypes) {
    for (int64_t n : kSizes) {
      for (const Variant& v : variants) {
        SCOPED_TRACE(std::string(v.name) + " " + std::string(dtype_name(dt)) + " n=" + std::to_string(n));
        const Tensor p = round_through(random({n}), dt), g = round_through(random({n}), dt);
        const Tensor buf = round_through(random({n}, -0.5f, 0.5f), dt);
        Tensor pg = to_gpu(p, dt), gg = to_gpu(g, dt), bg = to_gpu(buf, dt);
        kernels::sgd_step(pg, gg, bg, v.o, v.first_step, stream);
        Tensor pc = p.clone(cpu), bc = buf.clone(cpu);
        kernels::sgd_step(pc, g, bc, v.o, v.first_step, cpu);
        EXPECT_TRUE(same_bits(expected_in(pc, dt), host(pg))) << "params";
        EXPECT_TRUE(same_bits(expected_in(bc, dt), host(bg))) << "momentum buffer";
      }
    }
  }
}

TEST_F(OptimCuda, AdamWStepAtSteps1And1000) {
  const AdamWOptions o{1e-3f, 0.9f, 0.999f, 1e-8f, 0.05f};
  for (DType dt : test::kCudaTestDtypes) {
    for (int64_t n : kSizes) {
      for (int64_t step : {int64_t(1), int64_t(1000)}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n) + " step " + std::to_string(step));
        const Tensor p = round_through(random({n}), dt), g = round_through(random({n}, -0.1f, 0.1f), dt);
        const Tensor m = round_through(random({n}, -0.05f, 0.05f), dt), v = round_through(random({n}, 0.0f, 1e-2f), dt);
        Tensor pg = to_gpu(p, dt), gg = to_gpu(g, dt), mg = to_gpu(m, dt), vg = to_gpu(v, dt);
        kernels::adamw_step(pg, gg, mg, vg, o, step, stream);
        Tensor pc = p.clone(cpu), mc = m.clone(cpu), vc = v.clone(cpu);
        kernels::adamw_step(pc, g, mc, vc, o, step, cpu);
        EXPECT_TRUE(same_bits(expected_in(pc, dt), host(pg))) << "params";
        EXPECT_TRUE(same_bits(expected_in(mc, dt), host(mg))) << "exp_avg";
        EXPECT_TRUE(same_bits(expected_in(vc, dt), host(vg))) << "exp_avg_sq";
      }
    }
  }
}

TEST_F(OptimCuda, Scale) {
  for (DType dt : test::kCudaTestDtypes) {
    for (int64_t n : kSizes) {
      for (float f : {0.5f, 1.0f / 3.0f, 65536.0f}) {
        const Tensor x = round_through(random({n}, -2.0f, 2.0f), dt);
        Tensor xg = to_gpu(x, dt);
        kernels::scale(xg, f, stream);
        Tensor xc = x.clone(cpu);
        kernels::scale(xc, f, cpu);
        EXPECT_TRUE(same_bits(expected_in(xc, dt), host(xg))) << dtype_name(dt) << " n=" << n << " s=" << f;
      }
    }
  }
}

// ---- global_norm / clip_grad_norm / has_nonfinite ----------------------------------------------------------

TEST_F(OptimCuda, GlobalNormClipAndNonFinite) {
  for (DType dt : test::kCudaTestDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<Tensor> hosts, gpus;
    for (int64_t n : kSizes) {
      hosts.push_back(round_through(random({n}, -3.0f, 3.0f), dt));
      gpus.push_back(to_gpu(hosts.back(), dt));
    }
    const double want = kernels::global_norm(hosts, cpu);
    const double got = kernels::global_norm(gpus, stream);
    EXPECT_NEAR(got, want, 1e-12 * want) << "different summation orders in double";
    for (const Tensor& g : gpus) EXPECT_FALSE(kernels::has_nonfinite(g, stream));

    for (double max_norm : {0.25 * want, 4.0 * want}) {  // clipping (coef < 1) and not (coef >= 1)
      std::vector<Tensor> g2;
      for (const Tensor& h : hosts) g2.push_back(to_gpu(h, dt));
      const double norm = kernels::clip_grad_norm(g2, max_norm, stream);
      EXPECT_NEAR(norm, want, 1e-12 * want);
      // The oracle clips by the coefficient of the GPU's norm (the last bit of the norm may differ).
      const double coef = max_norm / (norm + 1e-6);
      for (size_t i = 0; i < hosts.size(); ++i) {
        Tensor c = hosts[i].clone(cpu);
        if (coef < 1.0) kernels::scale(c, float(coef), cpu);
        EXPECT_TRUE(same_bits(expected_in(c, dt), host(g2[i]))) << "max_norm " << max_norm << " tensor " << i;
      }
    }

    // inf or NaN anywhere, first, middle or last element, is found
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      for (int64_t n : kSizes) {
        for (int64_t at : {int64_t(0), n / 2, n - 1}) {
          Tensor h = round_through(random({n}), dt);
          h.data<float>()[at] = bad;
          EXPECT_TRUE(kernels::has_nonfinite(to_gpu(h, dt), stream)) << bad << " at " << at << " of " << n;
          EXPECT_FALSE(std::isfinite(kernels::global_norm({to_gpu(h, dt)}, stream)));
        }
      }
    }
  }
  EXPECT_EQ(kernels::global_norm({}, stream), 0.0);
}

// ---- the fused step ----------------------------------------------------------------------------------------

enum class Clip { none, below, above };  // no clipping; max_norm below the norm (coef < 1); above it (coef 1)

struct FusedCase {
  const char* name;
  FusedStepOptions o;
  float grad_range;  // scaled gradients in [-range, range)
  Clip clip;
};

FusedStepOptions adamw(int64_t step, float inv_scale) {
  FusedStepOptions o;
  o.kind = OptimizerKind::adamw;
  o.adamw = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.05f};
  o.step = step;
  o.inv_scale = inv_scale;
  return o;
}

FusedStepOptions sgd(SgdOptions s, bool first_step, float inv_scale) {
  FusedStepOptions o;
  o.kind = OptimizerKind::sgd;
  o.sgd = s;
  o.first_step = first_step;
  o.inv_scale = inv_scale;
  return o;
}

const FusedCase kFusedCases[] = {
    {"adamw step 1", adamw(1, 1.0f), 1.0f, Clip::none},
    {"adamw step 1000, loss scale 1024, clipped", adamw(1000, 1.0f / 1024), 1024.0f, Clip::below},
    {"adamw step 1000, inv_scale 1/3, clip not reached", adamw(1000, 1.0f / 3), 3.0f, Clip::above},
    {"sgd momentum first step + wd, loss scale 65536, clipped",
     sgd({0.1f, 0.9f, 0.0f, 5e-4f, false}, true, 1.0f / 65536), 30000.0f,
     Clip::below},  // f16 gradients overflow above 65504
    {"sgd nesterov + wd, clip not reached", sgd({0.1f, 0.9f, 0.0f, 1e-2f, true}, false, 1.0f), 1.0f, Clip::above},
    {"sgd no momentum, inv_scale 0.5", sgd({0.1f, 0.0f, 0.0f, 0.0f, false}, false, 0.5f), 2.0f, Clip::none},
};

class FusedStepCuda : public OptimCuda {
 protected:
  // One fused step on the GPU and on the oracle from the same inputs; everything compared bit for bit.
  // bad_at >= 0 puts bad_value into the gradients there (the step must then change nothing).
  void check(int64_t n, DType grad_dt, DType model_dt, FusedCase c, int64_t bad_at = -1, float bad_value = 0) {
    const bool adam = c.o.kind == OptimizerKind::adamw;
    const bool has_state1 = adam || c.o.sgd.momentum != 0.0f;
    const bool has_model = model_dt != DType::f32;
    const Tensor p = random({n});
    Tensor g32 = random({n}, -c.grad_range, c.grad_range);
    if (bad_at >= 0) g32.data<float>()[bad_at] = bad_value;
    const Tensor g = narrow(g32, grad_dt);  // the gradients as stored (f32, f16 or bf16)
    const Tensor s1 = has_state1 ? random({n}, -0.05f, 0.05f) : Tensor();
    const Tensor s2 = adam ? random({n}, 0.0f, 1e-2f) : Tensor();
    const Tensor model0 = has_model ? narrow(random({n}), model_dt) : Tensor();  // what the model held before

    // oracle statistics: the norm sets max_norm for the clip cases
    Tensor stats_c = kernels::make_grad_stats(Device::cpu(), cpu);
    kernels::grad_stats({g}, c.o.inv_scale, stats_c, cpu);
    const GradStats want = kernels::read_grad_stats(stats_c, cpu);
    const bool skip = want.nonfinite != 0;
    FusedStepOptions o = c.o;
    if (c.clip == Clip::below) o.max_norm = 0.5 * want.norm();
    if (c.clip == Clip::above) o.max_norm = 2.0 * want.norm() + 1.0;

    // GPU: two passes, no host round trip between them
    Tensor pg = gpu(p), gg = gpu(g);
    Tensor s1g = has_state1 ? gpu(s1) : Tensor(), s2g = adam ? gpu(s2) : Tensor();
    Tensor mg = has_model ? gpu(model0) : Tensor();
    Tensor stats_g = kernels::make_grad_stats(Device::cuda(0), stream);
    kernels::grad_stats({gg}, o.inv_scale, stats_g, stream);
    kernels::fused_step(FusedStepBuffers{pg, gg, s1g, s2g, mg, stats_g}, o, stream);
    const GradStats got = kernels::read_grad_stats(stats_g, stream);
    ASSERT_EQ(got.nonfinite, want.nonfinite);
    if (!skip) {
      EXPECT_NEAR(got.sum_squares, want.sum_squares, 1e-12 * want.sum_squares);
      const float coef = kernels::math::clip_coefficient(got.sum_squares, o.max_norm);
      if (c.clip == Clip::below)
        EXPECT_LT(coef, 1.0f);
      else
        EXPECT_EQ(coef, 1.0f);
    }

    // oracle step with the GPU's sum of squares (one clip coefficient for both)
    std::memcpy(stats_c.data(), &got, sizeof got);
    Tensor pc = p.clone(cpu), s1c = has_state1 ? s1.clone(cpu) : Tensor(), s2c = adam ? s2.clone(cpu) : Tensor();
    Tensor mc = has_model ? model0.clone(cpu) : Tensor();
    kernels::fused_step(FusedStepBuffers{pc, g, s1c, s2c, mc, stats_c}, o, cpu);
    if (skip) {  // GradScaler: nothing changes, on either side
      EXPECT_TRUE(same_bits(p, pc)) << "oracle params changed on a skipped step";
      EXPECT_TRUE(same_bits(p, host(pg))) << "params changed on a skipped step";
      if (has_state1) {
        EXPECT_TRUE(same_bits(s1, host(s1g))) << "state1 changed on a skipped step";
      }
      if (adam) {
        EXPECT_TRUE(same_bits(s2, host(s2g))) << "state2 changed on a skipped step";
      }
      if (has_model) {
        EXPECT_TRUE(same_bits(model0, host(mg))) << "model copy changed on a skipped step";
      }
      return;
    }
    EXPECT_FALSE(same_bits(p, pc)) << "the oracle did not step";
    EXPECT_TRUE(same_bits(pc, host(pg))) << "params";
    if (has_state1) {
      EXPECT_TRUE(same_bits(s1c, host(s1g))) << (adam ? "exp_avg" : "momentum buffer");
    }
    if (adam) {
      EXPECT_TRUE(same_bits(s2c, host(s2g))) << "exp_avg_sq";
    }
    if (has_model) {
      EXPECT_TRUE(same_bits(mc, host(mg))) << "model copy";
      EXPECT_TRUE(same_bits(narrow(pc, model_dt), mc)) << "the model copy is the master rounded";
    }
  }
};

TEST_F(FusedStepCuda, MatchesOracleBitwise) {
  struct Precision {
    DType grads, model;  // model f32: no model copy
  };
  // every pair the CUDA path compiles (since 2026-12-01: before, five of them ran nowhere)
  const Precision precisions[] = {{DType::f32, DType::f32},   {DType::f32, DType::bf16}, {DType::f32, DType::f16},
                                  {DType::bf16, DType::bf16}, {DType::bf16, DType::f32}, {DType::bf16, DType::f16},
                                  {DType::f16, DType::f16},   {DType::f16, DType::f32},  {DType::f16, DType::bf16}};
  for (const FusedCase& c : kFusedCases) {
    for (const Precision& pr : precisions) {
      for (int64_t n : kSizes) {
        SCOPED_TRACE(std::string(c.name) + ", grads " + std::string(dtype_name(pr.grads)) + ", model " +
                     std::string(dtype_name(pr.model)) + ", n=" + std::to_string(n));
        check(n, pr.grads, pr.model, c);
      }
    }
  }
}

TEST_F(FusedStepCuda, InfOrNanSkipsTheStepOnTheDevice) {
  for (const FusedCase& c : kFusedCases) {
    for (DType dt : test::kCudaTestDtypes) {
      const DType model = dt == DType::f32 ? DType::bf16 : dt;
      for (int64_t n : kSizes) {
        for (float bad : {INFINITY, -INFINITY, NAN}) {
          if (n > 7 && !std::isnan(bad)) continue;  // the large size once per case and dtype
          SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)) + " n=" + std::to_string(n) +
                       " bad=" + std::to_string(bad));
          check(n, dt, model, c, n - 1 - n / 3, bad);
        }
      }
    }
  }
}

TEST_F(FusedStepCuda, OverflowOnUnscaleSkips) {
  // finite scaled gradients that overflow once multiplied by inv_scale > 1 are inf for GradScaler too
  FusedCase c{"adamw, inv_scale 4", adamw(10, 4.0f), 1.0f, Clip::none};
  check(1000003, DType::f32, DType::bf16, c, 5, 3.0e38f);
}

TEST_F(FusedStepCuda, ResNet50ArenaBf16GradsAndModel) {
  FusedCase c{"adamw step 1000, loss scale 1024, clipped", adamw(1000, 1.0f / 1024), 1024.0f, Clip::below};
  check(kResNet50Params, DType::bf16, DType::bf16, c);
}

TEST_F(FusedStepCuda, UnalignedBuffersTakeTheScalarPath) {
  // views one element into their buffers: the 4-wide vector loads are off, the results must not change
  const int64_t n = 4099;
  const FusedCase c = kFusedCases[1];
  Tensor p = random({n + 1}), g32 = random({n + 1}, -1024.0f, 1024.0f), m = random({n + 1}, -0.05f, 0.05f),
         v = random({n + 1}, 0.0f, 1e-2f);
  Tensor g = narrow(g32, DType::bf16);
  Tensor pg = gpu(p), gg = gpu(g), mg = gpu(m), vg = gpu(v);
  Tensor model = poisoned({n + 1}, DType::bf16);
  FusedStepOptions o = c.o;
  Tensor stats_g = kernels::make_grad_stats(Device::cuda(0), stream);
  Tensor gv = gg.flat(1, n);
  kernels::grad_stats({gv}, o.inv_scale, stats_g, stream);
  const GradStats st = kernels::read_grad_stats(stats_g, stream);
  o.max_norm = 0.5 * st.norm();
  Tensor pv = pg.flat(1, n), mv = mg.flat(1, n), vv = vg.flat(1, n), modelv = model.flat(1, n);
  kernels::fused_step(FusedStepBuffers{pv, gv, mv, vv, modelv, stats_g}, o, stream);

  Tensor stats_c = kernels::make_grad_stats(Device::cpu(), cpu);
  std::memcpy(stats_c.data(), &st, sizeof st);
  Tensor pc = p.clone(cpu).flat(1, n), mc = m.clone(cpu).flat(1, n), vc = v.clone(cpu).flat(1, n);
  Tensor modelc = Tensor::empty({n}, DType::bf16);
  kernels::fused_step(FusedStepBuffers{pc, g.flat(1, n), mc, vc, modelc, stats_c}, o, cpu);
  EXPECT_TRUE(same_bits(pc, host(pv)));
  EXPECT_TRUE(same_bits(mc, host(mv)));
  EXPECT_TRUE(same_bits(vc, host(vv)));
  EXPECT_TRUE(same_bits(modelc, host(modelv)));
  // the element before the views is untouched
  EXPECT_TRUE(same_bits(p.flat(0, 1), host(pg.flat(0, 1))));
  EXPECT_TRUE(std::isnan(to_cpu_f32(model.flat(0, 1)).data<float>()[0]));
  // and the sum of squares over the unaligned view agrees with the aligned copy's
  Tensor stats2 = kernels::make_grad_stats(Device::cuda(0), stream);
  kernels::grad_stats({gpu(g.flat(1, n).clone(cpu))}, o.inv_scale, stats2, stream);
  EXPECT_EQ(kernels::read_grad_stats(stats2, stream).sum_squares, st.sum_squares) << "order independent of alignment";
}

TEST_F(FusedStepCuda, StatsOverSeveralBuffersAccumulateInOrder) {
  std::vector<Tensor> hosts, gpus;
  for (int64_t n : kSizes) {
    hosts.push_back(narrow(random({n}, -8.0f, 8.0f), DType::bf16));
    gpus.push_back(gpu(hosts.back()));
  }
  Tensor sc = kernels::make_grad_stats(Device::cpu(), cpu), sg = kernels::make_grad_stats(Device::cuda(0), stream);
  kernels::grad_stats(hosts, 0.125f, sc, cpu);
  kernels::grad_stats(gpus, 0.125f, sg, stream);
  const GradStats a = kernels::read_grad_stats(sc, cpu), b = kernels::read_grad_stats(sg, stream);
  EXPECT_NEAR(b.sum_squares, a.sum_squares, 1e-12 * a.sum_squares);
  EXPECT_EQ(b.nonfinite, 0);
  // deterministic: the same bits again
  kernels::grad_stats(gpus, 0.125f, sg, stream);
  EXPECT_EQ(kernels::read_grad_stats(sg, stream).sum_squares, b.sum_squares);
  // overwritten, not accumulated across calls; empty list: zeros
  kernels::grad_stats({}, 0.125f, sg, stream);
  EXPECT_EQ(kernels::read_grad_stats(sg, stream).sum_squares, 0.0);
}

TEST_F(OptimCuda, BadArgumentsOnGpu) {
  Tensor p = poisoned({8}), g16 = poisoned({8}, DType::bf16), g7 = poisoned({7}), m = poisoned({8}), v = poisoned({8});
  HPDT_EXPECT_THROW_MSG(kernels::sgd_step(p, g16, m, SgdOptions{}, false, stream), "share one of f32, f16, bf16");
  HPDT_EXPECT_THROW_MSG(kernels::sgd_step(p, g7, m, SgdOptions{}, false, stream), "element counts differ");
  HPDT_EXPECT_THROW_MSG(kernels::adamw_step(p, p, m, v, AdamWOptions{}, 0, stream), "must count from 1");
  HPDT_EXPECT_THROW_MSG(kernels::adamw_step(p, p, m, v, AdamWOptions{}, 1, cpu), "need a CUDA stream");
  Tensor stats = kernels::make_grad_stats(Device::cuda(0), stream);
  FusedStepOptions o = adamw(1, 1.0f);
  HPDT_EXPECT_THROW_MSG(kernels::fused_step(FusedStepBuffers{g16, g16, m, v, {}, stats}, o, stream),
                        "params has dtype bf16, expected f32");
  HPDT_EXPECT_THROW_MSG(kernels::fused_step(FusedStepBuffers{p, g7, m, v, {}, stats}, o, stream),
                        "element counts differ");
  HPDT_EXPECT_THROW_MSG(kernels::fused_step(FusedStepBuffers{p, g16, m, {}, {}, stats}, o, stream), "AdamW needs v");
  HPDT_EXPECT_THROW_MSG(kernels::fused_step(FusedStepBuffers{p, g16, m, v, poisoned({8}), stats}, o, stream),
                        "must be f16 or bf16");
  o.max_norm = 1.0;
  HPDT_EXPECT_THROW_MSG(kernels::fused_step(FusedStepBuffers{p, g16, m, v, {}, {}}, o, stream), "needs the stats");
  HPDT_EXPECT_THROW_MSG(kernels::fused_step(FusedStepBuffers{p, g16, m, v, {}, poisoned({4})}, o, stream),
                        "stats has dtype f32, expected u8");
  Tensor host_stats = kernels::make_grad_stats(Device::cpu(), cpu);
  HPDT_EXPECT_THROW_MSG(kernels::fused_step(FusedStepBuffers{p, g16, m, v, {}, host_stats}, o, stream),
                        "different devices");
}

// ---- CPU only: the fused oracle is the unfused sequence -----------------------------------------------------

// With f32 gradients, fused_step on the CPU gives the bits of what nn does today: scale(g, inv_scale),
// has_nonfinite, clip_grad_norm, sgd/adamw_step, cast to the model copy. Runs without a GPU.
TEST(FusedStepCpu, EqualsTheUnfusedSequence) {
  const Stream cpu;
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(100003)}) {
    for (const FusedCase& c : kFusedCases) {
      SCOPED_TRACE(std::string(c.name) + " n=" + std::to_string(n));
      const bool adam = c.o.kind == OptimizerKind::adamw;
      Tensor p = Tensor::empty({n}, DType::f32), g = Tensor::empty({n}, DType::f32),
             s1 = Tensor::empty({n}, DType::f32), s2 = Tensor::empty({n}, DType::f32);
      kernels::cpu::fill_uniform(p, -1, 1, 7, 0);
      kernels::cpu::fill_uniform(g, -c.grad_range, c.grad_range, 7, 1u << 20);
      kernels::cpu::fill_uniform(s1, -0.05f, 0.05f, 7, 2u << 20);
      kernels::cpu::fill_uniform(s2, 0.0f, 1e-2f, 7, 3u << 20);
      // unfused
      Tensor pu = p.clone(cpu), gu = g.clone(cpu), s1u = s1.clone(cpu), s2u = s2.clone(cpu);
      kernels::scale(gu, c.o.inv_scale, cpu);
      ASSERT_FALSE(kernels::has_nonfinite(gu, cpu));
      const double norm = kernels::global_norm({gu}, cpu);
      const double max_norm = c.clip == Clip::below ? 0.5 * norm : c.clip == Clip::above ? 2.0 * norm + 1.0 : 0.0;
      if (max_norm > 0) {
        std::vector<Tensor> gs = {gu};
        kernels::clip_grad_norm(gs, max_norm, cpu);
      }
      if (adam)
        kernels::adamw_step(pu, gu, s1u, s2u, c.o.adamw, c.o.step, cpu);
      else
        kernels::sgd_step(pu, gu, s1u, c.o.sgd, c.o.first_step, cpu);
      Tensor model_u = Tensor::empty({n}, DType::bf16);
      kernels::cpu::cast(pu, model_u);
      // fused
      FusedStepOptions o = c.o;
      o.max_norm = max_norm;
      Tensor stats = kernels::make_grad_stats(Device::cpu(), cpu);
      kernels::grad_stats({g}, o.inv_scale, stats, cpu);
      EXPECT_EQ(kernels::read_grad_stats(stats, cpu).norm(), norm) << "same blocks, same order";
      Tensor pf = p.clone(cpu), s1f = s1.clone(cpu), s2f = s2.clone(cpu), model_f = Tensor::empty({n}, DType::bf16);
      kernels::fused_step(FusedStepBuffers{pf, g, s1f, adam ? s2f : Tensor(), model_f, stats}, o, cpu);
      EXPECT_TRUE(same_bits(pu, pf)) << "params";
      if (adam || c.o.sgd.momentum != 0.0f) {
        EXPECT_TRUE(same_bits(s1u, s1f)) << "state1";
      }
      if (adam) {
        EXPECT_TRUE(same_bits(s2u, s2f)) << "state2";
      }
      EXPECT_TRUE(same_bits(model_u, model_f)) << "model copy";
    }
  }
}

}  // namespace
