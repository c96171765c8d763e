// Tests of the CPU emulator of CUDA itself (tests/cuda_emu): this file is CUDA, transformed by transform.py like
// kernels/cuda/*.cu. Barriers, shuffles and votes against their CUDA definitions; ldmatrix + mma.sync against a
// host matrix product using the canonical fragment addressing (so a wrong PTX layout shows); cp.async groups;
// sm_90a (mbarrier, TMA with the 128-byte swizzle, wgmma from descriptors) against a host reference of the
// PTX ISA layouts; launch-configuration errors; and the faults the emulator must stop on (deadlocks, divergent barriers, masks,
// out-of-bounds shared memory, __launch_bounds__), as death tests.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "hpdt/core/env.h"  // ScopedEnv: the emulator reads CUDA_EMU_RESIDENT and _DISPATCH at every launch
#include "wgmma.cuh"  // kernels/cuda/sm90a/wgmma.cuh as transformed for hpdt_kernels_emu: its mbarrier watchdog

namespace {

// Device buffers: cudaMalloc'd, copied up and down.
template <class T>
struct Buf {
  T* d = nullptr;
  size_t n = 0;
  explicit Buf(size_t count) : n(count) { EXPECT_EQ(cudaMalloc(&d, n * sizeof(T)), cudaSuccess); }
  Buf(const std::vector<T>& h) : Buf(h.size()) { up(h); }
  ~Buf() { cudaFree(d); }
  void up(const std::vector<T>& h) {
    EXPECT_EQ(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> down() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// ---- barriers and shared memory ----------------------------------------------------------------------------
// Block sums through static shared memory, two barriers per step; 2-D blocks.
__global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float buf[256];
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int i = blockIdx.x * 256 + t;
  buf[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

TEST(CudaEmu, BlockBarrierReduction) {
  const int n = 1000, blocks = 4;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[size_t(i)] = float(i % 17);
  Buf<float> dx(x), dout(blocks);
  block_sum<<<blocks, dim3(32, 8)>>>(dx.d, dout.d, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto out = dout.down();
  for (int b = 0; b < blocks; ++b) {
    float want = 0;
    for (int i = b * 256; i < std::min(n, (b + 1) * 256); ++i) want += x[size_t(i)];
    EXPECT_EQ(out[size_t(b)], want) << "block " << b;
  }
}

__global__ void sync_count(int* out) {
  const int t = threadIdx.x;
  const int c = __syncthreads_count(t % 3 == 0);
  const int a = __syncthreads_and(t < 1000);
  const int o = __syncthreads_or(t == 77);
  if (t == 0) out[0] = c, out[1] = a, out[2] = o;
}

TEST(CudaEmu, SyncthreadsReductions) {
  Buf<int> d(3);
  sync_count<<<1, 100>>>(d.d);
  const auto h = d.down();
  EXPECT_EQ(h[0], 34);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], 1);
}

// ---- warp collectives --------------------------------------------------------------------------------------
__global__ void shuffles(int* out) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  int* o = out + w * 32 * 8 + lane * 8;
  o[0] = __shfl_sync(0xffffffffu, lane * 10, (lane + 5) % 32);
  o[1] = __shfl_up_sync(0xffffffffu, lane * 10, 3);
  o[2] = __shfl_down_sync(0xffffffffu, lane * 10, 3);
  o[3] = __shfl_xor_sync(0xffffffffu, lane * 10, 5);
  o[4] = __shfl_xor_sync(0xffffffffu, lane * 10, 1, 16);
  o[5] = __shfl_down_sync(0xffffffffu, lane * 10, 4, 8);  // segments of 8: beyond the end keeps its own
  o[6] = __shfl_sync(0xffffffffu, lane * 10, 2, 16);      // lane 2 of each half-warp
  o[7] = int(__ballot_sync(0xffffffffu, lane % 3 == 0));
}

TEST(CudaEmu, Shuffles) {
  Buf<int> d(64 * 8);
  shuffles<<<1, 64>>>(d.d);
  const auto h = d.down();
  uint32_t ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int w = 0; w < 2; ++w)
    for (int l = 0; l < 32; ++l) {
      const int* o = &h[size_t(w * 256 + l * 8)];
      EXPECT_EQ(o[0], ((l + 5) % 32) * 10);
      EXPECT_EQ(o[1], (l >= 3 ? l - 3 : l) * 10);
      EXPECT_EQ(o[2], (l + 3 < 32 ? l + 3 : l) * 10);
      EXPECT_EQ(o[3], (l ^ 5) * 10);
      EXPECT_EQ(o[4], (l ^ 1) * 10);
      EXPECT_EQ(o[5], ((l % 8) + 4 < 8 ? l + 4 : l) * 10) << l;
      EXPECT_EQ(o[6], ((l / 16) * 16 + 2) * 10);
      EXPECT_EQ(uint32_t(o[7]), ballot);
    }
}

__global__ void votes(unsigned* out) {
  const int lane = threadIdx.x;
  if (lane < 16) {  // a converged half-warp with its own mask
    out[lane] = __ballot_sync(0x0000ffffu, lane & 1);
    out[32 + lane] = unsigned(__any_sync(0x0000ffffu, lane == 7));
    out[64 + lane] = unsigned(__all_sync(0x0000ffffu, lane < 16));
  } else {
    out[lane] = __ballot_sync(0xffff0000u, lane >= 20);
    out[32 + lane] = __match_any_sync(0xffff0000u, lane / 4);
    out[64 + lane] = __reduce_add_sync(0xffff0000u, unsigned(lane));
  }
  __syncwarp();
}

TEST(CudaEmu, VotesWithPartialMasks) {
  Buf<unsigned> d(96);
  votes<<<1, 32>>>(d.d);
  const auto h = d.down();
  unsigned sum = 0;
  for (int l = 16; l < 32; ++l) sum += unsigned(l);
  for (int l = 0; l < 32; ++l) {
    if (l < 16) {
      EXPECT_EQ(h[size_t(l)], 0xaaaau);
      EXPECT_EQ(h[size_t(32 + l)], 1u);
      EXPECT_EQ(h[size_t(64 + l)], 1u);
    } else {
      EXPECT_EQ(h[size_t(l)], 0xfff00000u);
      EXPECT_EQ(h[size_t(32 + l)], 0xfu << (l / 4 * 4));
      EXPECT_EQ(h[size_t(64 + l)], sum);
    }
  }
}

// PTX: shfl.sync waits for the non-exited lanes of its mask; reading an exited lane gives an undefined value
// (all ones here).
__global__ void shfl_exited(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

TEST(CudaEmu, ExitedLanesLeaveShuffles) {
  Buf<int> d(32);
  shfl_exited<<<1, 32>>>(d.d);
  const auto h = d.down();
  for (int l = 0; l < 32; ++l) {
    if (l == 3) continue;
    EXPECT_EQ(h[size_t(l)], l == 2 ? -1 : (l ^ 1)) << l;
  }
}

// ---- tensor cores ------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// C (16x8, f32) = A (16x16, row-major) B (16x8, row-major K x N) through the textbook fragment loads:
// A with ldmatrix.x4 (lane l gives row l % 16, column block l / 16), B with ldmatrix.x2.trans (lane l < 16
// gives row k = l), then one mma.sync. Also checks ldmatrix.x1 and the non-transposed x2 against the layout.
template <bool kBf16>
__global__ void mma_tile(const uint16_t* a, const uint16_t* b, float* c, uint32_t* frag) {
  __shared__ __align__(16) uint16_t sa[16 * 16];
  __shared__ __align__(16) uint16_t sb[16 * 8];
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) sa[i] = a[i];
  for (int i = lane; i < 128; i += 32) sb[i] = b[i];
  __syncwarp();
  uint32_t ra[4], rb[2], r1, r2[2];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(ra[0]), "=r"(ra[1]), "=r"(ra[2]), "=r"(ra[3])
               : "r"(smem_u32(&sa[(lane % 16) * 16 + (lane / 16) * 8])));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(rb[0]), "=r"(rb[1])
               : "r"(smem_u32(&sb[(lane % 16) * 8])));
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 %0, [%1];\n" : "=r"(r1) : "r"(smem_u32(&sa[(lane % 8) * 16])));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r2[0]), "=r"(r2[1])
               : "r"(smem_u32(&sa[(lane % 16) * 16])));
  float d[4] = {1.0f, 2.0f, 3.0f, 4.0f};  // C = per-register constants, checked below
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
  }
  const int g = lane / 4, q = lane % 4;
  c[g * 8 + 2 * q] = d[0];
  c[g * 8 + 2 * q + 1] = d[1];
  c[(g + 8) * 8 + 2 * q] = d[2];
  c[(g + 8) * 8 + 2 * q + 1] = d[3];
  frag[lane * 3] = r1;
  frag[lane * 3 + 1] = r2[0];
  frag[lane * 3 + 2] = r2[1];
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);  // test values are exact in bf16
}
uint16_t to_f16(float f) {  // values exact in f16 only
  if (f == 0) return 0;
  const uint16_t sign = f < 0 ? 0x8000 : 0;
  f = std::fabs(f);
  int e = 0;
  while (f >= 2) f /= 2, ++e;
  while (f < 1) f *= 2, --e;
  return uint16_t(sign | uint16_t((e + 15) << 10) | uint16_t(std::lround((f - 1) * 1024)));
}

