// The GPU benchmarks' timing (bench/kernels/gpu_timing.h) on a GPU: a call timed by CallTimer takes the GPU's time
// alone, without the time the host takes to issue it, and the iterations whose spin was shorter than that count as
// launch gaps until the spin covers it. Under compute-sanitizer (scripts/gpu/run.sh sets HPDT_UNDER_SANITIZER) the same
// calls run, their times unchecked: the instrumentation slows the host and the GPU alike.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "gpu_timing.h"
#include "hpdt/kernels/cuda/spin.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;

bool under_sanitizer() { return std::getenv("HPDT_UNDER_SANITIZER") != nullptr; }

// A call whose host part (1 ms) is five times its GPU part (a 0.2 ms kernel), called once before the tests time it.
class GpuTiming : public ::testing::Test {
 protected:
  void SetUp() override {
    HPDT_REQUIRE_GPU();
    call();
    s().synchronize();
  }
  static const Stream& s() { return bench::bench_stream(); }
  static void call() {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    kernels::cuda::spin(200e-6, s());
  }
};

TEST_F(GpuTiming, ACallIsTimedWithoutItsLaunchGap) {
  // timed plainly, the events around it, the host's millisecond is in
  Event start(Device::cuda(0)), stop(Device::cuda(0));
  start.record(s());
  call();
  stop.record(s());
  stop.synchronize();
  bench::CallTimer timer;
  double last = 0;
  for (int i = 0; i < 12; ++i) last = timer.seconds(call);
  if (under_sanitizer()) return;
  EXPECT_GE(start.elapsed_ms(stop), 1.0);
  EXPECT_GE(last, 0.19e-3);
  EXPECT_LT(last, 0.5e-3) << "the host's millisecond is still in the time";
  // 50 us doubled until it covers the host's 1 ms: 5 iterations with a gap (50 .. 800 us), then none
  EXPECT_GE(timer.launch_gaps(), 4);
  EXPECT_LE(timer.launch_gaps(), 6);
}

// Calibrated first, as a benchmark row's timer is (time_row): its timed calls start without a gap.
TEST_F(GpuTiming, ACalibratedTimerTimesWithoutGaps) {
  bench::CallTimer timer;
  timer.calibrate(call);
  EXPECT_EQ(timer.launch_gaps(), 0);
  const double t = timer.seconds(call);
  if (under_sanitizer()) return;
  EXPECT_GE(t, 0.19e-3);
  EXPECT_LT(t, 0.5e-3);
  EXPECT_EQ(timer.launch_gaps(), 0);
}

TEST_F(GpuTiming, BackToBackTimesAGpuBoundCallByItsKernel) {
  // GPU-bound calls back to back: the host runs ahead, the mean is the kernel's time
  const double gpu_bound = bench::seconds_back_to_back([&] { kernels::cuda::spin(500e-6, s()); }, 10);
  if (under_sanitizer()) return;
  EXPECT_GE(gpu_bound, 0.49e-3);
  EXPECT_LT(gpu_bound, 0.6e-3);
}

}  // namespace
