// Cache-blocked, packed SGEMM in the Goto/BLIS style:
//   for jc in N by NC:  for pc in K by KC:  pack op(B)[pc, jc] into NR-wide panels (shared)
//     for ic in M by MC (threads):           pack op(A)[ic, pc] into MR-tall panels (per thread)
//       for jr, ir: MR x NR micro-kernel, accumulators in vector registers, one FMA per (row, vector).
// Packing makes the micro-kernel's loads unit-stride whatever the transposes are, and edges are
// zero-padded in the packs so the kernel never branches inside its k loop.
#include "hpdt/kernels/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "simd.h"

namespace hpdt::kernels::cpu {

namespace {

using namespace simd;
#if defined(__AVX512F__)
constexpr int MR = 8;  // 16 zmm accumulators + 2 B vectors + 1 broadcast
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int MR = 6;  // 12 ymm accumulators of 16
#else
constexpr int MR = 4;
#endif
constexpr int NR = 2 * VW;
constexpr int64_t KC = kGemmKChunk;  // a KC x NR panel of B stays in L1 across the MR rows
constexpr int64_t MC = MR * 16;   // an MC x KC block of A stays in L2
constexpr int64_t NC = NR * 64;   // a KC x NC block of B stays in L2/L3
constexpr int64_t NCHUNK = NR * 8;  // columns one task handles inside an NC block

// b advances by bstride floats per k: NR for a packed panel, ldb when B is read in place.
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, int64_t bstride, float* c,
                  int64_t ldc, float alpha, float beta, int mr, int nr) {
  vec acc[MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = vzero();
  for (int64_t k = 0; k < kc; ++k) {
    const vec b0 = vload(b), b1 = vload(b + VW);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const vec ar = vset1(a[r]);
      acc[r][0] = vfma(ar, b0, acc[r][0]);
      acc[r][1] = vfma(ar, b1, acc[r][1]);
    }
    a += MR;
    b += bstride;
  }
  const vec va = vset1(alpha);
  if (mr == MR && nr == NR) {
    if (beta == 0.0f) {  // C is not read: it may hold garbage (NaN) on entry
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        vstore(c + r * ldc, vmul(va, acc[r][0]));
        vstore(c + r * ldc + VW, vmul(va, acc[r][1]));
      }
    } else {
      const vec vb = vset1(beta);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        float* cr = c + r * ldc;
        vstore(cr, vfma(va, acc[r][0], vmul(vb, vload(cr))));
        vstore(cr + VW, vfma(va, acc[r][1], vmul(vb, vload(cr + VW))));
      }
    }
    return;
  }
  alignas(64) float tmp[MR * NR];
  for (int r = 0; r < MR; ++r) {
    vstore(tmp + r * NR, acc[r][0]);
    vstore(tmp + r * NR + VW, acc[r][1]);
  }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) {
      float& dst = c[r * ldc + j];
      dst = beta == 0.0f ? alpha * tmp[r * NR + j] : alpha * tmp[r * NR + j] + beta * dst;
    }
}

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
// A full 6-row panel of row-major A, 8 columns at a time: the 6 rows (and 2 zero rows) transposed 8x8 in
// registers, each column stored as 8 floats at its k*6 slot; the 2 extra floats of a store are
// overwritten by the next one, and the last spills 2 floats past the panel (pack_a's buffers have
// kPackSlack floats of room). Scalar, this transpose took 10 % of a ViT-Ti step.
constexpr int64_t kPackSlack = 8;
int64_t pack_rows6_x8(const float* const* src, int64_t kc, float* dst) {
  static_assert(MR == 6, "the AVX2 micro-kernel packs 6-row panels");
  int64_t k = 0;
  const __m256 zero = _mm256_setzero_ps();
  for (; k + 8 <= kc; k += 8) {
    const __m256 t0 = _mm256_unpacklo_ps(_mm256_loadu_ps(src[0] + k), _mm256_loadu_ps(src[1] + k));
    const __m256 t1 = _mm256_unpackhi_ps(_mm256_loadu_ps(src[0] + k), _mm256_loadu_ps(src[1] + k));
    const __m256 t2 = _mm256_unpacklo_ps(_mm256_loadu_ps(src[2] + k), _mm256_loadu_ps(src[3] + k));
    const __m256 t3 = _mm256_unpackhi_ps(_mm256_loadu_ps(src[2] + k), _mm256_loadu_ps(src[3] + k));
    const __m256 t4 = _mm256_unpacklo_ps(_mm256_loadu_ps(src[4] + k), _mm256_loadu_ps(src[5] + k));
    const __m256 t5 = _mm256_unpackhi_ps(_mm256_loadu_ps(src[4] + k), _mm256_loadu_ps(src[5] + k));
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, zero, 0x44), u5 = _mm256_shuffle_ps(t4, zero, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, zero, 0x44), u7 = _mm256_shuffle_ps(t5, zero, 0xEE);
    float* d = dst + k * 6;
    _mm256_storeu_ps(d + 0, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + 6, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 12, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 18, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 24, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 30, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 36, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 42, _mm256_permute2f128_ps(u3, u7, 0x31));
  }
  return k;
}
#else
constexpr int64_t kPackSlack = 0;
#endif