template <bool kBf16>
void check_mma() {
  std::mt19937 rng(7);
  // j * 2^e (|j| < 128, e in [-10, 0]): exact in bf16 and f16, their products exact in f32, but not the sums of 16
  // of them (magnitudes 2^-20 to 2^14), so the check below sees the emulator's rounding: an f32 fma chain over k in
  // order, from C.
  std::uniform_int_distribution<int> dist(-127, 127), exponent(-10, 0);
  std::vector<float> A(256), B(128);
  for (auto& v : A) v = std::ldexp(float(dist(rng)), exponent(rng));
  for (auto& v : B) v = std::ldexp(float(dist(rng)), exponent(rng));
  std::vector<uint16_t> ha(256), hb(128);
  for (int i = 0; i < 256; ++i) ha[size_t(i)] = kBf16 ? to_bf16(A[size_t(i)]) : to_f16(A[size_t(i)]);
  for (int i = 0; i < 128; ++i) hb[size_t(i)] = kBf16 ? to_bf16(B[size_t(i)]) : to_f16(B[size_t(i)]);
  Buf<uint16_t> da(ha), db(hb);
  Buf<float> dc(128);
  Buf<uint32_t> df(96);
  mma_tile<kBf16><<<1, 32>>>(da.d, db.d, dc.d, df.d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto c = dc.down();
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      float want = 1.0f + float((n & 1) + 2 * (m >= 8));  // the C register constants
      for (int k = 0; k < 16; ++k) want = std::fma(A[size_t(m * 16 + k)], B[size_t(k * 8 + n)], want);
      EXPECT_EQ(c[size_t(m * 8 + n)], want) << "m " << m << " n " << n;
    }
  // PTX ISA: ldmatrix (no .trans) gives lane l the elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of each
  // 8x8 matrix, whose row r comes from lane 8 i + r of the matrix i.
  const auto f = df.down();
  for (int l = 0; l < 32; ++l) {
    const int row = l / 4, col = 2 * (l % 4);
    auto pair = [&](int r, int c0) {
      return uint32_t(ha[size_t(r * 16 + c0)]) | uint32_t(ha[size_t(r * 16 + c0 + 1)]) << 16;
    };
    EXPECT_EQ(f[size_t(l * 3)], pair(row, col)) << "x1 lane " << l;
    EXPECT_EQ(f[size_t(l * 3 + 1)], pair(row, col)) << "x2 lane " << l;
    EXPECT_EQ(f[size_t(l * 3 + 2)], pair(row + 8, col)) << "x2 lane " << l;
  }
}

TEST(CudaEmu, LdmatrixMmaBf16) { check_mma<true>(); }
TEST(CudaEmu, LdmatrixMmaF16) { check_mma<false>(); }

// ---- cp.async ----------------------------------------------------------------------------------------------
__global__ void cp_async_groups(const float* src, float* out) {
  extern __shared__ __align__(16) float buf[];  // 3 x 4 floats
  const uint32_t s = smem_u32(buf);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(16));
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(s + 16), "l"(src + 4),
               "r"(8));  // half zero-filled
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s + 32), "l"(src + 8));
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group %0;\n" ::"n"(1));
  for (int i = 0; i < 12; ++i) out[i] = buf[i];  // the second group may not have landed
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  for (int i = 0; i < 12; ++i) out[12 + i] = buf[i];
}

TEST(CudaEmu, CpAsyncGroups) {
  std::vector<float> src(12);
  for (int i = 0; i < 12; ++i) src[size_t(i)] = float(i + 1);
  Buf<float> ds(src), dout(24);
  cp_async_groups<<<1, 1, 48>>>(ds.d, dout.d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto o = dout.down();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(o[size_t(i)], float(i + 1));
  for (int i = 4; i < 12; ++i) EXPECT_TRUE(std::isnan(o[size_t(i)])) << "the emulator performs copies at the wait";
  const float want[12] = {1, 2, 3, 4, 5, 6, 0, 0, 9, NAN, NAN, NAN};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(o[size_t(12 + i)], want[i]) << i;
}

// ---- sm_90a: mbarrier, TMA, wgmma ------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok != 0;
}
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// wgmma descriptor of a k-major tile with the 128-byte swizzle: 8-row groups 1024 bytes apart
__device__ __forceinline__ uint64_t desc128(uint32_t addr) {
  return uint64_t((addr & 0x3ffffu) >> 4) | uint64_t(1) << 16 | uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}
// D (m64n8, f32) += A B, bf16 from descriptors
__device__ __forceinline__ void mma_m64n8k16(float (&d)[4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(da), "l"(db), "r"(1));
}

// D (m64n72, f32) = A B, A and B MN-major (imm-trans-a/b 1), bf16 from descriptors; n 72 spans two 64-wide
// blocks of B, so B's leading byte offset is used.
__device__ __forceinline__ void mma_m64n72k16_mn(float (&d)[36], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n72k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}, %36, %37, p, 1, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
      : "l"(da), "l"(db), "r"(0));
}

// One 64 x 64 bf16 box at (c0, c1) of a map with the 128-byte swizzle, twice through one mbarrier (phases 0
// and 1), the shared bytes copied out raw.
__global__ void tma_box(const __grid_constant__ CUtensorMap map, int c0, int c1, uint16_t* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u, bar = base + 8192;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  for (int phase = 0; phase < 2; ++phase) {
    if (threadIdx.x == 0) {
      mbar_expect(bar, 8192);
      tma_2d(base, &map, bar, c0 + 64 * phase, c1);
    }
    while (!mbar_try_wait(bar, uint32_t(phase))) {
    }
    const auto* s = reinterpret_cast<const uint16_t*>(smem + (base - smem_u32(smem)));
    for (int i = int(threadIdx.x); i < 4096; i += int(blockDim.x)) out[phase * 4096 + i] = s[i];
    __syncthreads();
  }
}

// A bf16 matrix's TMA map: boxes of box_cols x box_rows in `swizzle` (64 columns, 128 bytes, in the 128-byte one).
CUtensorMap bf16_map(const void* p, uint64_t rows, uint64_t cols, uint64_t ld, uint32_t box_rows,
                     CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B, uint32_t box_cols = 64) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q), cudaSuccess);
  EXPECT_EQ(q, cudaDriverEntryPointSuccess);
  CUtensorMap m{};
  const cuuint64_t dims[2] = {cols, rows}, strides[1] = {ld * 2};
  const cuuint32_t box[2] = {box_cols, box_rows}, es[2] = {1, 1};
  EXPECT_EQ(
      reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(
          &m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p), dims, strides, box, es,
          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
      CUDA_SUCCESS);
  return m;
}

// TMA: the box lands with the PTX ISA's 128-byte swizzle (16-byte chunk c of row r at chunk c ^ r % 8),
// elements past the matrix (here 70 x 100, row stride 104) as zeros; the second phase of the barrier too.
TEST(CudaEmu, TmaBoxSwizzleAndBounds) {
  const uint64_t rows = 70, cols = 100, ld = 104;
  std::vector<uint16_t> h(rows * ld);
  for (size_t i = 0; i < h.size(); ++i) h[i] = uint16_t(1 + i % 60000);
  Buf<uint16_t> dm(h), dout(2 * 4096);
  const CUtensorMap map = bf16_map(dm.d, rows, cols, ld, 64);
  cudaFuncSetAttribute(tma_box, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192 + 1024 + 64);
  tma_box<<<1, 128, 8192 + 1024 + 64>>>(map, 0, 40, dout.d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto o = dout.down();
  for (int phase = 0; phase < 2; ++phase)
    for (int r = 0; r < 64; ++r)
      for (int e = 0; e < 64; ++e) {
        const uint64_t x = uint64_t(64 * phase + e), y = uint64_t(40 + r);
        const uint16_t want = x < cols && y < rows ? h[y * ld + x] : 0;
        const int chunk = (e / 8) ^ (r % 8);
        ASSERT_EQ(o[size_t(phase * 4096 + r * 64 + chunk * 8 + e % 8)], want) << phase << " " << r << " " << e;
      }
}

// A TMA store of one box of at most 4096 bf16 (64 x 64 in the 128-byte swizzle, 32 x 16 in the 64-byte one) from
// shared memory (filled with s[i] = i + 1 in its raw, swizzled layout) to (c0, c1) of a map; `wait` 0: thread 0 leaves
// without waiting for it (a fault).
__global__ void tma_store_box(const __grid_constant__ CUtensorMap map, int c0, int c1, int wait, int offset) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = ((smem_u32(smem) + 1023u) & ~1023u) + uint32_t(offset);
  auto* s = reinterpret_cast<uint16_t*>(smem + (base - smem_u32(smem)));
  for (int i = int(threadIdx.x); i < 4096; i += int(blockDim.x)) s[i] = uint16_t(i + 1);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                     reinterpret_cast<uint64_t>(&map)),
                 "r"(base), "r"(c0), "r"(c1)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    if (wait) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  }
}

