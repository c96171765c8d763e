// The memory order of 4-D image activations, and the transposes between the two.
//
//   nchw: [n, c, h, w], PyTorch's default; every op family has it, on the CPU (the oracle) and on CUDA.
//   nhwc: [n, h, w, c] ("channels last"); the fast CPU path for convolutional networks: direct
//         convolution vectorised over channels, batch norm as a [n*h*w, c] matrix, pooling over pixels.
//         CPU only: the CUDA kernels are NCHW, and an NHWC tensor on CUDA is refused with a message.
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

// x [n, c, h, w] -> y [n, h, w, c] and back (CPU, f32; any element type of 4 bytes would do, f32 is
// what the CPU activations are). y must not alias x.
void nchw_to_nhwc(const Tensor& x, Tensor& y, const Stream& stream);
void nhwc_to_nchw(const Tensor& x, Tensor& y, const Stream& stream);

namespace detail {
// Throws "<op>: NHWC tensors are CPU-only (the CUDA kernels are NCHW)" for a CUDA device and nhwc.
void check_layout_device(std::string_view op, Layout layout, Device device);
}  // namespace detail

}  // namespace hpdt::kernels