// op(A) rows [i0, i0+mc), cols [k0, k0+kc) -> panels of MR rows: pa[(p*kc + k)*MR + r].
void pack_a(bool trans, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* pa) {
  for (int64_t p = 0; p < mc; p += MR) {
    const int rows = int(std::min<int64_t>(MR, mc - p));
    float* dst = pa + p * kc;
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
    if (!trans && rows == MR) {
      const float* src[MR];
      for (int r = 0; r < MR; ++r) src[r] = A + (i0 + p + r) * lda + k0;
      for (int64_t k = pack_rows6_x8(src, kc, dst); k < kc; ++k)
        for (int r = 0; r < MR; ++r) dst[k * MR + r] = src[r][k];
      continue;
    }
#endif
    if (!trans) {
      for (int r = 0; r < MR; ++r) {
        if (r < rows) {
          const float* src = A + (i0 + p + r) * lda + k0;
          for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = src[k];
        } else {
          for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = 0.0f;
        }
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = A + (k0 + k) * lda + i0 + p;
        int r = 0;
        for (; r < rows; ++r) dst[k * MR + r] = src[r];
        for (; r < MR; ++r) dst[k * MR + r] = 0.0f;
      }
    }
  }
}

// op(B) rows [k0, k0+kc), cols [j0, j0+nc) -> panels of NR cols: pb[(q*kc + k)*NR + c].
void pack_b(bool trans, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* pb) {
  const int64_t panels = (nc + NR - 1) / NR;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && kc * nc > (1 << 16))
  for (int64_t q = 0; q < panels; ++q) {
    const int cols = int(std::min<int64_t>(NR, nc - q * NR));
    float* dst = pb + q * NR * kc;
    if (!trans) {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = B + (k0 + k) * ldb + j0 + q * NR;
        int c = 0;
        for (; c < cols; ++c) dst[k * NR + c] = src[c];
        for (; c < NR; ++c) dst[k * NR + c] = 0.0f;
      }
    } else {
      for (int c = 0; c < NR; ++c) {
        if (c < cols) {
          const float* src = B + (j0 + q * NR + c) * ldb + k0;
          for (int64_t k = 0; k < kc; ++k) dst[k * NR + c] = src[k];
        } else {
          for (int64_t k = 0; k < kc; ++k) dst[k * NR + c] = 0.0f;
        }
      }
    }
  }
}

// Per-thread scratch that survives calls (no page faults from fresh allocations in the hot loop).
float* scratch(std::vector<float>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  static thread_local std::vector<float> b_buf, a_buf, edge_buf;
  const bool parallel = !omp_in_parallel() && omp_get_max_threads() > 1 && double(M) * N * K > 2e5;
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const float beta_eff = pc == 0 ? beta : 1.0f;
      // Row-major B is read in place (its NR-wide rows are already contiguous) when few row blocks reuse
      // it: packing cost 7% of an NCHW ResNet-20 step (16-64-row GEMMs per image). Taller products pack
      // it: read in place with a row stride of 3-4 KiB, the k rows of a panel fall into a few L1 sets and
      // evict each other (1024^3 ran at 96 GFLOP/s against OpenBLAS's 159 on 2 Zen 3 cores). A ragged
      // last panel is always packed, zero-padded.
      const bool b_in_place = !tb && M <= 2 * MC;
      float* pb = b_in_place ? nullptr : scratch(b_buf, size_t((nc + NR - 1) / NR * NR * kc));
      if (!b_in_place) pack_b(tb, B, ldb, pc, kc, jc, nc, pb);
      // Tasks: row blocks x column chunks. With row blocks enough to feed every thread a few, a task
      // takes all nc columns, so its A block is packed once instead of once per chunk (ViT's 6400-row
      // linears spent 12 % of their step re-packing A).
      const int64_t m_blocks = (M + MC - 1) / MC;
      const int64_t chunk = !parallel || m_blocks >= 4 * omp_get_max_threads() ? nc : NCHUNK;
      const int64_t n_chunks = (nc + chunk - 1) / chunk, tasks = m_blocks * n_chunks;
#pragma omp parallel for schedule(dynamic) if (parallel && tasks > 1)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t ic = (t / n_chunks) * MC, j1 = (t % n_chunks) * chunk;
        const int64_t mc = std::min(MC, M - ic), ncc = std::min(chunk, nc - j1);
        float* pa = scratch(a_buf, size_t((mc + MR - 1) / MR * MR * kc + kPackSlack));
        pack_a(ta, A, lda, ic, mc, pc, kc, pa);
        for (int64_t jr = 0; jr < ncc; jr += NR) {
          const int nr = int(std::min<int64_t>(NR, ncc - jr));
          const float* bp = b_in_place ? nullptr : pb + (j1 + jr) * kc;
          int64_t bstride = NR;
          if (b_in_place && nr == NR) {
            bp = B + pc * ldb + jc + j1 + jr;
            bstride = ldb;
          } else if (b_in_place) {
            float* edge = scratch(edge_buf, size_t(NR * kc));
            pack_b(false, B, ldb, pc, kc, jc + j1 + jr, nr, edge);
            bp = edge;
          }
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int mr = int(std::min<int64_t>(MR, mc - ir));
            micro_kernel(kc, pa + ir * kc, bp, bstride, C + (ic + ir) * ldc + jc + j1 + jr, ldc, alpha, beta_eff, mr, nr);
          }
        }
      }
    }
  }
}

}  // namespace

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                  const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && M * N * K > (1 << 16))
  for (int64_t i = 0; i < M; ++i) {
    double* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = beta == 0.0 ? 0.0 : beta * c[j];
    for (int64_t k = 0; k < K; ++k) {
      const double a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
      if (!tb) {
        const double* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      } else {
        for (int64_t j = 0; j < N; ++j) c[j] += a * B[j * ldb + k];
      }
    }
  }
}

}  // namespace hpdt::kernels::cpu
