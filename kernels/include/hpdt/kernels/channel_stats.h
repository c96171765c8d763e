// Batch norm's per-channel reductions, computed by the kernel that writes the tensor they reduce: a convolution's
// epilogue has every output value in registers or shared memory once, so it can hand the batch norm next to it
// what that batch norm's own reduction pass would compute, and the batch norm skips that pass.
//   ChannelStats: forward, the statistics of the batch norm's input, from the epilogue of the convolution that
//     wrote it (conv.h: Conv2dEpilogue::stats, norm.h: BatchNormFusion::stats): one read of the activation less.
//   ChannelGradSums: backward, the sums of the batch norm's output gradient, from the epilogue of the backward-data
//     that wrote it, which also applies the fused ReLU's mask (conv.h: conv2d_backward_data's bn_grad, norm.h:
//     batchnorm_backward_train's sums): the reduce pass (reads dy, x and y, writes dz) becomes two more reads in
//     the epilogue.
#pragma once

#include <cstdint>

#include "hpdt/core/tensor.h"

namespace hpdt::kernels {

struct ChannelStats {
  // f32 [c * splits * 3]: split s of channel ch at (ch * splits + s) * 3 holds (count, mean, M2) of the values as
  // stored (rounded to the tensor's dtype). Undefined: none were computed (the path that ran cannot).
  Tensor partial;
  int64_t splits = 0;
  // The tensor they describe, by its data() and its values per channel: batch norm uses them for that tensor only.
  const void* of = nullptr;
  int64_t count = 0;
  bool describe(const Tensor& x, int64_t channels) const {
    return partial.defined() && of == x.data() && count * channels == x.numel() && splits > 0 &&
           partial.numel() == channels * splits * 3;
  }
  void clear() { *this = ChannelStats{}; }
};

struct ChannelGradSums {
  // Asked for with the batch norm's input x, its fused output y (whose sign is the fused ReLU's mask; undefined: no
  // ReLU) and its saved mean ([c] f32); the kernel then writes dz = (y > 0 ? g : 0) in place of the gradient g.
  Tensor x, y, mean;
  // Written: f32 [c * splits * 2], split s of channel ch at (ch * splits + s) * 2 holds (sum dz, sum dz (x - mean))
  // of the values as stored. Undefined: none were computed (the path that ran cannot; it wrote g unmasked).
  Tensor partial;
  int64_t splits = 0;
  const void* of = nullptr;  // data() of the gradient they sum, and its values per channel
  int64_t count = 0;
  bool masked = false;       // y was given: the gradient written is dz
  bool describe(const Tensor& dz, int64_t channels) const {
    return partial.defined() && of == dz.data() && count * channels == dz.numel() && splits > 0 &&
           partial.numel() == channels * splits * 2;
  }
  void clear_results() {
    partial = Tensor();
    splits = 0, of = nullptr, count = 0, masked = false;
  }
};

}  // namespace hpdt::kernels
