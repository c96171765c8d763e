// CPU pooling, NCHW (and NHWC twins): max pool (any window/stride/padding; saves the argmax) and global average pool.
#pragma once

#include <cstdint>

namespace hpdt::kernels::cpu {

// y [n, c, oh, ow], argmax [n, c, oh, ow] (index into the h*w plane of the input). Padding is -inf.
template <class T>
void maxpool2d_forward(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t stride, int64_t pad,
                       const T* x, T* y, int32_t* argmax);
// dx [n, c, h, w] overwritten.
template <class T>
void maxpool2d_backward(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow, const T* dy,
                        const int32_t* argmax, T* dx);
// y [n, c] = mean over h*w.
template <class T>
void global_avgpool_forward(int64_t n, int64_t c, int64_t hw, const T* x, T* y);
template <class T>
void global_avgpool_backward(int64_t n, int64_t c, int64_t hw, const T* dy, T* dx);

// NHWC twins: x [n, h, w, c], y and argmax [n, oh, ow, c] (argmax indexes the h*w plane as above),
// global average pool x [n, hw, c] -> y [n, c].
template <class T>
void maxpool2d_forward_nhwc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t stride, int64_t pad,
                            const T* x, T* y, int32_t* argmax);
template <class T>
void maxpool2d_backward_nhwc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow, const T* dy,
                             const int32_t* argmax, T* dx);
template <class T>
void global_avgpool_forward_nhwc(int64_t n, int64_t c, int64_t hw, const T* x, T* y);
template <class T>
void global_avgpool_backward_nhwc(int64_t n, int64_t c, int64_t hw, const T* dy, T* dx);

}  // namespace hpdt::kernels::cpu
