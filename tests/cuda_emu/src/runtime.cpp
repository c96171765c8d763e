// The host side of the emulated CUDA runtime: one H100-like device whose memory is host memory. Copies and
// memsets run at once (the async ones too); launches run synchronously, so streams and events only keep
// their bookkeeping (events record host time). Device pointers are tracked, so a copy or memset that runs
// past an allocation, or names host memory as device memory, fails as it would on a GPU.
//
// CUDA_EMU_STREAMS=lazy|random (default eager: the above) queues the work of each created stream instead, and runs
// it only as the program's synchronisation asks: a stream or event synchronisation runs that stream's work up to it,
// a stream waiting on an event runs, when its own work reaches the wait, the recording stream's work up to the
// event, and the legacy stream, synchronous copies and memsets, cudaFree and cudaFreeHost run everything first.
// "random" draws for each stream at its creation, by a coin (CUDA_EMU_STREAMS_SEED), whether it runs its work as soon
// as it is queued (still after the waits it queued) or lazily: then a copy stream's work may run before a lazy
// compute stream's earlier work that reads the copy's target (a missing wait for the reader), where "lazy" catches a
// reader that does not wait for its producer. What a missing dependency then does on a GPU, a different order of
// the streams' work, happens here: tests compare the results with the eager mode's.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <unordered_map>

#include "internal.h"

struct CUstream_st {
  unsigned flags = 0;
  int priority = 0;
  bool capturing = false;  // between cudaStreamBeginCapture and cudaStreamEndCapture
  bool invalidated = false;
  bool captured_collective = false;  // the capture holds an NCCL collective (capture_collective)
  std::vector<std::function<void()>> captured;
  // Fork and join: a stream that waits for an event recorded in a capture joins it (`origin`: the capturing stream
  // whose graph its work goes into, in issue order). `ops` counts a stream's captured work; `after[x]` how much of
  // stream x's captured work this stream's next work comes after, through the events it waited for (transitively).
  // Before the capture ends the origin must come after all of every joined stream's work.
  CUstream_st* origin = nullptr;
  std::vector<CUstream_st*> joined;  // the origin's
  uint64_t ops = 0;
  std::map<const CUstream_st*, uint64_t> after;
  uint64_t capture_id = 0;  // the origin's: which of its captures (an event of an earlier one is not of this one)
  // CUDA_EMU_STREAMS=lazy|random: work queued and not yet run; `queued` counts what was ever queued, `done` what ran
  std::deque<std::function<void()>> pending;
  uint64_t queued = 0, done = 0;
  bool runs_at_once = false;  // "random": this stream drawn to run its work as queued (else only when asked)
};
struct CUgraph_st {
  std::vector<std::function<void()>> ops;
  bool collective = false;  // holds an NCCL collective: launched, it runs at once
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
  bool collective = false;
};
struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  double ms = 0;
  CUstream_st* stream = nullptr;  // deferred streams: recorded on this stream, complete when its `done` reaches seq
  uint64_t seq = 0;
  // Recorded in a capture: the capture's stream, the stream it was recorded on and that stream's captured ops then.
  CUstream_st* capture = nullptr;
  uint64_t capture_id = 0;
  std::map<const CUstream_st*, uint64_t> capture_after;  // what a wait for it comes after (its stream's `after` + ops)
};

namespace cuda_emu {
namespace {

// CUDA_EMU_LAUNCH_LOG: registered here, in the file every emulated program links (the runtime API), so that a
// process that launches nothing writes its (empty) log too: its test case ran and reached no kernel.
[[maybe_unused]] const bool g_launch_log_at_exit = [] {
  const char* dir = std::getenv("CUDA_EMU_LAUNCH_LOG");
  return dir && *dir && std::atexit(write_launch_log) == 0;
}();

thread_local cudaError_t g_last_error = cudaSuccess;
thread_local int g_device = 0;
thread_local CUstream_st* g_capture = nullptr;  // the stream this thread captures (thread-local mode)

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, size_t> device;  // cudaMalloc'd blocks: start -> bytes
  std::map<uintptr_t, size_t> pinned;  // cudaHostAlloc'd / registered
  std::set<const void*> streams;
  std::set<const void*> events;
  std::unordered_map<const void*, size_t> max_dyn_smem;
};
Registry& reg() {
  static auto* r = new Registry;  // outlives static destructors that free device memory
  return *r;
}

cudaError_t fail(cudaError_t e) {
  g_last_error = e;
  return e;
}

// A call a capture does not allow (an allocation, a synchronous copy, a host wait) made by the capturing
// thread: the capture is invalidated and the call fails, as on a GPU.
cudaError_t refused_in_capture() {
  g_capture->invalidated = true;
  return fail(cudaErrorStreamCaptureUnsupported);
}
#define CUDA_EMU_NOT_IN_CAPTURE() \
  do {                            \
    if (g_capture) return refused_in_capture(); \
  } while (0)

bool is_legacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }

