// What the GEMM variants of gemm.cu and sm90a/gemm_wgmma.cu share (private to kernels/cuda): the
// kernel parameters, the tile order and the epilogue's order of operations.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "hpdt/core/dtype.h"
#include "hpdt/core/float16.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cuda/gemm.h"
#include "hpdt/kernels/math/activation_math.h"
#include "prefetch.cuh"

namespace hpdt::kernels::cuda::gemm_detail {

// Everything a GEMM kernel needs; passed by value (kernel parameter space).
struct Params {
  int M, N, K;
  float alpha, beta;
  const void* A;
  int64_t lda;
  const void* B;
  int64_t ldb;
  void* C;
  int64_t ldc;
  const void* bias;  // [N], C's dtype, or null
  const void* res;   // GemmEpilogue's residual: [M][ldc] in C's dtype, or null
  // GemmEpilogue's activation (act: 0 none, 1 gelu, 2 gelu gradient; pre_activation / gelu_grad_input in `aux`,
  // C's dtype and leading dimension)
  int act;
  bool gelu_tanh;
  void* aux;
  bool c_f32;        // C (and bias) f32, else C has the inputs' 16-bit type
  bool a_kmajor;     // A's k index is contiguous (A not transposed)
  bool b_kmajor;     // B's k index is contiguous (B transposed)
  int tiles_m, tiles_n;
  int kt_per_split;  // split-K: k tiles per split (of 32 in v2, of 64 in v3); the split: blockIdx.y (v1, v2), the work unit (v3)
  float* partial;    // split-K: [splits][M][N] f32 partial sums, or null
  // Batch norm's reductions over C's columns, from the epilogue of GEMM v3 and conv v3 (band_epilogue.cuh, no
  // split-K, no activation; sm90a/column_stats.cuh): partials [N][stats_splits][W] of each 64-row group of a tile, at
  // split stats_split0 + 2 tm + the group; null: none.
  //   bn_x null (kBandStats; GemmEpilogue::column_stats): W = 3, (count, mean, M2) of column n's stored values.
  //   bn_x set (kBandGradSums; GemmEpilogue::column_grad_sums): C gets dz = (bn_y > 0 ? v : 0) (v itself without
  //     bn_y) in place of the epilogue's value v, and W = 2, (sum dz, sum dz (bn_x - bn_mean[n])) of the stored dz;
  //     bn_x and bn_y in C's dtype and layout (ldc), bn_mean [N] f32.
  float* col_stats;
  int stats_splits, stats_split0;
  const void* bn_x;
  const void* bn_y;
  const float* bn_mean;
  // GEMM v3 and conv v3 (HPDT_EPILOGUE_PREFETCH, prefetch.cuh): prefetch a tile's epilogue inputs (C when beta != 0,
  // res, the GELU gradient's aux, bn_x and bn_y) into L2 as its k loop starts (band_epilogue.cuh:
  // band_prefetch_inputs; unless off); with ahead (the default) the persistent pipelines also prefetch the block's
  // next unit's (wgmma.cuh: prefetch_units).
  EpiloguePrefetch prefetch = EpiloguePrefetch::off;
  // GEMM v3: the epilogue by TMA stores through C's store map (sm90a/tma_store_epilogue.cuh; HPDT_GEMM_V3_STORE=tma,
  // where gemm_wgmma.cu's tma_store_eligible holds)
  bool tma_store = false;
};

// Block index -> output tile, in groups of 8 tile rows so blocks running together share A and B in L2.
__device__ __forceinline__ void tile_coords(int pid, int tiles_m, int tiles_n, int& tm, int& tn) {
  constexpr int kGroup = 8;
  const int per_group = kGroup * tiles_n;
  const int group = pid / per_group;
  const int first_m = group * kGroup;
  const int size_m = min(tiles_m - first_m, kGroup);
  const int in_group = pid - group * per_group;
  tm = first_m + in_group % size_m;
  tn = in_group / size_m;
}

enum : int { kActNone = 0, kActGelu = 1, kActGeluGrad = 2 };

// v as a plain GEMM stores it in C's type TC (a no-op for f32), what the activation steps below take: the GELU sees
// the 16-bit pre-activation it keeps in aux, as PyTorch's autocast GELU sees the linear's 16-bit output, so that a
// fused GELU (or GELU gradient) gives bit for bit the plain GEMM and the elementwise GELU kernel after it
// (--gelu separate, --kernels vendor; test_gemm_cuda's FusedGeluIsThePlainGemmThenTheGeluKernel). Before
// 2026-11-29 it took the f32 value: one rounding less, and bits no other path gave.
template <class TC>
__device__ __forceinline__ float as_stored(float v) {
  return to_f32(from_f32<TC>(v));
}

// The activation step of the epilogue on v = alpha * acc + beta * C + bias at element offset `off` of C (and of
// aux), v taken as stored (as_stored): the GELU gradient multiplies by gelu'(aux[off]); the GELU stores v to aux
// (when set) and returns gelu(v).
template <class TC>
__device__ __forceinline__ float activate(const Params& p, int64_t off, float v) {
  if (p.act != kActNone) v = as_stored<TC>(v);
  if (p.act == kActGeluGrad) {
    const float h = to_f32(static_cast<const TC*>(p.aux)[off]);
    return v * (p.gelu_tanh ? math::gelu_tanh_grad(h) : math::gelu_erf_grad(h));
  }
  if (p.act == kActGelu) {
    if (p.aux) static_cast<TC*>(p.aux)[off] = from_f32<TC>(v);
    return p.gelu_tanh ? math::gelu_tanh(v) : math::gelu_erf(v);
  }
  return v;
}

// alpha * acc (+ beta * C) (+ bias) (+ residual), then the activation: the oracle's order of operations; the value
// of C's element at offset `off` (column col).
template <class TC>
__device__ __forceinline__ float epilogue_one(const Params& p, int64_t off, int col, float acc) {
  float v = p.alpha * acc;
  if (p.beta != 0.0f) v += p.beta * to_f32(static_cast<const TC*>(p.C)[off]);
  if (p.bias) v += to_f32(static_cast<const TC*>(p.bias)[col]);
  if (p.res) v += to_f32(static_cast<const TC*>(p.res)[off]);
  return activate<TC>(p, off, v);
}

template <class TC>
__device__ __forceinline__ void store_one(const Params& p, int64_t off, int col, float acc) {
  static_cast<TC*>(p.C)[off] = from_f32<TC>(epilogue_one<TC>(p, off, col, acc));
}

// Whether the epilogue (band_epilogue.cuh) may move two elements at once: ldc even and C (and the residual and the activation's matrix)
// aligned to two.
template <class TC>
__host__ __device__ __forceinline__ bool pairs_aligned(const Params& p) {
  constexpr uintptr_t kPair = 2 * sizeof(TC);
  return (p.ldc & 1) == 0 && reinterpret_cast<uintptr_t>(p.C) % kPair == 0 &&
         reinterpret_cast<uintptr_t>(p.res) % kPair == 0 && reinterpret_cast<uintptr_t>(p.aux) % kPair == 0;
}

// Two 16-bit values packed little-endian (the lower address in the low half) and back.
template <class TC>
__device__ __forceinline__ void unpack2(uint32_t w, float& a, float& b) {
  a = to_f32(TC::from_bits(uint16_t(w & 0xffffu)));
  b = to_f32(TC::from_bits(uint16_t(w >> 16)));
}
template <class TC>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  return uint32_t(from_f32<TC>(a).bits) | (uint32_t(from_f32<TC>(b).bits) << 16);
}

