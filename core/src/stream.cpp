#include "hpdt/core/stream.h"

#include "hpdt/core/error.h"
#include "hpdt/core/timer.h"

#if HPDT_HAVE_CUDA
#include "hpdt/core/check_cuda.h"
#endif

namespace hpdt {

namespace {
#if !HPDT_HAVE_CUDA
[[noreturn]] void no_cuda(const char* what) {
  HPDT_FAIL(what, " needs CUDA, but hpdt was built without it (configure with -DHPDT_CUDA=ON)");
}
#endif

#if HPDT_HAVE_CUDA
// Runs `f` with `device` current, restoring the caller's device afterwards.
template <class F>
void on_device(int device, F&& f) {
  int prev = 0;
  HPDT_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device) HPDT_CUDA_CHECK(cudaSetDevice(device));
  try {
    f();
  } catch (...) {
    if (prev != device) (void)cudaSetDevice(prev);
    throw;
  }
  if (prev != device) HPDT_CUDA_CHECK(cudaSetDevice(prev));
}
#endif
}  // namespace

Stream Stream::create_cuda(int device, int priority) {
#if HPDT_HAVE_CUDA
  Stream s;
  s.device_ = Device::cuda(device);
  cudaStream_t h = nullptr;
  on_device(device, [&] { HPDT_CUDA_CHECK(cudaStreamCreateWithPriority(&h, cudaStreamNonBlocking, priority)); });
  s.handle_ = std::shared_ptr<void>(h, [](void* p) { (void)cudaStreamDestroy(static_cast<cudaStream_t>(p)); });
  return s;
#else
  (void)device;
  (void)priority;
  no_cuda("Stream::create_cuda");
#endif
}

Stream Stream::cuda_default(int device) {
#if HPDT_HAVE_CUDA
  Stream s;
  s.device_ = Device::cuda(device);
  s.raw_ = cudaStreamPerThread;
  return s;
#else
  (void)device;
  no_cuda("Stream::cuda_default");
#endif
}

Stream Stream::wrap_cuda(void* cuda_stream, int device) {
  Stream s;
  s.device_ = Device::cuda(device);
  s.raw_ = cuda_stream;
  return s;
}

void Stream::synchronize() const {
  if (!is_cuda()) return;
#if HPDT_HAVE_CUDA
  HPDT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle())));
#endif
}

Event::Event(Device device, bool timing) : device_(device) {
  if (!device.is_cuda()) return;
#if HPDT_HAVE_CUDA
  cudaEvent_t e = nullptr;
  on_device(device.index, [&] {
    HPDT_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  });
  event_ = std::shared_ptr<void>(e, [](void* p) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
#else
  (void)timing;
  no_cuda("a CUDA Event");
#endif
}

void Event::record(const Stream& stream) {
  HPDT_CHECK(stream.device() == device_, "Event on ", device_.str(), " recorded on a stream of ", stream.device().str());
  if (!device_.is_cuda()) {
    host_time_s_ = now_s();
    return;
  }
#if HPDT_HAVE_CUDA
  HPDT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_.get()), static_cast<cudaStream_t>(stream.handle())));
#endif
}

void Event::wait(const Stream& waiter) const {
  if (!device_.is_cuda() || !waiter.is_cuda()) {
    synchronize();  // CPU work is already complete; a CPU waiter blocks on the GPU
    return;
  }
#if HPDT_HAVE_CUDA
  HPDT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter.handle()), static_cast<cudaEvent_t>(event_.get()), 0));
#endif
}

void Event::synchronize() const {
  if (!device_.is_cuda()) return;
#if HPDT_HAVE_CUDA
  HPDT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_.get())));
#endif
}

bool Event::query() const {
  if (!device_.is_cuda()) return true;
#if HPDT_HAVE_CUDA
  return detail::cuda_query_done(cudaEventQuery(static_cast<cudaEvent_t>(event_.get())), "cudaEventQuery");
#else
  return true;
#endif
}

float Event::elapsed_ms(const Event& end) const {
  HPDT_CHECK(device_ == end.device_, "Event::elapsed_ms between events of ", device_.str(), " and ", end.device_.str());
  if (!device_.is_cuda()) {
    HPDT_CHECK(host_time_s_ >= 0 && end.host_time_s_ >= 0, "Event::elapsed_ms on an event that was never recorded");
    return float((end.host_time_s_ - host_time_s_) * 1e3);
  }
#if HPDT_HAVE_CUDA
  float ms = 0;
  HPDT_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(event_.get()), static_cast<cudaEvent_t>(end.event_.get())));
  return ms;
#else
  return 0;
#endif
}

}  // namespace hpdt