// TMA store: row r's 16-byte chunk c is read from chunk c ^ r % 8 (the 128-byte swizzle), and only the box's
// elements inside the matrix (70 x 100, row stride 112) are written, with the rest of the 16-byte granule of each
// row's last element (columns 100..103: 200 bytes a row end mid-granule), as on the GPU: not the padding past
// that, not past the last row.
TEST(CudaEmu, TmaStoreSwizzleAndBounds) {
  const uint64_t rows = 70, cols = 100, ld = 112, written = 104;
  Buf<uint16_t> dm(std::vector<uint16_t>(rows * ld, 0x7777));
  const CUtensorMap map = bf16_map(dm.d, rows, cols, ld, 64);
  cudaFuncSetAttribute(tma_store_box, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192 + 1024);
  const unsigned long long before = cuda_emu::tma_stores();
  tma_store_box<<<1, 128, 8192 + 1024>>>(map, 64, 40, 1, 0);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cuda_emu::tma_stores() - before, 1u);
  const auto o = dm.down();
  for (uint64_t y = 0; y < rows; ++y)
    for (uint64_t x = 0; x < ld; ++x) {
      uint16_t want = 0x7777;
      if (x >= 64 && x < written && y >= 40) {
        const uint64_t r = y - 40, e = x - 64;
        want = uint16_t(1 + r * 64 + (((e / 8) ^ (r % 8)) * 8) + e % 8);
      }
      ASSERT_EQ(o[size_t(y * ld + x)], want) << y << " " << x;
    }
}

// The 64-byte swizzle, as GEMM v3's TMA-store epilogue uses it (sm90a/tma_store_epilogue.cuh): a box of 32 bf16 x 16
// rows (64-byte rows), its shared image filled with s[i] = i + 1 raw, stored at (32, 8) of a 20 x 72 matrix (row stride
// 80): row r's 16-byte unit u is read from unit u ^ (r / 2) % 4 (the PTX ISA's swizzle: address bits [4, 6) XOR bits
// [7, 9)), and rows past the matrix are not written.
TEST(CudaEmu, TmaStore64ByteSwizzle) {
  const uint64_t rows = 20, cols = 72, ld = 80;
  Buf<uint16_t> dm(std::vector<uint16_t>(rows * ld, 0x7777));
  const CUtensorMap map = bf16_map(dm.d, rows, cols, ld, 16, CU_TENSOR_MAP_SWIZZLE_64B, 32);
  cudaFuncSetAttribute(tma_store_box, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192 + 1024);
  tma_store_box<<<1, 64, 8192 + 1024>>>(map, 32, 8, 1, 0);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto o = dm.down();
  for (uint64_t y = 0; y < rows; ++y)
    for (uint64_t x = 0; x < ld; ++x) {
      uint16_t want = 0x7777;
      if (x >= 32 && x < 64 && y >= 8) {
        const uint64_t r = y - 8, e = x - 32;
        want = uint16_t(1 + r * 32 + (((e / 8) ^ (r / 2 % 4)) * 8) + e % 8);
      }
      ASSERT_EQ(o[size_t(y * ld + x)], want) << y << " " << x;
    }
}

// A 4-D box (64 channels x 4 x 2 x 2) of an NHWC tensor at (0, x0, y0, n0), the shared bytes copied out raw.
__global__ void tma_box4d(const __grid_constant__ CUtensorMap map, int x0, int y0, int n0, uint16_t* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u, bar = base + 2048;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    mbar_expect(bar, 2048);
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(
            base),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(bar), "r"(0), "r"(x0), "r"(y0), "r"(n0)
        : "memory");
  }
  __syncthreads();
  while (!mbar_try_wait(bar, 0u)) {
  }
  const auto* s = reinterpret_cast<const uint16_t*>(smem + (base - smem_u32(smem)));
  for (int i = int(threadIdx.x); i < 1024; i += int(blockDim.x)) out[i] = s[i];
}

// TMA, rank 4 (conv v3's im2col): the box's rows (64 channels, 128 bytes) in x, y, image order with the 128-byte
// swizzle; coordinates below zero and past each dimension (x -1, y 5 of 5, image 3 of 3) read as zeros.
TEST(CudaEmu, TmaBox4dSwizzleAndBounds) {
  const int n = 3, h = 5, w = 6, c = 64;
  std::vector<uint16_t> t(size_t(n) * h * w * c);
  for (size_t i = 0; i < t.size(); ++i) t[i] = uint16_t(1 + i % 60000);
  Buf<uint16_t> dt(t), dout(1024);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q), cudaSuccess);
  CUtensorMap map{};
  const cuuint64_t dims[4] = {cuuint64_t(c), cuuint64_t(w), cuuint64_t(h), cuuint64_t(n)};
  const cuuint64_t strides[3] = {cuuint64_t(c) * 2, cuuint64_t(w) * c * 2, cuuint64_t(h) * w * c * 2};
  const cuuint32_t box[4] = {64, 4, 2, 2}, es[4] = {1, 1, 1, 1};
  ASSERT_EQ(reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(
                &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, dt.d, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_SUCCESS);
  const int x0 = -1, y0 = 4, n0 = 2;
  cudaFuncSetAttribute(tma_box4d, cudaFuncAttributeMaxDynamicSharedMemorySize, 2048 + 1024 + 64);
  tma_box4d<<<1, 128, 2048 + 1024 + 64>>>(map, x0, y0, n0, dout.d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto o = dout.down();
  int inside = 0;
  for (int r = 0; r < 16; ++r)
    for (int e = 0; e < 64; ++e) {
      const int x = x0 + r % 4, y = y0 + r / 4 % 2, img = n0 + r / 8;
      const bool in = x >= 0 && x < w && y < h && img < n;
      inside += in && e == 0;
      const uint16_t want = in ? t[((size_t(img) * h + y) * w + x) * c + e] : 0;
      const int chunk = (e / 8) ^ (r % 8);
      ASSERT_EQ(o[size_t(r * 64 + chunk * 8 + e % 8)], want) << r << " " << e;
    }
  EXPECT_EQ(inside, 3) << "rows of the box inside the tensor (x 0..2 of row y 4, image 2)";
}

// An im2col load (rank 4) of 16 pixels of 32 f32 channels (128-byte rows, 128-byte swizzle) at (0, w0, h0, n0) with
// offsets (ow, oh), the shared bytes copied out raw.
__global__ void tma_im2col16(const __grid_constant__ CUtensorMap map, int w0, int h0, int n0, int ow, int oh,
                             float* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u, bar = base + 2048;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    mbar_expect(bar, 2048);
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
        "%6}], [%2], {%7, %8};\n" ::"r"(base),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(bar), "r"(0), "r"(w0), "r"(h0), "r"(n0), "h"(uint16_t(ow)),
        "h"(uint16_t(oh))
        : "memory");
  }
  __syncthreads();
  while (!mbar_try_wait(bar, 0u)) {
  }
  const auto* s = reinterpret_cast<const float*>(smem + (base - smem_u32(smem)));
  for (int i = int(threadIdx.x); i < 512; i += int(blockDim.x)) out[i] = s[i];
}

struct Im2colLoad {
  const char* name;
  int n, hw, lower, upper, stride, h0, w0, oh, ow;
  std::vector<float> want;  // the 16 pixels' values
};