// C = alpha * (the sum of the splits' partials, in split order) + beta * C + bias + residual, then the activation
// (gemm.cu).
void splitk_reduce(const Params& p, int splits, DType c_type, cudaStream_t s);

// The epilogue's activation as a pass of its own over C as a plain GEMM left it: C = gelu(C), storing C's value to
// aux first when p.aux is set, or C *= gelu'(aux); from_aux (the GELU with aux set): the plain GEMM stored its value
// in aux, and C = gelu(aux), a read and a write less. The vendor backend's GELU, and GEMM v3's "+gelu pass" plans; the
// same bits as the fused epilogue (activate takes v as C stores it) (gemm.cu).
void activation_only(const Params& p, DType c_type, cudaStream_t s, bool from_aux = false);

// Split-K of a GEMM launch over p.tiles_m x p.tiles_n tiles and kt_total k tiles (detail::choose_split_k, at
// most 16 splits): sets p.kt_per_split and, for more than one split, p.partial to `workspace`, a [splits][M][N]
// f32 buffer from the stream's allocator. Returns the split count (gemm.cu).
int plan_split_k(Params& p, int kt_total, int64_t resident, double step_flops, int min_steps, int max_splits,
                 double flops_per_second, const Stream& stream, Tensor& workspace);

// v3 (sm90a/gemm_wgmma.cu): built only where the build targets sm_90 (HPDT_HAVE_GEMM_WGMMA), and runs
// only on a device of compute capability 9.0. Takes 16-bit A and B in any layout (k-major operands as they
// are, MN-major ones through wgmma's transpose bits), 16-byte aligned, lda and ldb multiples of 8.
bool v3_device_ok(int device);
// Its pipeline and block tile by rule, or under kernels::GemmTuning::find the fastest, timed at the shape's first
// call (v3_found / v3_forget_found: cuda::gemm_v3_found / gemm_v3_forget_found).
void v3_launch(Params p, DType ab_type, DType c_type, const Stream& stream);
std::vector<GemmV3Found> v3_found();
void v3_forget_found();

}  // namespace hpdt::kernels::cuda::gemm_detail