// The capture (its origin stream) whose graph work queued on `s` goes into now: this thread's capture when `s` is
// its stream or joined it; else null (the work runs, or is deferred, as outside a capture).
CUstream_st* capture_of(cudaStream_t s) {
  if (!g_capture || is_legacy(s)) return nullptr;
  return s == g_capture || s->origin == g_capture ? g_capture : nullptr;
}
// Keeps `op`, queued on `s`, for the graph of the capture `s` is part of (false: none).
bool capture_op(cudaStream_t s, std::function<void()> op) {
  CUstream_st* c = capture_of(s);
  if (!c) return false;
  c->captured.push_back(std::move(op));
  ++s->ops;
  return true;
}

// ---- deferred streams (CUDA_EMU_STREAMS) ---------------------------------------------------------------------------
enum class StreamMode { eager, lazy, random };
// Read at every call (a test may set it around work it synchronises; set it before a program starts otherwise).
StreamMode stream_mode() {
  const char* v = std::getenv("CUDA_EMU_STREAMS");
  if (!v || !*v || std::strcmp(v, "eager") == 0) return StreamMode::eager;
  if (std::strcmp(v, "lazy") == 0) return StreamMode::lazy;
  if (std::strcmp(v, "random") == 0) return StreamMode::random;
  std::fprintf(stderr, "cuda emu: CUDA_EMU_STREAMS=%s: expected eager, lazy or random\n", v);
  std::abort();
}
bool deferring(cudaStream_t s) {
  return stream_mode() != StreamMode::eager && !is_legacy(s) && s != cudaStreamPerThread;
}
// One lock over every stream's queue and the running of queued work (which may run on any thread that synchronises:
// GradSync's stager runs the compute stream's kernels when it waits for an event of theirs).
std::recursive_mutex& exec_mutex() {
  static auto* m = new std::recursive_mutex;
  return *m;
}
cudaError_t g_async_error = cudaSuccess;  // the first error of queued work, returned by the next synchronisation

// Runs s's queued work until `upto` of its items have run (a wait item first runs its producer's work).
void drain(CUstream_st* s, uint64_t upto) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  while (s->done < upto && !s->pending.empty()) {
    std::function<void()> op = std::move(s->pending.front());
    s->pending.pop_front();
    const cudaError_t before = g_last_error;  // (this thread's, and not the queued work's)
    g_last_error = cudaSuccess;
    op();
    ++s->done;
    if (g_last_error != cudaSuccess && g_async_error == cudaSuccess) g_async_error = g_last_error;
    g_last_error = before;
  }
}
void drain(CUstream_st* s) { drain(s, UINT64_MAX); }
std::vector<CUstream_st*> live_streams();
void drain_all() {
  if (stream_mode() == StreamMode::eager) return;
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  for (bool more = true; more;) {  // (a stream's work may wait on another's)
    more = false;
    for (CUstream_st* s : live_streams()) {
      more |= !s->pending.empty();
      drain(s);
    }
  }
}
// Queues op on s when its work is deferred (else false: the caller runs it now, after the queued work of every
// stream when s is the legacy stream). A "random" stream drawn to run at once then runs its queue.
void run_after(cudaStream_t s);
bool defer(cudaStream_t s, std::function<void()> op) {
  if (!deferring(s)) {
    run_after(s);
    return false;
  }
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  s->pending.push_back(std::move(op));
  ++s->queued;
  if (s->runs_at_once) drain(s);
  return true;
}
// "random": whether a new stream runs its work as queued (a seeded coin, in the order streams are created).
bool draw_runs_at_once() {
  if (stream_mode() != StreamMode::random) return false;
  static std::mt19937_64 coin([] {
    const char* v = std::getenv("CUDA_EMU_STREAMS_SEED");
    return v ? std::strtoull(v, nullptr, 10) : 1ull;
  }());
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  return (coin() >> 17) & 1;
}
// Before work that runs now on stream s (a call that returns when done): s's queued work, or every stream's for the
// legacy stream.
void run_after(cudaStream_t s) {
  if (stream_mode() == StreamMode::eager) return;
  if (deferring(s))
    drain(s);
  else
    drain_all();
}
cudaError_t take_async_error() {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  const cudaError_t e = g_async_error;
  g_async_error = cudaSuccess;
  if (e != cudaSuccess) g_last_error = e;
  return e;
}

