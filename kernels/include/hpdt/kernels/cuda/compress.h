// CUDA implementations of hpdt/kernels/compress.h, checked against hpdt::kernels::cpu (bitwise: same
// selection, same QSGD arithmetic from hpdt/kernels/cpu/compress.h). Arguments are checked by the callers
// (kernels/src/compress.cpp).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/cpu/compress.h"

namespace hpdt::kernels::cuda {
void topk_select(const Tensor& x, int64_t k, Tensor& indices, Tensor& values, const Stream& stream);
void qsgd_quantize(const Tensor& x, int bits, const QsgdRandom& rng, Tensor& packed, Tensor& scales, Tensor* residual,
                   const Stream& stream);
void qsgd_dequantize(const Tensor& packed, const Tensor& scales, int bits, Tensor& out, bool accumulate,
                     const Stream& stream);
void sparse_accumulate(const Tensor& indices, const Tensor& values, Tensor& out, const Stream& stream);
void sparse_fill(const Tensor& indices, float value, Tensor& x, const Stream& stream);
void powersgd_product(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, Tensor& c, const Stream& stream);
}  // namespace hpdt::kernels::cuda
