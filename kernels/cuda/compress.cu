// CUDA gradient-compression kernels; the CPU oracle is kernels/cpu/compress.cpp (and, behind it, comm's
// CPU compressors). Results are bitwise those of the oracle.
//
// top-k: radix select on the 31-bit keys |x| (the float bits without the sign, whose integer order is the
// order of |x|). Four histogram passes of 8 bits each narrow down the key T of the k-th largest element and
// how many elements equal to T are still needed (need_eq); no host round trip, the state stays on the
// device. Then a stable compaction in fixed tiles of 4096 elements: per-tile counts of keys > T and == T,
// one exclusive scan over the tiles, and a scatter that writes every key > T and the first need_eq keys
// == T (lowest indices first) in index order. Integer atomics only (histograms), so the result is exact.
//
// QSGD: one warp per chunk of 512 values: max |x| by shuffles, then each lane quantises two groups of 8
// consecutive values, which fill exactly `bits` bytes of the packed stream, and writes those bytes whole.
#include "hpdt/kernels/cpu/gemm.h"
#include "hpdt/kernels/cuda/compress.h"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t abs_key(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// ---- top-k: radix select ---------------------------------------------------------------------------------

constexpr int kBins = 256;      // 8-bit digits
constexpr int kPasses = 4;      // bits 31..24, 23..16, 15..8, 7..0 (bit 31 of a key is always 0)
constexpr int kTileItems = 16;  // scatter/count tiles: kThreads x kTileItems elements
constexpr int64_t kTile = int64_t(kThreads) * kTileItems;
constexpr int kScanThreads = 1024;

struct SelectState {
  uint32_t prefix;  // the digits of T found so far
  uint32_t mask;    // which bits of prefix are known
  uint32_t k_rem;   // how many of the keys matching prefix are still to be selected
  uint32_t unused;
};

__global__ void topk_init(uint32_t* __restrict__ hist, SelectState* __restrict__ st, uint32_t k) {
  for (int b = threadIdx.x; b < kPasses * kBins; b += blockDim.x) hist[b] = 0;
  if (threadIdx.x == 0) *st = SelectState{0u, 0u, k, 0u};
}

// Histogram of the digit at `shift` of the keys that match the prefix found so far.
__global__ void __launch_bounds__(kThreads)
    topk_histogram(const float* __restrict__ x, int64_t n, int shift, const SelectState* __restrict__ st,
                   uint32_t* __restrict__ hist) {
  __shared__ uint32_t bins[kBins];
  for (int b = threadIdx.x; b < kBins; b += kThreads) bins[b] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix, mask = st->mask;
  const int lane = threadIdx.x & 31;
  // base is uniform over the block, so whole warps go around the loop together (needed by the _sync calls).
  for (int64_t base = int64_t(blockIdx.x) * kThreads; base < n; base += int64_t(gridDim.x) * kThreads) {
    const int64_t i = base + threadIdx.x;
    bool take = false;
    uint32_t bin = 0;
    if (i < n) {
      const uint32_t key = abs_key(x[i]);
      take = (key & mask) == prefix;
      bin = (key >> shift) & (kBins - 1);
    }
    const unsigned active = __ballot_sync(0xffffffffu, take);
    if (take) {
      // Gradients crowd into few exponents: one shared atomic per distinct bin per warp, not per lane.
      const unsigned same = __match_any_sync(active, bin);
      if (lane == __ffs(same) - 1) atomicAdd(&bins[bin], uint32_t(__popc(same)));
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kThreads)
    if (bins[b] != 0) atomicAdd(&hist[b], bins[b]);
}

// One warp: picks the digit of T at `shift` from the histogram (largest digits first) and updates the state.
__global__ void topk_choose(const uint32_t* __restrict__ hist, int shift, SelectState* __restrict__ st) {
  const int lane = threadIdx.x;
  const SelectState s = *st;  // read by every lane before the one that decides writes (the shuffles below sync)
  constexpr int kPerLane = kBins / 32;
  uint32_t h[kPerLane], total = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) total += (h[j] = hist[lane * kPerLane + j]);
  uint32_t from_here = total;  // keys in this lane's bins and above
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t t = __shfl_down_sync(0xffffffffu, from_here, o);
    if (lane + o < 32) from_here += t;
  }
  const uint32_t above = from_here - total;  // keys in higher lanes' bins
  __syncwarp();
  // Exactly one lane holds the k_rem-th largest: 1 <= k_rem <= keys matching the prefix.
  if (above < s.k_rem && s.k_rem <= from_here) {
    uint32_t cum = above;
#pragma unroll
    for (int j = kPerLane - 1; j >= 0; --j) {
      if (cum + h[j] >= s.k_rem) {
        const uint32_t digit = uint32_t(lane * kPerLane + j);
        *st = SelectState{s.prefix | (digit << shift), s.mask | (uint32_t(kBins - 1) << shift), s.k_rem - cum, 0u};
        break;
      }
      cum += h[j];
    }
  }
}

