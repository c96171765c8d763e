// CUDA GEMM (every variant: v1 SIMT, v2 tensor cores, v3 Hopper wgmma/TMA, vendor cuBLAS), matmul and linear
// against the CPU oracle (cpu::gemm<float>, cpu linear) on the inputs rounded through the storage dtype.
// v3 runs where the device is compute capability 9.0 and the operands are aligned (else it falls back to v2,
// which these tests then check); the CUDA emulator reports 9.0, so it runs v3 on its wgmma/TMA model.
//
// Tolerance (gemm_tolerance below): products of rounded inputs are exact in f32 on both sides, so the
// results differ only by the order of the K-term f32 sums (and the tensor cores' accumulation, which
// truncates aligned addends), plus the final rounding for 16-bit C. With inputs uniform in [-1, 1] an
// output is typically |alpha| sqrt(K) / 3 in size and the order error a few ulps of that times sqrt(K), so
//   rtol = 2e-6 * sqrt(K) (+ the dtype's rounding for 16-bit C),
//   atol = rtol_acc * (|alpha| sqrt(K) / 3 + |beta| + 1) (+ the dtype's atol),
// i.e. about 1e-5 sqrt(K) relative to a typical output. A missing or doubled k-tile of 8 or 16 terms
// moves an output by ~1, far outside this.
// Padding of every matrix (leading dimension beyond the width) is NaN: reading it shows up; C's padding
// must come back still NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_oracle.h"
#include "hpdt/core/cuda_graph.h"
#include "hpdt/core/env.h"
#include "hpdt/kernels/activation.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/channel_stats.h"
#include "hpdt/kernels/cpu/gemm.h"
#include "hpdt/kernels/gemm.h"
#include "hpdt/kernels/linear.h"
#include "hpdt/kernels/math/activation_math.h"
#if HPDT_HAVE_CUDA
#include <cuda_runtime.h>

#include "hpdt/kernels/cuda/gemm.h"
#include "hpdt/kernels/cuda/linear.h"
#endif

namespace {

using namespace hpdt;
using test::Tolerance;

Tolerance gemm_tolerance(DType c_type, int64_t K, float alpha, float beta) {
  const double k = double(std::max<int64_t>(K, 1));
  const double acc = 2e-6 * std::sqrt(k);
  Tolerance t;
  t.rtol = acc;
  t.atol = acc * (std::fabs(alpha) * std::sqrt(k) / 3 + std::fabs(beta) + 1) + 1e-6;
  if (c_type != DType::f32) {
    const Tolerance c = test::default_tolerance(c_type);
    t.rtol += c.rtol;
    t.atol += c.atol;
  }
  return t;
}

// cuBLAS (the vendor variant) with a 16-bit C, on the aligned realistic shapes only: on an H100 (cuBLAS
// of CUDA 13.0, 2026-11-26) 0.01-0.1 % of the outputs were off by up to one rounding of a partial sum of
// typical size to C's type (bf16: ~2^-8 at outputs near 0, with sqrt(K)/3 ~ 4.6; f16: ~2^-12), whatever
// K; f32 C and the odd sizes were exact to the tolerance above, and setting
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION changed nothing. hpdt's own kernels keep the tight
// bound; the vendor's is widened by one unit roundoff of C's type times a typical partial sum.
void widen_for_vendor_16bit(Tolerance& t, DType c_type, int64_t K, float alpha, float beta) {
  if (c_type == DType::f32) return;
  const double u = c_type == DType::bf16 ? 0x1p-8 : 0x1p-11;
  t.atol += u * (std::fabs(alpha) * std::sqrt(double(std::max<int64_t>(K, 1))) / 3 + std::fabs(beta) + 1);
}

class GemmCuda : public test::CudaOracleTest {
 protected:
  // A host f32 buffer holding a rows x cols matrix with leading dimension ld, starting `offset` elements
  // in: random values inside (when `fill`), NaN everywhere else (padding, the offset, or all of it).
  Tensor padded(int64_t rows, int64_t cols, int64_t ld, int64_t offset, bool fill) {
    Tensor t = random({std::max<int64_t>(1, offset + rows * ld)});
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const int64_t j = i - offset;
      const bool inside = j >= 0 && j < rows * ld && j % ld < cols;
      if (!inside || !fill) p[i] = NAN;
    }
    return t;
  }

#if HPDT_HAVE_CUDA
  struct Case {
    kernels::cuda::GemmVariant variant = kernels::cuda::GemmVariant::automatic;
    bool ta = false, tb = false;
    int64_t M = 1, N = 1, K = 1;
    DType ab = DType::f32, c = DType::f32;
    float alpha = 1, beta = 0;
    bool bias = false;
    int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // leading dimension = width + pad
    int64_t offset_a = 0;                     // A starts this many elements into its buffer
    bool residual = false;                    // + a residual matrix [M, ldc] in C's dtype
    int act = 0;                              // 1: GELU (pre_activation kept when keep_pre), 2: GELU gradient
    bool keep_pre = false;
    kernels::GeluForm form = kernels::GeluForm::erf;
  };

  static std::string describe(const Case& c) {
    std::ostringstream os;
    os << kernels::cuda::gemm_variant_name(c.variant) << " " << (c.ta ? "T" : "N") << (c.tb ? "T" : "N") << " M" << c.M
       << " N" << c.N << " K" << c.K << " ab " << dtype_name(c.ab) << " c " << dtype_name(c.c) << " alpha " << c.alpha
       << " beta " << c.beta << (c.bias ? " bias" : "") << " pads " << c.pad_a << "/" << c.pad_b << "/" << c.pad_c
       << " offset_a " << c.offset_a;
    if (c.residual) os << " residual";
    if (c.act)
      os << (c.act == 1 ? " gelu" : " gelu_grad") << (c.form == kernels::GeluForm::erf ? "(erf)" : "(tanh)")
         << (c.keep_pre ? " keep_pre" : "");
    return os.str();
  }

  // `variant` (which must be what runs) against cuBLAS on dense A and B, alpha 1, beta 0. Two f32-accumulated
  // results: the order tolerance twice over, plus one ulp of the 16-bit output where the two land on either
  // side of a rounding boundary (and, with `vendor_16bit_slack`, cuBLAS's partial-sum rounding of a 16-bit C).
  void expect_near_cublas(kernels::cuda::GemmVariant variant, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          const Tensor& A, const Tensor& B, DType ab, DType ct, bool vendor_16bit_slack) {
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    ASSERT_EQ(kernels::cuda::gemm_resolve(variant, ta, tb, lda, ldb, A.data(), B.data(), ab, stream), variant);
    Tensor ours = poisoned({M, N}, ct), ref = poisoned({M, N}, ct);
    kernels::cuda::gemm(ta, tb, M, N, K, 1, A.data(), lda, B.data(), ldb, 0, ours.data(), N, ab, ct, {}, stream, variant);
    kernels::cuda::gemm(ta, tb, M, N, K, 1, A.data(), lda, B.data(), ldb, 0, ref.data(), N, ab, ct, {}, stream,
                        kernels::cuda::GemmVariant::vendor);
    Tolerance tol = gemm_tolerance(ct, K, 1, 0);
    tol.atol *= 2;
    if (vendor_16bit_slack) widen_for_vendor_16bit(tol, ct, K, 1, 0);
    EXPECT_TRUE(close(to_cpu_f32(ref), to_cpu_f32(ours), tol));
  }

  // Leading dimension that keeps v2 usable (a multiple of 8) and leaves some padding.
  static int64_t aligned_pad(int64_t width) { return (width + 7) / 8 * 8 + 8 - width; }

  // Runs the case on the GPU and on the oracle. `used`: the variant that ran; `out`: C copied back (f32).
  ::testing::AssertionResult run(const Case& c, kernels::cuda::GemmVariant* used = nullptr, Tensor* out = nullptr) {
    const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
    const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
    const int64_t lda = std::max<int64_t>(1, a_cols + c.pad_a), ldb = std::max<int64_t>(1, b_cols + c.pad_b);
    const int64_t ldc = std::max<int64_t>(1, c.N + c.pad_c);
    const Tensor A = padded(a_rows, a_cols, lda, c.offset_a, true);
    const Tensor B = padded(b_rows, b_cols, ldb, 0, true);
    const Tensor C = padded(c.M, c.N, ldc, 0, c.beta != 0.0f);  // beta == 0: C is not read, NaN throughout
    const Tensor bias = random({std::max<int64_t>(1, c.N)});

    // Oracle on the values the GPU sees.
    const Tensor Ar = round_through(A, c.ab), Br = round_through(B, c.ab), biasr = round_through(bias, c.c);
    Tensor want = round_through(C, c.c);
    kernels::cpu::gemm<float>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, Ar.data<float>() + c.offset_a, lda, Br.data<float>(),
                              ldb, c.beta, want.data<float>(), ldc);
    if (c.bias)
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) want.data<float>()[i * ldc + j] += biasr.data<float>()[j];

    // The residual, then the activation: the GELU's input h (gradient) or the kept pre-activation (GELU), [M, ldc]
    // in C's dtype.
    const Tensor res = padded(c.M, c.N, ldc, 0, true), resr = round_through(res, c.c);
    for (int64_t i = 0; c.residual && i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) want.data<float>()[i * ldc + j] += resr.data<float>()[i * ldc + j];
    const Tensor h = padded(c.M, c.N, ldc, 0, c.act == 2);
    const Tensor hr = round_through(h, c.c);
    Tensor want_pre = h;  // NaN throughout, the pre-activation inside
    // the activation takes v as a plain GEMM stores it (gemm_common.cuh: activate)
    const Tensor stored = c.act ? round_through(want, c.c) : want;
    for (int64_t i = 0; c.act && i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        float& v = want.data<float>()[i * ldc + j];
        const float pre = v;
        v = stored.data<float>()[i * ldc + j];
        if (c.act == 2) {
          const float x = hr.data<float>()[i * ldc + j];
          v *= c.form == kernels::GeluForm::erf ? kernels::math::gelu_erf_grad(x) : kernels::math::gelu_tanh_grad(x);
        } else {
          want_pre.data<float>()[i * ldc + j] = pre;
          v = c.form == kernels::GeluForm::erf ? kernels::math::gelu_erf(v) : kernels::math::gelu_tanh(v);
        }
      }

    const Tensor Ag = to_gpu(A, c.ab), Bg = to_gpu(B, c.ab), biasg = to_gpu(bias, c.c);
    Tensor Cg = to_gpu(C, c.c), hg = to_gpu(h, c.c);
    const Tensor resg = to_gpu(res, c.c);
    const void* a_ptr = static_cast<const char*>(Ag.data()) + c.offset_a * int64_t(dtype_size(c.ab));
    kernels::cuda::GemmEpilogue epi;
    epi.bias = c.bias ? biasg.data() : nullptr;
    epi.residual = c.residual ? resg.data() : nullptr;
    epi.gelu = c.act == 1;
    epi.pre_activation = c.act == 1 && c.keep_pre ? hg.data() : nullptr;
    epi.gelu_grad_input = c.act == 2 ? hg.data() : nullptr;
    epi.gelu_form = c.form;
    if (used) *used = kernels::cuda::gemm_resolve(c.variant, c.ta, c.tb, lda, ldb, a_ptr, Bg.data(), c.ab, stream);
    kernels::cuda::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a_ptr, lda, Bg.data(), ldb, c.beta, Cg.data(), ldc, c.ab,
                        c.c, epi, stream, c.variant);
    const Tensor got = to_cpu_f32(Cg);
    if (out) *out = got;
    Tolerance tol = gemm_tolerance(c.c, c.K, c.alpha, c.beta);
    // vendor with a bias and beta != 0 (or a residual) rounds beta * C + bias + residual to C's dtype before
    // cuBLAS adds the product.
    if (c.variant == kernels::cuda::GemmVariant::vendor && (c.bias || c.residual) && (c.beta != 0.0f || c.residual) &&
        c.c != DType::f32)
      tol.atol += 2 * test::default_tolerance(c.c).rtol * (std::fabs(c.beta) + 1);
    if (c.variant == kernels::cuda::GemmVariant::vendor) widen_for_vendor_16bit(tol, c.c, c.K, c.alpha, c.beta);
    if (c.act == 1 && c.keep_pre) {
      ::testing::AssertionResult pre_ok = close(want_pre, to_cpu_f32(hg), tol);
      if (!pre_ok) return pre_ok << " (the kept pre-activation)";
    }
    if (c.act) {
      // |gelu'| <= 1.13: the sum's error, a little larger; the GELU's own rounding (erf / tanh / exp on each
      // side) a few ulps; vendor applies it to C's rounded value, one more rounding of C's type.
      tol.atol *= 1.2;
      tol.rtol += 1e-6;
      if (c.variant == kernels::cuda::GemmVariant::vendor && c.c != DType::f32)
        tol.atol += 2 * test::default_tolerance(c.c).rtol * (std::fabs(c.alpha) * std::sqrt(double(c.K)) / 3 + 1);
    }
    return close(want, got, tol);
  }
#endif
};

#if HPDT_HAVE_CUDA
using kernels::cuda::GemmVariant;

const GemmVariant kVariants[] = {GemmVariant::v1_simt, GemmVariant::v2_mma, GemmVariant::v3_wgmma, GemmVariant::vendor};
// The variants compared with the CPU: all of them, less cuBLAS where it cannot run (the CUDA emulator) or is left
// out (racecheck: test::vendor_available).
std::vector<GemmVariant> checked_variants() {
  std::vector<GemmVariant> v{GemmVariant::v1_simt, GemmVariant::v2_mma, GemmVariant::v3_wgmma};
  if (test::vendor_available()) v.push_back(GemmVariant::vendor);
  return v;
}

// Compute capability 9.0 (H100/H200, and the emulator): where v3's sm_90a code runs.
bool hopper_device() {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}
bool v3_runs_here() { return kernels::cuda::gemm_v3_built() && hopper_device(); }

struct Types {
  DType ab, c;
};
const Types kTypes[] = {{DType::f32, DType::f32},
                        {DType::bf16, DType::bf16},
                        {DType::bf16, DType::f32},
                        {DType::f16, DType::f16},
                        {DType::f16, DType::f32}};
struct Size {
  int64_t M, N, K;
};

