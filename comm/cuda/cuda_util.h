// Helpers of the GPU-only sources of comm/ (private): the watched wait on CUDA work and a device scope.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "hpdt/comm/transport.h"

namespace hpdt::comm::detail {

// Polls `query` (cudaStreamQuery or cudaEventQuery of the work waited for) until it returns cudaSuccess;
// other errors than cudaErrorNotReady throw. While waiting: NCCL asynchronous errors of `nccl` (may be
// null) throw hpdt::Error; after w.timeout_s (> 0) the watchdog fires with MpiTransport's message,
// "watchdog: <what> has not finished after X s (timeout Y s); ranks not arrived: <not_arrived>", and
// aborts the job or throws, as w.action says.
void wait_cuda_watched(const std::function<cudaError_t()>& query, ncclComm_t nccl, const WatchdogOptions& w,
                       const OperationContext& what, const std::string& not_arrived);

inline void wait_stream_watched(cudaStream_t s, ncclComm_t nccl, const WatchdogOptions& w, const OperationContext& what,
                                const std::string& not_arrived) {
  wait_cuda_watched([s] { return cudaStreamQuery(s); }, nccl, w, what, not_arrived);
}

// Makes `device` current for the scope and restores the caller's device afterwards.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// A cudaEvent_t (timing disabled) of the current device, destroyed with the object.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace hpdt::comm::detail
