#include "schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace hpdt::train {

LrSchedule LrSchedule::make(double base_lr, long global_batch, long ref_batch, long warmup_steps, long total_steps) {
  LrSchedule s;
  s.peak = base_lr * double(global_batch) / double(ref_batch);
  s.total_steps = std::max(1L, total_steps);
  s.warmup_steps = std::clamp(warmup_steps, 0L, s.total_steps - 1);
  return s;
}

double LrSchedule::at(long step) const {
  if (step < warmup_steps) return peak * double(step + 1) / double(warmup_steps);
  const long decay = std::max(1L, total_steps - warmup_steps);
  const double t = std::clamp(double(step - warmup_steps) / double(decay), 0.0, 1.0);
  return peak * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

}  // namespace hpdt::train