// Every variant x transpose x dtype pair on odd and small sizes, tight and padded (v2-aligned) leading
// dimensions, with and without alpha/beta/bias. v2 must really run wherever the layout allows it.
TEST_F(GemmCuda, EveryVariantTransposeDtypeOnOddSizes) {
  const Size sizes[] = {{1, 1, 1}, {7, 5, 3}, {17, 33, 65}, {127, 129, 255}, {64, 64, 64}};
  for (const Size& sz : sizes)
    for (GemmVariant v : checked_variants())
      for (int tr = 0; tr < 4; ++tr)
        for (const Types& ty : kTypes)
          for (int form = 0; form < 3; ++form) {
            Case c;
            c.variant = v;
            c.ta = tr & 1;
            c.tb = tr & 2;
            c.M = sz.M, c.N = sz.N, c.K = sz.K;
            c.ab = ty.ab, c.c = ty.c;
            if (form >= 1) {  // padded, v2-aligned leading dimensions; alpha, beta and bias
              c.pad_a = aligned_pad(c.ta ? c.M : c.K);
              c.pad_b = aligned_pad(c.tb ? c.K : c.N);
              c.pad_c = 3;
              c.alpha = 0.75f;
              c.beta = form == 1 ? -0.5f : 0.0f;
              c.bias = true;
            }
            SCOPED_TRACE(describe(c));
            GemmVariant used;
            EXPECT_TRUE(run(c, &used));
            if (v == GemmVariant::v2_mma && ty.ab != DType::f32 && form >= 1) {
              EXPECT_EQ(used, GemmVariant::v2_mma);
            }
            if (v == GemmVariant::v3_wgmma && ty.ab != DType::f32 && form >= 1) {  // v3 where it can, else v2
              EXPECT_EQ(used, v3_runs_here() ? GemmVariant::v3_wgmma : GemmVariant::v2_mma);
            }
          }
}

// The GEMMs of linear layers at realistic shapes (forward, dx, dw), every variant, 16-bit and f32.
TEST_F(GemmCuda, RealisticLinearShapes) {
  struct Lin {
    int64_t rows, in, out;
  };
  const Lin shapes[] = {{64 * 50, 192, 576}, {2 * 197, 768, 3072}, {256, 64, 10}};
  // The CUDA emulator runs every thread in turn (racecheck nearly so): there the rows (batch x tokens) shrink, in and
  // out stay.
  const Lin emulated_shapes[] = {{4 * 50, 192, 576}, {197, 768, 3072}, {256, 64, 10}};
  for (const Lin& l : test::small_shapes() ? emulated_shapes : shapes)
    for (GemmVariant v : checked_variants())
      for (const Types& ty :
           {Types{DType::f32, DType::f32}, Types{DType::bf16, DType::bf16}, Types{DType::f16, DType::f32}})
        for (int which = 0; which < 3; ++which) {
          Case c;
          c.variant = v;
          c.ab = ty.ab, c.c = ty.c;
          if (which == 0) c.tb = true, c.M = l.rows, c.N = l.out, c.K = l.in, c.bias = true;  // y = x w^T + b
          if (which == 1) c.M = l.rows, c.N = l.in, c.K = l.out;                              // dx = dy w
          if (which == 2) c.ta = true, c.M = l.out, c.N = l.in, c.K = l.rows, c.beta = 1;     // dw += dy^T x
          SCOPED_TRACE(describe(c));
          EXPECT_TRUE(run(c));
        }
}

// K == 0 (C = beta C + bias), alpha == 0 (A and B not read), empty M or N (C untouched).
TEST_F(GemmCuda, DegenerateSizes) {
  for (GemmVariant v : kVariants)
    for (const Types& ty : kTypes) {
      for (float beta : {0.0f, 0.5f})
        for (bool bias : {false, true}) {
          Case c;
          c.variant = v, c.ab = ty.ab, c.c = ty.c, c.M = 9, c.N = 13, c.K = 0, c.beta = beta, c.bias = bias,
          c.pad_c = 2;
          SCOPED_TRACE(describe(c));
          EXPECT_TRUE(run(c));
          c.K = 5, c.alpha = 0.0f;
          SCOPED_TRACE(describe(c));
          EXPECT_TRUE(run(c));
        }
      for (const Size& sz : {Size{0, 7, 5}, Size{7, 0, 5}, Size{0, 0, 0}}) {
        Case c;
        c.variant = v, c.ab = ty.ab, c.c = ty.c, c.M = sz.M, c.N = sz.N, c.K = sz.K, c.beta = 0.5f, c.pad_c = 1;
        SCOPED_TRACE(describe(c));
        EXPECT_TRUE(run(c));
      }
    }
}

// Leading dimensions that v2 cannot take (not a multiple of 8, or an A pointer off 16-byte alignment)
// fall back to v1, which must then be right.
TEST_F(GemmCuda, OddLeadingDimensionsAndUnalignedPointersFallBackToV1) {
  for (const Types& ty : kTypes)
    for (int tr = 0; tr < 4; ++tr)
      for (int form = 0; form < 2; ++form) {
        Case c;
        c.variant = GemmVariant::v2_mma;
        c.ta = tr & 1, c.tb = tr & 2, c.M = 70, c.N = 45, c.K = 99, c.ab = ty.ab, c.c = ty.c, c.alpha = 1.25f;
        c.beta = -1.0f, c.bias = true, c.pad_c = 5;
        if (form == 0)
          c.pad_a = 3, c.pad_b = 1;  // odd leading dimensions
        else
          c.pad_a = aligned_pad(c.ta ? c.M : c.K), c.pad_b = aligned_pad(c.tb ? c.K : c.N), c.offset_a = 1;
        SCOPED_TRACE(describe(c));
        GemmVariant used;
        EXPECT_TRUE(run(c, &used));
        EXPECT_EQ(used, GemmVariant::v1_simt);
      }
}

// Few output tiles and a long K: v2 splits K (f32 partials reduced in split order). Checked against the
// oracle and for bitwise repeatability.
TEST_F(GemmCuda, SplitKIsRightAndDeterministic) {
  for (DType ab : {DType::bf16, DType::f16})
    for (int tr = 0; tr < 4; ++tr)
      for (DType ct : {DType::f32, ab}) {
        Case c;
        c.variant = GemmVariant::v2_mma;
        c.ta = tr & 1, c.tb = tr & 2, c.M = 130, c.N = 72, c.K = 2504, c.ab = ab, c.c = ct, c.alpha = 0.5f,
        c.beta = 0.25f;
        c.bias = true, c.pad_c = 1;
        c.pad_a = aligned_pad(c.ta ? c.M : c.K), c.pad_b = aligned_pad(c.tb ? c.K : c.N);
        SCOPED_TRACE(describe(c));
        EXPECT_TRUE(run(c));
      }
  // Same inputs twice: same bits.
  const int64_t M = 96, N = 80, K = 4096;
  const Tensor A = to_gpu(random({M, K}), DType::bf16), B = to_gpu(random({K, N}), DType::bf16);
  Tensor c1 = poisoned({M, N}), c2 = poisoned({M, N});
  kernels::cuda::gemm(false, false, M, N, K, 1, A.data(), K, B.data(), N, 0, c1.data(), N, DType::bf16, DType::f32, {},
                      stream, GemmVariant::v2_mma);
  kernels::cuda::gemm(false, false, M, N, K, 1, A.data(), K, B.data(), N, 0, c2.data(), N, DType::bf16, DType::f32, {},
                      stream, GemmVariant::v2_mma);
  const Tensor h1 = to_cpu_f32(c1), h2 = to_cpu_f32(c2);
  for (int64_t i = 0; i < M * N; ++i)
    ASSERT_EQ(test::bits_of(h1.data<float>()[i]), test::bits_of(h2.data<float>()[i])) << "element " << i;
}

// The epilogue's residual, GELU (with and without the kept pre-activation) and GELU gradient on every variant,
// transpose and dtype pair: odd sizes with an odd ldc (one element at a time) and even ones (pairs), alpha, beta
// and bias before the activation; split-K (the reduction kernel's epilogue) and K == 0 (the epilogue alone).
TEST_F(GemmCuda, ResidualAndGeluEpiloguesEveryVariant) {
  const Size sizes[] = {{17, 33, 65}, {64, 64, 64}};
  const Types types[] = {{DType::bf16, DType::bf16}, {DType::bf16, DType::f32}, {DType::f32, DType::f32}};
  for (GemmVariant v : checked_variants())
    for (int tr = 0; tr < 4; ++tr)
      for (const Types& ty : types)
        for (const Size& sz : sizes)
          for (int mode = 0; mode < 5; ++mode) {  // GELU (erf, kept input); GELU (tanh) + residual; gradients;
                                                   // residual alone
            Case c;
            c.variant = v;
            c.ta = tr & 1, c.tb = tr & 2, c.M = sz.M, c.N = sz.N, c.K = sz.K, c.ab = ty.ab, c.c = ty.c;
            c.pad_a = aligned_pad(c.ta ? c.M : c.K), c.pad_b = aligned_pad(c.tb ? c.K : c.N);
            c.pad_c = sz.N % 2 ? 3 : 0;
            c.alpha = 0.75f, c.beta = mode % 2 ? -0.5f : 0.0f, c.bias = true;
            c.act = mode < 2 ? 1 : mode < 4 ? 2 : 0;
            c.keep_pre = mode == 0;
            c.residual = mode == 1 || mode == 4;
            c.form = mode % 2 ? kernels::GeluForm::tanh : kernels::GeluForm::erf;
            SCOPED_TRACE(describe(c));
            EXPECT_TRUE(run(c));
          }
  for (GemmVariant v : {GemmVariant::v2_mma, GemmVariant::v3_wgmma})
    for (int act = 1; act <= 2; ++act) {
      Case c;
      c.variant = v;
      c.M = 130, c.N = 72, c.K = 2504, c.ab = DType::bf16, c.c = DType::bf16, c.bias = true, c.act = act;
      c.keep_pre = true, c.tb = true, c.residual = act == 1;
      c.pad_a = aligned_pad(c.K), c.pad_b = aligned_pad(c.K);
      SCOPED_TRACE("split-K " + describe(c));
      EXPECT_TRUE(run(c));
    }
  for (int act = 1; act <= 2; ++act) {
    Case c;
    c.M = 5, c.N = 7, c.K = 0, c.beta = 0.5f, c.bias = true, c.act = act, c.keep_pre = true, c.residual = true;
    SCOPED_TRACE(describe(c));
    EXPECT_TRUE(run(c));
  }
}

// The fused GELU is the plain GEMM and the elementwise GELU kernel after it, bit for bit (gemm_common.cuh:
// activate takes v as C stores it): the kept pre-activation is the plain GEMM's C, C is gelu_forward of it, and the
// fused gradient is gelu_backward(h, the plain GEMM's C). So --gelu fused and --gelu separate train alike, and
// the vendor backend's GELU pass computes the same function. 16-bit C on every variant (v3 on each pipeline; the
// emulator has no cuBLAS), and v3 with HPDT_GEMM_V3_ACTIVATION=pass (the plain GEMM, then gemm_common.cuh's
// activation_only: Find's "+gelu pass" plans, its 16-byte vectors and single elements, from C or, with beta 0, from
// the kept input), both forms, pairs and single elements (odd ldc), split-K (the reduction kernel's epilogue), with
// bias, beta (or none) and a residual before the activation.
TEST_F(GemmCuda, FusedGeluIsThePlainGemmThenTheGeluKernel) {
  struct Shape {
    int64_t M, N, K, ldc;
  };
  const Shape shapes[] = {{70, 40, 96, 40}, {33, 17, 65, 19}, {130, 72, 2504, 72}};
  std::vector<std::pair<GemmVariant, const char*>> runs;
  for (GemmVariant v : checked_variants()) runs.emplace_back(v, nullptr);
  if (v3_runs_here())
    for (const char* pipeline : {"ws", "pingpong"}) runs.emplace_back(GemmVariant::v3_wgmma, pipeline);
  const size_t fused_runs = runs.size();
  if (v3_runs_here()) runs.emplace_back(GemmVariant::v3_wgmma, nullptr);  // then with HPDT_GEMM_V3_ACTIVATION=pass
  int compared = 0;
  for (size_t r = 0; r < runs.size(); ++r)
    for (DType ct : {DType::bf16, DType::f16})
      for (const Shape& sh : shapes)
        for (kernels::GeluForm form : {kernels::GeluForm::erf, kernels::GeluForm::tanh}) {
          const auto [variant, pipeline] = runs[r];
          const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", pipeline),
              act("HPDT_GEMM_V3_ACTIVATION", r >= fused_runs ? "pass" : nullptr);
          SCOPED_TRACE(std::string(kernels::cuda::gemm_variant_name(variant)) + (pipeline ? "/" : "") +
                       (pipeline ? pipeline : "") + (r >= fused_runs ? " +gelu pass" : "") + " " +
                       std::string(dtype_name(ct)) + " " + std::to_string(sh.M) + "x" + std::to_string(sh.N) + "x" +
                       std::to_string(sh.K) + (form == kernels::GeluForm::erf ? " erf" : " tanh"));
          const DType ab = ct;  // A and B in C's type: v3 and v2 take 16-bit operands
          const Tensor A = to_gpu(random({sh.M, sh.K}), ab), B = to_gpu(random({sh.N, sh.K}), ab);
          const Tensor bias = to_gpu(random({sh.N}), ct), res = to_gpu(random({sh.M, sh.ldc}), ct);
          const Tensor C0 = to_gpu(random({sh.M, sh.ldc}), ct), H = to_gpu(random({sh.M, sh.ldc}), ct);
          const int64_t n = sh.M * sh.ldc;
          // beta 0 on the first shape: C not read, so the pass plan's GEMM stores into the kept input and the pass
          // reads it there (activation_only's from_aux)
          const float beta = &sh == &shapes[0] ? 0.0f : -0.5f;
          const auto gemm = [&](const kernels::cuda::GemmEpilogue& epi, Tensor& C) {
            kernels::cuda::gemm(false, true, sh.M, sh.N, sh.K, 0.75f, A.data(), sh.K, B.data(), sh.K, beta, C.data(),
                                sh.ldc, ab, ct, epi, stream, variant);
          };
          const auto copy = [&](const Tensor& t) { return t.clone(stream); };
          const kernels::cuda::GemmEpilogue plain{.bias = bias.data(), .residual = res.data()};
          Tensor Cp = copy(C0);
          gemm(plain, Cp);
          // forward: C = gelu(v), v kept
          Tensor Cf = copy(C0), pre = poisoned({sh.M, sh.ldc}, ct);
          kernels::cuda::GemmEpilogue fused = plain;
          fused.gelu = true, fused.pre_activation = pre.data(), fused.gelu_form = form;
          gemm(fused, Cf);
          Tensor Cs = poisoned({sh.M, sh.ldc}, ct);
          kernels::gelu_forward(Cp, form, Cs, stream);
          // backward: C = v * gelu'(h)
          Tensor Cg = copy(C0), Cgs = poisoned({sh.M, sh.ldc}, ct);
          kernels::cuda::GemmEpilogue grad = plain;
          grad.gelu_grad_input = H.data(), grad.gelu_form = form;
          gemm(grad, Cg);
          kernels::gelu_backward(H, Cp, form, Cgs, stream);
          const Tensor p = to_cpu_f32(Cp), pr = to_cpu_f32(pre), f = to_cpu_f32(Cf), s = to_cpu_f32(Cs),
                       g = to_cpu_f32(Cg), gs = to_cpu_f32(Cgs), c0 = to_cpu_f32(C0);
          for (int64_t i = 0; i < n; ++i) {
            const bool in_c = i % sh.ldc < sh.N;
            if (!in_c) {  // the padding is C0's (the pre-activation's stays poisoned)
              ASSERT_EQ(test::bits_of(f.data<float>()[i]), test::bits_of(c0.data<float>()[i])) << "padding " << i;
              continue;
            }
            ASSERT_TRUE(std::isfinite(p.data<float>()[i])) << i;
            ASSERT_EQ(test::bits_of(pr.data<float>()[i]), test::bits_of(p.data<float>()[i])) << "kept input, " << i;
            ASSERT_EQ(test::bits_of(f.data<float>()[i]), test::bits_of(s.data<float>()[i])) << "GELU, " << i;
            ASSERT_EQ(test::bits_of(g.data<float>()[i]), test::bits_of(gs.data<float>()[i])) << "gradient, " << i;
          }
          ++compared;
        }
  EXPECT_EQ(compared, int(runs.size()) * 2 * 3 * 2);
}

