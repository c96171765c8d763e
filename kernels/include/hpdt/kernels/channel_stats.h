// Batch norm's per-channel reductions, computed by the kernel that writes the tensor they reduce: a convolution's
// epilogue has every output value in registers or shared memory once, so it can hand the batch norm next to it
// what that batch norm's own reduction pass would compute, and the batch norm skips that pass.
//   ChannelStats: forward, the statistics of the batch norm's input, from the epilogue of the convolution that
//     wrote it (conv.h: Conv2dEpilogue::stats, norm.h: BatchNormFusion::stats): one read of the activation less.
//   ChannelGradSums: backward, the sums of the batch norm's output gradient, from the epilogue of the backward-data
//     (or the max pool's backward, pool.h) that wrote it, which also applies the fused ReLU's mask (conv.h:
//     conv2d_backward_data's bn_grad, pool.h: maxpool2d_backward's, norm.h:
//     batchnorm_backward_train's sums): the reduce pass (reads dy, x and y, writes dz) becomes two more reads in
//     the epilogue. Also from the backward apply pass of the batch norm that added this one's output as its
//     residual (norm.h: batchnorm_backward_train's residual_sums, ResNet's projection shortcut): that pass reads
//     dz, this batch norm's dy, anyway, and one more read (the residual) replaces this one's reduce pass.
#pragma once

#include <algorithm>
#include <cstdint>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

// What both hand over: per-channel partial results of W floats, f32 [c * splits * W] (split s of channel ch at
// (ch * splits + s) * W), and the tensor they describe, by its data() and its values per channel, for which alone
// a batch norm uses them. Undefined partial: none were computed (the path that ran cannot).
template <int W>
struct ChannelPartials {
  Tensor partial;
  int64_t splits = 0;
  const void* of = nullptr;
  int64_t count = 0;
  bool describe(const Tensor& t, int64_t channels) const {
    return partial.defined() && of == t.data() && count * channels == t.numel() && splits > 0 &&
           partial.numel() == channels * splits * W;
  }
  void clear_results() { *this = ChannelPartials{}; }
  // For the kernel that computes them: fresh partials for `channels` x `splits` from `stream`'s allocator, describing
  // the tensor at `of_data` (`values` per channel); returns them.
  float* start(int64_t channels, int64_t split_count, const void* of_data, int64_t values, const Stream& stream) {
    partial = Tensor::empty({std::max<int64_t>(channels * split_count * W, 1)}, DType::f32, stream.device(),
                            AllocOptions{.stream = &stream});
    splits = split_count, of = of_data, count = values;
    return partial.data<float>();
  }
};

// (count, mean, M2) of the values as stored (rounded to the tensor's dtype).
struct ChannelStats : ChannelPartials<3> {};

// Asked for with the batch norm's input x, its fused output y (whose sign is the fused ReLU's mask; undefined: no
// ReLU) and its saved mean ([c] f32); the kernel then writes dz = (y > 0 ? g : 0) in place of the gradient g (g
// itself without y), and the partials (sum dz, sum dz (x - mean)) of the values as stored. Where none were
// computed, it wrote g unmasked.
struct ChannelGradSums : ChannelPartials<2> {
  Tensor x, y, mean;
};

}  // namespace hpdt::kernels
