// CUDA GEMM: C = alpha * op(A) * op(B) + beta * C (+ bias per column, + a residual matrix, then an optional GELU
// or GELU gradient), row-major like cpu::gemm.
//
// A and B share one storage dtype (f32, f16 or bf16); C is f32 or that dtype; products are summed in
// f32 whatever the storage. Any M, N, K >= 0 (K == 0 gives C = beta * C + bias), any leading
// dimensions, either transpose. beta == 0 means C is not read (it may hold NaN on entry); alpha == 0
// means A and B are not read.
//
// Variants (kernels/cuda/gemm.cu, gemm_vendor.cu), each kept, tested and benchmarked:
//   v1_simt: SIMT f32 tiles (128x128x8, 8x8 outputs per thread); takes every dtype, shape and alignment
//            (16-bit inputs are widened on load). The f32 path.
//   v2_mma:  tensor cores (mma.sync m16n8k16 via ldmatrix, multi-stage cp.async pipeline, swizzled
//            shared memory), bf16/f16 inputs only, with deterministic split-K for few output tiles.
//            Needs A and B 16-byte aligned and lda, ldb multiples of 8; falls back to v1 otherwise.
//   vendor:  cuBLAS (cublasGemmEx, CUBLAS_COMPUTE_32F); a bias is first written into C (beta * C + bias, a
//            small kernel), then cuBLAS accumulates alpha * AB onto it.
//   v3_wgmma: Hopper (sm_90a): TMA loads into 128-byte-swizzled shared memory on mbarriers, wgmma.mma_async
//            m64n256k16 / m64n128k16 from shared-memory descriptors, two warpgroups per 128 x 256 (or 128 x
//            128) block tile. bf16/f16, either transpose (a k-major operand as it is, an MN-major one, A
//            transposed or B not, through wgmma's transpose bit), 16-byte aligned, lda and ldb multiples of
//            8, on a compute capability 9.0 device, in a build that targets sm_90 (kernels/cuda/sm90a/ is
//            compiled for sm_90a alone); otherwise v2 (then v1). Run on an H200 on 2026-11-27 (every test
//            passed; 1.15-2.3x v2), so `automatic` takes it unless kernels::gemm_choice() is v2
//            (hpdt-train --gemm v2).
//   automatic: vendor when kernels::kernel_backend() is vendor; else for 16-bit inputs v3 (the default
//            kernels::gemm_choice()) or v2, each where it can take the call; v1 otherwise.
// v1 and v2 are deterministic (same inputs, same bits; no atomics, split-K partials summed in order).
// v2's block tile (128x128 or 128x256) is chosen by shape; HPDT_GEMM_V2_TILE=small|large pins it (tuning).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hpdt/core/dtype.h"
#include "hpdt/core/stream.h"
#include "hpdt/kernels/cpu/activation.h"  // GeluForm

namespace hpdt::kernels {
struct ChannelStats;     // hpdt/kernels/channel_stats.h
struct ChannelGradSums;  // hpdt/kernels/channel_stats.h
}

