#include "hpdt/core/allocator.h"

#include <cstdlib>
#include <vector>

#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/stream.h"

#if HPDT_HAVE_CUDA
#include "hpdt/core/check_cuda.h"
#endif

namespace hpdt {

namespace {
std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }
}  // namespace

std::shared_ptr<void> allocate_host(size_t bytes, bool pinned) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
#if HPDT_HAVE_CUDA
  if (pinned && cuda_available()) {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, rounded, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      HPDT_FAIL("cannot allocate ", bytes, " bytes of pinned host memory: ", cudaGetErrorString(e));
    }
    return std::shared_ptr<void>(p, [](void* q) { (void)cudaFreeHost(q); });
  }
#else
  (void)pinned;
#endif
  void* p = std::aligned_alloc(kHostAlignment, rounded);
  if (!p) HPDT_FAIL("cannot allocate ", bytes, " bytes of host memory (", mib(bytes), ")");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

// ---- CachingAllocator ---------------------------------------------------------------------------

CachingAllocator::CachingAllocator(std::unique_ptr<RawAllocator> raw, std::string name)
    : raw_(std::move(raw)), name_(std::move(name)) {}

CachingAllocator::~CachingAllocator() {
  release_cached();
  // Blocks still live at exit belong to tensors that outlive the allocator (static objects); they are
  // left to the driver's teardown rather than freed under their owners.
}

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20, kSmallLimit = size_t(1) << 20;
  if (bytes == 0) bytes = 1;
  if (bytes <= kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void* CachingAllocator::allocate(size_t bytes, void* stream) {
  const size_t size = round_size(bytes);
  std::lock_guard lk(mu_);
  uint64_t pool = 0;  // the pool capturing on this stream, if any
  for (auto& [id, q] : pools_)
    if (q.capturing && q.stream == stream) pool = id;
  const Block block{size, stream, pool};
  // A capture's own freed blocks first, then the general cache's (of this stream), then new memory.
  if (pool) {
    auto& cached = pools_.at(pool).cached;
    if (auto it = cached.find(size); it != cached.end()) {
      void* p = it->second;
      cached.erase(it);
      return hand_out(p, block, /*from_cache=*/true);
    }
  }
  if (auto it = cached_.find({stream, size}); it != cached_.end()) {
    void* p = it->second;
    cached_.erase(it);
    return hand_out(p, block, /*from_cache=*/true);
  }
  void* p = raw_->allocate(size);
  if (!p && !cached_.empty()) {  // out of memory: give the general cache back and try once more
    for (auto& [key, q] : cached_) {
      raw_->deallocate(q);
      stats_.bytes_cached -= key.second;
    }
    cached_.clear();
    p = raw_->allocate(size);
  }
  if (!p)
    HPDT_FAIL(name_, " memory exhausted allocating ", bytes, " bytes (", mib(size), "): ", mib(stats_.bytes_in_use),
              " in use, peak ", mib(stats_.peak_bytes_in_use));
  return hand_out(p, block, /*from_cache=*/false);
}

void* CachingAllocator::hand_out(void* p, const Block& block, bool from_cache) {
  live_.emplace(p, block);
  if (from_cache) {
    stats_.bytes_cached -= block.size;
    ++stats_.cache_hits;
  } else {
    ++stats_.raw_allocations;
  }
  stats_.bytes_in_use += block.size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return p;
}

void CachingAllocator::deallocate(void* p) {
  if (!p) return;
  std::lock_guard lk(mu_);
  auto it = live_.find(p);
  HPDT_CHECK(it != live_.end(), name_, " allocator: free of a pointer it did not allocate (or a double free)");
  const Block b = it->second;
  live_.erase(it);
  if (auto q = pools_.find(b.pool); b.pool && q != pools_.end())
    q->second.cached.emplace(b.size, p);
  else
    cached_.emplace(std::make_pair(b.stream, b.size), p);
  stats_.bytes_in_use -= b.size;
  stats_.bytes_cached += b.size;
}

void CachingAllocator::release_cached() {
  std::lock_guard lk(mu_);
  for (auto& [key, p] : cached_) {
    raw_->deallocate(p);
    stats_.bytes_cached -= key.second;
  }
  cached_.clear();
}

uint64_t CachingAllocator::begin_pool(void* stream) {
  std::lock_guard lk(mu_);
  for (const auto& [id, q] : pools_)
    HPDT_CHECK(!(q.capturing && q.stream == stream), name_,
               " allocator: a private pool is already capturing on stream ", stream,
               " (one capture per stream at a time)");
  const uint64_t id = next_pool_++;
  pools_.emplace(id, Pool{stream, true, {}});
  return id;
}

void CachingAllocator::end_pool_capture(uint64_t pool) {
  std::lock_guard lk(mu_);
  auto q = pools_.find(pool);
  HPDT_CHECK(q != pools_.end(), name_, " allocator: end_pool_capture of an unknown pool ", pool);
  q->second.capturing = false;
}

void CachingAllocator::release_pool(uint64_t pool) {
  std::lock_guard lk(mu_);
  auto q = pools_.find(pool);
  HPDT_CHECK(q != pools_.end(), name_, " allocator: release_pool of an unknown pool ", pool);
  for (auto& [size, p] : q->second.cached) cached_.emplace(std::make_pair(q->second.stream, size), p);
  pools_.erase(q);
}

size_t CachingAllocator::pool_bytes_cached(uint64_t pool) const {
  std::lock_guard lk(mu_);
  auto q = pools_.find(pool);
  size_t n = 0;
  if (q != pools_.end())
    for (const auto& [size, p] : q->second.cached) n += size;
  return n;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

// ---- CUDA -----------------------------------------------------------------------------------------

#if HPDT_HAVE_CUDA
namespace {
class CudaRawAllocator final : public RawAllocator {
 public:
  explicit CudaRawAllocator(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    int prev = 0;
    HPDT_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != device_) HPDT_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (prev != device_) HPDT_CUDA_CHECK(cudaSetDevice(prev));
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    HPDT_CUDA_CHECK(e);
    return p;
  }
  void deallocate(void* p) override {
    // cudaFree synchronises the device, so work still using the block has finished.
    const cudaError_t e = cudaFree(p);
    if (e != cudaSuccess && e != cudaErrorCudartUnloading) {
      (void)cudaGetLastError();
      HPDT_LOG(error) << "cudaFree failed: " << cudaGetErrorString(e);
    }
  }

 private:
  int device_;
};
}  // namespace
#endif

CachingAllocator& cuda_caching_allocator(int device) {
#if HPDT_HAVE_CUDA
  static std::mutex mu;
  static std::vector<std::unique_ptr<CachingAllocator>>* allocators = new std::vector<std::unique_ptr<CachingAllocator>>();
  // Deliberately leaked: destroying it at exit would race the CUDA runtime's own teardown.
  HPDT_CHECK(device >= 0 && device < cuda_device_count(), "device memory on cuda:", device, " requested, but ",
             cuda_device_count() == 0 ? "no GPU is usable: " + cuda_unavailable_reason()
                                      : "only " + std::to_string(cuda_device_count()) + " GPU(s) exist");
  std::lock_guard lk(mu);
  if (allocators->size() <= size_t(device)) allocators->resize(size_t(device) + 1);
  auto& a = (*allocators)[size_t(device)];
  if (!a) a = std::make_unique<CachingAllocator>(std::make_unique<CudaRawAllocator>(device), "cuda:" + std::to_string(device));
  return *a;
#else
  HPDT_FAIL("device memory on cuda:", device, " requested, but hpdt was built without CUDA");
#endif
}

std::shared_ptr<void> allocate_device(size_t bytes, int device, const Stream* stream) {
  CachingAllocator& a = cuda_caching_allocator(device);
  void* s = stream ? stream->handle() : nullptr;
  void* p = a.allocate(bytes, s);
  return std::shared_ptr<void>(p, [&a](void* q) { a.deallocate(q); });
}

}  // namespace hpdt