TEST_F(GemmCuda, EpilogueErrors) {
  const Tensor A = to_gpu(random({4, 4}), DType::bf16), B = to_gpu(random({4, 4}), DType::bf16);
  Tensor C = poisoned({4, 4}, DType::bf16), H = poisoned({4, 4}, DType::bf16);
  kernels::cuda::GemmEpilogue both{.gelu = true, .gelu_grad_input = H.data()};
  HPDT_EXPECT_THROW_MSG(kernels::cuda::gemm(false, false, 4, 4, 4, 1, A.data(), 4, B.data(), 4, 0, C.data(), 4,
                                            DType::bf16, DType::bf16, both, stream),
                        "gemm: the epilogue's GELU and GELU gradient exclude each other");
  kernels::cuda::GemmEpilogue pre_only{.pre_activation = H.data()};
  HPDT_EXPECT_THROW_MSG(kernels::cuda::gemm(false, false, 4, 4, 4, 1, A.data(), 4, B.data(), 4, 0, C.data(), 4,
                                            DType::bf16, DType::bf16, pre_only, stream),
                        "gemm: pre_activation is stored only with the epilogue's GELU");
}

// Under racecheck (scripts/gpu/run.sh sets HPDT_UNDER_SANITIZER to the tool) the tests take the emulator's shapes and
// leave cuBLAS/cuDNN out; under memcheck, or without a sanitizer, they run as they would anyway.
TEST_F(GemmCuda, RacecheckTakesTheEmulatorsShapesWithoutTheVendor) {
  {
    const ScopedEnv tool("HPDT_UNDER_SANITIZER", "racecheck");
    EXPECT_TRUE(test::under_racecheck());
    EXPECT_TRUE(test::small_shapes());
    EXPECT_FALSE(test::vendor_available());
    EXPECT_EQ(checked_variants().size(), 3u);  // v1, v2, v3: no vendor
  }
  for (const char* tool : {"memcheck", static_cast<const char*>(nullptr)}) {
    const ScopedEnv scope("HPDT_UNDER_SANITIZER", tool);
    EXPECT_FALSE(test::under_racecheck());
    EXPECT_EQ(test::small_shapes(), test::emulated());
    EXPECT_EQ(test::vendor_available(), !test::emulated());
  }
}

// Large 16-bit GEMMs: v2 against cuBLAS (both f32-accumulated), every transpose. 4104^2 x 264 has enough
// tiles for v2's 128x256 tile, 2000 x 1544 x 4000 uses the 128x128 one; neither is a multiple of a tile.
TEST_F(GemmCuda, LargeV2AgainstCublas) {
  HPDT_SKIP_WITHOUT_VENDOR();
  const Size sizes[] = {{4104, 4104, 264}, {2000, 1544, 4000}};
  for (const Size& sz : sizes)
    for (DType ab : {DType::bf16, DType::f16})
      for (int tr = 0; tr < 4; ++tr) {
        const bool ta = tr & 1, tb = tr & 2;
        const int64_t M = sz.M, N = sz.N, K = sz.K;
        const int64_t lda = ta ? M : K, ldb = tb ? K : N;
        const Tensor A = to_gpu(random({ta ? K : M, lda}), ab), B = to_gpu(random({tb ? N : K, ldb}), ab);
        for (DType ct : {DType::f32, ab}) {
          if (M > 4000 && ct != DType::f32) continue;  // the big one: f32 C only (the epilogue is shared)
          SCOPED_TRACE(std::string(dtype_name(ab)) + " -> " + std::string(dtype_name(ct)) + (ta ? " T" : " N") +
                       (tb ? "T " : "N ") + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K));
          expect_near_cublas(GemmVariant::v2_mma, ta, tb, M, N, K, A, B, ab, ct, false);
        }
      }
}

// v3 on a compute capability 9.0 device: it must be built in (a build that runs there targets sm_90) and be
// what aligned 16-bit GEMMs of every layout resolve to when asked for; f32 and unaligned leading dimensions
// go to v1. `automatic` takes v3 unless gemm_choice() is v2 (v3 is the default since it ran on an H200), and
// never takes v3 under the vendor backend.
TEST_F(GemmCuda, V3ResolvesOnHopperOnly) {
  if (!hopper_device()) GTEST_SKIP() << "v3_wgmma runs on compute capability 9.0 only; this device is not";
  ASSERT_TRUE(kernels::cuda::gemm_v3_built()) << "this build has no v3_wgmma: CMAKE_CUDA_ARCHITECTURES lacks 90";
  const Tensor A = to_gpu(random({64, 72}), DType::bf16), B = to_gpu(random({64, 72}), DType::bf16);
  auto resolve = [&](bool ta, bool tb, int64_t ld, DType t) {
    return kernels::cuda::gemm_resolve(GemmVariant::v3_wgmma, ta, tb, ld, ld, A.data(), B.data(), t, stream);
  };
  for (int tr = 0; tr < 4; ++tr) {
    EXPECT_EQ(resolve(tr & 1, tr & 2, 72, DType::bf16), GemmVariant::v3_wgmma) << "transposes " << tr;
    EXPECT_EQ(resolve(tr & 1, tr & 2, 72, DType::f16), GemmVariant::v3_wgmma) << "transposes " << tr;
  }
  EXPECT_EQ(resolve(false, true, 70, DType::bf16), GemmVariant::v1_simt);
  EXPECT_EQ(resolve(false, true, 72, DType::f32), GemmVariant::v1_simt);
  auto automatic = [&](DType t) {
    return kernels::cuda::gemm_resolve(GemmVariant::automatic, false, false, 72, 72, A.data(), B.data(), t, stream);
  };
  EXPECT_EQ(kernels::gemm_choice(), kernels::GemmChoice::v3) << "the default";
  EXPECT_EQ(automatic(DType::bf16), GemmVariant::v3_wgmma);
  EXPECT_EQ(automatic(DType::f16), GemmVariant::v3_wgmma);
  EXPECT_EQ(automatic(DType::f32), GemmVariant::v1_simt);
  {
    const kernels::ScopedGemmChoice v2(kernels::GemmChoice::v2);
    EXPECT_EQ(automatic(DType::bf16), GemmVariant::v2_mma);
  }
  {
    const kernels::ScopedKernelBackend vendor(kernels::KernelBackend::vendor);
    EXPECT_EQ(automatic(DType::bf16), GemmVariant::vendor);
  }
  EXPECT_EQ(automatic(DType::bf16), GemmVariant::v3_wgmma);
}

// v3 with all three block tiles (128 x 128, 128 x 256, 128 x 64) on shapes that are no multiple of a tile (rows of A
// and B and k columns past the edge come from TMA as zeros; NaN padding beyond K shows a read past it), several k
// tiles and stages reused (K up to 520: 9 k tiles over 4, 6 or 8 stages), alpha/beta/bias, f32 and 16-bit C; one MMA
// group in flight across the refill barrier (the default) and none (HPDT_GEMM_V3_IN_FLIGHT=0). On the emulator
// (docs/cuda-emulator.md) two schedules are tried: TMA completing at the first wait with the warps taking turns (a read
// before the wait shows), and TMA completing at the issue with each warp running ahead as far as the barriers let it (a
// stage refilled while another warpgroup still reads it shows). All three pipelines: "barrier" (a block barrier per k
// tile), "ws" (a producer warpgroup, full/empty mbarriers, persistent) and "pingpong" (ws's producer, each consumer
// warpgroup a whole tile, the two in turns; no wide tile), the last two with 2 blocks (HPDT_GEMM_V3_CTAS), so that each
// block runs several tiles through the same stages (9 or 15 on 300 x 520: the stages' phases carry across tiles, the
// next tile's loads overlap this one's stores; pingpong's consumers take 2-8 turns each). The emulator takes half the
// dtypes a configuration (it took 88 s for all of them, the longest test in CI): bf16 -> f32 with f16 -> f16, or bf16
// -> bf16 with f16 -> f32, so each configuration has an f32 C and a 16-bit C, bf16 and f16 inputs, and the pair
// alternates with the transposes (each configuration meets all four dtypes over NN..TT).
TEST_F(GemmCuda, V3BothTilesOnEdgeShapes) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  const Size sizes[] = {{1, 1, 1}, {130, 260, 72}, {300, 520, 200}, {64, 24, 520}};
  const Types types[] = {
      {DType::bf16, DType::f32}, {DType::bf16, DType::bf16}, {DType::f16, DType::f16}, {DType::f16, DType::f32}};
  int configs = 0;  // run so far (an even number a transpose: the pair below alternates with tr)
  for (int tr = 0; tr < 4; ++tr)
  for (const char* pipeline : {"barrier", "ws", "pingpong"})
  for (const char* in_flight : {"1", "0"})
  for (const char* tma : {"late", "early"})
  for (const char* tile : {"narrow", "wide", "slim"}) {
    const bool persistent = std::string(pipeline) != "barrier";
    // the wait-all variant is the barrier pipeline's, built for NT only; pingpong has the narrow tile only
    if ((tr != 2 || persistent) && std::string(in_flight) == "0") continue;
    if (std::string(pipeline) == "pingpong" && std::string(tile) == "wide") continue;
    ::setenv("HPDT_GEMM_V3_PIPELINE", pipeline, 1);
    const ScopedEnv blocks("HPDT_GEMM_V3_CTAS", persistent ? "2" : nullptr);
    if (!test::emulated() && std::string(tma) == "early") continue;  // a GPU decides that itself
    ::setenv("HPDT_GEMM_V3_IN_FLIGHT", in_flight, 1);
    ::setenv("CUDA_EMU_TMA", tma, 1);
    ::setenv("CUDA_EMU_SCHEDULE", std::string(tma) == "early" ? "warp" : "roundrobin", 1);
    const ScopedEnv scope("HPDT_GEMM_V3_TILE", tile);  // v3's block tile (read at every call)
    const int pair = (tr + configs++) % 2;             // the emulator's dtypes: types[pair] and types[pair + 2]
    for (const Size& sz : sizes)
      for (int k = 0; k < 4; ++k) {
        if (test::emulated() && k % 2 != pair) continue;
        const Types& ty = types[k];
        Case c;
        c.variant = GemmVariant::v3_wgmma;
        c.ta = tr & 1;
        c.tb = tr & 2;
        c.M = sz.M, c.N = sz.N, c.K = sz.K;
        c.ab = ty.ab, c.c = ty.c;
        // a 16-bit C with rows 16-byte aligned (the staged epilogue's TMA stores), an f32 C without (direct stores)
        c.pad_a = aligned_pad(c.ta ? c.M : c.K), c.pad_b = aligned_pad(c.tb ? c.K : c.N);
        c.pad_c = ty.c == DType::f32 ? 3 : aligned_pad(c.N);
        c.alpha = 0.75f, c.beta = -0.5f, c.bias = true;
        SCOPED_TRACE(std::string(pipeline) + " pipeline, " + tile + " tile, " + in_flight +
                     " MMA group(s) in flight, TMA " + tma + ", " + describe(c));
        GemmVariant used;
        EXPECT_TRUE(run(c, &used));
        EXPECT_EQ(used, GemmVariant::v3_wgmma);
      }
  }
  ::unsetenv("CUDA_EMU_TMA");
  ::unsetenv("CUDA_EMU_SCHEDULE");
  ::unsetenv("HPDT_GEMM_V3_IN_FLIGHT");
  ::unsetenv("HPDT_GEMM_V3_PIPELINE");
}

// The pingpong pipeline's turns (wgmma.cuh: pingpong_pipeline). A consumer that started a unit before its turn (the
// other consumer's MMAs of the previous unit all issued) could wait on a stage two uses ahead of the last one loaded:
// the phase of that parity it finds complete is the older one, and it would multiply another unit's tile. That
// takes 7 or more k tiles a unit (13 here, over 6 stages) and 3 or more units a block (36 tiles of 128 x 128 on 2
// blocks: 9 turns a consumer; no split-K: the partials of 768 x 768 would cost more than the splits save), both
// emulated schedules (TMA at the wait and warps in turns; TMA at the issue and each warp running ahead), NT and TN.
// Dropping the turn wait fails here (and nowhere else: the other v3 tests have fewer k tiles a unit).
TEST_F(GemmCuda, V3PingpongConsumersTakeTurns) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", "pingpong"), blocks("HPDT_GEMM_V3_CTAS", "2");
  for (const char* tma : {"late", "early"}) {
    if (!test::emulated() && std::string(tma) == "early") continue;  // a GPU decides that itself
    const ScopedEnv emu_tma("CUDA_EMU_TMA", tma),
        schedule("CUDA_EMU_SCHEDULE", std::string(tma) == "early" ? "warp" : "roundrobin");
    for (const bool ta : {false, true}) {
      Case c;
      c.variant = GemmVariant::v3_wgmma;
      c.ta = ta, c.tb = !ta;
      c.M = 768, c.N = 760, c.K = 13 * 64 - 24;
      c.ab = DType::bf16, c.c = DType::bf16;
      c.pad_a = aligned_pad(c.ta ? c.M : c.K), c.pad_b = aligned_pad(c.tb ? c.K : c.N), c.pad_c = aligned_pad(c.N);
      c.bias = true;
      SCOPED_TRACE(std::string("TMA ") + tma + ", " + describe(c));
      GemmVariant used;
      EXPECT_TRUE(run(c, &used));
      EXPECT_EQ(used, GemmVariant::v3_wgmma);
    }
  }
}

