// The one way a CUDA op is checked against its CPU oracle (gpu-labelled tests, tests/kernels/test_*_cuda.cpp):
//   - inputs are fresh random numbers from Philox (a new seed per run, printed on failure), never zeros;
//   - reduced-precision runs give the oracle exactly the values the GPU sees: the f32 input is rounded
//     through the storage type first (round_through), and the oracle computes in f32 on those values;
//   - every GPU output is poisoned (NaN) before the op runs, so an element the kernel forgot shows up;
//   - results are compared element by element with |got - want| <= atol + rtol * |want|, the
//     tolerance stated per dtype (and widened per op where the op's arithmetic says why).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "hpdt/core/philox.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
#include <cuda_runtime.h>  // the emulator's: cuda_emu::bank_counts
#endif
#include "hpdt/kernels/cpu/elementwise.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt_test.h"

namespace hpdt::test {

// True when the test runs in the CPU emulator of CUDA (tests/cuda_emu, docs/cuda-emulator.md): every
// kernel runs there one CUDA thread at a time, so tests shrink their largest shapes, and the vendor
// backend (cuBLAS, cuDNN) is not available.
constexpr bool emulated() {
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
  return true;
#else
  return false;
#endif
}

// True when scripts/gpu/run.sh runs this binary under compute-sanitizer's racecheck (HPDT_UNDER_SANITIZER=racecheck).
// racecheck slows a kernel by 100-1000x, as the emulator does, and looks for shared-memory hazards, which depend on a
// block's code path, not on the grid: there the tests take the emulator's shapes (small_shapes) and leave the vendor
// backend out (vendor_available), whose kernels are not ours (cuDNN's reported hazards of their own on the H200,
// 2026-11-29). memcheck keeps both: it checks how we call the vendor too.
inline bool under_racecheck() {
  const char* tool = std::getenv("HPDT_UNDER_SANITIZER");
  return tool && std::string(tool) == "racecheck";
}

// The shapes of the emulator (where a test has smaller ones): in the emulator and under racecheck. Every code path
// stays (channels, kernel sizes, strides, tile edges); only batches and planes shrink. So the kernels racecheck
// sees are the ones the emulator logs (scripts/gpu/sanitizer_coverage.py).
inline bool small_shapes() { return emulated() || under_racecheck(); }

// The vendor backend (cuBLAS, cuDNN) runs only on a GPU, and there not under racecheck: a test that compares against
// it skips with this (visibly), and a test that loops over both backends leaves the vendor one out
// (`if (vendor && !vendor_available()) continue;`).
inline bool vendor_available() { return !emulated() && !under_racecheck(); }
#define HPDT_SKIP_WITHOUT_VENDOR()                                                                                \
  do {                                                                                                            \
    if (::hpdt::test::emulated())                                                                                 \
      GTEST_SKIP() << "the vendor backend (cuBLAS/cuDNN) is not available in the CUDA emulator";                  \
    if (::hpdt::test::under_racecheck())                                                                          \
      GTEST_SKIP() << "the vendor backend (cuBLAS/cuDNN) is left out under racecheck (its kernels are not ours)"; \
  } while (0)

struct Tolerance {
  double rtol = 0, atol = 0;
};

// (count, mean, M2) and Chan et al.'s pairwise merge, in double: the oracle of the batch-norm partials kernels hand
// over (kernels::ChannelStats).
struct Moments {
  double n = 0, mean = 0, m2 = 0;
};
inline Moments merge(Moments a, Moments b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const double n = a.n + b.n, d = b.mean - a.mean;
  return {n, a.mean + d * b.n / n, a.m2 + b.m2 + d * d * a.n * b.n / n};
}

// Storage rounding of one element (f32: 0; bf16: 2^-8; f16: 2^-11) plus room for the f32
// accumulation-order differences between the CPU and GPU. Ops that sum long rows widen these.
inline Tolerance default_tolerance(DType dt) {
  switch (dt) {
    case DType::f32: return {1e-5, 1e-6};
    case DType::f16: return {2e-3, 1e-4};
    case DType::bf16: return {1.6e-2, 1e-3};
    default: return {0, 0};
  }
}

class CudaOracleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPDT_REQUIRE_GPU();
    stream = Stream::create_cuda(0);
    seed = uint64_t(::testing::UnitTest::GetInstance()->random_seed()) * 7919u + 17u;
    ::testing::Test::RecordProperty("philox_seed", std::to_string(seed));
  }
  // A failure names its inputs: the run's seed, and how to draw them again.
  void TearDown() override {
    if (HasFailure())
      std::fprintf(stderr, "inputs: Philox seed %llu; rerun with --gtest_random_seed=%d for the same ones\n",
                   (unsigned long long)seed, ::testing::UnitTest::GetInstance()->random_seed());
  }

  // A CPU f32 tensor of uniform numbers in [lo, hi) from Philox (seed, offset): fresh each run.
  // Where random() draws next; rewind(draw_position()) makes the next draws repeat (the same inputs twice).
  uint64_t draw_position() const { return next_offset_; }
  void rewind(uint64_t position) { next_offset_ = position; }

  Tensor random(const Shape& shape, float lo = -1.0f, float hi = 1.0f) {
    Tensor t = Tensor::empty(shape, DType::f32);
    kernels::cpu::fill_uniform(t, lo, hi, seed, next_offset_);
    next_offset_ += uint64_t(t.numel()) + 1024;
    return t;
  }

  // The f32 values `t` takes once stored as `dt` (f32: unchanged copy). Feed this to the oracle.
  Tensor round_through(const Tensor& t, DType dt) {
    if (dt == DType::f32) return t.clone(cpu);
    Tensor narrow = Tensor::empty(t.shape(), dt);
    kernels::cpu::cast(t, narrow);
    Tensor wide = Tensor::empty(t.shape(), DType::f32);
    kernels::cpu::cast(narrow, wide);
    return wide;
  }

  // A CPU f32 tensor copied to the GPU as dtype `dt`.
  Tensor to_gpu(const Tensor& host_f32, DType dt = DType::f32) {
    Tensor narrow = host_f32;
    if (dt != host_f32.dtype()) {
      narrow = Tensor::empty(host_f32.shape(), dt);
      kernels::cpu::cast(host_f32, narrow);
    }
    return narrow.to(Device::cuda(0), stream);
  }

  // A GPU tensor filled with NaN (floating) or 0xff.. bytes (integers): what a kernel leaves unwritten shows.
  Tensor poisoned(const Shape& shape, DType dt = DType::f32) {
    Tensor g = Tensor::empty(shape, dt, Device::cuda(0), AllocOptions{.stream = &stream});
    kernels::fill(g, is_floating(dt) ? NAN : -1.0f, stream);
    return g;
  }

  // A GPU tensor copied back and widened to f32 (after the stream has finished).
  Tensor to_cpu_f32(const Tensor& g) {
    Tensor c = g.to(Device::cpu(), stream);
    stream.synchronize();
    if (c.dtype() == DType::f32) return c;
    Tensor wide = Tensor::empty(c.shape(), DType::f32);
    kernels::cpu::cast(c, wide);
    return wide;
  }

  // Element-wise comparison; reports how many elements fail, the worst one and the first one.
  static ::testing::AssertionResult close(const Tensor& want, const Tensor& got, Tolerance tol) {
    if (want.numel() != got.numel())
      return ::testing::AssertionFailure() << "element counts differ: " << want.str() << " vs " << got.str();
    const float* w = want.data<float>();
    const float* g = got.data<float>();
    int64_t bad = 0, first = -1, worst = -1;
    double worst_excess = -1, margin = 0;  // margin: the largest err / allowed, of passing elements too
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double wi = w[i], gi = g[i];
      const double allowed = tol.atol + tol.rtol * std::fabs(wi);
      const double err = std::fabs(gi - wi);
      const bool ok = std::isfinite(wi) ? (std::isfinite(gi) && err <= allowed) : (std::isnan(wi) ? std::isnan(gi) : gi == wi);
      const double excess = !ok && !std::isfinite(err) ? 1e300
                            : std::isfinite(wi)        ? err / (allowed > 0 ? allowed : 1e-30)
                                                       : 0;
      margin = std::max(margin, excess);
      if (!ok) {
        ++bad;
        if (first < 0) first = i;
        if (excess > worst_excess) worst_excess = excess, worst = i;
      }
    }
    record_margin(margin);
    if (bad == 0) return ::testing::AssertionSuccess();
    std::ostringstream os;
    os << bad << " of " << want.numel() << " elements outside rtol " << tol.rtol << " atol " << tol.atol
       << "; first at " << first << ": want " << w[first] << " got " << g[first] << "; worst at " << worst
       << ": want " << w[worst] << " got " << g[worst];
    return ::testing::AssertionFailure() << os.str();
  }

  // HPDT_TEST_MARGINS=FILE: every comparison, passed or failed, appends "TEST N MARGIN SEED" to FILE: the N-th
  // comparison of the test, its elements' largest |got - want| / allowed (1 is the tolerance; above fails) and the
  // run's --gtest_random_seed. scripts/dev/test_margins.py ranks the comparisons that random inputs bring closest to
  // their tolerances, where a suite of fresh inputs fails now and then.
  static void record_margin(double margin) {
    static const char* const path = std::getenv("HPDT_TEST_MARGINS");
    if (!path || !*path) return;
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string test = t ? std::string(t->test_suite_name()) + "." + t->name() : "(outside a test)";
    static std::string last;
    static int n = 0;
    n = test == last ? n + 1 : 1;
    last = test;
    FILE* f = std::fopen(path, "a");
    if (!f) {
      ADD_FAILURE() << "HPDT_TEST_MARGINS: cannot open " << path << " for appending";
      return;
    }
    std::fprintf(f, "%s %d %.6g %d\n", test.c_str(), n, margin, ::testing::UnitTest::GetInstance()->random_seed());
    std::fclose(f);
  }

  Stream stream;
  Stream cpu;  // the CPU stream, for the oracle's entry points
  uint64_t seed = 0;

 private:
  uint64_t next_offset_ = 0;
};

// The dtypes every CUDA op is checked in.
inline constexpr DType kCudaTestDtypes[] = {DType::f32, DType::bf16, DType::f16};

#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
// Emulator only (it counts shared-memory bank conflicts, docs/cuda-emulator.md): runs `work` and expects its
// ldmatrix reads and cp.async writes to have been issued, and all conflict-free.
template <class F>
void expect_conflict_free_shared_memory(F&& work) {
  cuda_emu::count_bank_conflicts(true);
  work();
  const cuda_emu::BankCounts b = cuda_emu::bank_counts();
  cuda_emu::count_bank_conflicts(false);
  EXPECT_GT(b.cp_async_ideal, 0u);
  EXPECT_GT(b.ldmatrix_ideal, 0u);
  EXPECT_EQ(b.cp_async_wavefronts, b.cp_async_ideal);
  EXPECT_EQ(b.ldmatrix_wavefronts, b.ldmatrix_ideal);
}
#endif

}  // namespace hpdt::test
