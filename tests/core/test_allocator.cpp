// The caching logic of CachingAllocator, with malloc standing in for cudaMalloc.
#include "hpdt/core/allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "hpdt_test.h"

namespace {

using hpdt::CachingAllocator;

class CountingMalloc final : public hpdt::RawAllocator {
 public:
  size_t limit = SIZE_MAX, used = 0, calls = 0;
  std::set<void*> live;
  std::map<void*, size_t> sizes;
  void* allocate(size_t bytes) override {
    if (used + bytes > limit) return nullptr;
    void* p = std::malloc(bytes);
    used += bytes;
    ++calls;
    live.insert(p);
    sizes[p] = bytes;
    return p;
  }
  void deallocate(void* p) override {
    ASSERT_TRUE(live.count(p)) << "freed a block twice or one never allocated";
    live.erase(p);
    used -= sizes[p];
    std::free(p);
  }
};

TEST(CachingAllocator, SizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(1 << 20), size_t(1) << 20);
  EXPECT_EQ(CachingAllocator::round_size((1 << 20) + 1), size_t(2) << 20);
  EXPECT_EQ(CachingAllocator::round_size((5 << 20)), size_t(6) << 20);
}

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameClassAndStream) {
  auto raw = std::make_unique<CountingMalloc>();
  CountingMalloc* m = raw.get();
  CachingAllocator a(std::move(raw), "test");
  void* s1 = reinterpret_cast<void*>(0x1);
  void* s2 = reinterpret_cast<void*>(0x2);
  void* p = a.allocate(1000, s1);
  a.deallocate(p);
  EXPECT_EQ(a.allocate(900, s1), p);  // same class (1024), same stream: the cached block
  EXPECT_EQ(m->calls, 1u);
  void* q = a.allocate(900, s2);      // other stream: a new block
  EXPECT_NE(q, p);
  EXPECT_EQ(m->calls, 2u);
  auto st = a.stats();
  EXPECT_EQ(st.cache_hits, 1u);
  EXPECT_EQ(st.bytes_in_use, 2048u);
  a.deallocate(p);
  a.deallocate(q);
  st = a.stats();
  EXPECT_EQ(st.bytes_in_use, 0u);
  EXPECT_EQ(st.bytes_cached, 2048u);
  EXPECT_EQ(st.peak_bytes_in_use, 2048u);
  a.release_cached();
  EXPECT_EQ(a.stats().bytes_cached, 0u);
  EXPECT_TRUE(m->live.empty());
}

TEST(CachingAllocator, ReleasesCacheWhenOutOfMemory) {
  auto raw = std::make_unique<CountingMalloc>();
  CountingMalloc* m = raw.get();
  m->limit = 4 << 20;
  CachingAllocator a(std::move(raw), "test");
  void* big = a.allocate(3 << 20);  // class 4 MiB: the whole budget
  a.deallocate(big);                // cached
  void* other = a.allocate(2 << 20);  // different class: needs the cache released first
  EXPECT_NE(other, nullptr);
  EXPECT_EQ(a.stats().bytes_cached, 0u);
  HPDT_EXPECT_THROW_MSG(a.allocate(4 << 20), "test memory exhausted");
  a.deallocate(other);
}

TEST(CachingAllocator, RejectsForeignPointers) {
  CachingAllocator a(std::make_unique<CountingMalloc>(), "test");
  int x;
  HPDT_EXPECT_THROW_MSG(a.deallocate(&x), "did not allocate");
  void* p = a.allocate(10);
  a.deallocate(p);
  HPDT_EXPECT_THROW_MSG(a.deallocate(p), "double free");
}

// A CUDA graph's private pool: what the capture allocates, from the pool's cache, the general cache or the raw
// allocator, is the pool's; freed, it stays the pool's (no allocation outside a capture gets it, release_cached()
// and the out-of-memory path leave it) until the pool is released, when its cached blocks join the general cache.
TEST(CachingAllocator, PrivatePoolKeepsACapturesBlocksUntilReleased) {
  auto raw = std::make_unique<CountingMalloc>();
  CountingMalloc* m = raw.get();
  CachingAllocator a(std::move(raw), "test");
  void* s = reinterpret_cast<void*>(0x1);
  void* warm = a.allocate(1000, s);  // a warm-up step's temporary, cached before the capture
  a.deallocate(warm);
  const uint64_t pool = a.begin_pool(s);
  HPDT_EXPECT_THROW_MSG(a.begin_pool(s), "already capturing");
  void* t1 = a.allocate(1000, s);  // from the general cache, now the pool's
  EXPECT_EQ(t1, warm);
  a.deallocate(t1);  // back to the pool, not the general cache
  EXPECT_EQ(a.pool_bytes_cached(pool), 1024u);
  void* t2 = a.allocate(1000, s);  // the capture reuses its own freed block
  EXPECT_EQ(t2, t1);
  void* kept = a.allocate(5000, s);  // from the raw allocator: live after the capture (a layer's buffer)
  void* other = a.allocate(1000, reinterpret_cast<void*>(0x2));  // another stream: not the pool's
  a.deallocate(t2);
  a.end_pool_capture(pool);
  EXPECT_EQ(m->calls, 3u);
  // After the capture: the pool's cached block is nobody else's, on the capture's stream or after release_cached().
  void* after = a.allocate(1000, s);
  EXPECT_NE(after, t1);
  EXPECT_EQ(m->calls, 4u);
  a.release_cached();
  EXPECT_TRUE(m->live.count(t1)) << "release_cached() freed a block the graph writes";
  a.deallocate(kept);  // a live pool block freed while the pool lives: the pool's
  EXPECT_EQ(a.pool_bytes_cached(pool), 1024u + 5120u);
  void* second = a.allocate(5000, s);
  EXPECT_NE(second, kept);
  // Released (the graph destroyed): its blocks are the general cache's again.
  a.release_pool(pool);
  EXPECT_EQ(a.pool_bytes_cached(pool), 0u);
  EXPECT_EQ(a.allocate(1000, s), t1);
  HPDT_EXPECT_THROW_MSG(a.release_pool(pool), "unknown pool");
  const uint64_t again = a.begin_pool(s);  // a new capture on the stream: allowed once the last one ended
  a.end_pool_capture(again);
  a.release_pool(again);
  a.deallocate(after);
  a.deallocate(other);
  a.deallocate(t1);
  auto st = a.stats();
  EXPECT_EQ(st.bytes_in_use, 5120u);  // the second 5000-byte block, still live
  EXPECT_EQ(st.bytes_cached, 1024u + 1024u + 1024u + 5120u);
  a.deallocate(second);
  a.release_cached();
  EXPECT_TRUE(m->live.empty());
}

}  // namespace
