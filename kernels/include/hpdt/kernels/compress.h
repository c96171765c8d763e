// Gradient-compression kernels on flat f32 buffers, CPU and CUDA, with the semantics of comm's CPU
// compressors (comm/src/compression.cpp), so a GPU rank and a CPU rank produce the same messages:
//
//   top-k    topk_select: the k largest |x| (ties to the lower index) as (i32 index, f32 value) in
//            increasing index order, as comm's TopK sends them; comm's decode is sparse_accumulate of
//            every rank's pairs in rank order into zeros, its residual is x with sparse_fill(0) at the
//            sent indices.
//   QSGD     qsgd_quantize / qsgd_dequantize: chunks of 512 values scaled by max |x|, stochastic rounding
//            to 2^(bits-1) - 1 levels with Philox numbers (QsgdRandom), bit-packed exactly as comm's
//            Qsgd; the optional residual is comm's error feedback x - decoded.
//   fp16/bf16 wire casts and the f32 sums/averages: hpdt/kernels/accumulate.h (not repeated here).
//
// All deterministic: the same input gives the same bits on every run and on both devices (QSGD: the same
// (seed, stream, offset)). Asynchronous on CUDA; no op here synchronises.
#pragma once

#include <cstdint>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cpu/compress.h"

namespace hpdt::kernels {

// comm's k for a ratio: min(n, max(1, ceil(ratio * n))), 0 for n = 0.
int64_t topk_count(int64_t n, double ratio);
// QSGD message sizes: one f32 scale per 512 values; (n * bits + 7) / 8 packed bytes.
int64_t qsgd_chunks(int64_t n);
int64_t qsgd_packed_bytes(int64_t n, int bits);

// x: f32, n < 2^31 values. indices: i32 [k]; values: f32 [k]. 0 <= k <= n. The selection orders by the
// bits of |x| (so NaN counts above inf, and -0 ties with +0), which for numbers is the order of |x|.
void topk_select(const Tensor& x, int64_t k, Tensor& indices, Tensor& values, const Stream& stream);

// x: f32 [n], finite. bits 2..8. packed: u8 [qsgd_packed_bytes(n, bits)], every byte written; scales: f32
// [qsgd_chunks(n)]. residual (nullptr: none): f32 [n], set to x - decoded (error feedback).
void qsgd_quantize(const Tensor& x, int bits, const QsgdRandom& rng, Tensor& packed, Tensor& scales, Tensor* residual,
                   const Stream& stream);
// out: f32 [n]; out = decoded (accumulate false) or out += decoded, one rounding per element (accumulate
// true: comm sums the ranks' messages this way, in rank order, into zeros).
void qsgd_dequantize(const Tensor& packed, const Tensor& scales, int bits, Tensor& out, bool accumulate,
                     const Stream& stream);

// out[indices[j]] += values[j] for j in order; the indices of one call must be distinct on CUDA (one
// rank's top-k message is), so every element gets at most one add per call. indices i32, values/out f32.
// Indices outside out throw on the CPU; on CUDA they are skipped (checking them would need a sync).
void sparse_accumulate(const Tensor& indices, const Tensor& values, Tensor& out, const Stream& stream);
// x[indices[j]] = value (top-k error feedback: what was sent leaves the residual). Bad indices as above.
void sparse_fill(const Tensor& indices, float value, Tensor& x, const Stream& stream);

// PowerSGD's products (comm: P = M Q, Q = M^T P, M ~ P Q^T): c = op(a) op(b), f32, 2-D row-major, op(x) = x or x^T,
// c [rows of op(a), columns of op(b)] overwritten. Every element computed in the order of the CPU GEMM
// (kernels::cpu::gemm<float>, which this is on the CPU: an FMA chain from zero over each block of
// cpu::kGemmKChunk k values, the blocks' sums added in order), so a GPU and a CPU rank compute the same bits. On CUDA
// a thread an element: skinny products (PowerSGD's rank is a few columns), not a fast GEMM.
void powersgd_product(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, Tensor& c, const Stream& stream);

}  // namespace hpdt::kernels