// TMA's im2col mode (PTX ISA, "Tensor copy: im2col mode"): the five loads whose results triton-lang/triton's
// python/tutorials/gluon/13-conv-im2col.py lists (its tests assert them on Hopper), on n images of 4 x 4 pixels whose
// 32 channels all hold 1 + the pixel's index: the plain box, a bounding box shifted by the padding (corners -1), the
// offsets shifting the loaded pixels, and the traversal wrapping into the next image, with and without padding.
// Then a strided traversal (element strides 2, a 5 x 5 image, the corners of a 3 x 3 convolution with padding 1 and
// stride 2 as that tutorial's conv2d_tma_im2col sets them): every second pixel of rows 0, 2, 4, then the next
// (missing) image's zeros. Each row with the 128-byte swizzle; the encoder's range checks.
TEST(CudaEmu, TmaIm2colLoadsAsDocumented) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeIm2col", &fn, 12000, cudaEnableDefault, &q),
            cudaSuccess);
  ASSERT_EQ(q, cudaDriverEntryPointSuccess);
  const auto encode = reinterpret_cast<PFN_cuTensorMapEncodeIm2col_v12000>(fn);
  const Im2colLoad loads[] = {
      {"plain", 1, 4, 0, 0, 1, 0, 0, 0, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
      {"padded", 1, 4, -1, -1, 1, -1, -1, 0, 0, {0, 0, 0, 0, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11}},
      {"offsets", 1, 4, -1, -1, 1, -1, -1, 1, 1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
      {"two images", 2, 4, 0, 0, 1, 1, 3, 0, 0, {8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}},
      {"two images padded", 2, 4, -1, -1, 1, 1, 2, 0, 0, {7, 0, 9, 10, 11, 0, 0, 0, 0, 0, 17, 18, 19, 0, 21, 22}},
      {"stride 2", 1, 5, -1, -1, 2, -1, -1, 1, 1, {1, 3, 5, 11, 13, 15, 21, 23, 25, 0, 0, 0, 0, 0, 0, 0}},
  };
  cudaFuncSetAttribute(tma_im2col16, cudaFuncAttributeMaxDynamicSharedMemorySize, 2048 + 1024 + 64);
  for (const Im2colLoad& l : loads) {
    SCOPED_TRACE(l.name);
    const int c = 32;
    std::vector<float> t(size_t(l.n) * l.hw * l.hw * c);
    for (size_t i = 0; i < t.size(); ++i) t[i] = float(1 + i / c);
    Buf<float> dt(t), dout(512);
    const cuuint64_t dims[4] = {cuuint64_t(c), cuuint64_t(l.hw), cuuint64_t(l.hw), cuuint64_t(l.n)};
    const cuuint64_t strides[3] = {cuuint64_t(c) * 4, cuuint64_t(l.hw) * c * 4, cuuint64_t(l.hw) * l.hw * c * 4};
    const int lower[2] = {l.lower, l.lower}, upper[2] = {l.upper, l.upper};
    const cuuint32_t es[4] = {1, cuuint32_t(l.stride), cuuint32_t(l.stride), 1};
    CUtensorMap map{};
    ASSERT_EQ(encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, dt.d, dims, strides, lower, upper, 32, 16, es,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              CUDA_SUCCESS);
    tma_im2col16<<<1, 128, 2048 + 1024 + 64>>>(map, l.w0, l.h0, 0, l.ow, l.oh, dout.d);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const auto o = dout.down();
    for (int r = 0; r < 16; ++r)
      for (int e = 0; e < c; ++e)  // 16-byte chunk (4 floats) k of row r at chunk k ^ r % 8
        ASSERT_EQ(o[size_t(r * c + (((e / 4) ^ (r % 8)) * 4) + e % 4)], l.want[size_t(r)]) << "pixel " << r << " " << e;
  }
  // the driver's limits: rank 4's corners within [-128, 127], a box of non-zero extent, at most 1024 pixels
  std::vector<float> t(32 * 16);
  Buf<float> dt(t);
  const cuuint64_t dims[4] = {32, 4, 4, 1}, strides[3] = {128, 512, 2048};
  const cuuint32_t es[4] = {1, 1, 1, 1};
  const int ok[2] = {-1, -1}, far[2] = {-129, 0}, empty[2] = {-5, -5};
  CUtensorMap map{};
  const auto try_encode = [&](const int* lower, const int* upper, cuuint32_t pixels) {
    return encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, dt.d, dims, strides, lower, upper, 32, pixels, es,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  EXPECT_EQ(try_encode(ok, ok, 1024), CUDA_SUCCESS);
  EXPECT_EQ(try_encode(far, ok, 16), CUDA_ERROR_INVALID_VALUE) << "a corner below -128";
  EXPECT_EQ(try_encode(ok, empty, 16), CUDA_ERROR_INVALID_VALUE) << "the upper corner past the lower one";
  EXPECT_EQ(try_encode(ok, ok, 1025), CUDA_ERROR_INVALID_VALUE) << "1025 pixels";
}

// One warpgroup: A (64 x 16) and B (8 x 16, k-major) written into 128-byte-swizzled tiles by plain stores,
// then wgmma m64n8k16 from descriptors, D read back in the m64nNk16 fragment layout.
__global__ void wgmma_n8(const uint16_t* a, const uint16_t* b, float* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
  unsigned char* tile = smem + (base - smem_u32(smem));
  const int t = int(threadIdx.x);
  for (int i = t; i < 64 * 16; i += 128) {  // A row r, k: byte r * 128 + ((2k / 16) ^ r % 8) * 16 + 2k % 16
    const int r = i / 16, k = i % 16;
    std::memcpy(tile + r * 128 + (((2 * k) / 16) ^ (r % 8)) * 16 + (2 * k) % 16, &a[i], 2);
  }
  for (int i = t; i < 8 * 16; i += 128) {  // B at 8192 the same way
    const int r = i / 16, k = i % 16;
    std::memcpy(tile + 8192 + r * 128 + (((2 * k) / 16) ^ (r % 8)) * 16 + (2 * k) % 16, &b[i], 2);
  }
  __syncthreads();
  float d[4] = {1.0f, 1.0f, 1.0f, 1.0f};  // scale-d 1: accumulated onto
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  mma_m64n8k16(d, desc128(base), desc128(base + 8192));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const int warp = t / 32, lane = t % 32;
  for (int i = 0; i < 4; ++i) {
    const int row = 16 * warp + lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + i % 2;
    out[row * 8 + col] = d[i];
  }
}

TEST(CudaEmu, WgmmaFromSwizzledDescriptors) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> u(-8, 8);
  std::vector<uint16_t> a(64 * 16), b(8 * 16);
  std::vector<float> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = float(u(rng)) / 4, a[i] = uint16_t(std::bit_cast<uint32_t>(af[i]) >> 16);
  for (size_t i = 0; i < b.size(); ++i) bf[i] = float(u(rng)) / 4, b[i] = uint16_t(std::bit_cast<uint32_t>(bf[i]) >> 16);
  Buf<uint16_t> da(a), db(b);
  Buf<float> dout(64 * 8);
  cudaFuncSetAttribute(wgmma_n8, cudaFuncAttributeMaxDynamicSharedMemorySize, 16384);
  wgmma_n8<<<1, 128, 16384>>>(da.d, db.d, dout.d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto o = dout.down();
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 8; ++n) {
      double want = 1.0;  // the accumulator's initial value
      for (int k = 0; k < 16; ++k) want += double(af[size_t(m * 16 + k)]) * bf[size_t(n * 16 + k)];
      ASSERT_EQ(double(o[size_t(m * 8 + n)]), want) << m << " " << n;  // exact: quarters, short sums
    }
}

// MN-major operands (wgmma's transpose bits), written by plain stores in the PTX ISA's canonical layout
// ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) with the 128-byte swizzle: k row r of a 64-wide block holds its 64
// m (n) values in 128 bytes, 16-byte chunk c at chunk c ^ r % 8; 8-row groups of k SBO = 1024 bytes apart;
// B's two 64-wide blocks of n LBO = 2048 bytes apart (A's single block: LBO unused). scale-d 0: D = A B.
__global__ void wgmma_mn_major(const uint16_t* a, const uint16_t* b, float* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
  unsigned char* tile = smem + (base - smem_u32(smem));
  const int t = int(threadIdx.x);
  auto at = [](int mn, int k) { return (mn / 64) * 2048 + (k / 8) * 1024 + (k % 8) * 128 + (((mn % 64) / 8) ^ (k % 8)) * 16 + (mn % 8) * 2; };
  for (int i = t; i < 16 * 64; i += 128) std::memcpy(tile + at(i % 64, i / 64), &a[i], 2);         // a[k][m]
  for (int i = t; i < 16 * 72; i += 128) std::memcpy(tile + 8192 + at(i % 72, i / 72), &b[i], 2);  // b[k][n]
  __syncthreads();
  auto desc = [](uint32_t addr, uint32_t lbo) {
    return uint64_t((addr & 0x3ffffu) >> 4) | uint64_t(lbo >> 4) << 16 | uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
  };
  float d[36];
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  mma_m64n72k16_mn(d, desc(base, 8192), desc(base + 8192, 2048));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const int warp = t / 32, lane = t % 32;
  for (int i = 0; i < 36; ++i) {  // d[4 j + 2 h + e]: row 16 warp + lane / 4 + 8 h, column 8 j + 2 (lane % 4) + e
    const int row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
    out[row * 72 + col] = d[i];
  }
}

TEST(CudaEmu, WgmmaFromMnMajorDescriptors) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> u(-8, 8);
  std::vector<uint16_t> a(16 * 64), b(16 * 72);
  std::vector<float> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = float(u(rng)) / 4, a[i] = uint16_t(std::bit_cast<uint32_t>(af[i]) >> 16);
  for (size_t i = 0; i < b.size(); ++i) bf[i] = float(u(rng)) / 4, b[i] = uint16_t(std::bit_cast<uint32_t>(bf[i]) >> 16);
  Buf<uint16_t> da(a), db(b);
  Buf<float> dout(64 * 72);
  cudaFuncSetAttribute(wgmma_mn_major, cudaFuncAttributeMaxDynamicSharedMemorySize, 16384);
  wgmma_mn_major<<<1, 128, 16384>>>(da.d, db.d, dout.d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto o = dout.down();
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 72; ++n) {
      double want = 0.0;
      for (int k = 0; k < 16; ++k) want += double(af[size_t(k * 64 + m)]) * bf[size_t(k * 72 + n)];
      ASSERT_EQ(double(o[size_t(m * 72 + n)]), want) << m << " " << n;  // exact: quarters, short sums
    }
}

__global__ void wait_uninitialised() {
  __shared__ uint64_t bar;
  while (!mbar_try_wait(smem_u32(&bar), 0)) {
  }
}
__global__ void wgmma_never_waited(float* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
  float d[4] = {0, 0, 0, 0};
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  mma_m64n8k16(d, desc128(base), desc128(base));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  out[threadIdx.x] = 0;
}
// A wgmma without wgmma.fence: as the first of the kernel, or after a wait past which the accumulators were read.
__global__ void wgmma_unfenced(float* out, int after_a_wait) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
  float d[4] = {0, 0, 0, 0};
  if (after_a_wait) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    mma_m64n8k16(d, desc128(base), desc128(base));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    out[threadIdx.x] = d[0];
    d[0] = 0.0f;
  }
  mma_m64n8k16(d, desc128(base), desc128(base));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  out[threadIdx.x] = d[0];
}
// Thread 0 loads two phases through one mbarrier and the others wait only for the first: the second fill
// lands (CUDA_EMU_TMA=early) under threads that still read the first.
__global__ void refill_under_readers(const __grid_constant__ CUtensorMap map, float* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u, bar = base + 8192;
  if (threadIdx.x == 0) mbar_init(bar, 1);
  __syncthreads();
  const uint64_t desc = desc128(base);
  for (int kt = 0; kt < 2; ++kt) {
    if (threadIdx.x == 0) {
      mbar_expect(bar, 8192);
      tma_2d(base, &map, bar, 0, 64 * kt);
    }
    while (!mbar_try_wait(bar, uint32_t(kt))) {
    }
    float d[4] = {0, 0, 0, 0};
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    mma_m64n8k16(d, desc, desc);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    out[threadIdx.x] = d[0];
    // (no __syncthreads: the refill of the next kt may land before the other warps' wgmma read this one)
  }
}

