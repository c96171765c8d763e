// Strided convolutions of a few channels on space-to-depth, for v2's forward, backward-filter and backward-data in
// both layouts (conv.cu, conv_nhwc.cu).
// Private to kernels/cuda; include after conv_common.cuh.
//
// A strided convolution of C < 16 input channels (ResNet's 7x7 stride-2 stem on 3, ViT's 16x16 stride-16 patch
// embedding on 3) gathers its operand value by value (NCHW's generic gather: two FastDivs and a bounds check a value,
// 3 channels being no 16-channel half; NHWC's gather, 3 channels being no 16-byte vector): on the H200 (2026-11-27)
// the stem's forward took 1.83 ms (NCHW) and 1.14 ms (NHWC) at batch 256, 33 and 53 TFLOP/s, where the channels gather
// ran 3x3 64->64 at 56^2 at 125. Space-to-depth by the stride s makes it a stride-1, unpadded convolution of Cs = C s^2
// channels (zero-padded to a multiple of 16) and ceil(k / s)^2 taps:
//   xs[img][(c s + ry) s + rx][Y][X] = x[img][c][s Y + ry - pad][s X + rx - pad]   (0 outside x; Y < oh + th - 1;
//                                                                                  NHWC: xs[img][Y][X][channel])
//   ws[co][(ty tw + tx) Cs + (c s + ry) s + rx] = w[co][c][s ty + ry][s tx + rx]   (0 past the kernel)
// so that y[oy][ox] = sum over the taps (ty, tx) and the Cs channels of ws * xs[oy + ty][ox + tx]: the same products
// plus zeros (the stem: K = 256 against 147, 16 channels of 4 x 4 taps; the patch embedding: K = 768 either way, one
// tap), which NCHW's channels gather (one bounds check per 16 values; a one-tap one: the direct cp.async loads where
// the plane allows) and NHWC's 16-byte loads take. HPDT_CONV_SPACE_TO_DEPTH=off keeps the direct gathers (the A/B).
// The forward, the backward-filter (space_to_depth_backward_filter) and the backward-data without a residual or batch
// norm's sums (space_to_depth_backward_data: a step computes neither layer's, but the direct one ran the stem's with
// 3 of a 64-row tile's rows real in each of its 4 stride phases, at 0.48-0.56x cuDNN on the H200, 2026-11-27).
#pragma once

#include "conv_common.cuh"
#include "hpdt/core/env.h"

