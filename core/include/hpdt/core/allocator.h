// Memory for tensors.
//
// Host memory is 64-byte aligned (one cache line, one AVX-512 vector), optionally pinned (page-locked
// through cudaHostAlloc) so that copies to and from the GPU can be asynchronous.
//
// Device memory comes from a CachingAllocator: cudaMalloc is slow and synchronising, so freed blocks
// are kept and handed out again. A block is reused only on the stream it was last used on, which keeps
// reuse safe without events (the PyTorch rule). Everything is cudaMalloc; no managed memory. A CUDA graph's
// memory is kept in a private pool of its own while the graph lives (begin_pool).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace hpdt {

inline constexpr size_t kHostAlignment = 64;

class Stream;

// Host memory, 64-byte aligned; pinned when asked and a GPU is usable (else pageable, silently: a CPU-only
// run asks for pinned buffers too). Throws hpdt::Error when memory runs out.
std::shared_ptr<void> allocate_host(size_t bytes, bool pinned);
// Device memory from the caching allocator of `device`, tied to `stream` (nullptr: the default stream).
std::shared_ptr<void> allocate_device(size_t bytes, int device, const Stream* stream);

// Where a CachingAllocator gets its memory: cudaMalloc in production, malloc in tests.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual void* allocate(size_t bytes) = 0;  // nullptr when out of memory
  virtual void deallocate(void* p) = 0;
};

class CachingAllocator {
 public:
  struct Stats {
    size_t bytes_in_use = 0;       // handed out and not yet returned
    size_t bytes_cached = 0;       // returned and kept for reuse
    size_t peak_bytes_in_use = 0;
    size_t raw_allocations = 0;    // calls to the raw allocator that succeeded
    size_t cache_hits = 0;         // allocations served from the cache
  };

  explicit CachingAllocator(std::unique_ptr<RawAllocator> raw, std::string name = "device");
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Size classes: multiples of 512 B up to 1 MiB, then multiples of 2 MiB. A cached block is reused
  // for a request of the same class only. Throws hpdt::Error (with stats) when memory runs out even
  // after the cache is released.
  void* allocate(size_t bytes, void* stream = nullptr);
  void deallocate(void* p);  // throws for a pointer it did not hand out
  void release_cached();     // gives every cached block of the general cache back to the raw allocator
  Stats stats() const;
  static size_t round_size(size_t bytes);

  // Private pools, for CUDA-graph capture (CudaGraph::capture). Between begin_pool(stream) and
  // end_pool_capture(pool), allocations on `stream` take the pool's cached blocks first, then the general
  // cache's, then the raw allocator's, and every block they hand out belongs to the pool. A pool block that is
  // freed goes back to its pool: out of reach of every other allocation and of release_cached() until
  // release_pool(pool), which moves the pool's cached blocks into the general cache (its live blocks go there
  // when freed). So the memory a graph's replays write is never handed to other work while the graph lives.
  // One capturing pool per stream at a time.
  uint64_t begin_pool(void* stream);
  void end_pool_capture(uint64_t pool);
  void release_pool(uint64_t pool);
  size_t pool_bytes_cached(uint64_t pool) const;  // the pool's freed blocks (0 for a released pool)

 private:
  struct Block {
    size_t size;
    void* stream;
    uint64_t pool = 0;  // 0: the general cache's
  };
  struct Pool {
    void* stream;
    bool capturing = true;
    std::multimap<size_t, void*> cached;  // size -> block
  };
  void* hand_out(void* p, const Block& block, bool from_cache);  // live, counted; with mu_ held
  std::unique_ptr<RawAllocator> raw_;
  std::string name_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> live_;
  std::multimap<std::pair<void*, size_t>, void*> cached_;  // (stream, size) -> block
  std::map<uint64_t, Pool> pools_;
  uint64_t next_pool_ = 1;
  Stats stats_;
};

// The process-wide caching allocator of CUDA device `device` (created on first use).
CachingAllocator& cuda_caching_allocator(int device);

}  // namespace hpdt
