// CPU pointwise and row-wise activations: ReLU, residual add, GELU (tanh and erf), softmax, dropout.
#pragma once

#include <cstdint>

namespace hpdt::kernels {
enum class GeluForm { erf, tanh };  // PyTorch: approximate='none' / 'tanh'
}

namespace hpdt::kernels::cpu {

template <class T>
void relu_forward(int64_t n, const T* x, T* y);
// dx = dy where y > 0 else 0 (y is the forward output; dx may alias dy).
template <class T>
void relu_backward(int64_t n, const T* y, const T* dy, T* dx);
// y = a + b (y may alias a or b). The residual add's backward is the identity to both inputs.
template <class T>
void add_forward(int64_t n, const T* a, const T* b, T* y);
template <class T>
void gelu_forward(int64_t n, GeluForm form, const T* x, T* y);
template <class T>
void gelu_backward(int64_t n, GeluForm form, const T* x, const T* dy, T* dx);
// Softmax over the last dimension d of `rows` rows; the row maximum is subtracted first.
template <class T>
void softmax_forward(int64_t rows, int64_t d, const T* x, T* y);
// dx = y * (dy - sum(dy * y)) per row (dx may alias dy).
template <class T>
void softmax_backward(int64_t rows, int64_t d, const T* y, const T* dy, T* dx);
// Inverted dropout with probability p: element i is dropped when philox_uniform(seed, stream, first + i) < p,
// kept elements are scaled by 1/(1-p). The mask is a pure function of (seed, stream, first + i), so backward
// recomputes it, and a tensor cut into pieces (a batch split over ranks) gets the whole tensor's mask when
// each piece passes its first element's index as `first`.
template <class T>
void dropout_forward(int64_t n, float p, uint64_t seed, uint64_t stream, const T* x, T* y, uint64_t first = 0);
template <class T>
void dropout_backward(int64_t n, float p, uint64_t seed, uint64_t stream, const T* dy, T* dx, uint64_t first = 0);

}  // namespace hpdt::kernels::cpu