// Every warp has seen the first fill complete; thread 0 then refills the stage (CUDA_EMU_TMA=early: it lands at
// once) and no one waits for it before the wgmmas read the stage: they read lines filled for a phase their warps
// have not seen complete, whatever the order the emulator runs the warps in (refill_under_readers may stop on its
// wait instead).
__global__ void refill_before_the_wgmma(const __grid_constant__ CUtensorMap map, float* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u, bar = base + 8192;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_expect(bar, 8192);
    tma_2d(base, &map, bar, 0, 0);
  }
  __syncthreads();
  while (!mbar_try_wait(bar, 0)) {
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_expect(bar, 8192);
    tma_2d(base, &map, bar, 0, 64);
  }
  __syncthreads();
  float d[4] = {0, 0, 0, 0};
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  mma_m64n8k16(d, desc128(base), desc128(base));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  out[threadIdx.x] = d[0];
}

// Thread 0 completes phase 0 of an mbarrier, passes it, then waits for phase 2 (parity 0 again) while phase 1 is
// still open: the parity matches the old phase, so the wait passes at once, on a GPU too.
__global__ void wait_two_phases_ahead() {
  __shared__ uint64_t bar;
  if (threadIdx.x != 0) return;
  mbar_init(smem_u32(&bar), 1);
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(&bar)) : "memory");
  while (!mbar_try_wait(smem_u32(&bar), 0)) {
  }
  while (!mbar_try_wait(smem_u32(&bar), 0)) {  // phase 2's parity: 0 again
  }
}

TEST(CudaEmuDeathTest, StopsOnHopperFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Buf<float> f(256);
  Buf<uint16_t> m(128 * 64);
  const CUtensorMap map = bf16_map(m.d, 128, 64, 64, 64);
  cudaFuncSetAttribute(wgmma_never_waited, cudaFuncAttributeMaxDynamicSharedMemorySize, 16384);
  cudaFuncSetAttribute(refill_under_readers, cudaFuncAttributeMaxDynamicSharedMemorySize, 16384);
  EXPECT_DEATH(wait_uninitialised<<<1, 32>>>(), "holds no initialised mbarrier");
  EXPECT_DEATH(wait_two_phases_ahead<<<1, 32>>>(), "two or more ahead of the last one completed");
  EXPECT_DEATH(wgmma_never_waited<<<1, 128, 16384>>>(f.d), "never waited for");
  cudaFuncSetAttribute(wgmma_unfenced, cudaFuncAttributeMaxDynamicSharedMemorySize, 16384);
  for (int after_a_wait : {0, 1})
    EXPECT_DEATH(wgmma_unfenced<<<1, 128, 16384>>>(f.d, after_a_wait), "no wgmma.fence since the kernel's start");
  cudaFuncSetAttribute(tma_store_box, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192 + 1024);
  EXPECT_DEATH(tma_store_box<<<1, 128, 8192 + 1024>>>(map, 0, 0, 0, 0), "TMA stores issued .* never waited for");
  // a swizzled box's shared image where the swizzle's pattern does not start (the GPU swizzles by the address's bits:
  // 1024-byte periods for 128 bytes, 512 for 64): conv v3's TMA-store images were 256 bytes off, 2026-11-30
  EXPECT_DEATH(tma_store_box<<<1, 128, 8192 + 1024>>>(map, 0, 0, 1, 512), "not 1024-byte aligned");
  Buf<uint16_t> m64(20 * 80);
  const CUtensorMap map64 = bf16_map(m64.d, 20, 72, 80, 16, CU_TENSOR_MAP_SWIZZLE_64B, 32);
  EXPECT_DEATH(tma_store_box<<<1, 64, 8192 + 1024>>>(map64, 32, 8, 1, 256), "not 512-byte aligned");
  EXPECT_DEATH(
      {
        setenv("CUDA_EMU_TMA", "early", 1);
        setenv("CUDA_EMU_SCHEDULE", "warp", 1);
        refill_under_readers<<<1, 128, 16384>>>(map, f.d);
        cudaDeviceSynchronize();
      },
      "was refilled before every reader|no thread of the block can complete");
  cudaFuncSetAttribute(refill_before_the_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, 16384);
  EXPECT_DEATH(
      {
        setenv("CUDA_EMU_TMA", "early", 1);
        refill_before_the_wgmma<<<1, 128, 16384>>>(map, f.d);
        cudaDeviceSynchronize();
      },
      "TMA filled for phase 2 of the mbarrier .* while this warp has seen 1 phases of it complete: the stage was "
      "refilled before every reader");
}

