// CUDA linear layer (hpdt/kernels/linear.h), checked against cpu/linear.h. Raw pointers on the stream's
// device, all of one dtype (f32, f16 or bf16); arguments validated by the caller (kernels/src/linear.cpp).
// GEMMs go through cuda::gemm (so they follow KernelBackend: ours or cuBLAS); f32 accumulation.
#pragma once

#include <cstdint>

#include "hpdt/core/dtype.h"
#include "hpdt/core/stream.h"
#include "hpdt/kernels/cpu/activation.h"  // GeluForm

namespace hpdt::kernels::cuda {

// x [rows, in], w [out, in], b [out] (may be null) -> y [rows, out] = x w^T + b (bias in the GEMM's epilogue).
// With a residual r [rows, out]: y = x w^T + b + r. With gelu_pre set: y = gelu(x w^T + b (+ r)) and gelu_pre
// [rows, out] = x w^T + b (+ r). All in the GEMM's epilogue.
void linear_forward(int64_t rows, int64_t in, int64_t out, const void* x, const void* w, const void* b, void* y,
                    DType dtype, const Stream& stream, void* gelu_pre = nullptr, GeluForm form = GeluForm::erf,
                    const void* residual = nullptr);
// dx [rows, in] = dy w (overwritten; skipped when null); dw [out, in] += dy^T x; db [out] += column sums of dy
// (skipped when null). With gelu_input set (h [rows, in]): dx = (dy w) * gelu'(h), in the GEMM's epilogue.
void linear_backward(int64_t rows, int64_t in, int64_t out, const void* dy, const void* x, const void* w, void* dx,
                     void* dw, void* db, DType dtype, const Stream& stream, const void* gelu_input = nullptr,
                     GeluForm form = GeluForm::erf);

// out[c] += sum over r of x[r, c], x row-major [rows, cols]. Deterministic: row blocks fixed by the shape,
// each summed in a fixed order, the block partials added in block order. No atomics.
void column_sums_accumulate(int64_t rows, int64_t cols, const void* x, void* out, DType dtype, const Stream& stream);

}  // namespace hpdt::kernels::cuda