// Per tile: how many keys are > T and == T.
__global__ void __launch_bounds__(kThreads)
    topk_tile_counts(const float* __restrict__ x, int64_t n, const SelectState* __restrict__ st,
                     uint32_t* __restrict__ gt_count, uint32_t* __restrict__ eq_count) {
  __shared__ uint32_t warp_gt[kThreads / 32], warp_eq[kThreads / 32];
  const uint32_t T = st->prefix;
  const int64_t start = int64_t(blockIdx.x) * kTile;
  uint32_t gt = 0, eq = 0;
#pragma unroll 4
  for (int r = 0; r < kTileItems; ++r) {
    const int64_t i = start + r * kThreads + threadIdx.x;
    if (i < n) {
      const uint32_t key = abs_key(x[i]);
      gt += key > T;
      eq += key == T;
    }
  }
  gt = __reduce_add_sync(0xffffffffu, gt);
  eq = __reduce_add_sync(0xffffffffu, eq);
  if ((threadIdx.x & 31) == 0) warp_gt[threadIdx.x >> 5] = gt, warp_eq[threadIdx.x >> 5] = eq;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t a = 0, b = 0;
    for (int w = 0; w < kThreads / 32; ++w) a += warp_gt[w], b += warp_eq[w];
    gt_count[blockIdx.x] = a;
    eq_count[blockIdx.x] = b;
  }
}

// Exclusive scan of the tile counts, one block, in chunks of kScanThreads tiles.
__global__ void __launch_bounds__(kScanThreads)
    topk_scan(const uint32_t* __restrict__ gt_count, const uint32_t* __restrict__ eq_count, int tiles,
              uint32_t* __restrict__ gt_before, uint32_t* __restrict__ eq_before) {
  __shared__ uint32_t warp_gt[32], warp_eq[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t carry_gt = 0, carry_eq = 0;
  for (int base = 0; base < tiles; base += kScanThreads) {  // uniform trip count
    const int t = base + threadIdx.x;
    const uint32_t a = t < tiles ? gt_count[t] : 0u, b = t < tiles ? eq_count[t] : 0u;
    uint32_t sa = a, sb = b;  // inclusive warp scans
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t ua = __shfl_up_sync(0xffffffffu, sa, o), ub = __shfl_up_sync(0xffffffffu, sb, o);
      if (lane >= o) sa += ua, sb += ub;
    }
    if (lane == 31) warp_gt[warp] = sa, warp_eq[warp] = sb;
    __syncthreads();
    if (warp == 0) {  // inclusive scan of the 32 warp totals
      uint32_t wa = warp_gt[lane], wb = warp_eq[lane];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t ua = __shfl_up_sync(0xffffffffu, wa, o), ub = __shfl_up_sync(0xffffffffu, wb, o);
        if (lane >= o) wa += ua, wb += ub;
      }
      warp_gt[lane] = wa;
      warp_eq[lane] = wb;
    }
    __syncthreads();
    const uint32_t before_warp_gt = warp == 0 ? 0u : warp_gt[warp - 1];
    const uint32_t before_warp_eq = warp == 0 ? 0u : warp_eq[warp - 1];
    if (t < tiles) {
      gt_before[t] = carry_gt + before_warp_gt + sa - a;
      eq_before[t] = carry_eq + before_warp_eq + sb - b;
    }
    carry_gt += warp_gt[31];
    carry_eq += warp_eq[31];
    __syncthreads();  // warp_gt/warp_eq are rewritten by the next chunk
  }
}

