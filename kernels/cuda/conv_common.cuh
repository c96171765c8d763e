// Pieces shared by hpdt's implicit-GEMM convolutions, NCHW (conv.cu) and NHWC (conv_nhwc.cu), and by the cuDNN
// path (conv_vendor.cu). Private to kernels/cuda. Device helpers are inline here; the host helpers below are
// defined once, in conv.cu.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include "fast_div.cuh"
#include "hpdt/kernels/cuda/conv.h"
#include "launch.cuh"
#include "mma_sync.cuh"
#include "prefetch.cuh"
#include "vec.cuh"
#include "warp.cuh"

namespace hpdt::kernels::cuda::conv_detail {

// ---- tiles both layouts use ------------------------------------------------------------------------------

constexpr int kTcBK = 32;           // v2: k per pipeline stage (two m16n8k16 steps)
constexpr int kSimtBK = 8;          // v1: k per pipeline stage
constexpr int kPitchK = kTcBK + 8;  // v2 [row][k] tiles: 80-byte rows, ldmatrix conflict-free, 16-byte aligned

// Which 16-byte chunk of a [rows][kTcBK] tile (pitch kPitchK) the c-th chunk load writes: row, quarter q (k 8q ..
// 8q + 7). Eight consecutive lanes take one quarter of eight consecutive rows: row r, quarter q sits on the 16-byte
// bank group (5 r + q) % 8, so the 8 writes of a cp.async phase hit 8 groups. (Four lanes per row, row c / 4 and
// quarter c % 4, put rows r and r + 1 of a phase on one group: every write 2-way conflicted, seen by the CUDA
// emulator's CUDA_EMU_STATS.) A warp still covers whole 64-byte row segments: the same global sectors.
struct KChunk {
  int row, q;
};
__device__ __forceinline__ KChunk k_chunk(int c) { return {(c & 7) | ((c >> 5) << 3), (c >> 3) & 3}; }
// The same for 8-byte chunks (q: the eighth, k 4q .. 4q + 3). Row r, eighth q sits on 8-byte unit (10 r + q) % 16
// of a 128-byte wavefront; the 32 lanes of a warp take the 8 eighths of rows r, r + 4, r + 8, r + 12, whose spans
// start on units 10 r, +8, +0, +8 (mod 16): every unit twice, the 2 wavefronts 256 bytes need.
__device__ __forceinline__ KChunk k_chunk8(int c) {
  return {((c >> 3) & 3) * 4 + ((c >> 5) & 3) + ((c >> 7) << 4), c & 7};
}
constexpr int kThreads1D = 256;     // element-wise helper kernels

// The k-loop of every v2 kernel here: tiles [kt0, kt1) of the reduction, through kStages shared-memory
// stages. fetch(kt, stage) issues tile kt's loads into a stage (cp.async, or gathers into registers),
// stash(stage) stores what fetch gathered into registers (nothing to do when every load is cp.async),
// compute(stage) multiplies a stage that has landed.
//   kStages > 2, everything cp.async: tiles kt + 1 .. kt + kStages - 1 are in flight while tile kt is
//   multiplied. One commit group per tile (empty past the end), so wait_group<kStages - 2> at the top of
//   iteration kt means tile kt landed, and the stage refilled there was last read in iteration kt - 1.
//   kStages == 2, register-staged gathers: tile kt + 1 is fetched before tile kt's math and stashed after it.
template <int kStages, class Fetch, class Stash, class Compute>
__device__ __forceinline__ void pipelined_k_loop(int kt0, int kt1, Fetch&& fetch, Stash&& stash, Compute&& compute) {
  if constexpr (kStages > 2) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (kt0 + s < kt1) fetch(kt0 + s, s);
      cp_async_commit();
    }
    for (int kt = kt0; kt < kt1; ++kt) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // tile kt visible to all; every warp is done with tile kt - 1, whose stage is refilled now
      const int next = kt + kStages - 1;
      if (next < kt1) fetch(next, (next - kt0) % kStages);
      cp_async_commit();
      compute((kt - kt0) % kStages);
    }
    cp_async_wait_all();
  } else {
    static_assert(kStages == 2, "pipelined_k_loop: 2 stages (register-staged) or more (cp.async)");
    if (kt0 < kt1) {
      fetch(kt0, 0);
      stash(0);
      cp_async_wait_all();
      __syncthreads();
    }
    for (int kt = kt0; kt < kt1; ++kt) {
      const int stage = (kt - kt0) & 1;
      const bool more = kt + 1 < kt1;
      if (more) fetch(kt + 1, stage ^ 1);
      compute(stage);
      if (more) stash(stage ^ 1);
      cp_async_wait_all();
      __syncthreads();
    }
  }
}

