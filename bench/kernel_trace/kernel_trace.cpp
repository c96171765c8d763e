// KernelTrace: CUPTI's activity API, loaded at run time (kernel_trace.h says why and from where).
//
// CUPTI hands its records over through two C callbacks, process-wide: a buffer request and a buffer completion,
// the latter possibly on a thread of CUPTI's own. They reach the running trace through the one collector below
// (one trace at a time: CUPTI's activity recording is the process's, not an object's).
#include "hpdt/bench/kernel_trace.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

#include "hpdt/core/error.h"

#if HPDT_HAVE_CUPTI
#include <cupti.h>
#include <dlfcn.h>
#endif

namespace hpdt::bench {

#if HPDT_HAVE_CUPTI
namespace {

constexpr unsigned kCuptiMajor = CUPTI_API_VERSION / 10000;

// The entry points of the loaded library.
struct Cupti {
  std::string path;
  decltype(&cuptiGetVersion) get_version = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
};

// What the completion callback collects for the running trace. One for the process, never freed: a callback on
// CUPTI's thread can never find it gone; `recording` says whether a trace wants the records.
struct Collector {
  std::mutex mutex;
  bool recording = false;
  std::vector<GpuActivity> activities;
  size_t dropped = 0;
};
Collector g_collector;
std::atomic<bool> g_running{false};                 // a KernelTrace exists (one at a time)
std::atomic<const Cupti*> g_cupti{nullptr};  // set once, by the first successful load (never unloaded)

std::string result_text(const Cupti& c, CUptiResult r) {
  const char* s = nullptr;
  if (c.result_string && c.result_string(r, &s) == CUPTI_SUCCESS && s) return s;
  return "CUptiResult " + std::to_string(int(r));
}

void check(const Cupti& c, CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS) HPDT_FAIL("kernel trace: ", what, " failed: ", result_text(c, r), " (", c.path, ")");
}

const char* memcpy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[memcpy DtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "[memcpy PtoP]";
    default: return "[memcpy]";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = size_t(8) << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = *buffer ? kBytes : 0;  // 0: CUPTI drops the records, and stop() reports it
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  const Cupti* cupti = g_cupti.load();
  Collector* c = &g_collector;
  std::lock_guard<std::mutex> lock(c->mutex);
  if (cupti && c->recording) {
    CUpti_Activity* rec = nullptr;
    while (cupti->next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      GpuActivity a;
      // The record layouts of the CUPTI these headers come from (the library's major version is checked to match).
      // The fields read here sit at the same offsets in every version of these structures since CUDA 11
      // (CUpti_ActivityKernel6..10, Memcpy5..6, Memset3..4: checked with offsetof on CUDA 13.0's headers).
      if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        a = {demangle(k->name), k->start, k->end};
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        a = {memcpy_name(m->copyKind), m->start, m->end};
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        a = {"[memset]", m->start, m->end};
      } else {
        continue;
      }
      c->activities.push_back(std::move(a));
    }
    size_t dropped = 0;
    if (cupti->dropped(context, stream, &dropped) == CUPTI_SUCCESS) c->dropped += dropped;
  }
  std::free(buffer);
}

