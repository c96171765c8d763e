// A stream held busy for a while, for timing a call on the GPU alone. See kernels/cuda/spin.cu.
#pragma once

#include "hpdt/core/stream.h"

namespace hpdt::kernels::cuda {

// Queues on `stream` one thread that spins on the GPU's global timer for `seconds` (0 to 1), so that whatever is
// queued after it waits in the stream instead of starting as the host issues it. The GPU benchmarks queue it before
// a timed call's start event (bench/kernels/gpu_timing.h): the event is then reached only once the host has issued
// the whole call, and the time between the events is the GPU's alone, without the launch gap.
void spin(double seconds, const Stream& stream);

}  // namespace hpdt::kernels::cuda
