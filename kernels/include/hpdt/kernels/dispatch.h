// Device dispatch used by the public kernel entry points (kernels/src): one place decides whether an
// op runs on the CPU or on CUDA, and says clearly why when it cannot.
#pragma once

#include <initializer_list>
#include <string_view>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/channel_stats.h"

namespace hpdt::kernels::detail {

// Checks that all tensors live on one device and that `stream` belongs to it (CUDA), and returns that
// device. Throws hpdt::Error naming `op` otherwise, or when CUDA is needed but not built.
Device common_device(std::string_view op, std::initializer_list<const Tensor*> tensors, const Stream& stream);

// For op families whose CUDA twin has not landed yet: throws "<op>: not implemented on CUDA yet".
[[noreturn]] void not_on_cuda_yet(std::string_view op);

// Entry point of a CPU-only op family: checks devices and f32 dtype of every tensor given, and throws
// not_on_cuda_yet() for CUDA tensors.
void cpu_f32_only(std::string_view op, std::initializer_list<const Tensor*> tensors, const Stream& stream);

// Entry point of an op family with a CUDA twin. Checks devices (as common_device) and dtypes:
//  - on the CPU every tensor in `tensors` is f32 (the oracle computes and stores f32);
//  - on CUDA every tensor in `tensors` has one floating dtype, f32, f16 or bf16 (stored in that type,
//    computed in f32).
// Tensors whose dtype is fixed whatever the storage type (saved statistics, labels, argmax) are not
// passed here; check them with check_dtype. Returns the device.
Device float_op_device(std::string_view op, std::initializer_list<const Tensor*> tensors, const Stream& stream);

// A residual an op adds into its output `out` (named `out_name` in messages): on out's device and in its dtype,
// of out's shape, and a tensor other than out (the CPU paths write out before they add it).
void check_residual(std::string_view op, const Tensor& residual, const Tensor& out, std::string_view out_name,
                    const Stream& stream);

// The batch norm an op hands its backward sums (channel_stats.h's ChannelGradSums: conv2d_backward_data's and
// maxpool2d_backward's bn_grad), for the op's input gradient dx of `channels` channels: its x and y (if defined) on
// dx's device, in its dtype and of its shape, its mean f32 [channels] there. Clears the results (the kernel that can
// sets them).
void check_grad_sums(std::string_view op, ChannelGradSums& sums, const Tensor& dx, int64_t channels,
                     const Stream& stream);

}  // namespace hpdt::kernels::detail

// HPDT_ON_CUDA(call): the CUDA branch of an entry point. Without CUDA it compiles to nothing;
// common_device() has already thrown for a CUDA tensor by then.
#if HPDT_HAVE_CUDA
#define HPDT_ON_CUDA(call) call
#else
#define HPDT_ON_CUDA(call) (void)0
#endif
