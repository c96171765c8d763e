// CPU conv2d, groups = 1, any kernel size / stride / padding.
// NCHW (the oracle): per image im2col (skipped for 1x1 stride-1 unpadded convs) and one GEMM, images
// split over OpenMP threads. NHWC: direct convolution, the fast path. See docs/kernels-cpu.md.
#pragma once

#include <cstdint>
#include <string>

namespace hpdt::kernels {

struct Conv2dShape {
  int64_t n = 0, c_in = 0, h = 0, w = 0;  // input
  int64_t c_out = 0, kh = 0, kw = 0;
  int64_t stride = 1, pad = 0;
  int64_t out_h() const { return (h + 2 * pad - kh) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - kw) / stride + 1; }
  std::string str() const;  // "x [n, c, h, w] * w [co, ci, kh, kw] stride s pad p"
};

namespace cpu {
// y [n, c_out, oh, ow] = conv(x [n, c_in, h, w], w [c_out, c_in, kh, kw]) + bias [c_out] (bias may be null).
template <class T>
void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y);
// dx = conv^T(dy, w)   (dx is overwritten)
template <class T>
void conv2d_backward_data(const Conv2dShape& s, const T* dy, const T* w, T* dx);
// dw (+)= sum_n dy_n * im2col(x_n)^T; dbias (+)= sum dy (dbias may be null). accumulate: add to dw/dbias.
template <class T>
void conv2d_backward_filter(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate);

// NHWC ("channels last", kernels/cpu/conv_nhwc.cpp): x [n, h, w, c_in], y [n, oh, ow, c_out], the same
// weights w [c_out, c_in, kh, kw] as NCHW. Direct convolution in register tiles, f32: the fast CPU path
// (the NCHW functions above are its oracle). Same contracts as their NCHW twins.
void conv2d_forward_nhwc(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
void conv2d_backward_data_nhwc(const Conv2dShape& s, const float* dy, const float* w, float* dx);
void conv2d_backward_filter_nhwc(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* dbias,
                                 bool accumulate);
}  // namespace cpu

}  // namespace hpdt::kernels