// The math of every v2 kernel here, one stage: acc (+)= A B for a warp's 64 x 32 tile (4 x 4 mma tiles of 16 x 8)
// over the stage's kTcBK of k, A's rows a_row0 .. + 63 and B's columns b_col0 .. + 31. Each operand is k-major in
// shared memory ([row][k], `pitch` elements a row: plain ldmatrix) or mn-major ([k][row]: the transposing ldmatrix
// gives the same fragments), as its loader found it contiguous in global memory.
template <class T, bool kAKMajor, bool kBKMajor>
__device__ __forceinline__ void warp_tile_mma(float (&acc)[4][4][4], const uint16_t* as, int a_pitch, int a_row0,
                                              const uint16_t* bs, int b_pitch, int b_col0, int lane) {
#pragma unroll
  for (int ks = 0; ks < kTcBK / 16; ++ks) {
    uint32_t af[4][4], bf[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = a_row0 + i * 16;
      if constexpr (kAKMajor)
        ldmatrix_x4(af[i], as + (m + (lane & 15)) * a_pitch + ks * 16 + (lane >> 4) * 8);
      else
        ldmatrix_x4_trans(af[i], as + (ks * 16 + (lane & 7) + (lane >> 4) * 8) * a_pitch + m + ((lane >> 3) & 1) * 8);
    }
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int n = b_col0 + jp * 16;
      uint32_t r[4];
      if constexpr (kBKMajor)
        ldmatrix_x4(r, bs + (n + (lane & 7) + (lane >> 4) * 8) * b_pitch + ks * 16 + ((lane >> 3) & 1) * 8);
      else
        ldmatrix_x4_trans(r, bs + (ks * 16 + (lane & 15)) * b_pitch + n + (lane >> 4) * 8);
      bf[2 * jp][0] = r[0], bf[2 * jp][1] = r[1], bf[2 * jp + 1][0] = r[2], bf[2 * jp + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) mma_16816<T>(acc[i][j], af[i], bf[j]);
  }
}

// The epilogue's view of a warp_tile_mma tile: the warp's 64 x 32 accumulators into rows 0 .. 63 of the f32 staging
// buffer st (`pitch` floats a row), at columns wn * 32 .. wn * 32 + 31, as float2 pairs (conflict-free where pitch % 32
// == 8); gq = lane / 4, tq = lane % 4 (the fragment's row and column pair).
__device__ __forceinline__ void stage_warp_tile(float* st, int pitch, const float (&acc)[4][4][4], int wn, int gq,
                                                int tq) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float* c = st + (i * 16 + gq) * pitch + wn * 32 + j * 8 + 2 * tq;
      *reinterpret_cast<float2*>(c) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(c + 8 * pitch) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
}