// GEMM v3's epilogue hands a batch norm the statistics of C's columns (GemmEpilogue::column_stats; the NHWC 1x1
// convolutions' channels): per column and 64-row group of a tile (split 2 tm + group), the (count, mean, M2) of the
// values as stored. Checked partial by partial against C as it came back (counts exactly, so a row group written to
// the wrong split or a dropped row fails), merged against the whole column, the same bits on a second run, in all
// three pipelines and their tiles (the persistent ones on 2 blocks: each block's warpgroups run several tiles, so
// the exchange's mbarrier phases carry over from tile to tile), bf16 and f32 C, with a bias; on the emulator also
// with each warp running ahead as far as its barriers let it (CUDA_EMU_SCHEDULE=warp: without the wait that frees
// the exchange buffer, a warp overwrites it before the merger read it). Paths that cannot compute them clear the
// struct: a GELU epilogue, an odd N, v2.
TEST_F(GemmCuda, V3ColumnStatisticsForBatchNorm) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  struct Shape3 {
    int64_t M, N, K;
    float offset;  // of the bias: columns whose mean is large beside their spread
  };
  // 300 rows: 3 tiles, the last with 44 real rows (its second group none); 520: 5 tiles; N cut by every tile width.
  // The offset: ~300 +- 4, where sums of squares about 0 lose ~4e-4 of M2 in f32 (the epilogue's sums are about each
  // warp's first row).
  const Shape3 shapes[] = {{300, 192, 136, 0.0f}, {520, 96, 64, 300.0f}};
  for (const char* schedule : {"roundrobin", "warp"})
  for (const char* pipeline : {"barrier", "ws", "pingpong"})
    for (const char* tile : {"narrow", "wide", "slim"})
      for (const Shape3& sh : shapes)
        for (const DType ct : {DType::bf16, DType::f32}) {
          if (std::string(pipeline) == "pingpong" && std::string(tile) == "wide") continue;
          if (!test::emulated() && std::string(schedule) == "warp") continue;  // a GPU schedules itself
          const bool persistent = std::string(pipeline) != "barrier";
          const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", pipeline), tiles("HPDT_GEMM_V3_TILE", tile),
              blocks("HPDT_GEMM_V3_CTAS", persistent ? "2" : nullptr), emu("CUDA_EMU_SCHEDULE", schedule);
          const int64_t M = sh.M, N = sh.N, K = sh.K;
          SCOPED_TRACE(std::string(schedule) + " schedule, " + pipeline + " pipeline, " + tile + " tile, " +
                       std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " C " +
                       std::string(dtype_name(ct)) + ", bias offset " + std::to_string(sh.offset));
          const Tensor a = to_gpu(random({M, K}), DType::bf16), b = to_gpu(random({N, K}), DType::bf16);
          const Tensor bias = to_gpu(random({N}, sh.offset - 1.0f, sh.offset + 1.0f), ct);
          Tensor c = poisoned({M, N}, ct);
          kernels::ChannelStats st;
          kernels::cuda::GemmEpilogue epi;
          epi.bias = bias.data();
          epi.column_stats = &st;
          kernels::cuda::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N, DType::bf16, ct,
                              epi, stream, GemmVariant::v3_wgmma);
          ASSERT_TRUE(st.describe(c, N)) << "v3 wrote no statistics";
          const int64_t groups = 2 * ((M + 127) / 128);
          ASSERT_EQ(st.splits, groups);
          const Tensor cc = to_cpu_f32(c), part = st.partial.to(Device::cpu(), stream);
          stream.synchronize();
          const float* cv = cc.data<float>();
          const float* pp = part.data<float>();
          for (int64_t col = 0; col < N; ++col) {
            test::Moments whole, want_whole;
            for (int64_t g = 0; g < groups; ++g) {
              const float* q = pp + (col * groups + g) * 3;
              test::Moments want;
              const int64_t r0 = 64 * g, r1 = std::min(M, r0 + 64);
              for (int64_t r = r0; r < r1; ++r) want = test::merge(want, {1, cv[r * N + col], 0});
              ASSERT_EQ(double(q[0]), want.n) << "column " << col << " group " << g << ": count";
              if (want.n > 0) {
                const double sd = std::sqrt(want.m2 / want.n);
                EXPECT_NEAR(q[1], want.mean, 1e-5 * (std::abs(want.mean) + sd) + 1e-6) << "column " << col << " group "
                                                                                           << g << ": mean";
                EXPECT_NEAR(q[2], want.m2, 1e-4 * want.m2 + 1e-6) << "column " << col << " group " << g << ": M2";
              }
              whole = test::merge(whole, {q[0], q[1], q[2]});
              want_whole = test::merge(want_whole, want);
            }
            ASSERT_EQ(whole.n, double(M));
            EXPECT_NEAR(whole.mean, want_whole.mean, 1e-5 * (std::abs(want_whole.mean) + 1) ) << "column " << col;
            EXPECT_NEAR(whole.m2, want_whole.m2, 1e-4 * want_whole.m2 + 1e-6) << "column " << col;
          }
          // the same bits again
          kernels::ChannelStats again;
          epi.column_stats = &again;
          Tensor c2 = poisoned({M, N}, ct);
          kernels::cuda::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c2.data(), N, DType::bf16,
                              ct, epi, stream, GemmVariant::v3_wgmma);
          ASSERT_TRUE(again.describe(c2, N));
          const Tensor part2 = again.partial.to(Device::cpu(), stream);
          stream.synchronize();
          EXPECT_EQ(std::memcmp(part.data(), part2.data(), part.nbytes()), 0) << "not deterministic";
        }

  // The paths that do not compute them clear what the struct held.
  const int64_t M = 130, N = 64, K = 64;
  const Tensor a = to_gpu(random({M, K}), DType::bf16), b = to_gpu(random({N + 1, K}), DType::bf16);
  Tensor c = poisoned({M, N + 1}, DType::bf16), h = poisoned({M, N}, DType::bf16);
  kernels::ChannelStats st;
  kernels::cuda::GemmEpilogue epi;
  epi.column_stats = &st;
  const auto run_v = [&](int64_t n, const kernels::cuda::GemmEpilogue& e, GemmVariant v) {
    kernels::cuda::gemm(false, true, M, n, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), n, DType::bf16,
                        DType::bf16, e, stream, v);
  };
  run_v(N, epi, GemmVariant::v3_wgmma);
  ASSERT_TRUE(st.partial.defined());
  run_v(N, epi, GemmVariant::v2_mma);
  EXPECT_FALSE(st.partial.defined()) << "v2";
  run_v(N, epi, GemmVariant::v3_wgmma);
  run_v(N + 1, epi, GemmVariant::v3_wgmma);
  EXPECT_FALSE(st.partial.defined()) << "odd N";
  run_v(N, epi, GemmVariant::v3_wgmma);
  kernels::cuda::GemmEpilogue gelu = epi;
  gelu.gelu = true, gelu.pre_activation = h.data();
  run_v(N, gelu, GemmVariant::v3_wgmma);
  EXPECT_FALSE(st.partial.defined()) << "GELU";
}

// GEMM v3's epilogue as a batch norm's backward wants it (GemmEpilogue::column_grad_sums; the NHWC 1x1
// convolutions' backward-data): C comes back as the plain result through the fused ReLU's mask (y > 0), bit for bit,
// and each column's partial per 64-row group holds (sum dz, sum dz (x - mean)) of those 64 rows of C as stored;
// the same bits on a second run. Every pipeline and tile (the persistent ones on 2 blocks), bf16 and f32 C, with and
// without the mask, with and without a residual added first. Bad x, y, mean or a strided C are refused by name; v2,
// a GELU and an odd N clear the struct and write C unmasked.
TEST_F(GemmCuda, V3ColumnGradSumsForBatchNorm) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  const int64_t M = 300, N = 192, K = 136;  // 3 tiles, the last 44 rows; N cut by every tile width
  int config = 0;
  for (const char* pipeline : {"barrier", "ws", "pingpong"})
    for (const char* tile : {"narrow", "wide", "slim"})
      for (const DType ct : {DType::bf16, DType::f32}) {
        if (std::string(pipeline) == "pingpong" && std::string(tile) == "wide") continue;
        const bool relu = config % 2 == 0, with_residual = config % 3 == 0;
        ++config;
        const bool persistent = std::string(pipeline) != "barrier";
        const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", pipeline), tiles("HPDT_GEMM_V3_TILE", tile),
            blocks("HPDT_GEMM_V3_CTAS", persistent ? "2" : nullptr);
        SCOPED_TRACE(std::string(pipeline) + " pipeline, " + tile + " tile, C " + std::string(dtype_name(ct)) +
                     (relu ? ", relu" : "") + (with_residual ? ", residual" : ""));
        const Tensor a = to_gpu(random({M, K}), DType::bf16), b = to_gpu(random({N, K}), DType::bf16);
        const Tensor res = to_gpu(random({M, N}), ct);
        kernels::ChannelGradSums sums;
        sums.x = to_gpu(random({M, N}, -1.0f, 3.0f), ct);
        if (relu) sums.y = to_gpu(random({M, N}), ct);
        sums.mean = to_gpu(random({N}, 0.5f, 1.5f));
        kernels::cuda::GemmEpilogue epi;
        epi.residual = with_residual ? res.data() : nullptr;
        Tensor g = poisoned({M, N}, ct), dz = poisoned({M, N}, ct);
        kernels::cuda::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, g.data(), N, DType::bf16, ct,
                            epi, stream, GemmVariant::v3_wgmma);
        epi.column_grad_sums = &sums;
        kernels::cuda::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, dz.data(), N, DType::bf16, ct,
                            epi, stream, GemmVariant::v3_wgmma);
        ASSERT_TRUE(sums.describe(dz, N)) << "v3 wrote no sums";
        const int64_t groups = 2 * ((M + 127) / 128);
        ASSERT_EQ(sums.splits, groups);
        const Tensor gz = dz.to(Device::cpu(), stream), gg = g.to(Device::cpu(), stream);
        const Tensor part = sums.partial.to(Device::cpu(), stream), mc = sums.mean.to(Device::cpu(), stream);
        const Tensor xc = to_cpu_f32(sums.x), yc = relu ? to_cpu_f32(sums.y) : Tensor(), zc = to_cpu_f32(dz);
        stream.synchronize();
        // dz: g through the mask, bit for bit (16-bit or 32-bit words)
        const size_t word = dtype_size(ct);
        int64_t bad = 0;
        for (int64_t i = 0; i < M * N; ++i) {
          const bool keep = !relu || yc.data<float>()[i] > 0.0f;
          const unsigned char* zi = static_cast<const unsigned char*>(gz.data()) + i * word;
          const unsigned char* gi = static_cast<const unsigned char*>(gg.data()) + i * word;
          static const unsigned char zeros[4] = {};
          bad += std::memcmp(zi, keep ? gi : zeros, word) != 0 ? 1 : 0;
        }
        EXPECT_EQ(bad, 0) << "elements of dz that are not the masked result";
        // each partial: its 64 rows' sums of dz as stored
        const float* pp = part.data<float>();
        for (int64_t col = 0; col < N; ++col)
          for (int64_t grp = 0; grp < groups; ++grp) {
            double want[2] = {0, 0}, scale = 0;
            for (int64_t r = 64 * grp; r < std::min(M, 64 * grp + 64); ++r) {
              const double v = zc.data<float>()[r * N + col], d = xc.data<float>()[r * N + col] - mc.data<float>()[col];
              want[0] += v, want[1] += v * d, scale += std::abs(v) * (1.0 + std::abs(d));
            }
            for (int e = 0; e < 2; ++e)
              ASSERT_NEAR(pp[(col * groups + grp) * 2 + e], want[e], 1e-5 * scale + 1e-6)
                  << "column " << col << " group " << grp << (e ? ": sum dz (x - mean)" : ": sum dz");
          }
        // the same bits again
        kernels::ChannelGradSums again = sums;
        Tensor dz2 = poisoned({M, N}, ct);
        epi.column_grad_sums = &again;
        kernels::cuda::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, dz2.data(), N, DType::bf16,
                            ct, epi, stream, GemmVariant::v3_wgmma);
        const Tensor part2 = again.partial.to(Device::cpu(), stream);
        stream.synchronize();
        EXPECT_EQ(std::memcmp(part.data(), part2.data(), part.nbytes()), 0) << "not deterministic";
      }

  // Refused by name; cleared (and C unmasked) where not computed.
  const int64_t m = 130, n = 64, k = 64;
  const Tensor a = to_gpu(random({m, k}), DType::bf16), b = to_gpu(random({n + 1, k}), DType::bf16);
  Tensor c = poisoned({m, n + 1}, DType::bf16), h = poisoned({m, n}, DType::bf16);
  kernels::ChannelGradSums sums;
  sums.x = to_gpu(random({m, n}), DType::bf16);
  sums.y = to_gpu(random({m, n}), DType::bf16);
  sums.mean = to_gpu(random({n}));
  kernels::cuda::GemmEpilogue epi;
  epi.column_grad_sums = &sums;
  const auto run_v = [&](int64_t cols, int64_t ldc, const kernels::cuda::GemmEpilogue& e, GemmVariant v) {
    kernels::cuda::gemm(false, true, m, cols, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), ldc, DType::bf16,
                        DType::bf16, e, stream, v);
  };
  run_v(n, n, epi, GemmVariant::v3_wgmma);
  ASSERT_TRUE(sums.partial.defined());
  run_v(n, n, epi, GemmVariant::v2_mma);
  EXPECT_FALSE(sums.partial.defined()) << "v2";
  kernels::cuda::GemmEpilogue gelu = epi;
  gelu.gelu = true, gelu.pre_activation = h.data();
  run_v(n, n, gelu, GemmVariant::v3_wgmma);
  EXPECT_FALSE(sums.partial.defined()) << "GELU";
  HPDT_EXPECT_THROW_MSG(run_v(n, n + 1, epi, GemmVariant::v3_wgmma), "column_grad_sums needs a dense C (ldc 65 != N 64)");
  HPDT_EXPECT_THROW_MSG(run_v(n + 1, n + 1, epi, GemmVariant::v3_wgmma), "column_grad_sums' x must be 130 x 65 bf16");
  kernels::ChannelGradSums bad_mean = sums;
  bad_mean.mean = to_gpu(random({n + 1}));
  epi.column_grad_sums = &bad_mean;
  HPDT_EXPECT_THROW_MSG(run_v(n, n, epi, GemmVariant::v3_wgmma), "column_grad_sums' mean must be [64] f32");
  kernels::cuda::GemmEpilogue both = epi;
  kernels::ChannelStats st;
  both.column_stats = &st;
  HPDT_EXPECT_THROW_MSG(run_v(n, n, both, GemmVariant::v3_wgmma), "column_stats and column_grad_sums exclude each other");
}