// The library, loaded and its callbacks registered once per process; a failed load is retried by the next trace.
const Cupti& load_cupti() {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (const Cupti* loaded = g_cupti.load()) return *loaded;
  const std::string soname = "libcupti.so." + std::to_string(kCuptiMajor);
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("HPDT_CUPTI_LIBRARY"); e && *e) {
    candidates.push_back(e);
  } else {
    candidates.push_back(soname);
    if (const char* home = std::getenv("CUDA_HOME"); home && *home)
      candidates.push_back(std::string(home) + "/extras/CUPTI/lib64/" + soname);
    candidates.push_back("/usr/local/cuda/extras/CUPTI/lib64/" + soname);
    candidates.push_back("/usr/local/cuda/lib64/" + soname);
  }
  std::string tried;
  void* h = nullptr;
  std::string path;
  for (const std::string& c : candidates) {
    h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      path = c;
      break;
    }
    const char* err = dlerror();
    tried += (tried.empty() ? "" : "; ") + c + ": " + (err ? err : "not found");
  }
  HPDT_CHECK(h, "kernel trace: CUPTI ", kCuptiMajor, " could not be loaded (", tried,
             "); set HPDT_CUPTI_LIBRARY to the path of ", soname);
  auto* c = new Cupti;  // kept for the process's life, as the library
  c->path = path;
  if (Dl_info info{}; dladdr(dlsym(h, "cuptiGetVersion"), &info) && info.dli_fname) c->path = info.dli_fname;
  const auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    HPDT_CHECK(fn, "kernel trace: ", path, " has no ", name);
  };
  sym(c->get_version, "cuptiGetVersion");
  sym(c->result_string, "cuptiGetResultString");
  sym(c->register_callbacks, "cuptiActivityRegisterCallbacks");
  sym(c->enable, "cuptiActivityEnable");
  sym(c->disable, "cuptiActivityDisable");
  sym(c->flush_all, "cuptiActivityFlushAll");
  sym(c->next_record, "cuptiActivityGetNextRecord");
  sym(c->dropped, "cuptiActivityGetNumDroppedRecords");
  uint32_t version = 0;
  check(*c, c->get_version(&version), "cuptiGetVersion");
  HPDT_CHECK(version / 10000 == kCuptiMajor, "kernel trace: ", path, " is CUPTI API version ", version,
             "; this program reads the records of CUPTI ", kCuptiMajor, ".x (API version ", CUPTI_API_VERSION,
             "): set HPDT_CUPTI_LIBRARY to a ", soname);
  g_cupti.store(c);  // before the callbacks can run
  if (const CUptiResult r = c->register_callbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS) {
    g_cupti.store(nullptr);  // the next trace loads and registers again
    check(*c, r, "cuptiActivityRegisterCallbacks");
  }
  return *c;
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

KernelTrace::KernelTrace() {
  const Cupti& c = load_cupti();
  bool expected = false;
  HPDT_CHECK(g_running.compare_exchange_strong(expected, true),
             "kernel trace: another trace is running in this process (CUPTI's recording is the process's)");
  library_ = c.path;
  {
    std::lock_guard<std::mutex> lock(g_collector.mutex);
    g_collector.activities.clear();
    g_collector.dropped = 0;
    g_collector.recording = true;
  }
  running_ = true;
  for (const CUpti_ActivityKind k : kKinds) {
    const CUptiResult r = c.enable(k);
    if (r != CUPTI_SUCCESS) {
      finish();  // disables every kind, the ones enabled so far among them
      check(c, r, "cuptiActivityEnable");
    }
  }
}

// Stops the recording, delivers what CUPTI still holds, and frees the process's trace for the next one.
void KernelTrace::finish() {
  const Cupti& c = *g_cupti.load();
  for (const CUpti_ActivityKind k : kKinds) c.disable(k);
  c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard<std::mutex> lock(g_collector.mutex);
    g_collector.recording = false;
  }
  running_ = false;
  g_running.store(false);
}

KernelTrace::~KernelTrace() {
  if (running_) finish();
}

std::vector<GpuActivity> KernelTrace::stop() {
  HPDT_CHECK(running_, "kernel trace: stop() of a trace that is not running");
  finish();
  std::vector<GpuActivity> acts;
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(g_collector.mutex);
    acts.swap(g_collector.activities);
    dropped = g_collector.dropped;
  }
  HPDT_CHECK(dropped == 0, "kernel trace: CUPTI dropped ", dropped,
             " records (its buffers were full): the trace would understate the time");
  std::stable_sort(acts.begin(), acts.end(),
                   [](const GpuActivity& a, const GpuActivity& b) { return a.start_ns < b.start_ns; });
  return acts;
}

#else  // no CUPTI in this build

KernelTrace::KernelTrace() {
  HPDT_FAIL("kernel trace: this build has no CUPTI (a CUDA build whose toolkit has CUPTI's headers traces kernels)");
}
KernelTrace::~KernelTrace() = default;
void KernelTrace::finish() {}
std::vector<GpuActivity> KernelTrace::stop() { HPDT_FAIL("kernel trace: this build has no CUPTI"); }

#endif

}  // namespace hpdt::bench
