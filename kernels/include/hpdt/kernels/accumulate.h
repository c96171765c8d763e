// Element-wise reductions and conversions over raw buffers, for the all-reduce family (comm/).
//
// Collectives work on byte ranges of caller memory, not on Tensors, so these take pointers. All
// accumulation is in f32: an f16/bf16 message is widened to f32 once, reduced, and narrowed once at
// the end, so partial sums never lose bits to a 2-byte format on the way.
// Every function is deterministic and element-wise (no reordering), so the same inputs give the same
// bits on every rank.
#pragma once

#include <cstddef>

#include "hpdt/core/dtype.h"

namespace hpdt::kernels {

// dst[i] += src[i]
void accumulate_f32(float* dst, const float* src, size_t n);
// dst[i] = a[i] + b[i]  (dst may alias a or b)
void add_f32(float* dst, const float* a, const float* b, size_t n);
// x[i] /= d  (division, not multiplication by 1/d, so integer-valued sums divide exactly where they can)
void divide_f32(float* x, size_t n, float d);
// dst = src converted between f32, f16 and bf16 (round to nearest even); a plain copy when the types match.
void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n);

}  // namespace hpdt::kernels

#if HPDT_HAVE_CUDA
namespace hpdt::kernels::cuda {
// The same on device memory, queued on `stream` (a cudaStream_t).
void accumulate_f32(float* dst, const float* src, size_t n, void* stream);
void divide_f32(float* x, size_t n, float d, void* stream);
void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n, void* stream);
}  // namespace hpdt::kernels::cuda
#endif