// v3's split-K: few tiles and a long K (the shape of a weight gradient: 2 tiles, 40 k tiles, so 10 splits of 4),
// every layout, both pipelines, f32 and 16-bit C with alpha, beta and bias (applied once, by the reduction); the
// same inputs twice give the same bits. "ws" and "pingpong" with 3 blocks: each runs 6 or 7 of the 20 work units
// (tile, split).
TEST_F(GemmCuda, V3SplitKIsRightAndDeterministic) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  for (const char* pipeline : {"barrier", "ws", "pingpong"}) {
    ::setenv("HPDT_GEMM_V3_PIPELINE", pipeline, 1);
    const ScopedEnv blocks("HPDT_GEMM_V3_CTAS", std::string(pipeline) != "barrier" ? "3" : nullptr);
    for (int tr = 0; tr < 4; ++tr)
      for (DType ct : {DType::f32, DType::bf16}) {
        Case c;
        c.variant = GemmVariant::v3_wgmma;
        c.ta = tr & 1, c.tb = tr & 2, c.M = 130, c.N = 72, c.K = 2504, c.ab = DType::bf16, c.c = ct, c.alpha = 0.5f,
        c.beta = 0.25f;
        c.bias = true, c.pad_c = 1;
        c.pad_a = aligned_pad(c.ta ? c.M : c.K), c.pad_b = aligned_pad(c.tb ? c.K : c.N);
        SCOPED_TRACE(std::string(pipeline) + " pipeline, " + describe(c));
        GemmVariant used;
        EXPECT_TRUE(run(c, &used));
        EXPECT_EQ(used, GemmVariant::v3_wgmma);
      }
    const int64_t M = 96, N = 80, K = 4096;
    const Tensor A = to_gpu(random({M, K}), DType::bf16), B = to_gpu(random({N, K}), DType::bf16);
    Tensor c1 = poisoned({M, N}), c2 = poisoned({M, N});
    for (Tensor* c : {&c1, &c2})
      kernels::cuda::gemm(false, true, M, N, K, 1, A.data(), K, B.data(), K, 0, c->data(), N, DType::bf16, DType::f32,
                          {}, stream, GemmVariant::v3_wgmma);
    const Tensor h1 = to_cpu_f32(c1), h2 = to_cpu_f32(c2);
    for (int64_t i = 0; i < M * N; ++i)
      ASSERT_EQ(test::bits_of(h1.data<float>()[i]), test::bits_of(h2.data<float>()[i])) << pipeline << " element " << i;
  }
  ::unsetenv("HPDT_GEMM_V3_PIPELINE");
}

// The tensor-core GEMMs' epilogue (band_epilogue.cuh: each warp's outputs in chunks of 16 rows x 32 columns
// through shared memory, the chunk loop not unrolled, one mode per band) on edge shapes: a last tile of 2 rows
// (bands partly and wholly outside C), N = 264 (a last chunk of 8 of its 32 columns), N = 259 (a pair across C's
// last column: that element alone), an odd ldc (no pair aligned: every element through the scalar fallback), in
// every mode: alpha, beta and bias; GELU (erf) keeping the pre-activation, with a residual; GELU (tanh); the GELU
// gradient in both forms, C in bf16, f16 and f32. v2, and v3 with all three tiles on "barrier" and "ws", the slim and
// narrow ones on "pingpong" ("ws" and "pingpong" on 2 blocks: a block's next tile reuses the buffers; pingpong's warpgroups each
// store a whole tile, both halves through the same buffers). run() checks against the oracle and that C's padding keeps its poison.
// (The split-K partials go through the same code: SplitKIsRightAndDeterministic, V3SplitKIsRightAndDeterministic.)
TEST_F(GemmCuda, TensorCoreEpilogueOnEdgeShapes) {
  const Size sizes[] = {{130, 264, 72}, {34, 259, 40}};
  struct Run {
    GemmVariant variant;
    const char* pipeline;
    const char* tile;
  };
  std::vector<Run> runs{{GemmVariant::v2_mma, nullptr, nullptr}};
  if (v3_runs_here()) {
    for (const char* pipeline : {"barrier", "ws", "pingpong"})
      for (const char* tile : {"narrow", "wide", "slim"})
        if (std::string(pipeline) != "pingpong" || std::string(tile) != "wide")
          runs.push_back({GemmVariant::v3_wgmma, pipeline, tile});
  } else {
    std::printf("[  NOTE    ] v3_wgmma does not run here (a compute capability 9.0 device and a build for sm_90): v2 only\n");
  }
  for (const Run& r : runs)
    for (const Size& sz : sizes)
      for (int form = 0; form < 5; ++form) {
        const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", r.pipeline),
            ctas("HPDT_GEMM_V3_CTAS", r.pipeline && std::string(r.pipeline) != "barrier" ? "2" : nullptr),
            tiles("HPDT_GEMM_V3_TILE", r.tile);
        Case c;
        c.variant = r.variant;
        c.tb = true;
        c.ta = form == 3;  // one MN-major A
        c.M = sz.M, c.N = sz.N, c.K = sz.K;
        c.pad_a = aligned_pad(c.ta ? c.M : c.K), c.pad_b = aligned_pad(c.K), c.pad_c = aligned_pad(c.N);
        const Types types[] = {{DType::bf16, DType::bf16}, {DType::f16, DType::f16}, {DType::bf16, DType::f32},
                               {DType::bf16, DType::bf16}, {DType::f16, DType::f32}};
        c.ab = types[form].ab, c.c = types[form].c;
        if (form == 1) c.alpha = 0.75f, c.beta = -0.5f, c.bias = true;
        if (form == 2) c.bias = true, c.residual = true, c.act = 1, c.keep_pre = true;
        if (form == 3) c.act = 2, c.bias = true, c.form = kernels::GeluForm::tanh;
        if (form == 4) c.act = 2, c.beta = 0.5f, c.pad_c = (c.N % 2) ? 2 : 1;  // ldc odd: element by element
        if (form == 0) c.act = 1, c.form = kernels::GeluForm::tanh;
        SCOPED_TRACE(std::string(r.pipeline ? r.pipeline : "") + " " + (r.tile ? r.tile : "") + " " + describe(c));
        GemmVariant used;
        EXPECT_TRUE(run(c, &used));
        EXPECT_EQ(used, r.variant);
      }
}

// GEMM v3's TMA-store epilogue (HPDT_GEMM_V3_STORE=tma, sm90a/tma_store_epilogue.cuh) on every pipeline x tile, the
// persistent ones on 2 blocks (a block's next tile reuses the two chunk images): a last tile of 2 rows (bands wholly
// outside C: no store), N = 264 (a last tile with one chunk of 8 of its 32 columns inside C: TMA clips the rest),
// C's row padding poisoned (run() checks it kept the poison), one MN-major A. Plain (alpha 1, no bias), and with a
// residual (since the fourth session of 2026-11-30): the same bits as the direct stores. alpha and a bias (bf16,
// f16), with a residual too: against the oracle. Where it cannot take the GEMM (C in f32, N = 259 not a multiple of
// 8, beta, split-K), the direct stores run instead. On the emulator the TMA stores are counted:
// one a 16-row band and 32-column chunk inside C, ceil(M / 16) x ceil(N / 32); none where it does not apply or is off.
TEST_F(GemmCuda, V3TmaStoreEpilogue) {
  if (!v3_runs_here())
    GTEST_SKIP() << "v3_wgmma does not run here (a compute capability 9.0 device and a build for sm_90)";
  struct Form {
    const char* name;
    int64_t M, N, K;
    DType ab, c;
    float alpha, beta;
    bool bias, ta, eligible, residual = false;
  };
  const Form forms[] = {
      {"plain", 130, 264, 72, DType::bf16, DType::bf16, 1.0f, 0.0f, false, false, true},
      {"plain, A MN-major", 34, 200, 40, DType::f16, DType::f16, 1.0f, 0.0f, false, true, true},
      {"alpha and bias", 130, 264, 72, DType::bf16, DType::bf16, 0.75f, 0.0f, true, false, true},
      {"alpha and bias, f16", 34, 200, 40, DType::f16, DType::f16, -1.5f, 0.0f, true, false, true},
      {"C in f32", 130, 264, 72, DType::bf16, DType::f32, 1.0f, 0.0f, true, false, false},
      {"N not a multiple of 8", 34, 259, 40, DType::bf16, DType::bf16, 1.0f, 0.0f, false, false, false},
      {"beta", 34, 200, 40, DType::bf16, DType::bf16, 1.0f, 0.5f, false, false, false},
      {"residual", 130, 264, 72, DType::bf16, DType::bf16, 1.0f, 0.0f, false, false, true, true},
      {"alpha, bias and residual, f16", 34, 200, 40, DType::f16, DType::f16, 0.5f, 0.0f, true, false, true, true}};
  for (const char* pipeline : {"barrier", "ws", "pingpong"})
    for (const char* tile : {"narrow", "wide", "slim"}) {
      if (std::string(pipeline) == "pingpong" && std::string(tile) == "wide") continue;
      const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", pipeline),
          ctas("HPDT_GEMM_V3_CTAS", std::string(pipeline) != "barrier" ? "2" : nullptr),
          tiles("HPDT_GEMM_V3_TILE", tile);
      for (const Form& f : forms) {
        Case c;
        c.variant = GemmVariant::v3_wgmma;
        c.ta = f.ta, c.tb = true;
        c.M = f.M, c.N = f.N, c.K = f.K, c.ab = f.ab, c.c = f.c, c.alpha = f.alpha, c.beta = f.beta, c.bias = f.bias;
        c.residual = f.residual;
        c.pad_a = aligned_pad(c.ta ? c.M : c.K), c.pad_b = aligned_pad(c.K), c.pad_c = aligned_pad(c.N);
        SCOPED_TRACE(std::string(pipeline) + " " + tile + " " + f.name + ": " + describe(c));
        for (const char* store_mode : {"direct", "tma"}) {
          const ScopedEnv store("HPDT_GEMM_V3_STORE", store_mode);
          const bool tma = std::string(store_mode) == "tma";
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
          const unsigned long long before = cuda_emu::tma_stores();
#endif
          EXPECT_TRUE(run(c)) << store_mode;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
          const unsigned long long want =
              tma && f.eligible ? uint64_t((c.M + 15) / 16) * uint64_t((c.N + 31) / 32) : 0u;
          EXPECT_EQ(cuda_emu::tma_stores() - before, want) << "TMA stores, HPDT_GEMM_V3_STORE=" << store_mode;
#else
          (void)tma;
#endif
        }
        if (f.alpha == 1.0f && !f.bias) {  // both stores on the same inputs: the same bits
          const int64_t lda = c.ta ? c.M + c.pad_a : c.K + c.pad_a, ldb = c.K + c.pad_b, ldc = c.N + c.pad_c;
          const Tensor A = to_gpu(random({c.ta ? c.K : c.M, lda}), c.ab), B = to_gpu(random({c.N, ldb}), c.ab);
          const Tensor R = to_gpu(random({c.M, ldc}), c.c);
          kernels::cuda::GemmEpilogue e;
          if (f.residual) e.residual = R.data();
          Tensor out[2];
          for (int k = 0; k < 2; ++k) {
            const ScopedEnv store("HPDT_GEMM_V3_STORE", k == 0 ? "direct" : "tma");
            out[k] = poisoned({c.M, ldc}, c.c);
            kernels::cuda::gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, out[k].data(), ldc,
                                c.ab, c.c, e, stream, GemmVariant::v3_wgmma);
          }
          const Tensor a = out[0].to(Device::cpu(), stream), b = out[1].to(Device::cpu(), stream);
          stream.synchronize();
          EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.nbytes())) << "TMA stores against direct ones (C and padding)";
        }
      }
    }
  // split-K (the partials through band_epilogue, the sum through the reduction kernel): no TMA store
  {
    const ScopedEnv store("HPDT_GEMM_V3_STORE", "tma");
    Case c;
    c.variant = GemmVariant::v3_wgmma;
    c.tb = true, c.M = 64, c.N = 64, c.K = 4096, c.ab = DType::bf16, c.c = DType::bf16;
    c.pad_a = aligned_pad(c.K), c.pad_b = aligned_pad(c.K), c.pad_c = aligned_pad(c.N);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
    const unsigned long long before = cuda_emu::tma_stores(), reductions = cuda_emu::launches_named("splitk_reduce");
#endif
    EXPECT_TRUE(run(c));
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
    ASSERT_GT(cuda_emu::launches_named("splitk_reduce"), reductions) << "not split: the case tests nothing";
    EXPECT_EQ(cuda_emu::tma_stores() - before, 0u) << "split-K";
#endif
  }
  const ScopedEnv bad("HPDT_GEMM_V3_STORE", "fast");
  Case c;
  c.variant = GemmVariant::v3_wgmma;
  c.tb = true, c.M = 16, c.N = 16, c.K = 16, c.ab = DType::bf16, c.c = DType::bf16;
  HPDT_EXPECT_THROW_MSG(run(c), "HPDT_GEMM_V3_STORE=fast: expected direct or tma");
}

#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
// band_epilogue.cuh's buffer writes (st.shared.v2.f32, 8 bytes a lane: a phase of 16 lanes, 4 fragment rows x 4
// lanes) take one shared-memory wavefront a phase, as few as 128 bytes a phase can: the emulator counts them (v2,
// and v3's both tiles).
TEST_F(GemmCuda, EmulatedEpilogueBufferWritesAreConflictFree) {
  cuda_emu::count_bank_conflicts(true);
  std::vector<std::pair<GemmVariant, const char*>> runs{{GemmVariant::v2_mma, nullptr}};
  if (v3_runs_here()) runs.insert(runs.end(), {{GemmVariant::v3_wgmma, "narrow"}, {GemmVariant::v3_wgmma, "wide"}});
  for (const auto& [variant, tile] : runs) {
    const ScopedEnv tiles("HPDT_GEMM_V3_TILE", tile);
    Case c;
    c.variant = variant, c.tb = true, c.M = 130, c.N = 264, c.K = 40, c.ab = DType::bf16, c.c = DType::bf16;
    c.pad_a = aligned_pad(c.K), c.pad_b = aligned_pad(c.K), c.bias = true;
    SCOPED_TRACE(std::string(tile ? tile : "") + " " + describe(c));
    EXPECT_TRUE(run(c));
  }
  const cuda_emu::BankCounts b = cuda_emu::bank_counts();
  cuda_emu::count_bank_conflicts(false);
  EXPECT_GT(b.st_shared_ideal, 0u);
  EXPECT_EQ(b.st_shared_wavefronts, b.st_shared_ideal);
}