// ---- launch configuration ----------------------------------------------------------------------------------
// ---- stream capture into graphs ---------------------------------------------------------------------------
__global__ void add_one(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

// Work queued on a capturing stream runs at each cudaGraphLaunch, not at capture; what a capture refuses
// on a GPU (a synchronous copy, a host wait, an allocation, the legacy stream) invalidates it here too.
TEST(CudaEmu, StreamCaptureAndReplay) {
  const int n = 100;
  Buf<float> x(std::vector<float>(n, 0.0f));
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  add_one<<<1, 128, 0, s>>>(x.d, n);
  ASSERT_EQ(cudaMemsetAsync(x.d, 0, sizeof(float), s), cudaSuccess);  // x[0] = 0 after the kernel
  add_one<<<1, 128, 0, s>>>(x.d, n);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(x.down()[5], 0.0f) << "captured work ran at capture";
  cudaGraphExec_t e = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(cudaGraphLaunch(e, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const std::vector<float> h = x.down();
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[5], 6.0f);
  EXPECT_EQ(cudaGraphExecDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);

  // Refused inside a capture: each invalidates it, and EndCapture says so.
  std::vector<float> host(n);
  const auto refused = [&](const char* what, auto&& call) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess) << what;
    call();
    cudaGraph_t bad = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &bad), cudaErrorStreamCaptureInvalidated) << what;
    EXPECT_EQ(bad, nullptr) << what;
    (void)cudaGetLastError();
  };
  refused("cudaMemcpy", [&] { EXPECT_EQ(cudaMemcpy(host.data(), x.d, 4, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureUnsupported); });
  refused("pageable cudaMemcpyAsync", [&] {
    EXPECT_EQ(cudaMemcpyAsync(host.data(), x.d, 4, cudaMemcpyDeviceToHost, s), cudaErrorStreamCaptureUnsupported);
  });
  refused("cudaStreamSynchronize", [&] { EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported); });
  refused("cudaMalloc", [&] {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
  });
  refused("a kernel on the legacy stream", [&] { add_one<<<1, 128>>>(x.d, n); });
  EXPECT_EQ(x.down()[5], 6.0f) << "refused work ran";
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Fork and join: a stream that waits for an event recorded in the capture joins it, its work goes into the graph
// (in issue order, after the event's), and the capture ends only once the capturing stream has waited for an event
// recorded after the joined stream's last work (else cudaErrorStreamCaptureUnjoined, as on a GPU).
TEST(CudaEmu, StreamCaptureForksAndJoins) {
  const int n = 64;
  Buf<float> x(std::vector<float>(n, 0.0f)), y(std::vector<float>(n, -1.0f));
  cudaStream_t s, t;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t fork, join;
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  add_one<<<1, 128, 0, s>>>(x.d, n);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(t, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudaStreamWaitEvent(t, fork, 0), cudaSuccess);  // t joins
  ASSERT_EQ(cudaStreamIsCapturing(t, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  ASSERT_EQ(cudaMemcpyAsync(y.d, x.d, n * sizeof(float), cudaMemcpyDeviceToDevice, t), cudaSuccess);  // y = x
  ASSERT_EQ(cudaEventRecord(join, t), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s, join, 0), cudaSuccess);  // t joined back
  add_one<<<1, 128, 0, s>>>(x.d, n);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(t, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone) << "the capture ended: t no longer in it";
  EXPECT_EQ(x.down()[3], 0.0f) << "captured work ran at capture";
  EXPECT_EQ(y.down()[3], -1.0f) << "the joined stream's captured copy ran at capture";
  cudaGraphExec_t e = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(e, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(x.down()[3], 2.0f);
  EXPECT_EQ(y.down()[3], 1.0f) << "the copy on the joined stream runs between the two kernels";
  ASSERT_EQ(cudaGraphLaunch(e, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(x.down()[3], 4.0f);
  EXPECT_EQ(y.down()[3], 3.0f);
  EXPECT_EQ(cudaGraphExecDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);

  // Not joined back: EndCapture fails, and t is a plain stream again (its next kernel runs).
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(t, fork, 0), cudaSuccess);
  add_one<<<1, 128, 0, t>>>(y.d, n);
  ASSERT_EQ(cudaEventRecord(join, t), cudaSuccess);
  add_one<<<1, 128, 0, t>>>(y.d, n);  // after the event the capturing stream waits for
  ASSERT_EQ(cudaStreamWaitEvent(s, join, 0), cudaSuccess);
  g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(g, nullptr);
  (void)cudaGetLastError();
  EXPECT_EQ(y.down()[3], 3.0f) << "the failed capture's work ran";
  add_one<<<1, 128, 0, t>>>(y.d, n);
  ASSERT_EQ(cudaStreamSynchronize(t), cudaSuccess);
  EXPECT_EQ(y.down()[3], 4.0f) << "after the capture, t's kernels run";

  // Joined back through another joined stream (u -> t -> s): the origin comes after u's work too.
  cudaStream_t u;
  ASSERT_EQ(cudaStreamCreateWithFlags(&u, cudaStreamNonBlocking), cudaSuccess);
  for (const bool t_joins_back : {true, false}) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(t, fork, 0), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(fork, t), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(u, fork, 0), cudaSuccess);
    add_one<<<1, 128, 0, u>>>(y.d, n);
    ASSERT_EQ(cudaEventRecord(join, u), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(t, join, 0), cudaSuccess);  // t after u's kernel
    if (t_joins_back) {
      ASSERT_EQ(cudaEventRecord(join, t), cudaSuccess);
      ASSERT_EQ(cudaStreamWaitEvent(s, join, 0), cudaSuccess);  // s after t, so after u
    }
    g = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &g);
    (void)cudaGetLastError();
    if (t_joins_back) {
      ASSERT_EQ(end, cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(e, s), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_EQ(y.down()[3], 5.0f) << "u's kernel in the graph";
      EXPECT_EQ(cudaGraphExecDestroy(e), cudaSuccess);
      EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
    } else {
      EXPECT_EQ(end, cudaErrorStreamCaptureUnjoined) << "u joined t, but t never joined s";
    }
  }
  EXPECT_EQ(cudaStreamDestroy(u), cudaSuccess);

  // A stream that joins and queues nothing needs no join.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(t, fork, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  for (cudaEvent_t ev : {fork, join}) EXPECT_EQ(cudaEventDestroy(ev), cudaSuccess);
  for (cudaStream_t q : {s, t}) EXPECT_EQ(cudaStreamDestroy(q), cudaSuccess);
}

// CUDA_EMU_STREAMS=lazy: work on created streams waits to be asked for; a copy on another stream reads the kernel's
// output only when it waits for an event recorded after the kernel (without the wait it reads the old values, as a
// GPU may); synchronisations run what they must; a queued event is not ready for cudaEventElapsedTime.
TEST(CudaEmu, DeferredStreamsRunWorkAsTheWaitsSay) {
  const hpdt::ScopedEnv lazy("CUDA_EMU_STREAMS", "lazy");
  const int n = 64;
  Buf<float> a(std::vector<float>(n, 0.0f)), b(std::vector<float>(n, -1.0f)), c(std::vector<float>(n, -1.0f));
  cudaStream_t s1, s2;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t done, t0, t1;
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&t0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&t1), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(t0, s1), cudaSuccess);
  add_one<<<1, 128, 0, s1>>>(a.d, n);  // queued: a stays 0 until s1 runs
  ASSERT_EQ(cudaEventRecord(t1, s1), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, t0, t1), cudaErrorNotReady);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaMemcpyAsync(b.d, a.d, n * sizeof(float), cudaMemcpyDeviceToDevice, s2), cudaSuccess);  // no wait
  ASSERT_EQ(cudaEventRecord(done, s1), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s2, done, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(c.d, a.d, n * sizeof(float), cudaMemcpyDeviceToDevice, s2), cudaSuccess);  // after it
  ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);  // runs s2, whose wait runs s1 up to `done`
  std::vector<float> hb(n), hc(n);
  ASSERT_EQ(cudaMemcpyAsync(hb.data(), b.d, n * sizeof(float), cudaMemcpyDeviceToHost, s2),
            cudaSuccess);  // pageable: now
  ASSERT_EQ(cudaMemcpyAsync(hc.data(), c.d, n * sizeof(float), cudaMemcpyDeviceToHost, s2), cudaSuccess);
  EXPECT_EQ(hb[3], 0.0f) << "the copy without a wait ran after the kernel";
  EXPECT_EQ(hc[3], 1.0f) << "the copy after the wait did not see the kernel";
  EXPECT_EQ(cudaEventElapsedTime(&ms, t0, t1), cudaSuccess);
  // An event synchronisation runs its stream up to the event only; the synchronous copy runs everything first.
  add_one<<<1, 128, 0, s1>>>(a.d, n);
  ASSERT_EQ(cudaEventRecord(done, s1), cudaSuccess);
  add_one<<<1, 128, 0, s1>>>(a.d, n);
  ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(hb.data(), a.d, n * sizeof(float), cudaMemcpyDeviceToHost, s2), cudaSuccess);
  EXPECT_EQ(hb[3], 2.0f) << "cudaEventSynchronize ran past its event (or short of it)";
  EXPECT_EQ(a.down()[3], 3.0f) << "cudaMemcpy did not run the queued work first";
  for (cudaEvent_t e : {done, t0, t1}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s1), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s2), cudaSuccess);
}

// CUDA_EMU_STREAMS=random: each stream draws at its creation whether it runs its work as queued or lazily. Over 16
// streams both kinds come out (seen by reading the emulated device memory, host memory, before any synchronisation),
// and every stream's result is the same after its synchronisation.
TEST(CudaEmu, RandomStreamsRunAtOnceOrWhenAsked) {
  const hpdt::ScopedEnv random("CUDA_EMU_STREAMS", "random");
  const int n = 64;
  int at_once = 0, asked = 0;
  for (int k = 0; k < 16; ++k) {
    Buf<float> a(std::vector<float>(n, 0.0f));
    cudaStream_t st;
    ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    add_one<<<1, 128, 0, st>>>(a.d, n);
    (a.d[3] == 1.0f ? at_once : asked) += 1;  // (an emulator-only peek: device memory is host memory here)
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    EXPECT_EQ(a.d[3], 1.0f) << "stream " << k;
    EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);
  }
  EXPECT_GT(at_once, 0);
  EXPECT_GT(asked, 0);
}

__global__ void big_smem(float* out) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = buf[0];
}

TEST(CudaEmu, LaunchErrors) {
  Buf<float> d(1);
  big_smem<<<1, 2048>>>(d.d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  big_smem<<<0, 32>>>(d.d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  big_smem<<<1, 32, 64 * 1024>>>(d.d);  // above 48 KiB without the attribute
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024), cudaSuccess);
  big_smem<<<1, 32, 64 * 1024>>>(d.d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
            cudaErrorInvalidValue);
  float h = 0;
  EXPECT_EQ(cudaMemcpy(&h, d.d, 8, cudaMemcpyDeviceToHost), cudaErrorInvalidValue) << "past the allocation";
  EXPECT_EQ(cudaMemcpy(&h, &h, 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue) << "host memory as device memory";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // failed calls leave their error, as CUDA's do
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The occupancy calculator (the split-K sizing asks it): 128 registers a thread, threads and dynamic shared memory
// bound the answer; more shared memory than the kernel opted into fits no block.
TEST(CudaEmu, OccupancyCalculator) {
  ASSERT_EQ(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024), cudaSuccess);
  int n = -1;
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, big_smem, 256, 0), cudaSuccess);
  EXPECT_EQ(n, 2);  // 256 threads x 128 registers: 2 blocks on 65536 registers
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, big_smem, 32, 0), cudaSuccess);
  EXPECT_EQ(n, 16);
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, big_smem, 128, 0), cudaSuccess);
  EXPECT_EQ(n, 4);
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, big_smem, 128, 60 * 1024), cudaSuccess);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, big_smem, 128, 100 * 1024), cudaSuccess);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, big_smem, 2048, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

// ---- what the transformer rewrites ------------------------------------------------------------------------
template <int kThreads, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) two_arrays(const int* __restrict__ in, int* out) {
  __shared__ int a[kThreads], b[kThreads / 2];  // two declarators, one per-block array each
  __shared__ __align__(16) int c;
  a[threadIdx.x] = in[threadIdx.x];
  if (threadIdx.x < kThreads / 2) b[threadIdx.x] = 2 * in[threadIdx.x];
  if (threadIdx.x == 0) c = 1000;
  __syncthreads();
  out[blockIdx.x * kThreads + threadIdx.x] =
      a[kThreads - 1 - threadIdx.x] + b[threadIdx.x % (kThreads / 2)] + c + int(blockIdx.x);
}

