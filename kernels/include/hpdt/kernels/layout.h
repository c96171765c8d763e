// The memory order of 4-D image activations, and the transposes between the two.
//
//   nchw: [n, c, h, w], PyTorch's default; every op family has it, on the CPU (the oracle) and on CUDA.
//   nhwc: [n, h, w, c] ("channels last"); the fast CPU path for convolutional networks: direct
//         convolution vectorised over channels, batch norm as a [n*h*w, c] matrix, pooling over pixels.
//         On CUDA every op family that takes a layout has NHWC kernels too (implicit GEMM whose reduction
//         runs over channels: 16-byte tensor-core tile loads; see docs/kernels-cuda.md).
// Weights never change layout (convolution weights are [c_out, c_in, kh, kw] in both), so a model's
// parameters, checkpoints and fixtures are the same whichever layout its activations use.
#pragma once

#include <string_view>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

enum class Layout { nchw, nhwc };

inline const char* layout_name(Layout l) { return l == Layout::nhwc ? "nhwc" : "nchw"; }
// "nchw" or "nhwc"; throws naming `what` (a flag, say) and the accepted names otherwise.
Layout parse_layout(std::string_view name, std::string_view what = "layout");

// x [n, c, h, w] -> y [n, h, w, c] and back: f32 on the CPU; f32, f16 or bf16 on CUDA (x and y of one
// dtype). y must not alias x.
void nchw_to_nhwc(const Tensor& x, Tensor& y, const Stream& stream);
void nhwc_to_nchw(const Tensor& x, Tensor& y, const Stream& stream);

}  // namespace hpdt::kernels
