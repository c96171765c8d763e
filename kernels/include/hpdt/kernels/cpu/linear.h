// CPU linear layer y = x W^T + b over rows (PyTorch's weight layout [out, in]).
#pragma once

#include <cstdint>

namespace hpdt::kernels::cpu {

// x [rows, in], w [out, in], b [out] (may be null) -> y [rows, out]
template <class T>
void linear_forward(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y);
// dx [rows, in] = dy w (overwritten; skipped when dx is null); dw [out, in] += dy^T x; db += sum_rows dy.
template <class T>
void linear_backward(int64_t rows, int64_t in, int64_t out, const T* dy, const T* x, const T* w, T* dx, T* dw,
                     T* db);

}  // namespace hpdt::kernels::cpu