namespace hpdt::kernels::cuda {

enum class GemmVariant { automatic, v1_simt, v2_mma, v3_wgmma, vendor };

std::string_view gemm_variant_name(GemmVariant v);  // "automatic", "v1_simt", "v2_mma", "v3_wgmma", "vendor"

// cuBLAS, which the vendor variant calls, is opened at its first call (dlopen), not at every process's start (where
// loading it cost ~0.3 s and 210 MB). open_cublas() opens it now (a no-op once open), so that a run which will need
// it can fail at its start; open_cublas(library) tries that library instead (a name or a path) and leaves the one in
// use alone. Either throws naming the library and the dynamic loader's reason when it cannot be opened.
void open_cublas(const std::string& library = "");

// What runs after the sum, before the store, in this order, in f32 with one rounding at each store:
//   v = alpha * AB + beta * C + bias[col] + residual[row, col];
//   gelu_grad_input set: v *= gelu'(gelu_grad_input[row, col])  (the backward of a GELU whose input that was:
//                        the GEMM's result is the gradient of the GELU's output, C that of its input);
//   gelu set:            pre_activation[row, col] = v (when not null), then v = gelu(v)  (a layer and its GELU);
//   C = v.
// residual, pre_activation and gelu_grad_input are [M, N] matrices in C's dtype with C's leading dimension ldc,
// and must not overlap C. gelu and gelu_grad_input exclude each other. `vendor` puts beta * C + bias + residual in
// C first (cuBLAS then accumulates onto it), and runs the activation as a separate pass over C afterwards (from
// C's rounded value: within one rounding of ours).
struct GemmEpilogue {
  const void* bias = nullptr;      // [N] in C's dtype, or null
  const void* residual = nullptr;  // a skip connection's [M, N], or null
  bool gelu = false;
  void* pre_activation = nullptr;
  const void* gelu_grad_input = nullptr;
  GeluForm gelu_form = GeluForm::erf;
  // Batch norm's statistics of C's columns, for the batch norm after an NHWC 1x1 convolution run as this GEMM (the
  // columns are its channels): the (count, mean, M2) of each column's stored values as partials over 64-row groups
  // (channel_stats.h). Computed by v3 where the epilogue is otherwise plain (no GELU), N is even and C pair-aligned
  // (split-K then off); every other path clears them, and the batch norm runs its own pass.
  ChannelStats* column_stats = nullptr;
  // Batch norm's backward sums, for the batch norm whose output gradient C is (an NHWC 1x1 convolution's dx run as
  // this GEMM): C gets dz = (y > 0 ? v : 0) (v without y) in place of the epilogue's value v, and the partials (sum
  // dz, sum dz (x - mean)) of each column over 64-row groups (channel_stats.h; x and y [M, N] in C's dtype, C dense:
  // ldc = N; mean [N] f32). Computed by v3 where column_stats would be (not both); every other path clears them and
  // writes v unmasked.
  ChannelGradSums* column_grad_sums = nullptr;
  bool has_activation() const { return gelu || gelu_grad_input != nullptr; }
};

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
          const void* B, int64_t ldb, float beta, void* C, int64_t ldc, DType ab_type, DType c_type,
          const GemmEpilogue& epi, const Stream& stream, GemmVariant variant = GemmVariant::automatic);

// Whether this build compiled v3_wgmma (the build targets sm_90); it runs only on compute capability 9.0.
// HPDT_GEMM_V3_TILE=slim|narrow|wide pins its block tile (128 x 64, 128 x 128 or 128 x 256; tuning and tests);
// HPDT_GEMM_V3_PIPELINE=barrier|ws|pingpong its pipeline;
// HPDT_GEMM_V3_IN_FLIGHT=0 waits for every k tile's MMAs before freeing its stage (default: one group in flight).
bool gemm_v3_built();

// GEMM v3's plans under kernels::GemmTuning::find (backend.h), one per call shape timed so far in this process, in
// the order they were found, then conv v3's (calls "conv v3 fwd 3x3 64->64 256x56x56 -> 56x56 bf16", "conv v3
// bwd_data phase ..", "conv v3 bwd_filter ..."): the call ("12608x3072x768 NT bf16->bf16 bias gelu(erf)": M x N x K, A then B
// transposed (T) or not (N), A/B and C dtypes, the epilogue), the plan taken ("ws/narrow": pipeline/tile) and each
// candidate's time (ms a call, the median of 5 runs after one warm-up run, on scratch outputs).
struct GemmV3Found {
  std::string call;
  std::string plan;
  std::vector<std::pair<std::string, double>> ms;
};
std::vector<GemmV3Found> gemm_v3_found();
// Forgets them (GEMM v3's and conv v3's), so that the next call of each shape is timed again (tests).
void gemm_v3_forget_found();

// The variant gemm() runs for these arguments and this request (never `automatic`): the fallbacks
// above applied. For tests and benchmarks, to know what was measured.
GemmVariant gemm_resolve(GemmVariant requested, bool trans_a, bool trans_b, int64_t lda, int64_t ldb, const void* A,
                         const void* B, DType ab_type, const Stream& stream);

}  // namespace hpdt::kernels::cuda