// Writes the selected elements of one tile at their places in index order.
__global__ void __launch_bounds__(kThreads)
    topk_scatter(const float* __restrict__ x, int64_t n, const SelectState* __restrict__ st,
                 const uint32_t* __restrict__ gt_count, const uint32_t* __restrict__ eq_count,
                 const uint32_t* __restrict__ gt_before, const uint32_t* __restrict__ eq_before,
                 int32_t* __restrict__ indices, float* __restrict__ values) {
  __shared__ uint32_t warp_gt[2][kThreads / 32], warp_eq[2][kThreads / 32];  // double-buffered by round
  const uint32_t T = st->prefix, need_eq = st->k_rem;
  uint32_t run_gt = gt_before[blockIdx.x], run_eq = eq_before[blockIdx.x];
  // Nothing selected here: no key > T and no needed key == T (uniform over the block).
  if (gt_count[blockIdx.x] == 0 && (eq_count[blockIdx.x] == 0 || run_eq >= need_eq)) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const int64_t start = int64_t(blockIdx.x) * kTile;
  for (int r = 0; r < kTileItems; ++r) {
    const int64_t i = start + r * kThreads + threadIdx.x;
    float v = 0.0f;
    uint32_t key = 0;
    if (i < n) v = x[i], key = abs_key(v);
    const bool is_gt = i < n && key > T, is_eq = i < n && key == T;
    const uint32_t bg = __ballot_sync(0xffffffffu, is_gt), be = __ballot_sync(0xffffffffu, is_eq);
    if (lane == 0) warp_gt[r & 1][warp] = __popc(bg), warp_eq[r & 1][warp] = __popc(be);
    __syncthreads();
    uint32_t gt_b = run_gt + __popc(bg & lanes_below), eq_b = run_eq + __popc(be & lanes_below);
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) {
      const uint32_t a = warp_gt[r & 1][w], b = warp_eq[r & 1][w];
      if (w < warp) gt_b += a, eq_b += b;
      run_gt += a;
      run_eq += b;
    }
    if (is_gt || (is_eq && eq_b < need_eq)) {
      const uint32_t pos = gt_b + min(eq_b, need_eq);  // selected elements before i
      indices[pos] = int32_t(i);
      values[pos] = v;
    }
  }
}

// ---- QSGD ---------------------------------------------------------------------------------------------------

constexpr int kGroup = 8;  // values per group: exactly `bits` packed bytes
constexpr int kChunksPerBlock = kThreads / 32;

__device__ __forceinline__ uint32_t philox_lane(const Philox4x32& b, uint32_t lane) {
  return lane == 0 ? b.v[0] : lane == 1 ? b.v[1] : lane == 2 ? b.v[2] : b.v[3];  // registers, not local memory
}

// The 8 values of a group at element e (a multiple of 8), zeros beyond n.
__device__ __forceinline__ void load_group(const float* __restrict__ x, int64_t e, int64_t n, bool vec,
                                           float (&v)[kGroup]) {
  if (vec && e + kGroup <= n) {
    const float4 a = *reinterpret_cast<const float4*>(x + e), b = *reinterpret_cast<const float4*>(x + e + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int t = 0; t < kGroup; ++t) v[t] = e + t < n ? x[e + t] : 0.0f;
  }
}

