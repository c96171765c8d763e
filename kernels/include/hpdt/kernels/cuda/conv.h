// CUDA conv2d (groups = 1), NCHW (kernels/cuda/conv.cu) and NHWC (kernels/cuda/conv_nhwc.cu), checked against
// hpdt::kernels::cpu::conv2d_* and cpu::conv2d_*_nhwc. See hpdt/kernels/conv.h.
// Tensors are already checked by the entry points of kernels/src/conv.cpp (one device, one dtype of f32/f16/
// bf16, shapes matching `s`); work is queued on `stream` and not waited for.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/conv.h"

namespace hpdt::kernels::cuda {

// hpdt's own kernels, numbered as in kernels/cuda/conv.cu:
//   v1: SIMT implicit GEMM (f32, f16, bf16);
//   v2: tensor cores, mma.sync m16n8k16 with f32 accumulators (f16, bf16 only).
// automatic: v2 for f16/bf16, v1 for f32. Asking v2 for f32 tensors throws.
enum class ConvVariant { automatic = 0, v1_simt = 1, v2_tensor_core = 2 };

void conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& epilogue, Tensor& y,
                    const Stream& stream, ConvVariant variant = ConvVariant::automatic);
// backward-data: dx = conv^T(dy) (+ residual, when given: the epilogue's residual term).
// bn_grad: batch norm's backward sums in the epilogue (hpdt/kernels/conv.h), v2 only; cleared elsewhere.
void conv2d_backward_data(const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx, const Stream& stream,
                          ConvVariant variant = ConvVariant::automatic, const Tensor* residual = nullptr,
                          ChannelGradSums* bn_grad = nullptr);
void conv2d_backward_filter(const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias,
                            const Stream& stream, ConvVariant variant = ConvVariant::automatic);

// NHWC ("channels last"): x [n, h, w, ci], dy/y [n, oh, ow, co]; the weights stay [co, ci, kh, kw]. The same
// contracts and variants as the NCHW functions above; in NHWC the GEMMs' reduction runs over channels, so v2
// fills shared memory with 16-byte cp.async of 8 channels when the channel count is a multiple of 8 (and the
// tensor 16-byte aligned), and gathers element by element otherwise.
void conv2d_forward_nhwc(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& epilogue,
                         Tensor& y, const Stream& stream, ConvVariant variant = ConvVariant::automatic);
void conv2d_backward_data_nhwc(const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx,
                               const Stream& stream, ConvVariant variant = ConvVariant::automatic,
                               const Tensor* residual = nullptr, ChannelGradSums* bn_grad = nullptr);
void conv2d_backward_filter_nhwc(const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias,
                                 const Stream& stream, ConvVariant variant = ConvVariant::automatic);

// The NHWC convolutions' kernels under kernels::ConvChoice::find (backend.h), one per convolution timed so far in
// this process, in the order they were found: the call ("bwd_data 3x3 64->64 256x56x56 pad 1 bf16 residual":
// direction, kernel (and stride), channels, input n x h x w, padding, dtypes, the fused epilogue), the choice ("v2"
// or "v3") and both times (ms a call, the median of 5 runs after a warm-up run, on a scratch output); where v3
// does not take the convolution (its checks: 64k channels, alignment, no fused scale/shift/ReLU, ..), v2, untimed
// (ms empty).
struct ConvFound {
  std::string call;
  std::string choice;
  std::vector<std::pair<std::string, double>> ms;
};
std::vector<ConvFound> conv_found();
// Forgets them, so that the next call of each convolution is timed again (tests).
void conv_forget_found();

// One load of TMA's im2col mode as conv v3 issues it (for tests: the GPU's answer to what the CUDA emulator models,
// docs/cuda-emulator.md): `pixels` (1 to 256) pixels of src's 64 channels (src [n][h][w][64], bf16 or f16, dense)
// into dst ([pixels][64], src's dtype), walking from (x, y) of image img with offsets (ox, oy) >= 0 inside each image's
// bounding box from (lower[0], lower[1]) to (w - 1 + upper[0], h - 1 + upper[1]) (x first) in steps of `stride`.
// Throws without an sm_90 build and a compute capability 9.0 device.
void tma_im2col_load_nhwc(const Tensor& src, const int (&lower)[2], const int (&upper)[2], int stride, int x, int y,
                          int img, int ox, int oy, int pixels, Tensor& dst, const Stream& stream);

// cuDNN 9 (the `vendor` backend and the benchmark peer): NCHW or NHWC tensor descriptors (`layout`), f32
// compute (no TF32 for f32 tensors), algorithms cached per shape as kernels::cudnn_algo() says (backend.h): the
// first deterministic one of the v7 heuristics, or Find's fastest (timed at a shape's first call, synchronising). NHWC runs
// with an NHWC (KRSC) filter, cuDNN's tensor-core layout: the weights are permuted into a scratch buffer (not
// for 1x1 kernels, where the two layouts are the same bytes); backward-filter accumulates (beta = 1) into a KRSC
// copy of dw and permutes the result back. The
// forward's epilogue and dbias run on hpdt's kernels (cuDNN's bias/backward-bias calls do not take bf16).
void conv2d_forward_vendor(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& epilogue,
                           Tensor& y, const Stream& stream, Layout layout = Layout::nchw);
// (with a residual: cuDNN's backward-data, then the residual added by conv2d_epilogue_inplace)
void conv2d_backward_data_vendor(const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx,
                                 const Stream& stream, Layout layout = Layout::nchw, const Tensor* residual = nullptr);
void conv2d_backward_filter_vendor(const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias,
                                   const Stream& stream, Layout layout = Layout::nchw);

// Pieces of hpdt's kernels the vendor path reuses (kernels/cuda/conv.cu, conv_nhwc.cu).
// y = relu?((y + bias) * scale + shift + residual) in place, per channel of y ([n, co, oh, ow] or NHWC).
void conv2d_epilogue_inplace(const Conv2dEpilogue& epilogue, Tensor& y, const Stream& stream,
                             Layout layout = Layout::nchw);
// dbias [co] += sum of dy ([n, co, oh, ow] or NHWC) over n, oh, ow: fixed-order partial sums, no atomics.
void conv2d_bias_grad(const Tensor& dy, Tensor& dbias, const Stream& stream, Layout layout = Layout::nchw);
// dw [co, ci, kh, kw] = w_krsc [co, kh, kw, ci] (cuDNN's NHWC filter layout back to hpdt's): a permutation.
void conv2d_filter_from_krsc(const Conv2dShape& s, const Tensor& w_krsc, Tensor& dw, const Stream& stream);

}  // namespace hpdt::kernels::cuda