TEST(CudaEmu, TransformedDeclarationsAndLaunches) {
  std::vector<int> in(64);
  for (int i = 0; i < 64; ++i) in[size_t(i)] = i;
  Buf<int> din(in), dout(3 * 64);
  auto kernel = two_arrays<64, 2>;  // through a function pointer, in a generic lambda, over several lines
  auto go = [&](auto k, auto... args) { k<<<dim3(3), 64, 0, cudaStreamPerThread>>>(args...); };
  go(kernel, din.d, dout.d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto out = dout.down();
  for (int bl = 0; bl < 3; ++bl)
    for (int t = 0; t < 64; ++t)
      EXPECT_EQ(out[size_t(bl * 64 + t)], (63 - t) + 2 * (t % 32) + 1000 + bl) << bl << " " << t;
}

// ---- faults the emulator stops on --------------------------------------------------------------------------
__global__ void divergent_barrier(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[0] = 1;
}
__global__ void early_exit_barrier(float* out) {
  if (threadIdx.x >= 40) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
__global__ void shfl_without_self(int* out) { out[threadIdx.x] = __shfl_sync(0x1u, 1, 0); }
__global__ void mma_lane_exited(float* out) {
  if (threadIdx.x == 3) return;
  const uint32_t a[4] = {0, 0, 0, 0};
  float d[4] = {0, 0, 0, 0};
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[0]), "r"(a[1]));
  out[threadIdx.x] = d[0];
}
__global__ void smem_overrun(uint32_t* out) {
  extern __shared__ __align__(16) uint16_t buf[];
  uint32_t r[4];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(&buf[threadIdx.x * 8])));
  out[threadIdx.x] = r[0];
}
__global__ void smem_write_past_end(float* out) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = 1.0f;  // 33 floats into 128 bytes
  out[0] = 0;
}
__global__ void __launch_bounds__(64) bounded(float* out) { out[threadIdx.x] = 0; }
__global__ void global_overrun(float* out) { out[threadIdx.x * 64] = 1; }  // 64 floats allocated
__global__ void partial_warp_shfl(int* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1); }

TEST(CudaEmuDeathTest, StopsOnFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Buf<float> f(64);
  Buf<int> i(64);
  Buf<uint32_t> u(64);
  EXPECT_DEATH(divergent_barrier<<<1, 32>>>(f.d), "while thread [0-9]+ waits at __syncthreads\\(\\)");
  EXPECT_DEATH(early_exit_barrier<<<1, 64>>>(f.d), "every thread of the block must reach the barrier");
  EXPECT_DEATH(shfl_without_self<<<1, 32>>>(i.d), "leaves out the calling lane [1-9]");
  EXPECT_DEATH(mma_lane_exited<<<1, 32>>>(f.d), "needs the whole warp|wait for it");
  EXPECT_DEATH(smem_overrun<<<1, 32, 256>>>(u.d), "outside the 256 bytes of dynamic shared memory");
  EXPECT_DEATH(smem_write_past_end<<<1, 33, 128>>>(f.d),
               "outside the dynamic shared memory|shared memory out of bounds");
  EXPECT_DEATH(bounded<<<1, 128>>>(f.d), "__launch_bounds__\\(64\\)");
  EXPECT_DEATH((two_arrays<64, 2><<<1, 128>>>(i.d, i.d)), "__launch_bounds__\\(64\\)");
  EXPECT_DEATH(partial_warp_shfl<<<1, 48>>>(i.d), "do not exist in this block");
  EXPECT_DEATH(global_overrun<<<1, 32>>>(f.d), "global memory out of bounds|heap-buffer-overflow");
}

// ---- speed -------------------------------------------------------------------------------------------------
__global__ void barrier_loop(int iters, float* out) {
  float v = float(threadIdx.x);
  for (int i = 0; i < iters; ++i) {
    v = __shfl_xor_sync(0xffffffffu, v, 1) + 1.0f;
    __syncthreads();
  }
  out[threadIdx.x] = v;
}

TEST(CudaEmu, SwitchCost) {
  Buf<float> d(256);
  const int iters = 400;
  const auto t0 = std::chrono::steady_clock::now();
  barrier_loop<<<4, 256>>>(iters, d.d);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double waits = 4.0 * 256 * iters * 2;  // each thread waits once per shuffle and once per barrier
  std::printf("cuda_emu: %.1f ns per wait (switch + bookkeeping), %.2f s for %.0f waits\n", s / waits * 1e9, s, waits);
  const auto h = d.down();
  EXPECT_EQ(h[0], float(iters) + (iters % 2 ? 1.0f : 0.0f));
}

// ---- red.global.add.v2.f32 (kernels/cuda/attention.cu, variant 3's dQ adds) ----------------------------------
__global__ void red_pairs(float* acc, const float* add) {
  const int i = int(threadIdx.x);
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(acc + 2 * (i % 4)), "f"(add[2 * i]), "f"(add[2 * i + 1])
               : "memory");
}

TEST(CudaEmu, VectorReductionAddsEveryLane) {
  Buf<float> acc(8), add(64);
  std::vector<float> a(8), b(64);
  for (int i = 0; i < 8; ++i) a[size_t(i)] = float(i);
  for (int i = 0; i < 64; ++i) b[size_t(i)] = 0.25f * float(i + 1);
  acc.up(a);
  add.up(b);
  red_pairs<<<1, 32>>>(acc.d, add.d);  // 8 lanes on each of 4 pairs
  const auto h = acc.down();
  for (int k = 0; k < 4; ++k)
    for (int e = 0; e < 2; ++e) {
      float want = a[size_t(2 * k + e)];
      for (int i = k; i < 32; i += 4) want += b[size_t(2 * i + e)];
      EXPECT_EQ(h[size_t(2 * k + e)], want) << "pair " << k << " element " << e;
    }
}

// ---- blocks side by side (CUDA_EMU_RESIDENT) and spinning threads ---------------------------------------------
// Spins (as attention v3's turn waits do) until *flag is set.
__device__ void spin_until_set(const unsigned* flag) {
  const volatile unsigned* f = flag;
  while (*f == 0u) __nanosleep(32);
  __threadfence();
}

// Block b writes its row of `rows`, then (thread 0) waits for block b + wait_offset's flag, if that block exists,
// checks that block's row, and sets its own flag. `clock` orders the blocks' starts and ends.
__global__ void chain_of_blocks(unsigned* rows, unsigned* flags, unsigned* seen, unsigned* starts, unsigned* ends,
                                unsigned* clock, int wait_offset) {
  const int b = int(blockIdx.x), t = int(threadIdx.x), n = int(gridDim.x);
  if (t == 0) starts[b] = atomicAdd(clock, 1u);
  rows[b * 64 + t] = unsigned(b * 1000 + t);
  __syncthreads();
  if (t == 0) {
    const int w = b + wait_offset;
    if (w >= 0 && w < n) {
      spin_until_set(flags + w);
      seen[b] = rows[w * 64 + 63];
    }
    __threadfence();  // the row before the flag
    atomicExch(flags + b, 1u);
    ends[b] = atomicAdd(clock, 1u);
  }
}

struct Chain {
  Buf<unsigned> rows, flags, seen, starts, ends, clock;
  int n;
  explicit Chain(int blocks)
      : rows(size_t(blocks) * 64), flags(size_t(blocks)), seen(size_t(blocks)), starts(size_t(blocks)),
        ends(size_t(blocks)), clock(1), n(blocks) {
    EXPECT_EQ(cudaMemset(flags.d, 0, flags.n * 4), cudaSuccess);
    EXPECT_EQ(cudaMemset(seen.d, 0xff, seen.n * 4), cudaSuccess);
    EXPECT_EQ(cudaMemset(clock.d, 0, 4), cudaSuccess);
  }
  void run(int wait_offset) {
    chain_of_blocks<<<n, 64>>>(rows.d, flags.d, seen.d, starts.d, ends.d, clock.d, wait_offset);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
  // Whether some block started before the block before it had ended.
  bool interleaved() const {
    const auto s = starts.down(), e = ends.down();
    for (int b = 1; b < n; ++b)
      if (s[size_t(b)] < e[size_t(b - 1)]) return true;
    return false;
  }
};

TEST(CudaEmu, BlocksRunOneAfterAnotherByDefault) {
  Chain c(6);
  const unsigned long long yields = cuda_emu::block_yields();
  c.run(-1);  // each block waits for the one before: already done
  const auto seen = c.seen.down();
  for (int b = 1; b < 6; ++b) EXPECT_EQ(seen[size_t(b)], unsigned((b - 1) * 1000 + 63)) << "block " << b;
  EXPECT_FALSE(c.interleaved());
  EXPECT_EQ(cuda_emu::block_yields(), yields);
}

TEST(CudaEmu, ReverseDispatchStartsFromTheLastBlock) {
  const hpdt::ScopedEnv reverse("CUDA_EMU_DISPATCH", "reverse");
  Chain c(5);
  c.run(+1);  // each block waits for the one after it: dispatched, and done, before it
  const auto seen = c.seen.down(), starts = c.starts.down();
  for (int b = 0; b < 4; ++b) EXPECT_EQ(seen[size_t(b)], unsigned((b + 1) * 1000 + 63)) << "block " << b;
  for (int b = 0; b < 5; ++b) EXPECT_EQ(starts[size_t(b)], unsigned(2 * (4 - b))) << "block " << b;
}

TEST(CudaEmu, ResidentBlocksWaitForEachOther) {
  const hpdt::ScopedEnv resident("CUDA_EMU_RESIDENT", "4");
  {
    Chain c(11);  // each waits for the one before; newest first, so they wait for real
    const unsigned long long yields = cuda_emu::block_yields();
    c.run(-1);
    const auto seen = c.seen.down();
    for (int b = 1; b < 11; ++b) EXPECT_EQ(seen[size_t(b)], unsigned((b - 1) * 1000 + 63)) << "block " << b;
    EXPECT_TRUE(c.interleaved());
    EXPECT_GT(cuda_emu::block_yields(), yields);
  }
  {
    Chain c(4);  // each waits for the one after it: fine while all four are resident
    c.run(+1);
    const auto seen = c.seen.down();
    for (int b = 0; b < 3; ++b) EXPECT_EQ(seen[size_t(b)], unsigned((b + 1) * 1000 + 63)) << "block " << b;
  }
}

// The same chain by attention v3's turn protocol: an acquire load of the flag (ld.acquire.gpu), the row published by
// a release fence (fence.acq_rel.gpu) before the flag is set. Each block waits for the one before; 4 resident.
__global__ void acquire_release_chain(unsigned* rows, unsigned* flags, unsigned* seen) {
  const int b = int(blockIdx.x), t = int(threadIdx.x);
  rows[b * 64 + t] = unsigned(b * 1000 + t);
  __syncthreads();
  if (t == 0) {
    if (b > 0) {
      unsigned f = 0;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(f) : "l"(flags + b - 1) : "memory");
        if (f != 0u) break;
        __nanosleep(32);
      }
      seen[b] = rows[(b - 1) * 64 + 63];
    }
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    atomicExch(flags + b, 1u);
  }
}