__device__ __forceinline__ void store_group(float* __restrict__ y, int64_t e, int64_t n, bool vec,
                                            const float (&v)[kGroup]) {
  if (vec && e + kGroup <= n) {
    *reinterpret_cast<float4*>(y + e) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(y + e + 4) = make_float4(v[4], v[5], v[6], v[7]);
  } else {
#pragma unroll
    for (int t = 0; t < kGroup; ++t)
      if (e + t < n) y[e + t] = v[t];
  }
}

// One warp per chunk of 512; lane l quantises groups l and l + 32 of the chunk.
__global__ void __launch_bounds__(kThreads)
    qsgd_quantize_kernel(const float* __restrict__ x, int64_t n, int bits, QsgdRandom rng, uint8_t* __restrict__ packed,
                         float* __restrict__ scales, float* __restrict__ residual, int64_t chunks, int64_t packed_bytes,
                         bool vec) {
  const int lane = threadIdx.x & 31;
  const int64_t ch = int64_t(blockIdx.x) * kChunksPerBlock + (threadIdx.x >> 5);
  if (ch >= chunks) return;  // whole warps; no block-wide barrier below
  const int64_t lo = ch * kQsgdChunk;
  const int L = qsgd::levels(bits);
  float v[2][kGroup];
  float s = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    load_group(x, lo + (lane + 32 * h) * kGroup, n, vec, v[h]);
#pragma unroll
    for (int t = 0; t < kGroup; ++t) s = fmaxf(s, fabsf(v[h][t]));  // max is exact in any order
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, o));
  if (lane == 0) scales[ch] = s;
  const float st = qsgd::step(s, L);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t e = lo + (lane + 32 * h) * kGroup;
    if (e >= n) continue;
    const uint64_t o0 = rng.offset + uint64_t(e);
    uint64_t block = o0 >> 2;
    Philox4x32 r = philox_block(rng.seed, rng.stream, block);
    uint64_t word = 0;
    float res[kGroup];
#pragma unroll
    for (int t = 0; t < kGroup; ++t) {
      const uint64_t o = o0 + uint64_t(t);
      if ((o >> 2) != block) block = o >> 2, r = philox_block(rng.seed, rng.stream, block);
      const int q = e + t < n ? qsgd::level(v[h][t], s, L, philox_lane(r, uint32_t(o & 3))) : -L;  // -L packs as 0
      word |= uint64_t(uint32_t(q + L)) << (t * bits);
      res[t] = qsgd::residual(v[h][t], q, st);
    }
    const int64_t byte0 = (e / kGroup) * bits;
    for (int b = 0; b < bits; ++b)
      if (byte0 + b < packed_bytes) packed[byte0 + b] = uint8_t(word >> (8 * b));
    if (residual != nullptr) store_group(residual, e, n, vec, res);
  }
}

// One thread per group of 8 values.
__global__ void __launch_bounds__(kThreads)
    qsgd_dequantize_kernel(const uint8_t* __restrict__ packed, const float* __restrict__ scales, int bits,
                           float* __restrict__ out, int64_t n, int64_t packed_bytes, bool accumulate, bool vec) {
  const int L = qsgd::levels(bits);
  const uint32_t value_mask = (1u << bits) - 1u;
  const int64_t groups = (n + kGroup - 1) / kGroup;
  for (int64_t gi = blockIdx.x * int64_t(kThreads) + threadIdx.x; gi < groups; gi += int64_t(gridDim.x) * kThreads) {
    const int64_t e = gi * kGroup, byte0 = gi * bits;
    uint64_t word = 0;
    for (int b = 0; b < bits; ++b)
      if (byte0 + b < packed_bytes) word |= uint64_t(packed[byte0 + b]) << (8 * b);
    const float st = qsgd::step(scales[e / kQsgdChunk], L);  // a group never straddles two chunks
    float y[kGroup];
    if (accumulate) load_group(out, e, n, vec, y);
#pragma unroll
    for (int t = 0; t < kGroup; ++t) {
      const int q = int(uint32_t(word >> (t * bits)) & value_mask) - L;
      y[t] = accumulate ? qsgd::decode_add(y[t], q, st) : qsgd::decode(q, st);
    }
    store_group(out, e, n, vec, y);
  }
}

