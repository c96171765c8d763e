// spin(): one thread holding its stream for a while (hpdt/kernels/cuda/spin.h). A timing aid, not an op: it has no
// CPU twin to be checked against; test_elementwise_cuda checks the time it holds a stream.
#include <cmath>

#include "hpdt/core/error.h"
#include "hpdt/kernels/cuda/spin.h"
#include "launch.cuh"
#include "watchdog.cuh"

namespace hpdt::kernels::cuda {

namespace {

// (no __nanosleep: the thread is alone on its SM, and the global timer's steps, ~1 us, are what limit its accuracy)
__global__ void spin_kernel(uint64_t ns) {
  const uint64_t t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

}  // namespace

void spin(double seconds, const Stream& stream) {
  HPDT_CHECK(std::isfinite(seconds) && seconds >= 0 && seconds <= 1, "spin: ", seconds, " s is outside [0, 1]");
  spin_kernel<<<1, 1, 0, detail::native(stream)>>>(uint64_t(seconds * 1e9));
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace hpdt::kernels::cuda
