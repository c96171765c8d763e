// An ordered queue of work: a CUDA stream, or the CPU, where work runs synchronously in the caller.
// Kernels take a Stream so one signature serves both backends; CPU kernels ignore it.
#pragma once

#include <memory>

#include "hpdt/core/device.h"

namespace hpdt {

class Stream {
 public:
  Stream() = default;  // the CPU stream
  static Stream cpu() { return Stream(); }
  // A new non-blocking CUDA stream on `device` (lower priority value = higher priority).
  static Stream create_cuda(int device, int priority = 0);
  // The per-thread default stream of `device` (not owned).
  static Stream cuda_default(int device);
  // Wraps an existing cudaStream_t without owning it.
  static Stream wrap_cuda(void* cuda_stream, int device);

  Device device() const { return device_; }
  bool is_cuda() const { return device_.is_cuda(); }
  void* handle() const { return handle_ ? handle_.get() : raw_; }  // cudaStream_t
  void synchronize() const;  // waits for all queued work; no-op on the CPU stream

 private:
  Device device_ = Device::cpu();
  std::shared_ptr<void> handle_;  // owning (created streams)
  void* raw_ = nullptr;           // non-owning (default / wrapped)
};

// A point in a stream's work: record, then let another stream wait on it or time between two.
// On the CPU stream events are host timestamps, so timing code is the same on both backends.
class Event {
 public:
  explicit Event(Device device = Device::cpu(), bool timing = true);
  void record(const Stream& stream);
  void wait(const Stream& waiter) const;  // `waiter` does not run ahead of this event
  void synchronize() const;
  bool query() const;                      // true when done
  float elapsed_ms(const Event& end) const;  // from this event to `end`; both recorded and done

 private:
  Device device_;
  std::shared_ptr<void> event_;  // cudaEvent_t
  double host_time_s_ = -1;
};

}  // namespace hpdt
