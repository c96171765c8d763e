// Learning-rate schedule of hpdt-train: the linear scaling rule (Goyal et al. 2017: the learning rate
// grows with the global batch), linear warmup from lr/warmup to the peak, then cosine decay to zero.
#pragma once

namespace hpdt::train {

struct LrSchedule {
  double peak = 0.1;       // base_lr * global_batch / ref_batch
  long warmup_steps = 0;
  long total_steps = 1;

  static LrSchedule make(double base_lr, long global_batch, long ref_batch, long warmup_steps, long total_steps);
  double at(long step) const;  // learning rate for optimizer step `step` (0-based)
};

}  // namespace hpdt::train