TEST(CudaEmu, AcquireLoadsAndReleaseFencesHandOver) {
  const hpdt::ScopedEnv resident("CUDA_EMU_RESIDENT", "4");
  EXPECT_EQ(cuda_emu::resident_blocks(), 4);
  Chain c(11);
  const unsigned long long yields = cuda_emu::block_yields();
  acquire_release_chain<<<11, 64>>>(c.rows.d, c.flags.d, c.seen.d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const auto seen = c.seen.down();
  for (int b = 1; b < 11; ++b) EXPECT_EQ(seen[size_t(b)], unsigned((b - 1) * 1000 + 63)) << "block " << b;
  EXPECT_GT(cuda_emu::block_yields(), yields) << "the blocks did not interleave";
}

TEST(CudaEmu, ResidentBlocksReadTheSetting) {
  {
    const hpdt::ScopedEnv unset("CUDA_EMU_RESIDENT", "");  // empty: the default, one block
    EXPECT_EQ(cuda_emu::resident_blocks(), 1);
  }
  const hpdt::ScopedEnv resident("CUDA_EMU_RESIDENT", "7");
  EXPECT_EQ(cuda_emu::resident_blocks(), 7);
}

// Two warps of a block hand a flag to each other, whichever runs first: the one that spins must let the other run
// (with one resident block too). Block 0 runs its threads forward, block 1 in reverse (CUDA_EMU_ORDER's default).
__global__ void warps_hand_off(unsigned* flags, unsigned* out) {
  unsigned* f = flags + 2 * blockIdx.x;
  if (threadIdx.x == 32) {
    atomicExch(f, 1u);
    spin_until_set(f + 1);
    out[2 * blockIdx.x + 1] = 1;
  } else if (threadIdx.x == 0) {
    spin_until_set(f);
    atomicExch(f + 1, 1u);
    out[2 * blockIdx.x] = 1;
  }
}

TEST(CudaEmu, SpinningThreadsLetTheirBlockRun) {
  Buf<unsigned> flags(4), out(4);
  EXPECT_EQ(cudaMemset(flags.d, 0, 16), cudaSuccess);
  EXPECT_EQ(cudaMemset(out.d, 0, 16), cudaSuccess);
  warps_hand_off<<<2, 64>>>(flags.d, out.d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out.down(), std::vector<unsigned>(4, 1u));
}

TEST(CudaEmuDeathTest, BlocksThatWaitForAnAbsentBlockStop) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // One resident block (the default): block 0 waits for block 1, which cannot start.
  EXPECT_DEATH(Chain(3).run(+1), "spins at __nanosleep at .*emu_selftest.cu:[0-9]+ for good.* 1 resident block");
  // Two: blocks 0 and 1 wait for the block after them, and block 2 cannot start until one of them ends.
  EXPECT_DEATH(
      {
        setenv("CUDA_EMU_RESIDENT", "2", 1);
        Chain(4).run(+1);
      },
      "for good.* 2 resident block");
  // Dispatched from the last block: block 2 waits for block 1, which cannot start.
  EXPECT_DEATH(
      {
        setenv("CUDA_EMU_DISPATCH", "reverse", 1);
        Chain(3).run(-1);
      },
      "for good.* 1 resident block.*dispatched from the last index down");
  EXPECT_DEATH(
      {
        setenv("CUDA_EMU_RESIDENT", "0", 1);
        Chain(2).run(-1);
      },
      "CUDA_EMU_RESIDENT=0: expected a number of blocks from 1 to 64");
  EXPECT_DEATH(
      {
        setenv("CUDA_EMU_DISPATCH", "backwards", 1);
        Chain(2).run(-1);
      },
      "CUDA_EMU_DISPATCH=backwards: expected forward or reverse");
}

// ---- kernels/cuda/sm90a/wgmma.cuh: %globaltimer and the mbarrier watchdog ----------------------------------
__global__ void read_global_timer(unsigned long long* out) {
  const unsigned long long t0 = hpdt::kernels::cuda::sm90a::global_ns();
  __syncthreads();
  const unsigned long long t1 = hpdt::kernels::cuda::sm90a::global_ns();
  if (threadIdx.x == 0) out[0] = t0, out[1] = t1;
}

TEST(CudaEmu, GlobalTimerAdvances) {
  Buf<unsigned long long> t(2);
  const auto before = std::chrono::steady_clock::now().time_since_epoch();
  read_global_timer<<<1, 32>>>(t.d);
  const auto h = t.down();
  EXPECT_GE(h[0], (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(before).count());
  EXPECT_GT(h[1], h[0]);
}

// A phase nobody completes. Thread 0 gives up at once (timeout 0); thread 1 keeps polling with the default
// timeout, so the emulator's own check (every thread of the block blocked or polling for 100000 tries) does not
// stop the kernel first: the watchdog's trap does.
__global__ void wait_for_a_phase_never_completed(unsigned long long timeout_ns) {
  namespace hw = hpdt::kernels::cuda::sm90a;
  __shared__ __align__(8) uint64_t bar;
  const uint32_t b = hpdt::kernels::cuda::smem_u32(&bar);
  if (threadIdx.x == 0) {
    hw::mbar_init(b, 1);
    hw::fence_mbar_init();
  }
  __syncthreads();
  hw::mbar_wait(b, 0, threadIdx.x == 0 ? uint64_t(timeout_ns) : hw::kMbarTimeoutNs);
}

TEST(CudaEmuDeathTest, MbarrierWatchdogFailsTheLaunch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(wait_for_a_phase_never_completed<<<1, 2>>>(0),
               "trap at kernels/cuda/sm90a/wgmma.cuh:[0-9]+: the kernel stopped itself");
}

// ---- racecheck (the racecheck preset: ThreadSanitizer told about the CUDA threads) ------------------------------
// Each thread stores its index in shared memory and reads its neighbour's, then the same through a warp's lanes with
// __syncwarp, and from a producer warp to a consumer warp through an mbarrier phase. Run with every synchronisation
// (`synced`), none of them is a race, which the racecheck build checks (a report stops the test); without the block
// barrier, ctest's test_cuda_emu.racecheck_reports_a_missing_barrier expects ThreadSanitizer's report of the race.
__global__ void exchange_through_shared(float* out, bool synced) {
  namespace hw = hpdt::kernels::cuda::sm90a;
  __shared__ float s[128];
  __shared__ float w[128];
  __shared__ float m[32];
  __shared__ __align__(8) uint64_t bar;
  const int t = threadIdx.x;
  const uint32_t b = hpdt::kernels::cuda::smem_u32(&bar);
  if (t == 0) {
    hw::mbar_init(b, 32);
    hw::fence_mbar_init();
  }
  s[t] = float(t);
  if (synced) __syncthreads();
  out[t] = s[t ^ 1];
  w[t] = float(2 * t);
  __syncwarp();
  out[128 + t] = w[t ^ 31];
  if (t < 32) {  // warp 0 produces for warp 1
    m[t] = float(3 * t);
    hw::mbar_arrive(b);
  } else if (t < 64) {
    hw::mbar_wait(b, 0, hw::kMbarTimeoutNs);
    out[256 + t - 32] = m[63 - t];
  }
}

TEST(CudaEmuRacecheck, SynchronisedExchangesAreNoRace) {
  Buf<float> out(288);
  exchange_through_shared<<<2, 128>>>(out.d, true);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto h = out.down();
  for (int t = 0; t < 128; ++t) {
    EXPECT_EQ(h[size_t(t)], float(t ^ 1)) << t;
    EXPECT_EQ(h[size_t(128 + t)], float(2 * (t ^ 31))) << t;
  }
  for (int t = 0; t < 32; ++t) EXPECT_EQ(h[size_t(256 + t)], float(3 * (31 - t))) << t;
}

// Run by test_cuda_emu.racecheck_reports_a_missing_barrier in the racecheck build only: the race is the test.
TEST(CudaEmuRacecheck, DISABLED_MissingBarrierIsReported) {
  Buf<float> out(288);
  exchange_through_shared<<<1, 128>>>(out.d, false);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