// GEMM v3 prefetches each tile's epilogue inputs into L2 as the tile starts (band_epilogue.cuh:
// band_prefetch_inputs). The emulator records the 128-byte lines prefetched (and stops at an address outside device
// memory): they must be exactly the lines of each input's M x N elements, rows ldc apart (every line the epilogue
// reads; none of the row padding, none of another tensor). Every pipeline x tile, the persistent ones on 2 blocks
// (several tiles each); the inputs: C (beta != 0) with the residual, the GELU gradient's input, batch norm's x and y
// (column_grad_sums); no line for a plain GEMM, for the split-K partials (their reduction reads C), or with
// HPDT_EPILOGUE_PREFETCH=off.
TEST_F(GemmCuda, V3PrefetchesEveryEpilogueInputLineIntoL2) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  using Lines = std::vector<uintptr_t>;
  const auto lines_of = [](const void* ptr, DType t, int64_t rows, int64_t cols, int64_t ld) {
    std::set<uintptr_t> out;
    const size_t es = dtype_size(t);
    for (int64_t r = 0; r < rows; ++r) {
      const uintptr_t a = reinterpret_cast<uintptr_t>(ptr) + uintptr_t(r * ld) * es, end = a + uintptr_t(cols) * es;
      for (uintptr_t line = a >> 7; line <= (end - 1) >> 7; ++line) out.insert(line << 7);
    }
    return out;
  };
  const auto both = [](std::set<uintptr_t> a, const std::set<uintptr_t>& b) {
    a.insert(b.begin(), b.end());
    return Lines(a.begin(), a.end());
  };
  const int64_t M = 300, K = 72;
  for (const char* pipeline : {"barrier", "ws", "pingpong"})
    for (const char* tile : {"narrow", "wide", "slim"})
      for (const DType ct : {DType::bf16, DType::f32}) {
        if (std::string(pipeline) == "pingpong" && std::string(tile) == "wide") continue;
        const bool persistent = std::string(pipeline) != "barrier";
        const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", pipeline), tiles("HPDT_GEMM_V3_TILE", tile),
            blocks("HPDT_GEMM_V3_CTAS", persistent ? "2" : nullptr);
        SCOPED_TRACE(std::string(pipeline) + " pipeline, " + tile + " tile, C " + std::string(dtype_name(ct)));
        // C read (beta) and a residual, rows padded (N = 200 cut by every tile width, ldc 264)
        const int64_t N = 200, ldc = 264;
        const Tensor a = to_gpu(random({M, K}), DType::bf16), b = to_gpu(random({N, K}), DType::bf16);
        const Tensor res = to_gpu(random({M, ldc}), ct), h = to_gpu(random({M, ldc}), ct);
        Tensor c = to_gpu(random({M, ldc}), ct);
        const auto run_gemm = [&](float beta, const kernels::cuda::GemmEpilogue& e, int64_t n, int64_t ld) {
          cuda_emu::clear_prefetched_lines();
          kernels::cuda::gemm(false, true, M, n, K, 1.0f, a.data(), K, b.data(), K, beta, c.data(), ld, DType::bf16, ct,
                              e, stream, GemmVariant::v3_wgmma);
          stream.synchronize();
          return cuda_emu::prefetched_lines();
        };
        kernels::cuda::GemmEpilogue epi;
        epi.residual = res.data();
        EXPECT_EQ(run_gemm(0.5f, epi, N, ldc), both(lines_of(c.data(), ct, M, N, ldc), lines_of(res.data(), ct, M, N, ldc)))
            << "C (beta) and the residual";
        {  // each unit's own lines only (the persistent pipelines' blocks run 2-6 units: "on" prefetches the next
           // one's as a unit starts, and each unit's lines then once, by the unit before it)
          const ScopedEnv unit("HPDT_EPILOGUE_PREFETCH", "unit");
          EXPECT_EQ(run_gemm(0.5f, epi, N, ldc),
                    both(lines_of(c.data(), ct, M, N, ldc), lines_of(res.data(), ct, M, N, ldc)))
              << "HPDT_EPILOGUE_PREFETCH=unit";
        }
        {
          const ScopedEnv off("HPDT_EPILOGUE_PREFETCH", "off");
          EXPECT_TRUE(run_gemm(0.5f, epi, N, ldc).empty()) << "HPDT_EPILOGUE_PREFETCH=off";
        }
        EXPECT_TRUE(run_gemm(0.0f, {}, N, ldc).empty()) << "a plain GEMM reads no input";
        kernels::cuda::GemmEpilogue grad;
        grad.gelu_grad_input = h.data();
        const auto gl = lines_of(h.data(), ct, M, N, ldc);
        EXPECT_EQ(run_gemm(0.0f, grad, N, ldc), Lines(gl.begin(), gl.end())) << "the GELU gradient's input";
        // batch norm's backward sums: x and y, C dense (N even)
        const int64_t n = 192;
        kernels::ChannelGradSums sums;
        sums.x = to_gpu(random({M, n}), ct);
        sums.y = to_gpu(random({M, n}), ct);
        sums.mean = to_gpu(random({n}));
        kernels::cuda::GemmEpilogue bn;
        bn.column_grad_sums = &sums;
        EXPECT_EQ(run_gemm(0.0f, bn, n, n), both(lines_of(sums.x.data(), ct, M, n, n), lines_of(sums.y.data(), ct, M, n, n)))
            << "batch norm's x and y";
        ASSERT_TRUE(sums.partial.defined()) << "v3 computed no sums";
      }
  // split-K (2 tiles, K = 2560): the kernel's units write partials and prefetch nothing
  const int64_t m = 130, n = 64, k = 2560;
  const Tensor a = to_gpu(random({m, k}), DType::bf16), b = to_gpu(random({n, k}), DType::bf16);
  const Tensor res = to_gpu(random({m, n}), DType::bf16);
  Tensor c = to_gpu(random({m, n}), DType::bf16);
  kernels::cuda::GemmEpilogue epi;
  epi.residual = res.data();
  cuda_emu::clear_prefetched_lines();
  const unsigned long long reductions = cuda_emu::launches_named("splitk_reduce");
  kernels::cuda::gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.5f, c.data(), n, DType::bf16,
                      DType::bf16, epi, stream, GemmVariant::v3_wgmma);
  stream.synchronize();
  ASSERT_GT(cuda_emu::launches_named("splitk_reduce"), reductions) << "not split: the case tests nothing";
  EXPECT_TRUE(cuda_emu::prefetched_lines().empty());
}
#endif

// GEMM v3 under kernels::GemmTuning::find: each call shape's first call times every candidate plan (pipeline x tile)
// on scratch outputs, then runs the fastest on the real ones. The cases check against the oracle, C poisoned: beta
// != 0 reads C (had a timing run written C, or read a C the previous run wrote, the result would be off), the GELU
// keeps its pre-activation (had timing written it elsewhere than scratch, ok; had the final run not written it, the
// check fails), split-K (the partials' workspace per run), N <= 64 (the slim tile alone). Then: one report per shape,
// in order, every candidate timed and the fastest taken (a GELU or its gradient: each plan fused and as a pass after
// a plain GEMM, "+gelu pass"; a plain one the TMA-store epilogue can take: each plan storing directly and by TMA,
// "+tma store"); a repeat is not timed again; the pins restrict the candidates (one left: none timed).
TEST_F(GemmCuda, V3FindTimesEveryPlanOnScratchOutputs) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  const kernels::ScopedGemmTuning find(kernels::GemmTuning::find);
  kernels::cuda::gemm_v3_forget_found();
  std::vector<Case> cases(4);
  for (Case& c : cases) c.variant = GemmVariant::v3_wgmma, c.ab = DType::bf16, c.c = DType::bf16, c.tb = true;
  cases[0].M = 200, cases[0].N = 150, cases[0].K = 130, cases[0].alpha = 0.5f, cases[0].beta = -0.75f;
  cases[0].bias = true;
  cases[1].M = 130, cases[1].N = 72, cases[1].K = 72, cases[1].act = 1, cases[1].keep_pre = true;
  cases[1].residual = true, cases[1].ta = true;
  cases[2].M = 130, cases[2].N = 72, cases[2].K = 2504, cases[2].c = DType::f32, cases[2].beta = 0.25f;
  cases[3].M = 70, cases[3].N = 40, cases[3].K = 96, cases[3].act = 2;
  for (Case& c : cases) {
    c.pad_a = aligned_pad(c.ta ? c.M : c.K), c.pad_b = aligned_pad(c.K), c.pad_c = 1;
    SCOPED_TRACE(describe(c));
    GemmVariant used;
    EXPECT_TRUE(run(c, &used));
    EXPECT_EQ(used, GemmVariant::v3_wgmma);
  }
  const std::vector<kernels::cuda::GemmV3Found> found = kernels::cuda::gemm_v3_found();
  ASSERT_EQ(found.size(), cases.size());
  EXPECT_EQ(found[0].call, "200x150x130 NT bf16->bf16 beta bias");
  EXPECT_EQ(found[1].call, "130x72x72 TT bf16->bf16 residual gelu(erf)");
  EXPECT_EQ(found[2].call, "130x72x2504 NT bf16->f32 beta");
  EXPECT_EQ(found[3].call, "70x40x96 NT bf16->bf16 gelu_grad(erf)");
  for (size_t i = 0; i < found.size(); ++i) {
    SCOPED_TRACE(found[i].call);
    std::vector<std::string> names;
    double best = 1e300;
    for (const auto& [plan, ms] : found[i].ms) {
      names.push_back(plan);
      EXPECT_GT(ms, 0.0);
      best = std::min(best, ms);
    }
    const std::vector<std::string> wide_n{"barrier/narrow", "barrier/wide", "ws/narrow", "ws/wide", "pingpong/narrow"},
        slim_n{"barrier/slim", "ws/slim", "pingpong/slim"};
    std::vector<std::string> want = i < 3 ? wide_n : slim_n;
    if (i == 1 || i == 3)  // a GELU or its gradient: each plan fused, then as a pass after a plain GEMM
      for (const std::string& plan : std::vector<std::string>(want)) want.push_back(plan + "+gelu pass");
    EXPECT_EQ(names, want);
    const auto taken = std::find_if(found[i].ms.begin(), found[i].ms.end(),
                                    [&](const auto& r) { return r.first == found[i].plan; });
    ASSERT_NE(taken, found[i].ms.end()) << found[i].plan;
    EXPECT_EQ(taken->second, best);
  }
  {  // the same shape again: the cached plan, no new report
    SCOPED_TRACE(describe(cases[0]));
    EXPECT_TRUE(run(cases[0]));
    EXPECT_EQ(kernels::cuda::gemm_v3_found().size(), cases.size());
  }
  {  // a pinned pipeline: its two tiles
    const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", "ws");
    SCOPED_TRACE(describe(cases[0]) + " ws pinned");
    EXPECT_TRUE(run(cases[0]));
    const std::vector<kernels::cuda::GemmV3Found> now = kernels::cuda::gemm_v3_found();
    ASSERT_EQ(now.size(), cases.size() + 1);
    ASSERT_EQ(now.back().ms.size(), 2u);
    EXPECT_EQ(now.back().ms[0].first, "ws/narrow");
    EXPECT_EQ(now.back().ms[1].first, "ws/wide");
    EXPECT_EQ(now.back().plan.rfind("ws/", 0), 0u) << now.back().plan;
  }
  {  // the activation pinned: the GELU case's plans of that kind only
    const ScopedEnv act("HPDT_GEMM_V3_ACTIVATION", "pass");
    SCOPED_TRACE(describe(cases[1]) + " pass pinned");
    EXPECT_TRUE(run(cases[1]));
    const std::vector<kernels::cuda::GemmV3Found> now = kernels::cuda::gemm_v3_found();
    ASSERT_EQ(now.size(), cases.size() + 2);
    ASSERT_EQ(now.back().ms.size(), 5u);
    for (const auto& [plan, ms] : now.back().ms) EXPECT_NE(plan.find("+gelu pass"), std::string::npos) << plan;
  }
  {  // both pinned: one candidate, not timed
    const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", "pingpong"), tile("HPDT_GEMM_V3_TILE", "narrow");
    EXPECT_TRUE(run(cases[0]));
    const std::vector<kernels::cuda::GemmV3Found> now = kernels::cuda::gemm_v3_found();
    ASSERT_EQ(now.size(), cases.size() + 3);
    EXPECT_EQ(now.back().plan, "pingpong/narrow");
    EXPECT_TRUE(now.back().ms.empty());
  }
  {  // a plain GEMM the TMA-store epilogue can take (16-bit C, alpha and a bias, N and ldc multiples of 8): each plan
     // with the direct stores, then by TMA stores (HPDT_GEMM_V3_STORE unset), the fastest taken and right; pinned: its
     // kind
    Case c = cases[0];
    c.N = 152, c.beta = 0.0f, c.pad_c = aligned_pad(c.N);
    std::vector<std::string> want{"barrier/narrow", "barrier/wide", "ws/narrow", "ws/wide", "pingpong/narrow"};
    for (size_t j = 0, n = want.size(); j < n; ++j) want.push_back(want[j] + "+tma store");
    const std::pair<const char*, size_t> pins[] = {{nullptr, 10}, {"direct", 5}, {"tma", 5}};
    for (const auto& [pin, count] : pins) {
      const ScopedEnv store("HPDT_GEMM_V3_STORE", pin);
      SCOPED_TRACE(describe(c) + " stores pinned: " + (pin ? pin : "no"));
      EXPECT_TRUE(run(c));
      const std::vector<kernels::cuda::GemmV3Found> now = kernels::cuda::gemm_v3_found();
      ASSERT_FALSE(now.empty());
      const kernels::cuda::GemmV3Found& f = now.back();
      EXPECT_EQ(f.call, "200x152x130 NT bf16->bf16 bias");
      std::vector<std::string> names;
      for (const auto& [plan, ms] : f.ms) names.push_back(plan);
      const size_t from = pin && std::string(pin) == "tma" ? 5 : 0;
      EXPECT_EQ(names, std::vector<std::string>(want.begin() + long(from), want.begin() + long(from + count)));
    }
  }
  kernels::cuda::gemm_v3_forget_found();
  EXPECT_TRUE(kernels::cuda::gemm_v3_found().empty());
}

// Under Find, a shape first called inside a CUDA-graph capture cannot be timed (no host waits there): it runs the
// heuristic's plan in the graph, right, and stays untimed; its first call outside a capture times it.
TEST_F(GemmCuda, V3FindInsideACaptureRunsTheHeuristicsPlan) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  const kernels::ScopedGemmTuning find(kernels::GemmTuning::find);
  kernels::cuda::gemm_v3_forget_found();
  const int64_t M = 150, N = 136, K = 200;
  const Tensor a = random({M, K}), b = random({N, K});
  const Tensor A = to_gpu(a, DType::bf16), B = to_gpu(b, DType::bf16);
  Tensor C = poisoned({M, N}, DType::bf16), want = poisoned({M, N}, DType::bf16);
  const auto gemm_into = [&](Tensor& out) {
    kernels::cuda::gemm(false, true, M, N, K, 1, A.data(), K, B.data(), K, 0, out.data(), N, DType::bf16, DType::bf16,
                        {}, stream, GemmVariant::v3_wgmma);
  };
  const auto gemm = [&] { gemm_into(C); };
  {
    const kernels::ScopedGemmTuning heuristic(kernels::GemmTuning::heuristic);
    gemm_into(want);
  }
  const CudaGraph graph = CudaGraph::capture(stream, gemm);
  EXPECT_TRUE(kernels::cuda::gemm_v3_found().empty()) << "timed inside a capture";
  graph.launch(stream);
  const Tensor got = to_cpu_f32(C), ref = to_cpu_f32(want);
  for (int64_t i = 0; i < M * N; ++i)
    ASSERT_EQ(test::bits_of(got.data<float>()[i]), test::bits_of(ref.data<float>()[i])) << "element " << i;
  Tensor oracle = Tensor::zeros({M, N}, DType::f32);
  const Tensor ar = round_through(a, DType::bf16), br = round_through(b, DType::bf16);
  kernels::cpu::gemm<float>(false, true, M, N, K, 1, ar.data<float>(), K, br.data<float>(), K, 0, oracle.data<float>(), N);
  EXPECT_TRUE(close(round_through(oracle, DType::bf16), got, gemm_tolerance(DType::bf16, K, 1, 0)));
  gemm();
  ASSERT_EQ(kernels::cuda::gemm_v3_found().size(), 1u);
  EXPECT_EQ(kernels::cuda::gemm_v3_found()[0].call, "150x136x200 NT bf16->bf16");
  kernels::cuda::gemm_v3_forget_found();
}

