// Host wall-clock timing. GPU timing uses hpdt::Event (stream.h), which also works on the CPU stream.
#pragma once

#include <chrono>

namespace hpdt {

// Seconds on the monotonic clock since an arbitrary origin fixed at process start.
double now_s();

class Stopwatch {
 public:
  Stopwatch() { restart(); }
  void restart() { t0_ = std::chrono::steady_clock::now(); }
  double elapsed_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  double elapsed_ms() const { return elapsed_s() * 1e3; }
  double elapsed_us() const { return elapsed_s() * 1e6; }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace hpdt