// Device memory: under AddressSanitizer plain heap blocks (it checks their bounds); otherwise each block ends
// where a PROT_NONE page starts (start 256-byte aligned, as cudaMalloc's), so a kernel running past the end of
// an allocation faults at once and the fault handler names the kernel and thread.
constexpr size_t kPage = 4096;
void* device_alloc(size_t size) {
#if CUDA_EMU_ASAN
  void* p = nullptr;
  return posix_memalign(&p, 256, size) == 0 ? p : nullptr;
#else
  const size_t span = (size + 255) / 256 * 256, pages = (span + kPage - 1) / kPage * kPage;
  void* m = mmap(nullptr, pages + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  mprotect(static_cast<char*>(m) + pages, kPage, PROT_NONE);
  return static_cast<char*>(m) + (pages - span);
#endif
}
void device_free(void* p, size_t size) {
#if CUDA_EMU_ASAN
  (void)size;
  std::free(p);
#else
  const size_t span = (size + 255) / 256 * 256, pages = (span + kPage - 1) / kPage * kPage;
  munmap(static_cast<char*>(p) - (pages - span), pages + kPage);
#endif
}

enum class Where { host, device, bad };

// Where [p, p + n) lies: wholly inside one device allocation, wholly outside all of them, or straddling.
Where locate(const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(reg().mutex);
  auto& dev = reg().device;
  auto it = dev.upper_bound(a);
  if (it != dev.begin()) {
    auto prev = std::prev(it);
    if (a >= prev->first && a < prev->first + std::max<size_t>(prev->second, 1))
      return a + n <= prev->first + prev->second ? Where::device : Where::bad;
  }
  if (it != dev.end() && n > 0 && a + n > it->first) return Where::bad;
  return Where::host;
}

// Whether p lies in pinned host memory (cudaHostAlloc'd or registered).
bool is_pinned(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(reg().mutex);
  auto it = reg().pinned.upper_bound(a);
  if (it == reg().pinned.begin()) return false;
  --it;
  return a >= it->first && a < it->first + it->second;
}
// Host memory that is not pinned: a copy from or to it waits for the host, which a capture refuses.
bool pageable(const void* p, size_t n) { return locate(p, n) == Where::host && !is_pinned(p); }

cudaError_t memset_device(void* ptr, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  if (locate(ptr, count) != Where::device) return fail(cudaErrorInvalidValue);
  std::memset(ptr, value, count);
  return cudaSuccess;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool valid_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
  std::lock_guard<std::mutex> lock(reg().mutex);
  return reg().streams.count(s) != 0;
}

std::vector<CUstream_st*> live_streams() {
  std::lock_guard<std::mutex> lock(reg().mutex);
  std::vector<CUstream_st*> v;
  for (const void* p : reg().streams) v.push_back(static_cast<CUstream_st*>(const_cast<void*>(p)));
  return v;
}

bool valid_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(reg().mutex);
  return e && reg().events.count(e) != 0;
}

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  const Where d = locate(dst, n), s = locate(src, n);
  if (d == Where::bad || s == Where::bad) return fail(cudaErrorInvalidValue);  // runs past an allocation
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (d != Where::device) return fail(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToHost:
      if (s != Where::device) return fail(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToDevice:
      if (d != Where::device || s != Where::device) return fail(cudaErrorInvalidValue);
      break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      break;
    default:
      return fail(cudaErrorInvalidMemcpyDirection);
  }
  std::memmove(dst, src, n);
  return cudaSuccess;
}

}  // namespace

void set_last_error(cudaError_t e) { g_last_error = e; }

bool is_live_stream(const void* s) { return valid_stream(static_cast<cudaStream_t>(const_cast<void*>(s))); }

bool in_device_memory(const void* p, size_t n) { return locate(p, n) == Where::device; }

void describe_global_fault(const void* addr) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  auto& r = reg();
  if (!r.mutex.try_lock()) return;
  auto it = r.device.upper_bound(a);
  if (it != r.device.begin()) {
    --it;
    if (a >= it->first + it->second && a < it->first + it->second + 2 * kPage)
      std::fprintf(stderr, "  global memory out of bounds: byte %llu of a %zu-byte device allocation at %p\n",
                   (unsigned long long)(a - it->first), it->second, reinterpret_cast<void*>(it->first));
  }
  r.mutex.unlock();
}

size_t max_dynamic_smem(const void* kernel) {
  std::lock_guard<std::mutex> lock(reg().mutex);
  auto it = reg().max_dyn_smem.find(kernel);
  return it == reg().max_dyn_smem.end() ? kSmemPerBlockDefault : it->second;
}

// Work queued on the stream this thread captures is kept for the graph instead of run (device.h's launch).
bool capture_defer(const void* stream, std::function<void()> op) {
  if (!g_capture) return defer(static_cast<cudaStream_t>(const_cast<void*>(stream)), std::move(op));
  auto* s = static_cast<cudaStream_t>(const_cast<void*>(stream));
  if (is_legacy(s)) {  // the legacy stream waits for the capturing one: not allowed inside a capture
    g_capture->invalidated = true;
    set_last_error(cudaErrorStreamCaptureImplicit);
    return true;
  }
  return capture_op(s, std::move(op));  // (another stream: false, it runs now)
}

void drain_stream(const void* stream) { run_after(static_cast<cudaStream_t>(const_cast<void*>(stream))); }

bool captures(const void* stream) {
  return capture_of(static_cast<cudaStream_t>(const_cast<void*>(stream))) != nullptr;
}
bool capture_collective(const void* stream, std::function<void()> op) {
  if (!capture_op(static_cast<cudaStream_t>(const_cast<void*>(stream)), std::move(op))) return false;
  g_capture->captured_collective = true;
  return true;
}

}  // namespace cuda_emu