// ---- sparse updates ---------------------------------------------------------------------------------------

__global__ void sparse_accumulate_kernel(const int32_t* __restrict__ indices, const float* __restrict__ values,
                                         int64_t k, float* __restrict__ out, int64_t n) {
  for (int64_t j = blockIdx.x * int64_t(kThreads) + threadIdx.x; j < k; j += int64_t(gridDim.x) * kThreads) {
    const int32_t i = indices[j];
    if (i >= 0 && i < n) out[i] += values[j];  // distinct indices: no two threads touch one element
  }
}

__global__ void sparse_fill_kernel(const int32_t* __restrict__ indices, int64_t k, float value, float* __restrict__ x,
                                   int64_t n) {
  for (int64_t j = blockIdx.x * int64_t(kThreads) + threadIdx.x; j < k; j += int64_t(gridDim.x) * kThreads) {
    const int32_t i = indices[j];
    if (i >= 0 && i < n) x[i] = value;
  }
}

// One element of c = op(a) op(b) a thread, in kernels::cpu::gemm<float>'s order (kernels/compress.h).
__global__ void powersgd_product_kernel(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* __restrict__ a,
                                        int64_t lda, const float* __restrict__ b, int64_t ldb, float* __restrict__ c) {
  for (int64_t e = blockIdx.x * int64_t(kThreads) + threadIdx.x; e < m * n; e += int64_t(gridDim.x) * kThreads) {
    const int64_t i = e / n, j = e % n;
    float sum = 0.0f;
    for (int64_t p0 = 0; p0 < k; p0 += cpu::kGemmKChunk) {
      const int64_t p1 = p0 + cpu::kGemmKChunk < k ? p0 + cpu::kGemmKChunk : k;
      float acc = 0.0f;
      for (int64_t p = p0; p < p1; ++p)
        acc = fmaf(ta ? a[p * lda + i] : a[i * lda + p], tb ? b[j * ldb + p] : b[p * ldb + j], acc);
      sum = p0 == 0 ? acc : __fadd_rn(sum, acc);
    }
    c[e] = sum;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void topk_select(const Tensor& x, int64_t k, Tensor& indices, Tensor& values, const Stream& stream) {
  const int64_t n = x.numel();
  if (k == 0) return;
  const cudaStream_t s = detail::native(stream);
  const int64_t tiles = (n + kTile - 1) / kTile;
  // u32 scratch: histograms of the 4 passes, the state, and per-tile counts and their exclusive scans.
  const int64_t words = kPasses * kBins + 4 + 4 * tiles;
  Tensor scratch = Tensor::empty({words}, DType::i32, x.device(), AllocOptions{.stream = &stream});
  uint32_t* hist = static_cast<uint32_t*>(scratch.data());
  auto* st = reinterpret_cast<SelectState*>(hist + kPasses * kBins);
  uint32_t* gt_count = hist + kPasses * kBins + 4;
  uint32_t* eq_count = gt_count + tiles;
  uint32_t* gt_before = eq_count + tiles;
  uint32_t* eq_before = gt_before + tiles;
  const float* xp = x.data<float>();

  topk_init<<<1, kThreads, 0, s>>>(hist, st, uint32_t(k));
  HPDT_CUDA_CHECK_LAUNCH();
  const unsigned hist_blocks = detail::grid_for(n, kThreads, 16);
  for (int pass = 0; pass < kPasses; ++pass) {
    const int shift = 24 - 8 * pass;
    topk_histogram<<<hist_blocks, kThreads, 0, s>>>(xp, n, shift, st, hist + pass * kBins);
    HPDT_CUDA_CHECK_LAUNCH();
    topk_choose<<<1, 32, 0, s>>>(hist + pass * kBins, shift, st);
    HPDT_CUDA_CHECK_LAUNCH();
  }
  topk_tile_counts<<<unsigned(tiles), kThreads, 0, s>>>(xp, n, st, gt_count, eq_count);
  HPDT_CUDA_CHECK_LAUNCH();
  topk_scan<<<1, kScanThreads, 0, s>>>(gt_count, eq_count, int(tiles), gt_before, eq_before);
  HPDT_CUDA_CHECK_LAUNCH();
  topk_scatter<<<unsigned(tiles), kThreads, 0, s>>>(xp, n, st, gt_count, eq_count, gt_before, eq_before,
                                                    indices.data<int32_t>(), values.data<float>());
  HPDT_CUDA_CHECK_LAUNCH();
}

void qsgd_quantize(const Tensor& x, int bits, const QsgdRandom& rng, Tensor& packed, Tensor& scales, Tensor* residual,
                   const Stream& stream) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t chunks = (n + kQsgdChunk - 1) / kQsgdChunk;
  float* res = residual ? residual->data<float>() : nullptr;
  const bool vec = aligned16(x.data()) && (res == nullptr || aligned16(res));
  const unsigned blocks = unsigned((chunks + kChunksPerBlock - 1) / kChunksPerBlock);
  qsgd_quantize_kernel<<<blocks, kThreads, 0, detail::native(stream)>>>(
      x.data<float>(), n, bits, rng, packed.data<uint8_t>(), scales.data<float>(), res, chunks, packed.numel(), vec);
  HPDT_CUDA_CHECK_LAUNCH();
}

void qsgd_dequantize(const Tensor& packed, const Tensor& scales, int bits, Tensor& out, bool accumulate,
                     const Stream& stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t groups = (n + kGroup - 1) / kGroup;
  qsgd_dequantize_kernel<<<detail::grid_for(groups, kThreads), kThreads, 0, detail::native(stream)>>>(
      packed.data<uint8_t>(), scales.data<float>(), bits, out.data<float>(), n, packed.numel(), accumulate,
      aligned16(out.data()));
  HPDT_CUDA_CHECK_LAUNCH();
}

void sparse_accumulate(const Tensor& indices, const Tensor& values, Tensor& out, const Stream& stream) {
  const int64_t k = indices.numel();
  if (k == 0) return;
  sparse_accumulate_kernel<<<detail::grid_for(k, kThreads), kThreads, 0, detail::native(stream)>>>(
      indices.data<int32_t>(), values.data<float>(), k, out.data<float>(), out.numel());
  HPDT_CUDA_CHECK_LAUNCH();
}

void powersgd_product(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, Tensor& c, const Stream& stream) {
  const int64_t m = c.size(0), n = c.size(1), k = trans_a ? a.size(0) : a.size(1);
  if (m * n == 0) return;
  powersgd_product_kernel<<<detail::grid_for(m * n, kThreads), kThreads, 0, detail::native(stream)>>>(
      trans_a, trans_b, m, n, k, a.data<float>(), a.size(1), b.data<float>(), b.size(1), c.data<float>());
  HPDT_CUDA_CHECK_LAUNCH();
}

void sparse_fill(const Tensor& indices, float value, Tensor& x, const Stream& stream) {
  const int64_t k = indices.numel();
  if (k == 0) return;
  sparse_fill_kernel<<<detail::grid_for(k, kThreads), kThreads, 0, detail::native(stream)>>>(
      indices.data<int32_t>(), k, value, x.data<float>(), x.numel());
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace hpdt::kernels::cuda