// v3's pipeline by rule (wgmma.cuh: v3_rule_plan, split_k.cuh: short_k_loop): a short k loop over a wave of tiles or
// more runs pingpong on the slim and narrow tiles and ws on the wide one; fewer tiles than SMs, or a pinned pipeline,
// barrier. On the emulator (132 SMs, as an H100's; a GPU decides the same by its own count), which kernel ran, and
// each result against the oracle.
TEST_F(GemmCuda, V3PipelineByRuleFollowsTheKLoop) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  if (!test::emulated()) GTEST_SKIP() << "which kernel ran is counted on the CUDA emulator only";
  struct RuleCase {
    const char* what;
    int64_t M, N, K;
    const char* pinned;  // HPDT_GEMM_V3_PIPELINE, or null
    const char* kernel;  // what must run (a part of its name)
  };
  const RuleCase cases[] = {
      {"short k loop, 132 slim tiles: pingpong", 132 * 128, 64, 64, nullptr, "gemm_v3_pingpong_kernel"},
      {"short k loop, 132 wide tiles: ws", 132 * 128, 256, 64, nullptr, "bool WS = true"},
      {"short k loop, 131 slim tiles: barrier", 131 * 128, 64, 64, nullptr, "bool WS = false"},
      {"short k loop, 132 slim tiles, barrier pinned", 132 * 128, 64, 64, "barrier", "bool WS = false"},
  };
  for (const RuleCase& c : cases) {
    SCOPED_TRACE(c.what);
    const ScopedEnv pin("HPDT_GEMM_V3_PIPELINE", c.pinned), tile("HPDT_GEMM_V3_TILE", nullptr);
    const Tensor a = random({c.M, c.K}), b = random({c.N, c.K});
    const Tensor A = to_gpu(a, DType::bf16), B = to_gpu(b, DType::bf16);
    Tensor C = poisoned({c.M, c.N});
    const int64_t before = test::emu_launches(c.kernel), v3_before = test::emu_launches("gemm_v3_");
    kernels::cuda::gemm(false, true, c.M, c.N, c.K, 1, A.data(), c.K, B.data(), c.K, 0, C.data(), c.N, DType::bf16,
                        DType::f32, {}, stream, GemmVariant::v3_wgmma);
    EXPECT_EQ(test::emu_launches("gemm_v3_") - v3_before, 1) << "one GEMM v3 launch";
    EXPECT_EQ(test::emu_launches(c.kernel) - before, 1) << c.kernel;
    Tensor want = Tensor::zeros({c.M, c.N}, DType::f32);
    const Tensor ar = round_through(a, DType::bf16), br = round_through(b, DType::bf16);
    kernels::cpu::gemm<float>(false, true, c.M, c.N, c.K, 1, ar.data<float>(), c.K, br.data<float>(), c.K, 0,
                              want.data<float>(), c.N);
    EXPECT_TRUE(close(want, to_cpu_f32(C), gemm_tolerance(DType::f32, c.K, 1, 0)));
  }
}

// v3's switches. HPDT_GEMM_V3_CTAS caps the persistent pipelines' blocks: anything but a positive number is an error
// naming it (and the barrier pipeline, one block per tile, does not read it). HPDT_GEMM_V3_PIPELINE names one of
// three pipelines, HPDT_GEMM_V3_TILE one of three tiles, HPDT_GEMM_V3_ACTIVATION fused or pass, anything else is an
// error naming the variable; the pingpong
// pipeline has no wide tile, so pinning it there is an error too.
TEST_F(GemmCuda, V3SwitchesAreChecked) {
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  const Tensor A = to_gpu(random({64, 64}), DType::bf16), B = to_gpu(random({64, 64}), DType::bf16);
  Tensor C = poisoned({64, 64});
  const auto gemm = [&] {
    kernels::cuda::gemm(false, true, 64, 64, 64, 1, A.data(), 64, B.data(), 64, 0, C.data(), 64, DType::bf16,
                        DType::f32, {}, stream, GemmVariant::v3_wgmma);
  };
  for (const char* bad : {"0", "-2", "two", "3x", ""}) {
    const ScopedEnv ws("HPDT_GEMM_V3_PIPELINE", "ws"), cap("HPDT_GEMM_V3_CTAS", bad);
    HPDT_EXPECT_THROW_MSG(gemm(), std::string("HPDT_GEMM_V3_CTAS=") + bad + ": expected a positive number of blocks");
  }
  {
    const ScopedEnv cap("HPDT_GEMM_V3_CTAS", "0");
    EXPECT_NO_THROW(gemm());
  }
  for (const char* bad : {"Ws", "ping-pong", "", "barrier "}) {
    const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", bad);
    HPDT_EXPECT_THROW_MSG(gemm(), std::string("HPDT_GEMM_V3_PIPELINE=") + bad + ": expected barrier, ws or pingpong");
  }
  for (const char* bad : {"Wide", "medium", ""}) {
    const ScopedEnv tile("HPDT_GEMM_V3_TILE", bad);
    HPDT_EXPECT_THROW_MSG(gemm(), std::string("HPDT_GEMM_V3_TILE=") + bad + ": expected slim, narrow or wide");
  }
  for (const char* bad : {"Pass", "separate", ""}) {
    const ScopedEnv act("HPDT_GEMM_V3_ACTIVATION", bad);
    HPDT_EXPECT_THROW_MSG(gemm(), std::string("HPDT_GEMM_V3_ACTIVATION=") + bad + ": expected fused or pass");
  }
  for (const char* good : {"fused", "pass"}) {  // no activation here: either is the plain GEMM
    const ScopedEnv act("HPDT_GEMM_V3_ACTIVATION", good);
    EXPECT_NO_THROW(gemm());
  }
  for (const char* bad : {"On", "1", "no", ""}) {
    const ScopedEnv prefetch("HPDT_EPILOGUE_PREFETCH", bad);
    HPDT_EXPECT_THROW_MSG(gemm(), std::string("HPDT_EPILOGUE_PREFETCH=") + bad + ": expected on, unit or off");
  }
  for (const char* good : {"on", "unit", "off"}) {
    const ScopedEnv prefetch("HPDT_EPILOGUE_PREFETCH", good);
    EXPECT_NO_THROW(gemm());
  }
  const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", "pingpong");
  {
    const ScopedEnv tile("HPDT_GEMM_V3_TILE", "wide");
    HPDT_EXPECT_THROW_MSG(gemm(), "HPDT_GEMM_V3_TILE=wide: HPDT_GEMM_V3_PIPELINE=pingpong has the slim and narrow tiles");
  }
  for (const char* tile_name : {"narrow", "slim"}) {
    const ScopedEnv tile("HPDT_GEMM_V3_TILE", tile_name);
    EXPECT_NO_THROW(gemm());
  }
  stream.synchronize();
}

// Large 16-bit GEMMs of every layout: v3 against cuBLAS (on the GPU; the emulator has no cuBLAS). NT is
// the linear forward, NN its dx, TN its dw.
TEST_F(GemmCuda, LargeV3AgainstCublas) {
  HPDT_SKIP_WITHOUT_VENDOR();
  if (!v3_runs_here()) GTEST_SKIP() << "v3_wgmma needs a compute capability 9.0 device and a build for sm_90";
  // The last: ViT-B/16's projection weight gradient (dw = dy^T x, TN; 36 tiles for K = 12,608: split-K).
  const Size sizes[] = {{4104, 4104, 264}, {2000, 1544, 4000}, {64 * 197, 3072, 768}, {768, 768, 64 * 197}};
  for (int tr = 0; tr < 4; ++tr)
    for (const Size& sz : sizes)
      for (DType ab : {DType::bf16, DType::f16})
        for (DType ct : {DType::f32, ab}) {
          const bool ta = tr & 1, tb = tr & 2;
          const bool dw_tn = sz.M == 768 && tr == 1 && ab == DType::bf16;
          // NT everywhere, the others on one shape, TN on the weight gradient
          if (tr != 2 && (sz.M != 2000 || ab != DType::bf16) && !dw_tn) continue;
          const int64_t M = sz.M, N = sz.N, K = sz.K;
          const Tensor A = to_gpu(random({ta ? K : M, ta ? M : K}), ab), B = to_gpu(random({tb ? N : K, tb ? K : N}), ab);
          SCOPED_TRACE(std::string(dtype_name(ab)) + " -> " + std::string(dtype_name(ct)) + (ta ? " T" : " N") +
                       (tb ? "T " : "N ") + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K));
          for (const char* pipeline : {"barrier", "ws", "pingpong"}) {
            SCOPED_TRACE(std::string(pipeline) + " pipeline");
            ::setenv("HPDT_GEMM_V3_PIPELINE", pipeline, 1);
            expect_near_cublas(GemmVariant::v3_wgmma, ta, tb, M, N, K, A, B, ab, ct, true);
          }
          ::unsetenv("HPDT_GEMM_V3_PIPELINE");
        }
}

// f32 at a size where v1 runs many tiles: against cuBLAS (f32 compute, no TF32).
TEST_F(GemmCuda, LargeV1AgainstCublas) {
  HPDT_SKIP_WITHOUT_VENDOR();
  const int64_t M = 1000, N = 1100, K = 1200;
  for (int tr = 0; tr < 4; ++tr) {
    const bool ta = tr & 1, tb = tr & 2;
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    const Tensor A = to_gpu(random({ta ? K : M, lda})), B = to_gpu(random({tb ? N : K, ldb}));
    Tensor ours = poisoned({M, N}), ref = poisoned({M, N});
    kernels::cuda::gemm(ta, tb, M, N, K, 1, A.data(), lda, B.data(), ldb, 0, ours.data(), N, DType::f32, DType::f32, {},
                        stream, GemmVariant::v1_simt);
    kernels::cuda::gemm(ta, tb, M, N, K, 1, A.data(), lda, B.data(), ldb, 0, ref.data(), N, DType::f32, DType::f32, {},
                        stream, GemmVariant::vendor);
    Tolerance tol = gemm_tolerance(DType::f32, K, 1, 0);
    tol.atol *= 2;
    EXPECT_TRUE(close(to_cpu_f32(ref), to_cpu_f32(ours), tol)) << "transposes " << tr;
  }
}

TEST_F(GemmCuda, RawGemmErrors) {
  Tensor a = poisoned({4, 4}, DType::bf16), c = poisoned({4, 4}, DType::f16);
  HPDT_EXPECT_THROW_MSG(kernels::cuda::gemm(false, false, 4, 4, 4, 1, a.data(), 4, a.data(), 4, 0, c.data(), 4,
                                            DType::bf16, DType::f16, {}, stream),
                        "gemm: C must be f32 or the dtype of A and B (bf16), got f16");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::gemm(false, false, 4, 4, 5, 1, a.data(), 4, a.data(), 4, 0, c.data(), 4,
                                            DType::bf16, DType::bf16, {}, stream),
                        "gemm: lda 4 is smaller than A's row length 5");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::gemm(false, true, 4, 4, 4, 1, a.data(), 4, a.data(), 3, 0, c.data(), 4,
                                            DType::bf16, DType::bf16, {}, stream),
                        "gemm: ldb 3 is smaller than B's row length 4");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::gemm(false, false, -1, 4, 4, 1, a.data(), 4, a.data(), 4, 0, c.data(), 4,
                                            DType::bf16, DType::bf16, {}, stream),
                        "gemm: negative size");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::gemm(false, false, 4, 4, 4, 1, a.data(), 4, a.data(), 4, 0, c.data(), 4,
                                            DType::i32, DType::i32, {}, stream),
                        "gemm: A and B must be f32, f16 or bf16, got i32");
}
#endif  // HPDT_HAVE_CUDA

// ---- public entry points: matmul and linear ----

TEST_F(GemmCuda, MatmulEveryDtypeAndTranspose) {
  for (const DType dt : test::kCudaTestDtypes)
    for (const DType ct : {DType::f32, dt})
      for (int tr = 0; tr < 4; ++tr)
        for (const bool vendor : {false, true}) {
          if (vendor && !test::vendor_available()) continue;
          kernels::ScopedKernelBackend scope(vendor ? kernels::KernelBackend::vendor : kernels::KernelBackend::ours);
          const bool ta = tr & 1, tb = tr & 2;
          const int64_t M = 37, N = 50, K = 72;
          const Tensor a = random(ta ? Shape{K, M} : Shape{M, K}), b = random(tb ? Shape{N, K} : Shape{K, N});
          const Tensor c0 = random({M, N});
          Tensor want = round_through(c0, ct);
          kernels::matmul(round_through(a, dt), ta, round_through(b, dt), tb, want, 0.5f, 2.0f, cpu);
          Tensor cg = to_gpu(c0, ct);
          kernels::matmul(to_gpu(a, dt), ta, to_gpu(b, dt), tb, cg, 0.5f, 2.0f, stream);
          EXPECT_TRUE(close(want, to_cpu_f32(cg), gemm_tolerance(ct, K, 0.5f, 2.0f)))
              << dtype_name(dt) << " -> " << dtype_name(ct) << " transposes " << tr << (vendor ? " vendor" : " ours");
        }
}

TEST_F(GemmCuda, MatmulErrors) {
  const Tensor a = poisoned({4, 5}, DType::bf16), a32 = poisoned({4, 5}), b = poisoned({5, 3}, DType::bf16);
  Tensor c = poisoned({4, 3}, DType::f32), c16 = poisoned({4, 3}, DType::f16), bad = poisoned({4, 4}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::matmul(a32, false, b, false, c, 1, 0, stream),
                        "on CUDA all tensors of this op share one of f32, f16, bf16");
  HPDT_EXPECT_THROW_MSG(kernels::matmul(a, false, b, false, c16, 1, 0, stream),
                        "matmul: c has dtype f16; on CUDA c is f32 or the dtype of a and b (bf16)");
  HPDT_EXPECT_THROW_MSG(kernels::matmul(a, false, b, false, bad, 1, 0, stream),
                        "matmul: op(a) 4x5 times op(b) 5x3 into c [4, 4] do not agree");
  HPDT_EXPECT_THROW_MSG(kernels::matmul(a, true, b, false, c, 1, 0, stream),
                        "matmul: op(a) 5x4 times op(b) 5x3 into c [4, 3] do not agree");
  HPDT_EXPECT_THROW_MSG(kernels::matmul(a, false, b, false, c, 1, 0, cpu),
                        "matmul: tensors on cuda:0 need a CUDA stream");
  const Tensor host = random({5, 3});
  HPDT_EXPECT_THROW_MSG(kernels::matmul(a, false, host, false, c, 1, 0, stream),
                        "matmul: tensors on different devices");
}

struct LinearShape {
  Shape x;  // [..., in]
  int64_t out;
  Shape y() const {  // [..., out]
    std::vector<int64_t> dims = x.vec();
    dims.back() = out;
    return Shape{std::span<const int64_t>(dims)};
  }
};