// The k-loop of every v1 (SIMT) kernel here: tiles [kt0, kt1) of kSimtBK reduction rows through two shared-memory
// stages, register-staged (fetch(kt) loads tile kt into registers, stash(stage) stores them; tile kt + 1 is
// fetched before tile kt's math and stashed after it). Each thread accumulates 8 x 8 outputs: A columns
// tm * 4 + 0..3 and kAHalf + tm * 4 + 0..3 of the [kSimtBK][kPA] stage times B columns tn * 4 + 0..3 and
// kBHalf + tn * 4 + 0..3 of the [kSimtBK][kPB] stage, read as float4.
template <int kPA, int kPB, int kAHalf, int kBHalf, class Fetch, class Stash>
__device__ __forceinline__ void simt_k_loop(int kt0, int kt1, const float* As, const float* Bs, int tm, int tn,
                                            float (&acc)[8][8], Fetch&& fetch, Stash&& stash) {
  if (kt0 < kt1) {
    fetch(kt0);
    stash(0);
    __syncthreads();
  }
  for (int kt = kt0; kt < kt1; ++kt) {
    const int stage = (kt - kt0) & 1;
    const bool more = kt + 1 < kt1;
    if (more) fetch(kt + 1);
#pragma unroll
    for (int k = 0; k < kSimtBK; ++k) {
      const float* ar = As + (stage * kSimtBK + k) * kPA;
      const float* br = Bs + (stage * kSimtBK + k) * kPB;
      const float4 a0 = *reinterpret_cast<const float4*>(ar + tm * 4);
      const float4 a1 = *reinterpret_cast<const float4*>(ar + kAHalf + tm * 4);
      const float4 b0 = *reinterpret_cast<const float4*>(br + tn * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(br + kBHalf + tn * 4);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    if (more) stash(stage ^ 1);
    __syncthreads();
  }
}

// ---- host helpers (defined in conv.cu) -------------------------------------------------------------------

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The kernels index within one tensor with 32-bit pixel counts and per-image offsets.
void check_index_range(std::string_view op, const Conv2dShape& s);
// Whether `variant` runs on tensor cores for dtype `dt` (throws for v2 with f32).
bool use_tensor_cores(ConvVariant v, DType dt, std::string_view op);
// Whether v2's epilogues (NCHW and NHWC) may write 4 outputs with one 8-byte store where the shape and pointers allow
// (the default, "vec"), or one element per store (HPDT_CONV_V2_EPILOGUE=scalar: the A/B switch of
// hpdt-bench-conv-cuda's v2_scalar_epilogue rows; both give the same bits). Read at every call; another value throws.
bool conv_v2_vector_epilogue();
// Whether v2's epilogues (NCHW and NHWC) compute batch norm's reductions where asked, the statistics of the
// forward's y (Conv2dEpilogue::stats) and the sums of the backward-data's dx (ChannelGradSums)
// (HPDT_CONV_BN_STATS=epilogue), or leave them to batch norm's own passes (the default, "separate", since the H200
// run of 2026-11-29: the epilogues' reductions cost the ResNet-50 step 14 % in NCHW on v2 and 30 % in NHWC on conv v3
// and GEMM v3, results/gpu/README.md). Read at every call; another value throws.
bool conv_epilogue_bn_stats();
// Whether v2 (tensor cores: `tc_half`) computes what is asked for: the forward's statistics (e.stats, with an
// epilogue that does nothing else), the backward-data's sums (bn, where every dx pixel goes through the epilogue: a
// tap in every phase); both only with conv_epilogue_bn_stats(). So do conv v3 and, for the NHWC 1x1 convolutions,
// GEMM v3 (sm90a/column_stats.cuh).
bool epilogue_computes_stats(const Conv2dEpilogue& e, bool tc_half);
// Batch norm's backward sums in v2's backward-data epilogues (ChannelGradSums; conv.cu's stage_bn_grad, conv_nhwc.cu's
// stage_bn_grad_nhwc): the batch norm's input x, fused output y (null: no ReLU, dz = g) and saved mean, and its
// partials [M][splits][2], (sum dz, sum dz (x - mean)), this launch's from split split0 on. partial null: none.
struct BnGradEpilogue {
  const void* x = nullptr;
  const void* y = nullptr;
  const float* mean = nullptr;
  float* partial = nullptr;
  int splits = 0, split0 = 0;
};
inline BnGradEpilogue bn_grad_epilogue(const ChannelGradSums& s, int split0) {
  return {s.x.data(), s.y.defined() ? s.y.data() : nullptr, s.mean.data<float>(), s.partial.data<float>(),
          int(s.splits), split0};
}
// That epilogue for elements j = 0 .. N - 1 of one channel, those with has(j) (offset(j): element j's index, g(j): its
// gradient): g (+ the residual) through the mask, stored at dst, and added, as stored, to the channel's sums, in j's
// order. Every input of the N elements is loaded before the first store, so that their loads are in flight together:
// one round trip, not two an element (one element at a time, the compiler must assume a store may alias the next
// loads, and x was loaded after its element's store).
template <class T, int N, class Has, class Offset, class Grad>
__device__ __forceinline__ void bn_grad_elements(const BnGradEpilogue& bn, const void* residual, void* dst, Has has,
                                                 Offset offset, Grad g, float mean, float& sum, float& sum_x) {
  float res[N], y[N], x[N];
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (has(j)) {
      const int64_t i = offset(j);
      res[j] = residual ? to_f32(static_cast<const T*>(residual)[i]) : 0.0f;
      y[j] = bn.y ? to_f32(static_cast<const T*>(bn.y)[i]) : 1.0f;
      x[j] = to_f32(static_cast<const T*>(bn.x)[i]);
    }
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (has(j)) {
      float v = g(j);
      if (residual) v += res[j];
      if (bn.y && !(y[j] > 0.0f)) v = 0.0f;
      const T q = from_f32<T>(v);
      static_cast<T*>(dst)[offset(j)] = q;
      const float dz = to_f32(q);
      sum += dz;
      sum_x += dz * (x[j] - mean);
    }
}
// The inputs v2's epilogue reads from element i on, `bytes` of each (the residual; with bn.partial batch norm's y and
// x, as bn_grad_elements), into L2 before the k loop (prefetch.cuh): lines part, part + parts, .. of each.
template <class T>
__device__ __forceinline__ void prefetch_epilogue_inputs_at(const BnGradEpilogue& bn, const void* residual, int64_t i,
                                                            uint32_t bytes, int part, int parts) {
  prefetch_input_lines<T>(residual, i, bytes, part, parts);
  prefetch_input_lines<T>(bn.partial ? bn.y : nullptr, i, bytes, part, parts);
  prefetch_input_lines<T>(bn.partial ? bn.x : nullptr, i, bytes, part, parts);
}
// A scratch tensor of n elements (at least 1) from the caching allocator, on `stream`.
Tensor device_buffer(int64_t n, DType dt, Device dev, const Stream& stream);

// Weights repacked tap-major: out[row][k] for k = (jr * KWp + jc) * Cg + ch, kernel tap (ry0 + rstep * jr,
// rx0 + rstep * jc); zero for k in [K, lda). Forward: rows = co, ch = ci. Backward-data phase: rows = ci,
// ch = co (the transpose), the phase's taps.
struct Repack {
  int rows, lda, K, Cg, KWp, ry0, rx0, rstep, KW;
  int64_t row_stride, ch_stride;
};
void launch_repack(DType dt, const void* w, void* out, const Repack& r, cudaStream_t st);

// The forward's A operand: w [co, ci, kh, kw] as [co][lda] with k = tap * ci + c. A 1x1 kernel already is
// (lda = ci), unless `for_cp_async` asks for 16-byte rows and an aligned start; otherwise it is repacked into
// `packed` with lda = round_up(K, 8) (pad = false: lda = K, cuDNN's KRSC filter). Returns the operand.
const void* forward_weights(const Conv2dShape& s, const Tensor& w, bool for_cp_async, bool pad, Tensor& packed,
                            int64_t* lda, const Stream& stream);

// Backward-data by stride phases (see run_backward_data in conv.cu): the dx pixels with (iy + pad) % S == py
// (and likewise in x) receive exactly the taps (py + S * jr, px + S * jc).
struct DataPhase {
  int64_t py, px;  // the phase: taps (py + S * jr, px + S * jc), khp x kwp of them
  int64_t khp, kwp;
  int64_t iy0, ix0;  // its first dx pixel; then every S-th, hp x wp of them
  int64_t hp, wp;
  int64_t qy0, qx0;     // dy coordinates of its first pixel at tap (0, 0)
  int64_t lda, offset;  // its repacked weights [ci][lda] at `offset` elements of the packed buffer
};
// The phases with at least one dx pixel; *packed_total: elements of the buffer holding all their weights.
std::vector<DataPhase> data_phases(const Conv2dShape& s, int64_t* packed_total);
// (the backward-data's half of epilogue_computes_stats above: v2 and conv v3, and GEMM v3 for the 1x1 ones)
bool epilogue_computes_grad_sums(const ChannelGradSums* bn, bool tc_half, const std::vector<DataPhase>& phases);
// The phase's weights as [ci][lda], k = (jr * kwp + jc) * co + c, written into packed + f.offset.
void repack_phase_weights(const Conv2dShape& s, const DataPhase& f, const Tensor& w, Tensor& packed, cudaStream_t st);
// The dx pixels no phase reaches: zeros (a memset of dx), or with a residual the residual's values (a copy of it).
void clear_or_copy(Tensor& dx, const Tensor* residual, cudaStream_t st);

// Splits of a backward-filter pixel reduction of KT k tiles over `tiles` output tiles, `resident` blocks running at
// once (detail::choose_split_k: whole waves, >= 8 k tiles per split, <= 256 splits, a workspace of <= 2^25 floats).
// Deterministic sums: the partition depends on the shape, the kernel and the device's SM count, never on timing.
int wgrad_splits(int64_t tiles, int64_t KT, int64_t partial_floats, int64_t resident, double step_flops, bool tc,
                 int* tiles_per_split);
// dw[i] (+)= sum over splits s of ws[s][i], in split order; n = dw.numel().
void wgrad_reduce(const float* ws, int splits, Tensor& dw, cudaStream_t st);
// dbias[co] (+)= sum over s of partial[co][s], in split order.
void bias_grad_final(const float* partial, int co, int splits, Tensor& dbias, cudaStream_t st);
// dbias[co] (+)= the column sums of dy [n * oh * ow, co] (NHWC; conv_nhwc.cu).
void bias_grad_nhwc(const Tensor& dy, Tensor& dbias, const Stream& stream);

// A backward-filter launch: a grid of col_tiles x row_tiles output tiles, each k tile (KT of them) step_flops of
// math per block, on tensor cores (tc) or not.
struct WgradGrid {
  int64_t col_tiles, row_tiles, KT;
  double step_flops;
  bool tc;
};

// Runs backward-filter kernel Kernel (P: its parameter block, with CO, K, tiles_per_split and ws) at `threads`
// threads and `smem` bytes: the pixel reduction split by wgrad_splits from the kernel's occupancy, the partials
// ([splits][CO][K] f32) summed in split order into dw by wgrad_reduce.
template <auto Kernel, class P>
void launch_wgrad(P p, const WgradGrid& g, int threads, int smem, Tensor& dw, const Stream& stream) {
  detail::allow_dynamic_smem<Kernel>(smem);
  const int64_t resident =
      int64_t(detail::sm_count(stream.device().index)) * detail::blocks_per_sm<Kernel>(threads, smem);
  const int splits = wgrad_splits(g.col_tiles * g.row_tiles, g.KT, int64_t(p.CO) * p.K, resident, g.step_flops, g.tc,
                                  &p.tiles_per_split);
  Tensor ws;
  if (splits > 1) {
    ws = device_buffer(int64_t(splits) * p.CO * p.K, DType::f32, dw.device(), stream);
    p.ws = ws.data<float>();
  }
  const cudaStream_t st = detail::native(stream);
  const dim3 grid(unsigned(g.col_tiles), unsigned(g.row_tiles), unsigned(splits));
  Kernel<<<grid, threads, smem, st>>>(p);
  HPDT_CUDA_CHECK_LAUNCH();
  if (splits > 1) wgrad_reduce(ws.data<float>(), splits, dw, st);
}

}  // namespace hpdt::kernels::cuda::conv_detail
