// Batch norm's statistics of an activation, computed by the kernel that wrote it: a convolution's epilogue has every
// output value in registers or shared memory once, so it can hand the batch norm after it the per-channel Welford
// partials, and the batch norm skips its statistics pass, one full read of the activation (conv.h:
// Conv2dEpilogue::stats, norm.h: BatchNormFusion::stats).
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

}  // namespace hpdt::kernels