using namespace cuda_emu;

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define CUDA_EMU_NAME(x) \
  case x:                \
    return #x;
    CUDA_EMU_NAME(cudaSuccess)
    CUDA_EMU_NAME(cudaErrorInvalidValue)
    CUDA_EMU_NAME(cudaErrorMemoryAllocation)
    CUDA_EMU_NAME(cudaErrorInitializationError)
    CUDA_EMU_NAME(cudaErrorCudartUnloading)
    CUDA_EMU_NAME(cudaErrorInvalidConfiguration)
    CUDA_EMU_NAME(cudaErrorInvalidPitchValue)
    CUDA_EMU_NAME(cudaErrorInvalidSymbol)
    CUDA_EMU_NAME(cudaErrorInvalidDevicePointer)
    CUDA_EMU_NAME(cudaErrorInvalidMemcpyDirection)
    CUDA_EMU_NAME(cudaErrorInsufficientDriver)
    CUDA_EMU_NAME(cudaErrorInvalidDeviceFunction)
    CUDA_EMU_NAME(cudaErrorNoDevice)
    CUDA_EMU_NAME(cudaErrorInvalidDevice)
    CUDA_EMU_NAME(cudaErrorIllegalState)
    CUDA_EMU_NAME(cudaErrorStreamCaptureUnsupported)
    CUDA_EMU_NAME(cudaErrorStreamCaptureInvalidated)
    CUDA_EMU_NAME(cudaErrorStreamCaptureUnmatched)
    CUDA_EMU_NAME(cudaErrorStreamCaptureUnjoined)
    CUDA_EMU_NAME(cudaErrorStreamCaptureImplicit)
    CUDA_EMU_NAME(cudaErrorStreamCaptureWrongThread)
    CUDA_EMU_NAME(cudaErrorInvalidResourceHandle)
    CUDA_EMU_NAME(cudaErrorNotReady)
    CUDA_EMU_NAME(cudaErrorIllegalAddress)
    CUDA_EMU_NAME(cudaErrorLaunchOutOfResources)
    CUDA_EMU_NAME(cudaErrorLaunchFailure)
    CUDA_EMU_NAME(cudaErrorNotSupported)
    CUDA_EMU_NAME(cudaErrorUnknown)
#undef CUDA_EMU_NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorNotSupported:
      return "operation not supported (CUDA emulator)";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureUnjoined:
      return "capture sequence contains a fork that was not joined to the primary stream";
    default:
      return "unknown error (CUDA emulator)";
  }
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_last_error; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  g_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "hpdt CUDA emulator (H100-like, on the CPU)");
  p->totalGlobalMem = size_t(80) << 30;
  p->sharedMemPerBlock = kSmemPerBlockDefault;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = size_t(1) << 31;
  p->maxThreadsPerBlock = kMaxThreadsPerBlock;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->clockRate = 1980000;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = kSmCount;
  p->memoryClockRate = 2619000;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerMultiprocessor = kSmemPerSm;
  p->regsPerMultiprocessor = 65536;
  p->sharedMemPerBlockOptin = kSmemPerBlockOptin;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxBlockDimX:
      *value = p.maxThreadsDim[0];
      break;
    case cudaDevAttrMaxBlockDimY:
      *value = p.maxThreadsDim[1];
      break;
    case cudaDevAttrMaxBlockDimZ:
      *value = p.maxThreadsDim[2];
      break;
    case cudaDevAttrMaxGridDimX:
      *value = p.maxGridSize[0];
      break;
    case cudaDevAttrMaxGridDimY:
      *value = p.maxGridSize[1];
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = p.maxGridSize[2];
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = int(p.sharedMemPerBlock);
      break;
    case cudaDevAttrTotalConstantMemory:
      *value = int(p.totalConstMem);
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMaxRegistersPerBlock:
      *value = p.regsPerBlock;
      break;
    case cudaDevAttrClockRate:
      *value = p.clockRate;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrMemoryClockRate:
      *value = p.memoryClockRate;
      break;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = p.memoryBusWidth;
      break;
    case cudaDevAttrL2CacheSize:
      *value = p.l2CacheSize;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = p.maxThreadsPerMultiProcessor;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = int(p.sharedMemPerMultiprocessor);
      break;
    case cudaDevAttrMaxRegistersPerMultiprocessor:
      *value = p.regsPerMultiprocessor;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = int(p.sharedMemPerBlockOptin);
      break;
    default:
      return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  CUDA_EMU_NOT_IN_CAPTURE();
  drain_all();
  return take_async_error();
}
cudaError_t cudaDeviceReset() { return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *total_bytes = size_t(80) << 30;
  size_t used = 0;
  {
    std::lock_guard<std::mutex> lock(reg().mutex);
    for (const auto& [p, n] : reg().device) used += n;
  }
  *free_bytes = *total_bytes > used ? *total_bytes - used : 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int* can, int, int) {
  *can = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) { return fail(cudaErrorInvalidDevice); }