namespace hpdt::kernels::cuda::conv_detail {
namespace {

struct SpaceToDepth {
  int s, cs;   // stride; channels of xs (C s^2 rounded up to 16)
  int th, tw;  // taps of the stride-1 convolution
  int hs, ws;  // its source plane
};
inline SpaceToDepth space_to_depth_dims(const Conv2dShape& s) {
  const int st = int(s.stride), th = int((s.kh + st - 1) / st), tw = int((s.kw + st - 1) / st);
  return {st, int(round_up(s.c_in * st * st, 16)), th, tw, int(s.out_h()) + th - 1, int(s.out_w()) + tw - 1};
}

// HPDT_CONV_SPACE_TO_DEPTH: on (or unset) or off. Read at every call; another value throws.
inline bool conv_space_to_depth() { return env_switch("HPDT_CONV_SPACE_TO_DEPTH", "on", "off"); }

// Whether v2's forward (tensor cores, 16-bit: tc_half) runs s on space-to-depth: a stride of 2 or more, fewer than
// 16 channels (not already whole 16-channel halves), a kernel at least the stride in both directions (every tap of
// the rearranged convolution holds real weights), at most 1024 rearranged channels, xs and ws within 32-bit indices.
inline bool space_to_depth_applies(const Conv2dShape& s, bool tc_half) {
  if (!tc_half || s.stride < 2 || s.c_in >= 16 || s.kh < s.stride || s.kw < s.stride) return false;
  const SpaceToDepth d = space_to_depth_dims(s);
  const int64_t lim = int64_t(1) << 31;
  return d.cs <= 1024 && s.n * d.cs * d.hs * d.ws < lim && s.c_out * d.cs * d.th * d.tw < lim && conv_space_to_depth();
}

// xs from x, one thread a value of xs (FastDivs: xs has fewer than 2^31 values). NCHW: i = ((img cs + ch) hs + Y) ws +
// X; NHWC: i = ((img hs + Y) ws + X) cs + ch.
struct S2dDivs {
  FastDiv plane, width, cs, s2, s;  // xs's plane and row; channels; s^2 and s (channel -> (c, ry, rx))
};
template <class T, bool kNhwc>
__global__ void __launch_bounds__(kThreads1D)
    space_to_depth_kernel(const T* __restrict__ x, T* __restrict__ xs, int total, int C, int H, int W, int pad,
                          S2dDivs d) {
  for (int i = blockIdx.x * kThreads1D + threadIdx.x; i < total; i += gridDim.x * kThreads1D) {
    int img, ch, r;
    if constexpr (kNhwc) {
      const int pixel = d.cs.div(i);
      ch = i - pixel * d.cs.value();
      img = d.plane.div(pixel), r = pixel - img * d.plane.value();
    } else {
      const int q = d.plane.div(i);  // img * cs + channel
      r = i - q * d.plane.value();
      img = d.cs.div(q), ch = q - img * d.cs.value();
    }
    const int Y = d.width.div(r), X = r - Y * d.width.value();
    const int c = d.s2.div(ch), sub = ch - c * d.s2.value(), ry = d.s.div(sub), rx = sub - ry * d.s.value();
    const int iy = d.s.value() * Y + ry - pad, ix = d.s.value() * X + rx - pad;
    T v{};
    if (c < C && unsigned(iy) < unsigned(H) && unsigned(ix) < unsigned(W))
      v = kNhwc ? x[((int64_t(img) * H + iy) * W + ix) * C + c]
                : x[(int64_t(img) * C + c) * H * W + int64_t(iy) * W + ix];
    xs[i] = v;
  }
}

// Between a filter w [co][C][kh][kw] and its rearrangement wr [co][cs][th][tw] (the rearranged convolution's filter in
// the direct kernels' layout; zeros past the kernel and in the padding channels). to_rearranged: wr from w, every
// value; else w from wr, its real values only (the zeros' values dropped). Small: plain divisions.
template <class T>
__global__ void __launch_bounds__(kThreads1D)
    space_to_depth_filter(const T* __restrict__ from, T* __restrict__ to, int total, int C, int kh, int kw,
                          SpaceToDepth d, bool to_rearranged) {
  for (int i = blockIdx.x * kThreads1D + threadIdx.x; i < total; i += gridDim.x * kThreads1D) {
    // i indexes wr [co][cs][th][tw]
    const int tx = i % d.tw, ty = (i / d.tw) % d.th, ch = (i / (d.tw * d.th)) % d.cs, row = i / (d.tw * d.th * d.cs);
    const int c = ch / (d.s * d.s), sub = ch - c * d.s * d.s, ky = d.s * ty + sub / d.s, kx = d.s * tx + sub % d.s;
    const bool real = c < C && ky < kh && kx < kw;
    const int64_t j = ((int64_t(row) * C + c) * kh + ky) * kw + kx;
    if (to_rearranged)
      to[i] = real ? from[j] : T{};
    else if (real)
      to[j] = from[i];
  }
}

// The rearrangement of a filter (to_rearranged: wr from w) or back (w from wr), [co][cs][th][tw] as above.
template <class T>
void rearrange_filter(const Conv2dShape& s, const SpaceToDepth& d, const Tensor& from, Tensor& to, bool to_rearranged,
                      const Stream& stream) {
  const int64_t total = s.c_out * d.cs * d.th * d.tw;
  space_to_depth_filter<T><<<detail::grid_for(total, kThreads1D), kThreads1D, 0, detail::native(stream)>>>(
      static_cast<const T*>(from.data()), static_cast<T*>(to.data()), int(total), int(s.c_in), int(s.kh), int(s.kw), d,
      to_rearranged);
  HPDT_CUDA_CHECK_LAUNCH();
}

// The rearranged convolution: stride 1, unpadded, on xs [n][cs][hs][ws] (NHWC: [n][hs][ws][cs]).
inline Conv2dShape rearranged_shape(const Conv2dShape& s, const SpaceToDepth& d) {
  return {s.n, d.cs, d.hs, d.ws, s.c_out, d.th, d.tw, 1, 0};
}

// Rearranges x (NCHW or NHWC) into xs, allocated here on the stream.
template <class T>
SpaceToDepth space_to_depth_input(const Conv2dShape& s, const Tensor& x, Layout layout, Tensor& xs,
                                  const Stream& stream) {
  const cudaStream_t st = detail::native(stream);
  const SpaceToDepth d = space_to_depth_dims(s);
  const int64_t total = s.n * d.cs * d.hs * d.ws;
  xs = device_buffer(total, x.dtype(), x.device(), stream);
  const S2dDivs divs{FastDiv(int64_t(d.hs) * d.ws), FastDiv(d.ws), FastDiv(d.cs), FastDiv(d.s * d.s), FastDiv(d.s)};
  const auto* xp = static_cast<const T*>(x.data());
  auto* xsp = static_cast<T*>(xs.data());
  if (layout == Layout::nhwc)
    space_to_depth_kernel<T, true><<<detail::grid_for(total, kThreads1D), kThreads1D, 0, st>>>(
        xp, xsp, int(total), int(s.c_in), int(s.h), int(s.w), int(s.pad), divs);
  else
    space_to_depth_kernel<T, false><<<detail::grid_for(total, kThreads1D), kThreads1D, 0, st>>>(
        xp, xsp, int(total), int(s.c_in), int(s.h), int(s.w), int(s.pad), divs);
  HPDT_CUDA_CHECK_LAUNCH();
  return d;
}

// Rearranges x (NCHW or NHWC) into xs, and w into the rearranged convolution's forward weights ws: its filter
// (rearrange_filter) repacked tap-major as every forward's (forward_weights: [co][cs th tw], k = tap * cs + channel;
// cs th tw is a multiple of 16, so no padding; the patch embedding's one tap: the filter as it is). Both allocated
// here on the stream; ws starts at ws.data().
template <class T>
SpaceToDepth space_to_depth(const Conv2dShape& s, const Tensor& x, const Tensor& w, Layout layout, Tensor& ws,
                            Tensor& xs, const Stream& stream) {
  const SpaceToDepth d = space_to_depth_dims(s);
  Tensor wr = device_buffer(s.c_out * d.cs * d.th * d.tw, w.dtype(), w.device(), stream), packed;
  rearrange_filter<T>(s, d, w, wr, true, stream);
  int64_t lda = 0;
  forward_weights(rearranged_shape(s, d), wr, true, true, packed, &lda, stream);
  ws = packed.defined() ? packed : wr;
  return space_to_depth_input<T>(s, x, layout, xs, stream);
}

// The backward-filter of s on space-to-depth: the layout's own backward-filter of the rearranged convolution
// (wgrad(rs, xs, dws)) onto dws, which first holds dw's values at their rearranged places (and zeros elsewhere):
// dws = dw + the sums, rounded once as the direct kernels round them (summed from zero and added to dw afterwards, a
// gradient accumulated onto another lost up to 2^-8 of the sums' size: the oracle tests caught it). Then each of
// dw's values is copied back, the zeros' sums dropped.
template <class T, class Wgrad>
void space_to_depth_backward_filter(const Conv2dShape& s, const Tensor& x, Tensor& dw, Layout layout,
                                    const Stream& stream, Wgrad&& wgrad) {
  Tensor xs;
  const SpaceToDepth d = space_to_depth_input<T>(s, x, layout, xs, stream);
  Tensor dws = device_buffer(s.c_out * d.cs * d.th * d.tw, dw.dtype(), dw.device(), stream);
  rearrange_filter<T>(s, d, dw, dws, true, stream);
  wgrad(rearranged_shape(s, d), xs, dws);
  rearrange_filter<T>(s, d, dws, dw, false, stream);
}

// Whether the backward-data of s runs on space-to-depth: where the forward would, without a residual to add or batch
// norm's sums to compute (the rearranged dx is rounded before its values reach dx: a residual would be added to a
// rounded sum), with dx within 32-bit indices.
inline bool space_to_depth_backward_data_applies(const Conv2dShape& s, bool tc_half, const Tensor* residual,
                                                 const ChannelGradSums* bn) {
  return !residual && !bn && s.n * s.c_in * s.h * s.w < (int64_t(1) << 31) && space_to_depth_applies(s, tc_half);
}

// dx from dxs, the rearranged convolution's input gradient: one thread a value of dx, which sits at one place of dxs
// (y + pad = s Y + ry, x + pad = s X + rx, channel (c s + ry) s + rx), or is 0 where that place is past dxs (input
// pixels no window reaches). NCHW: i = ((img C + c) H + y) W + x; NHWC: i = ((img H + y) W + x) C + c.
struct D2sDivs {
  FastDiv w, h, c, s;
};
template <class T, bool kNhwc>
__global__ void __launch_bounds__(kThreads1D) depth_to_space_kernel(const T* __restrict__ dxs, T* __restrict__ dx,
                                                                    int total, int pad, SpaceToDepth d, D2sDivs g) {
  for (int i = blockIdx.x * kThreads1D + threadIdx.x; i < total; i += gridDim.x * kThreads1D) {
    int img, c, y, x;
    if constexpr (kNhwc) {
      const int pixel = g.c.div(i);
      c = i - pixel * g.c.value();
      const int row = g.w.div(pixel);
      x = pixel - row * g.w.value();
      img = g.h.div(row), y = row - img * g.h.value();
    } else {
      const int row = g.w.div(i);
      x = i - row * g.w.value();
      const int plane = g.h.div(row);
      y = row - plane * g.h.value();
      img = g.c.div(plane), c = plane - img * g.c.value();
    }
    const int Y = g.s.div(y + pad), ry = y + pad - Y * d.s, X = g.s.div(x + pad), rx = x + pad - X * d.s;
    const int ch = (c * d.s + ry) * d.s + rx;
    T v{};
    if (Y < d.hs && X < d.ws)
      v = kNhwc ? dxs[((int64_t(img) * d.hs + Y) * d.ws + X) * d.cs + ch]
                : dxs[((int64_t(img) * d.cs + ch) * d.hs + Y) * d.ws + X];
    dx[i] = v;
  }
}

// The backward-data of s on space-to-depth: the filter rearranged, the layout's own backward-data of the rearranged
// convolution (data(rs, wr, dxs): stride 1, so one phase of 16 or more rows where the direct one ran s^2 phases of C
// rows), then dx from dxs. Each dx value is dxs's, rounded once by the kernel that wrote it.
template <class T, class Data>
void space_to_depth_backward_data(const Conv2dShape& s, const Tensor& w, Tensor& dx, Layout layout,
                                  const Stream& stream, Data&& data) {
  const SpaceToDepth d = space_to_depth_dims(s);
  Tensor wr = device_buffer(s.c_out * d.cs * d.th * d.tw, w.dtype(), w.device(), stream);
  rearrange_filter<T>(s, d, w, wr, true, stream);
  const bool nhwc = layout == Layout::nhwc;
  Tensor dxs = device_buffer(s.n * d.cs * d.hs * d.ws, dx.dtype(), dx.device(), stream);
  data(rearranged_shape(s, d), wr, dxs);
  const int64_t total = s.n * s.c_in * s.h * s.w;
  const D2sDivs g{FastDiv(s.w), FastDiv(s.h), FastDiv(s.c_in), FastDiv(d.s)};
  const auto* src = static_cast<const T*>(dxs.data());
  auto* dst = static_cast<T*>(dx.data());
  if (nhwc)
    depth_to_space_kernel<T, true><<<detail::grid_for(total, kThreads1D), kThreads1D, 0, detail::native(stream)>>>(
        src, dst, int(total), int(s.pad), d, g);
  else
    depth_to_space_kernel<T, false><<<detail::grid_for(total, kThreads1D), kThreads1D, 0, detail::native(stream)>>>(
        src, dst, int(total), int(s.pad), d, g);
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace hpdt::kernels::cuda::conv_detail