// Forward and backward against the CPU linear layer, ours and vendor, every dtype, with and without bias.
// dw and dbias are accumulated (+=) into random values; dx is overwritten (poisoned first).
TEST_F(GemmCuda, LinearForwardBackward) {
  const LinearShape shapes[] = {
      {{1, 1}, 1},           {{7, 5}, 3}, {{17, 33}, 65}, {{2, 17, 192}, 192},  // ViT-Ti t = 17
      {{64, 50, 192}, 576},                                                     // ViT-Ti qkv
      {{2, 197, 768}, 3072},                                                    // ViT-B fc1
      {{256, 64}, 10},                                                          // ResNet fc
  };
  // The CUDA emulator runs every thread in turn (racecheck nearly so): there the two big layers run with fewer rows.
  const LinearShape emulated_shapes[] = {
      {{1, 1}, 1}, {{7, 5}, 3}, {{17, 33}, 65}, {{2, 17, 192}, 192}, {{4, 50, 192}, 576}, {{1, 197, 768}, 3072},
      {{256, 64}, 10},
  };
  for (const LinearShape& sh : test::small_shapes() ? emulated_shapes : shapes)
    for (const DType dt : test::kCudaTestDtypes)
      for (const bool with_bias : {true, false})
        for (const bool vendor : {false, true}) {
          if (vendor && !test::vendor_available()) continue;
          kernels::ScopedKernelBackend scope(vendor ? kernels::KernelBackend::vendor : kernels::KernelBackend::ours);
          const int64_t in = sh.x[-1], out = sh.out, rows = sh.x.numel() / in;
          const Shape yshape = sh.y();
          std::ostringstream what;
          what << dtype_name(dt) << " x " << sh.x.str() << " out " << out << (with_bias ? " bias" : "")
               << (vendor ? " vendor" : " ours");
          SCOPED_TRACE(what.str());

          const Tensor x = round_through(random(sh.x), dt), w = round_through(random({out, in}), dt);
          const Tensor b = round_through(random({out}), dt), dy = round_through(random(yshape), dt);
          const Tensor dw0 = round_through(random({out, in}), dt), db0 = round_through(random({out}), dt);

          // Oracle.
          Tensor y = Tensor::empty(yshape, DType::f32), dx = Tensor::empty(sh.x, DType::f32);
          Tensor dw = dw0.clone(cpu), db = db0.clone(cpu);
          kernels::linear_forward(x, w, with_bias ? &b : nullptr, y, cpu);
          kernels::linear_backward(dy, x, w, &dx, dw, with_bias ? &db : nullptr, cpu);

          const Tensor xg = to_gpu(x, dt), wg = to_gpu(w, dt), bg = to_gpu(b, dt), dyg = to_gpu(dy, dt);
          Tensor yg = poisoned(yshape, dt), dxg = poisoned(sh.x, dt), dwg = to_gpu(dw0, dt), dbg = to_gpu(db0, dt);
          kernels::linear_forward(xg, wg, with_bias ? &bg : nullptr, yg, stream);
          kernels::linear_backward(dyg, xg, wg, &dxg, dwg, with_bias ? &dbg : nullptr, stream);

          const auto tol = [&](int64_t K, float beta) {
            Tolerance t = gemm_tolerance(dt, K, 1, beta);
            if (vendor) widen_for_vendor_16bit(t, dt, K, 1, beta);
            return t;
          };
          EXPECT_TRUE(close(y, to_cpu_f32(yg), tol(in, 0))) << "y";
          EXPECT_TRUE(close(dx, to_cpu_f32(dxg), tol(out, 0))) << "dx";
          EXPECT_TRUE(close(dw, to_cpu_f32(dwg), tol(rows, 1))) << "dw";
          if (with_bias) {
            EXPECT_TRUE(close(db, to_cpu_f32(dbg), gemm_tolerance(dt, rows, 1, 1))) << "dbias";
          } else {
            EXPECT_TRUE(close(db0, to_cpu_f32(dbg), {0, 0})) << "dbias untouched";
          }
        }
}

// The fused linear + GELU (forward: the GELU and its kept input in the GEMM's epilogue; backward of the next
// layer: dx times gelu'(h) in the dx GEMM's) and the linear layer with a residual against the CPU's separate ops,
// ours and vendor.
TEST_F(GemmCuda, LinearGeluFusedAgainstTheOracle) {
  const LinearShape shapes[] = {{{7, 5}, 3}, {{17, 33}, 65}, {{2, 17, 192}, 768}};
  for (const LinearShape& sh : shapes)
    for (const DType dt : test::kCudaTestDtypes)
      for (const bool vendor : {false, true})
        for (const kernels::GeluForm form : {kernels::GeluForm::erf, kernels::GeluForm::tanh}) {
          if (vendor && !test::vendor_available()) continue;
          kernels::ScopedKernelBackend scope(vendor ? kernels::KernelBackend::vendor : kernels::KernelBackend::ours);
          const int64_t in = sh.x[-1], out = sh.out, rows = sh.x.numel() / in;
          const Shape yshape = sh.y();
          SCOPED_TRACE(std::string(dtype_name(dt)) + " x " + sh.x.str() + " out " + std::to_string(out) +
                       (vendor ? " vendor" : " ours") + (form == kernels::GeluForm::erf ? " erf" : " tanh"));
          // forward: fc1 (in -> out) with its GELU; backward: fc2 (out -> in) on y, through fc1's GELU (h = pre)
          const Tensor x = round_through(random(sh.x), dt), w = round_through(random({out, in}), dt);
          const Tensor b = round_through(random({out}), dt), w2 = round_through(random({in, out}), dt);
          const Tensor dy2 = round_through(random(sh.x), dt), h = round_through(random(yshape), dt);
          const Tensor x2 = round_through(random(yshape), dt);
          Tensor pre = Tensor::empty(yshape, DType::f32), y = Tensor::empty(yshape, DType::f32);
          Tensor dx2 = Tensor::empty(yshape, DType::f32), dw2 = Tensor::zeros({in, out}, DType::f32);
          kernels::linear_gelu_forward(x, w, &b, form, pre, y, cpu);
          kernels::linear_backward_through_gelu(dy2, x2, w2, h, form, dx2, dw2, nullptr, cpu);

          const Tensor xg = to_gpu(x, dt), wg = to_gpu(w, dt), bg = to_gpu(b, dt), w2g = to_gpu(w2, dt);
          const Tensor dy2g = to_gpu(dy2, dt), hg = to_gpu(h, dt), x2g = to_gpu(x2, dt);
          Tensor preg = poisoned(yshape, dt), yg = poisoned(yshape, dt), dx2g = poisoned(yshape, dt);
          Tensor dw2g = to_gpu(Tensor::zeros({in, out}, DType::f32), dt);
          kernels::linear_gelu_forward(xg, wg, &bg, form, preg, yg, stream);
          kernels::linear_backward_through_gelu(dy2g, x2g, w2g, hg, form, dx2g, dw2g, nullptr, stream);

          const auto tol = [&](int64_t K, float beta, bool act) {
            Tolerance t = gemm_tolerance(dt, K, 1, beta);
            if (vendor) widen_for_vendor_16bit(t, dt, K, 1, beta);
            if (act) {  // as GeluEpiloguesEveryVariant
              t.atol *= 1.2;
              t.rtol += 1e-6;
              if (vendor && dt != DType::f32)
                t.atol += 2 * test::default_tolerance(dt).rtol * (std::sqrt(double(K)) / 3 + 1);
            }
            return t;
          };
          EXPECT_TRUE(close(pre, to_cpu_f32(preg), tol(in, 0, false))) << "pre";
          EXPECT_TRUE(close(y, to_cpu_f32(yg), tol(in, 0, true))) << "y";
          EXPECT_TRUE(close(dx2, to_cpu_f32(dx2g), tol(in, 0, true))) << "dx through the GELU";
          EXPECT_TRUE(close(dw2, to_cpu_f32(dw2g), tol(rows, 1, false))) << "dw";
          // the skip connection in the epilogue: fc2 (out -> in) on y, plus a residual of its output's shape
          const Tensor r = round_through(random(sh.x), dt), rg = to_gpu(r, dt), yr = round_through(y, dt);
          Tensor z = Tensor::empty(sh.x, DType::f32), zg = poisoned(sh.x, dt);
          kernels::linear_forward(yr, w2, nullptr, z, cpu, &r);
          kernels::linear_forward(to_gpu(yr, dt), w2g, nullptr, zg, stream, &rg);
          EXPECT_TRUE(close(z, to_cpu_f32(zg), tol(out, 0, false))) << "y w2^T + residual";
        }
}

// dx skipped when null; the bias gradient is bitwise repeatable.
TEST_F(GemmCuda, LinearBackwardWithoutDxAndDeterministicBiasGradient) {
  for (const DType dt : test::kCudaTestDtypes) {
    const int64_t rows = 64 * 197, in = 96, out = 768;
    const Tensor x = to_gpu(random({rows, in}), dt), w = to_gpu(random({out, in}), dt),
                 dy = to_gpu(random({rows, out}), dt);
    const Tensor db0 = random({out});
    Tensor dw = to_gpu(random({out, in}), dt), db1 = to_gpu(db0, dt), db2 = to_gpu(db0, dt);
    kernels::linear_backward(dy, x, w, nullptr, dw, &db1, stream);
    kernels::linear_backward(dy, x, w, nullptr, dw, &db2, stream);
    const Tensor h1 = to_cpu_f32(db1), h2 = to_cpu_f32(db2);
    for (int64_t i = 0; i < out; ++i)
      ASSERT_EQ(test::bits_of(h1.data<float>()[i]), test::bits_of(h2.data<float>()[i])) << dtype_name(dt) << " " << i;
  }
}

#if HPDT_HAVE_CUDA
// cuBLAS is opened at the vendor GEMM's first call (open_cublas), not linked: a library that cannot be opened is an
// error naming it and the loader's reason; the toolkit's own opens (no GPU needed for either).
TEST(GemmCudaVendor, OpenCublasNamesTheLibraryItCannotOpen) {
  if (test::emulated()) GTEST_SKIP() << "cuBLAS is not emulated (vendor_stubs.cpp)";
  HPDT_EXPECT_THROW_MSG(kernels::cuda::open_cublas("/nonexistent/libcublas.so.99"),
                        "cannot open /nonexistent/libcublas.so.99: /nonexistent/libcublas.so.99: cannot open");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::open_cublas("libm.so.6"), "libm.so.6 has no cublasCreate_v2");
}
TEST(GemmCudaVendor, OpenCublasOpensTheToolkits) {
  if (test::emulated()) GTEST_SKIP() << "cuBLAS is not emulated (vendor_stubs.cpp)";
  EXPECT_NO_THROW(kernels::cuda::open_cublas());
  EXPECT_NO_THROW(kernels::cuda::open_cublas());  // (once open, a no-op)
}

// The bias gradient's column sums: with 16-byte loads (cols % 8 == 0, aligned) the bits of the scalar kernel (the
// same values one element past 16 bytes), near the CPU's sums; the ViT-B width and one not a multiple of 32 * 8.
TEST_F(GemmCuda, BiasGradientVectorLoadsKeepTheScalarBits) {
  for (const DType dt : test::kCudaTestDtypes)
    for (const int64_t cols : {int64_t(768), int64_t(264)}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " cols " + std::to_string(cols));
      const int64_t rows = 1037;
      const Tensor host = round_through(random({rows, cols}), dt), db0 = random({cols});
      const Tensor aligned = to_gpu(host, dt);
      Tensor big = Tensor::empty({rows * cols + 8}, dt, Device::cuda(0), AllocOptions{.stream = &stream});
      const Tensor shifted = big.flat(1, rows * cols).view({rows, cols});
      ASSERT_EQ(cudaMemcpyAsync(shifted.data(), aligned.data(), size_t(rows * cols) * dtype_size(dt),
                                cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream.handle())),
                cudaSuccess);
      Tensor vec = to_gpu(db0, dt), scalar = to_gpu(db0, dt);
      kernels::cuda::column_sums_accumulate(rows, cols, aligned.data(), vec.data(), dt, stream);
      kernels::cuda::column_sums_accumulate(rows, cols, shifted.data(), scalar.data(), dt, stream);
      const Tensor hv = to_cpu_f32(vec), hs = to_cpu_f32(scalar);
      for (int64_t j = 0; j < cols; ++j) {
        ASSERT_EQ(test::bits_of(hv.data<float>()[j]), test::bits_of(hs.data<float>()[j])) << "column " << j;
        double want = db0.data<float>()[j];
        for (int64_t r = 0; r < rows; ++r) want += host.data<float>()[r * cols + j];
        EXPECT_NEAR(hv.data<float>()[j], want, 1e-3 * std::sqrt(double(rows)) + 0.02 * std::abs(want)) << "column " << j;
      }
    }
}
#endif  // HPDT_HAVE_CUDA

TEST_F(GemmCuda, LinearErrors) {
  const Tensor x = poisoned({4, 6}, DType::bf16), w = poisoned({3, 6}, DType::bf16), w32 = poisoned({3, 6});
  const Tensor b = poisoned({3}, DType::bf16), b_bad = poisoned({5}, DType::bf16), b16 = poisoned({3}, DType::f16);
  Tensor y = poisoned({4, 3}, DType::bf16), y_bad = poisoned({4, 4}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::linear_forward(x, w32, &b, y, stream), "linear_forward: tensor");
  HPDT_EXPECT_THROW_MSG(kernels::linear_forward(x, w, &b16, y, stream),
                        "on CUDA all tensors of this op share one of f32, f16, bf16");
  HPDT_EXPECT_THROW_MSG(kernels::linear_forward(x, w, &b_bad, y, stream),
                        "linear_forward: bias has shape [5], expected [3]");
  HPDT_EXPECT_THROW_MSG(kernels::linear_forward(x, w, &b, y_bad, stream), "linear_forward: y [4, 4] for x [4, 6]");
  const Tensor w_bad = poisoned({3, 5}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::linear_forward(x, w_bad, nullptr, y, stream),
                        "linear_forward: x [4, 6] does not match weight [3, 5]");

  const Tensor dy = poisoned({4, 3}, DType::bf16), dy_bad = poisoned({5, 3}, DType::bf16);
  Tensor dx = poisoned({4, 6}, DType::bf16), dx16 = poisoned({4, 6}, DType::f16), dw = poisoned({3, 6}, DType::bf16);
  Tensor dw_bad = poisoned({6, 3}, DType::bf16), db = poisoned({3}, DType::bf16), db_bad = poisoned({4}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::linear_backward(dy_bad, x, w, &dx, dw, &db, stream),
                        "linear_backward: dy [5, 3], x [4, 6] and weight [3, 6] do not agree");
  HPDT_EXPECT_THROW_MSG(kernels::linear_backward(dy, x, w, &dx, dw_bad, &db, stream),
                        "linear_backward: dw has shape [6, 3], expected [3, 6]");
  HPDT_EXPECT_THROW_MSG(kernels::linear_backward(dy, x, w, &dx, dw, &db_bad, stream),
                        "linear_backward: dbias has shape [4], expected [3]");
  HPDT_EXPECT_THROW_MSG(kernels::linear_backward(dy, x, w, &dx16, dw, &db, stream),
                        "on CUDA all tensors of this op share one of f32, f16, bf16");
}

}  // namespace