cudaError_t cudaMalloc(void** ptr, size_t size) {
  CUDA_EMU_NOT_IN_CAPTURE();
  if (!ptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  void* p = device_alloc(size);
  if (!p) return fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, size);  // uninitialised device memory reads as NaN / -1, not as zeros
  {
    std::lock_guard<std::mutex> lock(reg().mutex);
    reg().device[reinterpret_cast<uintptr_t>(p)] = size;
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  CUDA_EMU_NOT_IN_CAPTURE();
  if (!ptr) return cudaSuccess;
  drain_all();  // (cudaFree waits for the device)
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(reg().mutex);
    auto it = reg().device.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == reg().device.end()) return fail(cudaErrorInvalidValue);
    size = it->second;
    reg().device.erase(it);
  }
  device_free(ptr, size);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned) {
  CUDA_EMU_NOT_IN_CAPTURE();
  if (!ptr) return fail(cudaErrorInvalidValue);
  void* p = nullptr;
  if (posix_memalign(&p, 4096, size ? size : 1) != 0 || !p) return fail(cudaErrorMemoryAllocation);
  {
    std::lock_guard<std::mutex> lock(reg().mutex);
    reg().pinned[reinterpret_cast<uintptr_t>(p)] = size;
  }
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  drain_all();  // (as cudaFree: a queued copy may still read it)
  {
    std::lock_guard<std::mutex> lock(reg().mutex);
    if (reg().pinned.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) return fail(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned) {
  std::lock_guard<std::mutex> lock(reg().mutex);
  reg().pinned[reinterpret_cast<uintptr_t>(ptr)] = size;
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* ptr) {
  std::lock_guard<std::mutex> lock(reg().mutex);
  if (reg().pinned.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* ptr) {
  *a = cudaPointerAttributes{};
  if (locate(ptr, 1) == Where::device) {
    a->type = 2;
    a->devicePointer = const_cast<void*>(ptr);
  } else {
    a->type = 0;
    a->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  CUDA_EMU_NOT_IN_CAPTURE();
  drain_all();
  return copy(dst, src, count, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (g_capture) {
    if (pageable(dst, count) || pageable(src, count) || is_legacy(stream)) return refused_in_capture();
    if (capture_op(stream, [=] { (void)copy(dst, src, count, kind); })) return cudaSuccess;
  }
  // (deferred streams: a copy from or to pageable memory returns when done, so it runs now, after its stream)
  if (deferring(stream) && !pageable(dst, count) && !pageable(src, count)) {
    if (locate(dst, count) == Where::bad || locate(src, count) == Where::bad) return fail(cudaErrorInvalidValue);
    defer(stream, [=] { (void)copy(dst, src, count, kind); });
    return cudaSuccess;
  }
  run_after(stream);
  return copy(dst, src, count, kind);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidPitchValue);
  if (g_capture) {
    const size_t span_d = height ? (height - 1) * dpitch + width : 0, span_s = height ? (height - 1) * spitch + width : 0;
    if (pageable(dst, span_d) || pageable(src, span_s) || is_legacy(stream)) return refused_in_capture();
    if (capture_op(stream, [=] {
          for (size_t r = 0; r < height; ++r)
            (void)copy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width, kind);
        }))
      return cudaSuccess;
  }
  const size_t span_d = height ? (height - 1) * dpitch + width : 0, span_s = height ? (height - 1) * spitch + width : 0;
  if (deferring(stream) && !pageable(dst, span_d) && !pageable(src, span_s)) {
    defer(stream, [=] {
      for (size_t r = 0; r < height; ++r)
        (void)copy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width, kind);
    });
    return cudaSuccess;
  }
  run_after(stream);
  for (size_t r = 0; r < height; ++r) {
    const cudaError_t e =
        copy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width, kind);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpyPeer(void* dst, int dd, const void* src, int sd, size_t count) {
  CUDA_EMU_NOT_IN_CAPTURE();
  if (dd != 0 || sd != 0) return fail(cudaErrorInvalidDevice);
  run_after(nullptr);
  return copy(dst, src, count, cudaMemcpyDeviceToDevice);
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dd, const void* src, int sd, size_t count, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (dd != 0 || sd != 0) return fail(cudaErrorInvalidDevice);
  return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  CUDA_EMU_NOT_IN_CAPTURE();
  run_after(nullptr);
  return memset_device(ptr, value, count);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (g_capture && is_legacy(stream)) return refused_in_capture();
  if (capture_of(stream)) {
    if (locate(ptr, count) != Where::device) return fail(cudaErrorInvalidValue);
    capture_op(stream, [=] { std::memset(ptr, value, count); });
    return cudaSuccess;
  }
  if (deferring(stream)) {
    if (count > 0 && locate(ptr, count) != Where::device) return fail(cudaErrorInvalidValue);
    defer(stream, [=] { (void)memset_device(ptr, value, count); });
    return cudaSuccess;
  }
  run_after(stream);
  return memset_device(ptr, value, count);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithPriority(s, cudaStreamDefault, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority) {
  auto* st = new CUstream_st;
  st->flags = flags;
  st->priority = priority;
  st->runs_at_once = draw_runs_at_once();
  std::lock_guard<std::mutex> lock(reg().mutex);
  reg().streams.insert(st);
  *s = st;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -5;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!valid_stream(s) || is_legacy(s)) return fail(cudaErrorInvalidResourceHandle);
  if (capture_of(s)) return refused_in_capture();  // (a stream of this thread's capture: its graph still needs it)
  if (stream_mode() != StreamMode::eager) {  // its queued work still runs (as on a GPU); events forget it
    std::lock_guard<std::recursive_mutex> exec(exec_mutex());
    drain(s);
    std::lock_guard<std::mutex> lock(reg().mutex);
    for (const void* e : reg().events)
      if (static_cast<const CUevent_st*>(e)->stream == s)
        const_cast<CUevent_st*>(static_cast<const CUevent_st*>(e))->stream = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(reg().mutex);
    if (reg().streams.erase(s) == 0) return fail(cudaErrorInvalidResourceHandle);
  }
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  CUDA_EMU_NOT_IN_CAPTURE();
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  run_after(s);
  return take_async_error();
}
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (is_legacy(s)) return fail(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
  if (g_capture || s->capturing) return fail(cudaErrorIllegalState);
  s->capturing = true;
  s->invalidated = false;
  s->captured_collective = false;
  s->captured.clear();
  s->joined.clear();
  s->ops = 0;
  s->after.clear();
  static std::atomic<uint64_t> captures_begun{0};
  s->capture_id = ++captures_begun;
  g_capture = s;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (!s->capturing) return fail(cudaErrorIllegalState);
  if (g_capture != s) return fail(cudaErrorStreamCaptureWrongThread);
  s->capturing = false;
  g_capture = nullptr;
  std::vector<std::function<void()>> ops;
  ops.swap(s->captured);
  *graph = nullptr;
  // Every stream that joined the capture must have been joined back: the origin comes after all of its captured work,
  // through the events waited for (else a GPU's EndCapture fails too: the graph would have a branch nothing awaits).
  bool unjoined = false;
  for (CUstream_st* j : s->joined) {
    const auto it = s->after.find(j);
    unjoined = unjoined || j->ops > (it == s->after.end() ? 0 : it->second);
    j->origin = nullptr;
    j->ops = 0;
    j->after.clear();
  }
  s->joined.clear();
  s->after.clear();
  s->ops = 0;
  if (s->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  if (unjoined) return fail(cudaErrorStreamCaptureUnjoined);
  *graph = new CUgraph_st{std::move(ops), s->captured_collective};
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (is_legacy(s) && g_capture) return refused_in_capture();
  CUstream_st* c = is_legacy(s) ? nullptr : s->capturing ? s : s->origin;  // (joined: its origin's capture)
  *status = !c || !c->capturing ? cudaStreamCaptureStatusNone
            : c->invalidated    ? cudaStreamCaptureStatusInvalidated
                                : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->ops, graph->collective};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (!exec) return fail(cudaErrorInvalidValue);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  CUDA_EMU_NOT_IN_CAPTURE();  // (a graph launched into a capture is not emulated)
  // The whole graph one item of s's work; with a collective it runs now, after s's queued work (as the emulated
  // collectives do: a deferred MPI collective could run on whichever thread next waits, and deadlock).
  if (deferring(s) && !exec->collective) {
    const std::vector<std::function<void()>> ops = exec->ops;
    defer(s, [ops] {
      for (auto& op : ops) {
        op();
        if (g_last_error != cudaSuccess) return;
      }
    });
    return cudaSuccess;
  }
  run_after(s);
  for (auto& op : exec->ops) {
    op();
    if (g_last_error != cudaSuccess) return g_last_error;  // a kernel of the graph failed its launch
  }
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}


cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (!valid_stream(s) || !valid_event(e)) return fail(cudaErrorInvalidResourceHandle);
  if (g_capture && e->capture == g_capture && e->capture_id == g_capture->capture_id) {  // an event of this capture: a fork, a join or an order within it
    if (is_legacy(s)) return refused_in_capture();
    if (!capture_of(s)) {  // s joins the capture (its later work goes into the graph, after the event's)
      s->origin = g_capture;
      s->ops = 0;
      s->after.clear();
      g_capture->joined.push_back(s);
    }
    for (const auto& [x, n] : e->capture_after) s->after[x] = std::max(s->after[x], n);  // (a join, or an order)
    return cudaSuccess;  // (the graph's ops run in issue order, which keeps every such dependency)
  }
  if (stream_mode() == StreamMode::eager) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  CUstream_st* producer = e->stream;  // the event as recorded now (a later record does not move this wait)
  const uint64_t seq = e->seq;
  if (!producer || producer == s) return cudaSuccess;
  if (!deferring(s)) {
    drain(producer, seq);
    return cudaSuccess;
  }
  // s's later work runs after the producer's work up to the event: when s's own work reaches this item.
  defer(s, [producer, seq] {
    if (valid_stream(producer)) drain(producer, seq);
  });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  auto* ev = new CUevent_st;
  ev->flags = flags;
  std::lock_guard<std::mutex> lock(reg().mutex);
  reg().events.insert(ev);
  *e = ev;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!valid_event(e)) return fail(cudaErrorInvalidResourceHandle);
  if (stream_mode() != StreamMode::eager) {  // a queued record of it runs first (it writes to the event)
    std::lock_guard<std::recursive_mutex> lock(exec_mutex());
    if (e->stream) drain(e->stream, e->seq);
  }
  {
    std::lock_guard<std::mutex> lock(reg().mutex);
    if (reg().events.erase(e) == 0) return fail(cudaErrorInvalidResourceHandle);
  }
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!valid_event(e) || !valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (g_capture && is_legacy(s)) return refused_in_capture();
  // Recorded in a capture, the event is an internal dependency of the graph (cudaEventRecord without
  // cudaEventRecordExternal): a stream that waits for it forks or joins, and a launch of the graph does not record it
  // (a query or a wait of the host still sees its last record outside a capture, as on a GPU).
  if (CUstream_st* c = capture_of(s)) {
    e->capture = c;
    e->capture_id = c->capture_id;
    e->capture_after = s->after;
    e->capture_after[s] = s->ops;
    return cudaSuccess;
  }
  e->capture = nullptr;
  if (deferring(s)) {
    std::lock_guard<std::recursive_mutex> lock(exec_mutex());
    e->stream = s;
    defer(s, [e] {
      e->recorded = true;
      e->ms = now_ms();
    });
    e->seq = s->queued;  // (a coin may have run it already: then done >= seq)
    return cudaSuccess;
  }
  run_after(s);
  e->stream = nullptr;
  e->recorded = true;
  e->ms = now_ms();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  CUDA_EMU_NOT_IN_CAPTURE();
  if (!valid_event(e)) return fail(cudaErrorInvalidResourceHandle);
  if (stream_mode() != StreamMode::eager) {
    std::lock_guard<std::recursive_mutex> lock(exec_mutex());
    if (e->stream) drain(e->stream, e->seq);
  }
  return take_async_error();
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!valid_event(start) || !valid_event(end)) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (stream_mode() != StreamMode::eager) {  // a record still queued: not ready, as on a GPU
    std::lock_guard<std::recursive_mutex> lock(exec_mutex());
    for (const CUevent_st* e : {start, end})
      if (e->stream && e->stream->done < e->seq) return fail(cudaErrorNotReady);
  }
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = float(end->ms - start->ms);
  return cudaSuccess;
}

