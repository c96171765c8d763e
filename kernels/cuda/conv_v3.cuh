// The NHWC convolution on Hopper's wgmma + TMA (sm90a/conv_wgmma.cu), as conv_nhwc.cu calls it: one stride-1
// implicit GEMM over a tap-major weight matrix (ConvV3: the forward of a stride-1 convolution or one stride phase
// of a backward-data), and the backward-filter of a stride-1 convolution (ConvV3Wgrad). Private to kernels/cuda;
// host code only.
#pragma once

#include <cstdint>
#include <vector>

#include "hpdt/core/dtype.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/channel_stats.h"
#include "hpdt/kernels/cuda/gemm.h"

namespace hpdt::kernels::cuda::conv_detail {

// dst[img][py * dys + dy0][px * dxs + dx0][m] = sum over taps (jr, jc) < (kh, kw) and channels c < C of
//   src[img][py * stride + oy0 + tsign * jr][px * stride + ox0 + tsign * jc][c] * w[m][(jr * kw + jc) * C + c]
//   (+ bias[m]) (+ residual at dst's element), for the pixel grid img < n, py < hp, px < wp; src reads as zero
// outside its hs x ws plane. Forward: src = x, m = co, the convolution's stride, (oy0, ox0) = -pad, tsign = +1.
// Backward-data phase: src = dy, m = ci, stride 1, tsign = -1 (conv_common.cuh: DataPhase).
struct ConvV3 {
  const void* w = nullptr;  // [M][ldw], 16-bit, zero for k in [kh * kw * C, ldw)
  int64_t ldw = 0;
  int M = 0;
  const void* src = nullptr;  // [n][hs][ws][C]
  int C = 0, hs = 0, ws = 0;
  int n = 0, hp = 0, wp = 0;
  int stride = 1;  // 1 to 8 (TMA's element strides)
  int oy0 = 0, ox0 = 0, tsign = 1, kh = 1, kw = 1;
  void* dst = nullptr;  // [n][dst_h][dst_w][M]
  int dst_h = 0, dst_w = 0, dys = 1, dy0 = 0, dxs = 1, dx0 = 0;
  const void* bias = nullptr;      // [M], dst's dtype, or null
  const void* residual = nullptr;  // dst's shape and dtype, or null
  // Batch norm's statistics of dst's channels over the pixel grid (dst a dense [n][hp][wp][M] tensor: a forward;
  // sm90a/column_stats.cuh); null: none. conv_v3_launch fills it.
  ChannelStats* stats = nullptr;
  // Batch norm's backward sums of a backward-data phase (dst dx; sm90a/column_stats.cuh): dst gets dz = (y > 0 ? g :
  // 0) (g itself without grad_sums->y), and grad_sums' partials (already allocated, for all phases) get this
  // phase's, from split sums_split0 on, conv_v3_row_groups(*this) of them; null: none.
  ChannelGradSums* grad_sums = nullptr;
  int sums_split0 = 0;
};

// Whether conv_v3_launch takes `c` on this stream: a build with the sm_90a kernels, a compute capability 9.0
// device, 16-bit dtype, C % 64 == 0 (a k tile is 64 channels of one tap), 16-byte aligned src and w, ldw % 8 == 0,
// stride 1 to 8, and sizes TMA can address.
bool conv_v3_can_take(const ConvV3& c, DType dt, const Stream& stream);
void conv_v3_launch(const ConvV3& c, DType dt, const Stream& stream);
// The 64-row groups of c's pixel tiles: the partials per channel its epilogue writes for a batch norm.
int64_t conv_v3_row_groups(const ConvV3& c);

// Backward-filter of an NHWC convolution: dw[co][ci][jr][jc] += sum over the output pixels (img, py, px) <
// (n, oh, ow) of dy[img][py][px][co] * x[img][py * stride + jr - pad][px * stride + jc - pad][ci] (x zero outside
// h x w).
struct ConvV3Wgrad {
  const void* x = nullptr;   // [n][h][w][ci], 16-bit
  const void* dy = nullptr;  // [n][oh][ow][co], x's dtype
  void* dw = nullptr;        // [co][ci][kh][kw], x's dtype
  int n = 0, h = 0, w = 0, ci = 0, co = 0, kh = 1, kw = 1, stride = 1, pad = 0, oh = 0, ow = 0;
};
// Whether conv_v3_wgrad_launch takes `c`: as conv_v3_can_take, with ci % 64 == 0 and co % 8 == 0 (16-byte rows
// of dy for TMA), stride 1 to 8.
bool conv_v3_wgrad_can_take(const ConvV3Wgrad& c, DType dt, const Stream& stream);
void conv_v3_wgrad_launch(const ConvV3Wgrad& c, DType dt, const Stream& stream);

// One load of TMA's im2col mode as conv v3 issues it (cuda::tma_im2col_load_nhwc, conv.h: for tests): `pixels`
// (1..256) pixels of the first 64 channels of src [n][h][w][64] (16-bit) into dst [pixels][64], unswizzled.
void conv_v3_im2col_load(const void* src, DType dt, int n, int h, int w, const int (&lower)[2], const int (&upper)[2],
                         int stride, int x, int y, int img, int ox, int oy, int pixels, void* dst,
                         const Stream& stream);

// conv v3's plans under kernels::GemmTuning::find (pipeline and tile per call, as GEMM v3's; the backward-filter's
// pipeline alone, its tile following co), in the order they were found; cuda::gemm_v3_found() lists them after
// GEMM v3's, and gemm_v3_forget_found() forgets them too.
std::vector<GemmV3Found> conv_v3_found();
void conv_v3_forget_found();

}  // namespace hpdt::kernels::cuda::conv_detail