// ---- driver entry points: tensor maps ----------------------------------------------------------------------
namespace {
// The driver's checks common to cuTensorMapEncodeTiled and cuTensorMapEncodeIm2col for what the emulator supports
// (no interleave, element strides 1 to 8, the first ignored as the driver does), and the fields they share; null
// when fine, else why not.
const char* encode_common(cuda_emu::TensorMap& t, CUtensorMapDataType type, cuuint32_t rank, void* address,
                          const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* elem_strides,
                          CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle, CUtensorMapFloatOOBfill oob) {
  static const uint32_t bytes_of[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2};
  if (!address || !dims || !strides || !elem_strides) return "null argument";
  if (unsigned(type) >= sizeof bytes_of / sizeof bytes_of[0]) return "unsupported data type";
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) return "the emulator supports no interleave";
  if (unsigned(swizzle) > unsigned(CU_TENSOR_MAP_SWIZZLE_128B)) return "the emulator supports swizzles up to 128B";
  const uint32_t eb = bytes_of[type];
  if (reinterpret_cast<uintptr_t>(address) % 16) return "global address not 16-byte aligned";
  for (uint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (uint64_t(1) << 32)) return "a dimension is 0 or above 2^32";
    if (elem_strides[i] == 0 || elem_strides[i] > 8) return "element stride outside [1, 8]";
  }
  // strides[i - 1]: bytes from one index of dimension i to the next; each spans the dimensions below it
  for (uint32_t i = 1; i < rank; ++i) {
    const uint64_t below = i == 1 ? dims[0] * eb : dims[i - 1] * strides[i - 2];
    if (strides[i - 1] % 16 || strides[i - 1] >= (uint64_t(1) << 40) || strides[i - 1] < below)
      return "a stride not a multiple of 16 bytes, above 2^40, or shorter than the dimensions below it";
  }
  t = cuda_emu::TensorMap{};
  t.magic = cuda_emu::kTensorMapMagic;
  t.base = static_cast<const unsigned char*>(address);
  t.rank = rank;
  for (uint32_t i = 0; i < rank; ++i) {
    t.dim[i] = dims[i], t.step[i] = uint8_t(i == 0 ? 1 : elem_strides[i]);
    if (i > 0) t.stride[i - 1] = strides[i - 1];
  }
  t.elem_bytes = eb;
  t.swizzle = uint8_t(swizzle);
  t.oob_nan = oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  return nullptr;
}

// A box row of `bytes` under `swizzle`: a multiple of 16 bytes, within the swizzle's span; null when fine.
const char* check_row(uint32_t bytes, CUtensorMapSwizzle swizzle) {
  if (bytes % 16) return "box row not a multiple of 16 bytes";
  const uint32_t span[] = {0, 32, 64, 128};
  if (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && bytes > span[swizzle]) return "box row wider than the swizzle span";
  return nullptr;
}

CUresult encode_failed(const char* fn, const char* why) {
  std::fprintf(stderr, "cuda_emu: %s: %s\n", fn, why);
  return CUDA_ERROR_INVALID_VALUE;
}

// cuTensorMapEncodeTiled: rank 1 to 5, boxes of 1 to 256 elements a dimension.
CUresult emu_tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                     const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                     const cuuint32_t* elem_strides, CUtensorMapInterleave interleave,
                                     CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill oob) {
  const char* fn = "cuTensorMapEncodeTiled";
  if (!map || !box) return encode_failed(fn, "null argument");
  if (rank < 1 || rank > uint32_t(cuda_emu::kTensorMapMaxRank)) return encode_failed(fn, "rank outside [1, 5]");
  cuda_emu::TensorMap t;
  if (const char* why = encode_common(t, type, rank, address, dims, strides, elem_strides, interleave, swizzle, oob))
    return encode_failed(fn, why);
  for (uint32_t i = 0; i < rank; ++i) {
    if (box[i] == 0 || box[i] > 256) return encode_failed(fn, "box dimension outside [1, 256]");
    t.box[i] = uint16_t(box[i]);
  }
  if (const char* why = check_row(box[0] * t.elem_bytes, swizzle)) return encode_failed(fn, why);
  *map = CUtensorMap{};
  std::memcpy(map, &t, sizeof t);
  return CUDA_SUCCESS;
}

// cuTensorMapEncodeIm2col (CUDA driver API): rank 3 to 5 ([n][d][h][w][c] with dimension 0 the channels), the
// bounding box's corners per spatial dimension (W first, as CUTLASS's make_im2col_tma_copy_desc passes them) within
// the rank's range ([-32768, 32767] at rank 3, [-128, 127] at 4, [-16, 15] at 5) and a box of non-zero extent in
// each, channelsPerPixel 1 to 256 (one box row), pixelsPerColumn 1 to 1024.
CUresult emu_tensor_map_encode_im2col(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                      const cuuint64_t* dims, const cuuint64_t* strides, const int* lower,
                                      const int* upper, cuuint32_t channels, cuuint32_t pixels,
                                      const cuuint32_t* elem_strides, CUtensorMapInterleave interleave,
                                      CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill oob) {
  const char* fn = "cuTensorMapEncodeIm2col";
  if (!map || !lower || !upper) return encode_failed(fn, "null argument");
  if (rank < 3 || rank > uint32_t(cuda_emu::kTensorMapMaxRank)) return encode_failed(fn, "rank outside [3, 5]");
  cuda_emu::TensorMap t;
  if (const char* why = encode_common(t, type, rank, address, dims, strides, elem_strides, interleave, swizzle, oob))
    return encode_failed(fn, why);
  if (channels == 0 || channels > 256) return encode_failed(fn, "channelsPerPixel outside [1, 256]");
  if (pixels == 0 || pixels > 1024) return encode_failed(fn, "pixelsPerColumn outside [1, 1024]");
  if (const char* why = check_row(channels * t.elem_bytes, swizzle)) return encode_failed(fn, why);
  const int limit = rank == 3 ? 32768 : rank == 4 ? 128 : 16;
  for (uint32_t i = 0; i + 2 < rank; ++i) {
    if (lower[i] < -limit || lower[i] >= limit || upper[i] < -limit || upper[i] >= limit)
      return encode_failed(fn, "a bounding-box corner outside the range of its rank");
    if (int64_t(dims[i + 1]) - 1 + upper[i] < lower[i]) return encode_failed(fn, "a bounding box of zero extent");
    t.lower[i] = int16_t(lower[i]), t.upper[i] = int16_t(upper[i]);
  }
  t.box[0] = uint16_t(channels);
  t.pixels = uint16_t(pixels);
  t.im2col = 1;
  *map = CUtensorMap{};
  std::memcpy(map, &t, sizeof t);
  return CUDA_SUCCESS;
}
}  // namespace

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  if (!symbol || !fn) return fail(cudaErrorInvalidValue);
  *fn = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0    ? reinterpret_cast<void*>(&emu_tensor_map_encode_tiled)
        : std::strcmp(symbol, "cuTensorMapEncodeIm2col") == 0 ? reinterpret_cast<void*>(&emu_tensor_map_encode_im2col)
                                                              : nullptr;
  if (status) *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || size_t(value) > kSmemPerBlockOptin) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(reg().mutex);
    reg().max_dyn_smem[func] = size_t(value);
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, const void* func, int block_size,
                                                          size_t dynamic_smem) {
  if (!num_blocks) return fail(cudaErrorInvalidValue);
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  if (block_size <= 0 || block_size > kMaxThreadsPerBlock) return fail(cudaErrorInvalidValue);
  // Registers are unknown here: count 128 a thread, near what hpdt's tensor-core kernels use on the H100 (90-168),
  // so that occupancy-sized partitions (split-K) come out as they do there, and emulated grids stay that small.
  constexpr int kAssumedRegisters = 128;
  int n = std::min({32, 2048 / block_size, 65536 / (kAssumedRegisters * block_size)});
  if (dynamic_smem > max_dynamic_smem(func)) n = 0;
  else if (dynamic_smem > 0) n = std::min<int>(n, int(kSmemPerSm / dynamic_smem));
  *num_blocks = n;
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void* func) {
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  *a = cudaFuncAttributes{};
  a->maxThreadsPerBlock = kMaxThreadsPerBlock;
  a->numRegs = 32;
  a->ptxVersion = 90;
  a->binaryVersion = 90;
  a->maxDynamicSharedSizeBytes = int(max_dynamic_smem(func));
  return cudaSuccess;
}
