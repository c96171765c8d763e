// ShardedReader at any rank count: shards disjoint and covering, the global batch independent of the
// rank count, eval mode seeing every sample exactly once, augmentation reproducible across rank
// counts, resume equal to an uninterrupted run, prefetch depth not changing a bit, and bad options;
// the same for the block-shuffled order (shuffle_block > 1, with and without the two-phase exchange),
// whose block 1 is exactly the per-sample order of earlier versions; window reads; pooled batch memory.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <set>

#include "hpdt/core/philox.h"
#include "hpdt/io/dataset.h"
#include "hpdt/io/prepare.h"
#include "hpdt/io/reader.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

constexpr int64_t kC = 1, kH = 4, kW = 4, kClasses = 5;

// Sample i: bytes 0-3 hold i (little-endian), the rest (i*7 + k) % 251; label i % 5. So a decoded
// image says which sample it is.
void index_fill(int64_t first, int64_t count, uint8_t* images, int32_t* labels) {
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t id = uint32_t(first + i);
    uint8_t* p = images + i * kC * kH * kW;
    std::memcpy(p, &id, 4);
    for (int64_t k = 4; k < kC * kH * kW; ++k) p[k] = uint8_t((id * 7 + uint32_t(k)) % 251);
    labels[i] = int32_t(id % kClasses);
  }
}

std::string make_index_dataset(const test::TempDir& dir, int64_t n, io::Layout layout = io::Layout::chunked) {
  const std::string path = dir.file("idx" + std::to_string(n) + ".h5");
  io::WriteOptions opt;
  opt.layout = layout;
  opt.chunk_samples = 16;
  io::write_dataset(MPI_COMM_WORLD, path, io::synthetic_spec(n, kC, kH, kW, kClasses, 0), index_fill, opt);
  return path;
}

// The sample id a decoded (normalize=false) image carries.
int64_t decoded_id(const float* img) {
  uint8_t b[4];
  for (int k = 0; k < 4; ++k) b[k] = uint8_t(std::lround(img[k] * 255.0f));
  uint32_t id;
  std::memcpy(&id, b, 4);
  return id;
}

std::vector<int64_t> allgather(const std::vector<int64_t>& mine) {
  std::vector<int64_t> all(mine.size() * size_t(world_size()));
  MPI_Allgather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, MPI_COMM_WORLD);
  return all;
}

TEST(ShardedReader, EpochOrderIsAPermutationPerSeedAndEpoch) {
  const auto a = io::ShardedReader::epoch_order(1000, 7, 0, true);
  const auto b = io::ShardedReader::epoch_order(1000, 7, 1, true);
  const auto c = io::ShardedReader::epoch_order(1000, 8, 0, true);
  EXPECT_EQ(a, io::ShardedReader::epoch_order(1000, 7, 0, true));
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[size_t(i)], i);
  EXPECT_EQ(io::ShardedReader::epoch_order(5, 7, 3, false), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

// Train mode, both tail policies, sizes that do and do not divide: the ranks' batches, gathered in
// rank order, are exactly the slice of the (rank-count independent) epoch order; data and labels
// match the sample; drop never repeats; pad covers everything.
TEST(ShardedReader, ShardsAreDisjointCoveringAndRankCountIndependent) {
  test::TempDir dir;
  const int p = world_size();
  for (int64_t n : {1, 13, 64, 101}) {
    const std::string path = make_index_dataset(dir, n);
    for (int64_t lb : {1, 3, 8}) {
      for (io::TailPolicy tail : {io::TailPolicy::drop, io::TailPolicy::pad}) {
        const int64_t B = lb * p;
        if (tail == io::TailPolicy::drop && n < B) continue;
        io::ReaderOptions opt;
        opt.tail = tail;
        opt.normalize = false;
        opt.prefetch = 2;
        opt.in_memory_limit_bytes = tail == io::TailPolicy::pad ? 0 : int64_t(1) << 20;  // both read paths
        io::ShardedReader reader(MPI_COMM_WORLD, path, B, 1234, opt);
        EXPECT_EQ(reader.in_memory(), tail == io::TailPolicy::drop);
        const int64_t steps = reader.steps_per_epoch();
        EXPECT_EQ(steps, tail == io::TailPolicy::drop ? n / B : (n + B - 1) / B);
        for (int64_t epoch = 0; epoch < 2; ++epoch) {
          const auto order = io::ShardedReader::epoch_order(n, 1234, epoch, true);
          std::multiset<int64_t> seen;
          for (int64_t s = 0; s < steps; ++s) {
            const io::Batch b = reader.next();
            ASSERT_EQ(b.epoch, epoch);
            ASSERT_EQ(b.step, s);
            ASSERT_EQ(b.images.shape(), (Shape{lb, kC, kH, kW}));
            for (int64_t i = 0; i < lb; ++i) {
              ASSERT_EQ(decoded_id(b.images.data<float>() + i * kC * kH * kW), b.indices[size_t(i)])
                  << "n=" << n << " lb=" << lb << " step " << s << " sample " << i;
              ASSERT_EQ(b.labels.data<int32_t>()[i], int32_t(b.indices[size_t(i)] % kClasses));
            }
            const auto global = allgather(b.indices);
            std::vector<int64_t> valid_flags = allgather({b.valid});
            for (int64_t g = 0; g < B; ++g) ASSERT_EQ(global[size_t(g)], order[size_t((s * B + g) % n)]) << "n=" << n << " B=" << B;
            for (int r = 0; r < p; ++r)
              for (int64_t i = 0; i < valid_flags[size_t(r)]; ++i) seen.insert(global[size_t(r * lb + i)]);
          }
          if (tail == io::TailPolicy::drop) {
            EXPECT_EQ(int64_t(seen.size()), steps * B);
            EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample repeated";
          } else {
            EXPECT_EQ(int64_t(seen.size()), n) << "valid samples must cover the epoch exactly once";
            EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), size_t(n));
          }
        }
      }
    }
  }
}

TEST(ShardedReader, EvalModeSeesEverySampleExactlyOnce) {
  test::TempDir dir;
  const int p = world_size();
  for (int64_t n : {7, 50}) {
    const std::string path = make_index_dataset(dir, n, io::Layout::contiguous);
    io::ReaderOptions opt;
    opt.mode = io::ReaderMode::eval;
    opt.augment = true;  // ignored in eval mode
    opt.normalize = false;
    io::ShardedReader reader(MPI_COMM_WORLD, path, 4 * p, 99, opt);
    std::vector<int> count(size_t(n), 0);
    for (int64_t s = 0; s < reader.steps_per_epoch(); ++s) {
      const io::Batch b = reader.next();
      const auto global = allgather(b.indices);
      const auto valid = allgather({b.valid});
      for (int r = 0; r < p; ++r)
        for (int64_t i = 0; i < valid[size_t(r)]; ++i) count[size_t(global[size_t(r * 4 + i)])]++;
      for (int64_t i = 0; i < 4; ++i) ASSERT_EQ(decoded_id(b.images.data<float>() + i * 16), b.indices[size_t(i)]);
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(count[size_t(i)], 1) << "sample " << i;
    EXPECT_EQ(reader.next().epoch, 1);  // rolls over into the next epoch
  }
}

// max_samples: the reader sees the first N samples of the file, as a file of N (the order, the steps per epoch), in
// memory or read from the file, in train and eval mode.
TEST(ShardedReader, MaxSamplesReadsTheFirstNAsAFileOfN) {
  test::TempDir dir;
  const int p = world_size();
  const std::string big = make_index_dataset(dir, 50, io::Layout::contiguous);
  const std::string small = make_index_dataset(dir, 20, io::Layout::contiguous);
  for (const int64_t in_memory : {int64_t(1) << 30, int64_t(0)}) {
    io::ReaderOptions opt;
    opt.normalize = false;
    opt.in_memory_limit_bytes = in_memory;
    opt.max_samples = 20;
    io::ShardedReader first(MPI_COMM_WORLD, big, 2 * p, 5, opt);
    opt.max_samples = 0;
    io::ShardedReader whole(MPI_COMM_WORLD, small, 2 * p, 5, opt);
    ASSERT_EQ(first.steps_per_epoch(), 20 / (2 * p));
    ASSERT_EQ(whole.steps_per_epoch(), first.steps_per_epoch());
    for (int64_t s = 0; s < 2 * first.steps_per_epoch(); ++s) {  // two epochs
      const io::Batch a = first.next(), b = whole.next();
      ASSERT_EQ(a.indices, b.indices) << "step " << s;
      for (int64_t i = 0; i < 2; ++i) {
        ASSERT_LT(a.indices[size_t(i)], 20);
        ASSERT_EQ(decoded_id(a.images.data<float>() + i * 16), a.indices[size_t(i)]);
      }
    }
  }
  io::ReaderOptions eval;
  eval.mode = io::ReaderMode::eval;
  eval.max_samples = 7;
  io::ShardedReader e(MPI_COMM_WORLD, big, 4 * p, 0, eval);
  EXPECT_EQ(e.steps_per_epoch(), (7 + 4 * p - 1) / (4 * p));
  io::ReaderOptions more;
  more.max_samples = 500;  // more than the file holds: all of it
  EXPECT_EQ(io::ShardedReader(MPI_COMM_WORLD, big, 2 * p, 0, more).steps_per_epoch(), 50 / (2 * p));
  io::ReaderOptions negative;
  negative.max_samples = -1;
  HPDT_EXPECT_THROW_MSG(io::ShardedReader(MPI_COMM_WORLD, big, p, 0, negative), "max_samples must be >= 0");
}

// ---- block-shuffled order ----

// The per-sample order as every version before shuffle_block computed it (Fisher-Yates on Philox
// keyed by (seed, epoch)): block 1 must reproduce it exactly, so existing checkpoints resume as before.
std::vector<int64_t> legacy_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  Rng rng(seed, uint64_t(epoch));
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[rng.below(uint32_t(i + 1))]);
  return order;
}

bool is_permutation_of_n(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != int64_t(i)) return false;
  return true;
}

TEST(ShardedReader, BlockOneIsTheLegacyOrder) {
  for (int64_t n : {1, 2, 13, 1000, 4097})
    for (uint64_t seed : {0ull, 7ull, 0xFFFFFFFFFFull})
      for (int64_t epoch : {0, 1, 5}) {
        const auto legacy = legacy_order(n, seed, epoch);
        ASSERT_EQ(io::ShardedReader::epoch_order(n, seed, epoch, true), legacy);
        ASSERT_EQ(io::ShardedReader::epoch_order(n, seed, epoch, true, 1, 64), legacy) << "the window must not matter";
      }
  // And through a reader: default options and an explicit shuffle_block = 1 give the legacy shares.
  test::TempDir dir;
  const int p = world_size(), r = world_rank();
  const std::string path = make_index_dataset(dir, 50);
  io::ReaderOptions explicit_one;
  explicit_one.shuffle_block = 1;
  io::ShardedReader a(MPI_COMM_WORLD, path, 2 * p, 11, {}), b(MPI_COMM_WORLD, path, 2 * p, 11, explicit_one);
  const auto legacy = legacy_order(50, 11, 1);
  for (int64_t s = 0; s < a.steps_per_epoch(); ++s) {
    const auto idx = a.batch_indices(1, s, r);
    ASSERT_EQ(idx, b.batch_indices(1, s, r));
    for (int64_t i = 0; i < 2; ++i) ASSERT_EQ(idx[size_t(i)], legacy[size_t(s * 2 * p + r * 2 + i)]);
  }
}

// The block order is a permutation for any (n, K, window), a function of (seed, epoch) only, and has
// the promised structure: every window holds exactly the samples of the blocks that the block
// permutation put there (K | window, K | n: window/K whole blocks of K consecutive rows).
TEST(ShardedReader, BlockOrderIsAPermutationOfWholeBlocksPerWindow) {
  for (int64_t n : {1, 7, 64, 100, 1001})
    for (int64_t k : {2, 4, 8, 64, 2000})
      for (int64_t window : {1, 4, 16, 60}) {
        const auto a = io::ShardedReader::epoch_order(n, 3, 2, true, k, window);
        ASSERT_EQ(int64_t(a.size()), n);
        ASSERT_TRUE(is_permutation_of_n(a)) << "n=" << n << " k=" << k << " window=" << window;
        ASSERT_EQ(a, io::ShardedReader::epoch_order(n, 3, 2, true, k, window));
        if (n / k >= 8) {  // enough blocks that two orders coincide by chance with negligible probability
          EXPECT_NE(a, io::ShardedReader::epoch_order(n, 3, 3, true, k, window)) << "epochs must differ";
          EXPECT_NE(a, io::ShardedReader::epoch_order(n, 4, 2, true, k, window)) << "seeds must differ";
        }
        EXPECT_EQ(io::ShardedReader::epoch_order(n, 3, 2, false, k, window), io::ShardedReader::epoch_order(n, 3, 2, false));
      }
  const int64_t n = 960, k = 8, window = 64;  // 120 blocks, 8 per window
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const auto order = io::ShardedReader::epoch_order(n, 5, epoch, true, k, window);
    for (int64_t w0 = 0; w0 < n; w0 += window) {
      std::vector<int64_t> win(order.begin() + w0, order.begin() + w0 + window);
      std::sort(win.begin(), win.end());
      for (int64_t i = 0; i < window; i += k) {  // sorted: window/k runs of k consecutive rows, each a whole block
        ASSERT_EQ(win[size_t(i)] % k, 0);
        for (int64_t j = 1; j < k; ++j) ASSERT_EQ(win[size_t(i + j)], win[size_t(i)] + j);
      }
      // ... and mixed: not simply the blocks one after the other.
      std::vector<int64_t> as_is(order.begin() + w0, order.begin() + w0 + window);
      int64_t breaks = 0;
      for (size_t i = 1; i < as_is.size(); ++i) breaks += as_is[i] != as_is[i - 1] + 1;
      EXPECT_GT(breaks, window / 2) << "the window shuffle must mix the blocks";
    }
  }
  HPDT_EXPECT_THROW_MSG(io::ShardedReader::epoch_order(10, 1, 0, true, 0, 4), "shuffle block must be >= 1");
  HPDT_EXPECT_THROW_MSG(io::ShardedReader::epoch_order(10, 1, 0, true, 4, 2, 0), "window_batches must be >= 1");
  HPDT_EXPECT_THROW_MSG(io::ShardedReader::epoch_order(10, 1, 0, true, 4, 0), "needs a window");
}

// Interleaved windows (window_batches W > 1): a permutation per (seed, epoch, K, B, W); the window
// holds whole blocks; for every p dividing B the shares of rank r over a full window are one
// contiguous stretch of the window's blocks (so at most bW/K + 3 runs of the file, one block being
// short); every column's steps are shuffled (not simply the stretch in file order); W = 1 is the in-batch order.
TEST(ShardedReader, InterleavedWindowsGiveEveryRankAContiguousStretch) {
  for (int64_t n : {1, 7, 100, 1001, 4096})
    for (int64_t k : {1, 8, 64})
      for (int64_t B : {1, 12, 60})
        for (int64_t W : {2, 3, 16}) {
          const auto a = io::ShardedReader::epoch_order(n, 3, 2, true, k, B, W);
          ASSERT_TRUE(is_permutation_of_n(a)) << "n=" << n << " k=" << k << " B=" << B << " W=" << W;
          ASSERT_EQ(a, io::ShardedReader::epoch_order(n, 3, 2, true, k, B, W));
          if (k == 1) {
            ASSERT_EQ(a, io::ShardedReader::epoch_order(n, 3, 2, true, 1, B)) << "per-sample order ignores W";
          }
        }
  EXPECT_EQ(io::ShardedReader::epoch_order(1000, 3, 2, true, 8, 40, 1), io::ShardedReader::epoch_order(1000, 3, 2, true, 8, 40));
  const int64_t n = 4100, k = 64, B = 60, W = 16;  // windows of 960 = 15 blocks; 4 full windows, a short one, a tail
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const auto order = io::ShardedReader::epoch_order(n, 5, epoch, true, k, B, W);
    EXPECT_NE(order, io::ShardedReader::epoch_order(n, 5, epoch, true, k, B)) << "interleaving must change the order";
    for (int64_t w0 = 0; w0 + B * W <= n; w0 += B * W) {
      for (int64_t p : {1, 2, 3, 4, 5, 6, 12}) {
        const int64_t b = B / p;
        for (int64_t r = 0; r < p; ++r) {
          std::vector<int64_t> rows;
          for (int64_t s = 0; s < W; ++s)
            for (int64_t i = 0; i < b; ++i) rows.push_back(order[size_t(w0 + s * B + r * b + i)]);
          std::sort(rows.begin(), rows.end());
          int64_t runs = 1;
          for (size_t i = 1; i < rows.size(); ++i) runs += rows[i] != rows[i - 1] + 1;
          EXPECT_LE(runs, b * W / k + 3) << "rank " << r << " of " << p << " window at " << w0;  // + the short last block
        }
      }
      // Column j of the window's steps: a permutation of W consecutive rows of the block order, shuffled.
      int64_t shuffled = 0;
      for (int64_t j = 0; j < B; ++j) {
        std::vector<int64_t> col;
        for (int64_t s = 0; s < W; ++s) col.push_back(order[size_t(w0 + s * B + j)]);
        std::vector<int64_t> sorted = col;
        std::sort(sorted.begin(), sorted.end());
        shuffled += col != sorted;
      }
      EXPECT_GT(shuffled, B / 2) << "the steps of a column must be shuffled";
    }
  }
}

// One step of a reader of index-filled samples (normalize off) at this rank count: this rank's
// indices are batch_indices, its images and labels are those samples, the ranks' batches gathered in
// rank order are the step's slice of `order` (which does not involve the rank count), and the valid
// samples of all ranks go into `seen`.
void check_step(const io::ShardedReader& reader, const io::Batch& b, const std::vector<int64_t>& order, int64_t n,
                std::multiset<int64_t>& seen) {
  const int64_t B = reader.global_batch(), lb = reader.local_batch();
  ASSERT_EQ(b.indices, reader.batch_indices(b.epoch, b.step, world_rank()));
  for (int64_t i = 0; i < lb; ++i) {
    ASSERT_EQ(decoded_id(b.images.data<float>() + i * kC * kH * kW), b.indices[size_t(i)]) << "sample " << i;
    ASSERT_EQ(b.labels.data<int32_t>()[i], int32_t(b.indices[size_t(i)] % kClasses));
  }
  const auto global = allgather(b.indices);
  const auto valid = allgather({b.valid});
  for (int64_t g = 0; g < B; ++g) ASSERT_EQ(global[size_t(g)], order[size_t((b.step * B + g) % n)]);
  for (int q = 0; q < world_size(); ++q)
    for (int64_t i = 0; i < valid[size_t(q)]; ++i) seen.insert(global[size_t(q * lb + i)]);
}

// A block-ordered reader at this rank count, both tail policies, with and without the two-phase
// exchange, reading the file: the ranks' batches gathered in rank order are exactly the slice of the
// pure order (which does not involve the rank count: B = 60 at every np of the test), drop never
// repeats, pad's valid samples cover the epoch once, and the bytes are those of the samples.
TEST(ShardedReader, BlockOrderShardsAreDisjointCoveringAndRankCountIndependent) {
  test::TempDir dir;
  const int p = world_size();
  if (60 % p != 0) GTEST_SKIP() << "global batch 60 needs np in 1..6";
  const int64_t B = 60;
  for (int64_t n : {60, 131, 300}) {
    for (io::Layout layout : {io::Layout::contiguous, io::Layout::chunked}) {
      const std::string path = make_index_dataset(dir, n, layout);
      for (int64_t k : {4, 7, 30}) {
        for (io::TailPolicy tail : {io::TailPolicy::drop, io::TailPolicy::pad}) {
          for (bool exchange : {true, false}) {
            io::ReaderOptions opt;
            opt.shuffle_block = k;
            opt.exchange = exchange;
            opt.tail = tail;
            opt.normalize = false;
            opt.in_memory_limit_bytes = 0;
            opt.collective = k != 7;  // both transfers
            io::ShardedReader reader(MPI_COMM_WORLD, path, B, 77, opt);
            const int64_t steps = reader.steps_per_epoch();
            for (int64_t epoch = 0; epoch < 2; ++epoch) {
              const auto order = io::ShardedReader::epoch_order(n, 77, epoch, true, k, B);
              ASSERT_TRUE(is_permutation_of_n(order));
              std::multiset<int64_t> seen;
              for (int64_t s = 0; s < steps; ++s) {
                const io::Batch b = reader.next();
                ASSERT_EQ(b.epoch, epoch);
                ASSERT_EQ(b.step, s);
                check_step(reader, b, order, n, seen);
                ASSERT_FALSE(HasFatalFailure()) << "n=" << n << " k=" << k << " exchange=" << exchange << " step " << s;
              }
              if (tail == io::TailPolicy::drop) {
                EXPECT_EQ(int64_t(seen.size()), steps * B);
                EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample repeated";
              } else {
                EXPECT_EQ(int64_t(seen.size()), n);
                EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), size_t(n));
              }
            }
            if (p > 1 && opt.collective) {
              EXPECT_EQ(reader.stats().independent_fallbacks, 0);
            }
          }
        }
      }
    }
  }
}

bool same_batch(const io::Batch& a, const io::Batch& b);

// A 1-rank reader (MPI_COMM_SELF) of the same global batch B holds this rank's batches of `run` as
// its slices, bit for bit, for the first `count` steps: order and augmentation independent of the
// rank count.
void expect_rank_slices(const std::string& path, int64_t B, uint64_t seed, const io::ReaderOptions& opt,
                        const std::vector<io::Batch>& run, int64_t count) {
  const int r = world_rank();
  const int64_t lb = B / world_size();
  io::ShardedReader single(MPI_COMM_SELF, path, B, seed, opt);
  for (int64_t k = 0; k < count; ++k) {
    const io::Batch g = single.next();
    const io::Batch& mine = run[size_t(k)];
    const size_t per = size_t(mine.images.numel());
    ASSERT_EQ(std::vector<int64_t>(g.indices.begin() + r * lb, g.indices.begin() + (r + 1) * lb), mine.indices);
    EXPECT_EQ(std::memcmp(g.images.data<float>() + size_t(r) * per, mine.images.data<float>(), per * 4), 0) << "step " << k;
  }
}

// Block order with augmentation: a 1-rank reader (MPI_COMM_SELF) of the same global batch holds this
// rank's batch as its slice, bit for bit (rank-count independence of order and augmentation); resume
// at (epoch, step) equals the uninterrupted run; the exchange, prefetch depth and pooled batch memory
// change nothing.
TEST(ShardedReader, BlockOrderResumeExchangeAndRankCountIndependence) {
  test::TempDir dir;
  const int p = world_size();
  const std::string path = make_index_dataset(dir, 97, io::Layout::contiguous);
  io::ReaderOptions opt;
  opt.shuffle_block = 5;
  opt.exchange = true;
  opt.augment = true;
  opt.crop_padding = 1;
  opt.prefetch = 3;
  opt.in_memory_limit_bytes = 0;
  const int64_t B = 4 * p;
  io::ShardedReader full(MPI_COMM_WORLD, path, B, 9, opt);
  const int64_t steps = full.steps_per_epoch();
  std::vector<io::Batch> run;
  for (int64_t k = 0; k < 2 * steps + 2; ++k) run.push_back(full.next());

  io::ReaderOptions other = opt;  // no exchange, synchronous, pooled memory, from memory
  other.exchange = false;
  other.prefetch = 0;
  other.reuse_batch_memory = true;
  for (int64_t limit : {int64_t(0), int64_t(1) << 20}) {
    other.in_memory_limit_bytes = limit;
    io::ShardedReader resumed(MPI_COMM_WORLD, path, B, 9, other);
    resumed.resume(1, steps - 1);
    for (int64_t k = 2 * steps - 1; k < int64_t(run.size()); ++k)
      EXPECT_TRUE(same_batch(resumed.next(), run[size_t(k)])) << "batch " << k << " limit " << limit;
    resumed.set_epoch(0);
    EXPECT_TRUE(same_batch(resumed.next(), run[0]));
  }

  expect_rank_slices(path, B, 9, opt, run, steps + 2);
  // Every step of this order reads a few runs: at most (B/K + 2) for the whole global batch.
  const auto st = full.stats();
  EXPECT_GT(st.runs, 0);
  int64_t runs = st.runs, all_runs = 0;
  MPI_Allreduce(&runs, &all_runs, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_LE(all_runs, st.batches * (B / 5 + 2) + st.batches * (p - 1)) << "too many runs for a block order";
}

// Window reads (window_batches = W > 1): block orders whose in-window shuffle spans W global batches,
// file order and eval mode, read a window at a time in two phases. At this rank count, both layouts,
// both transfers and tail policies: the ranks' batches gathered in rank order are the slice of the
// pure order (which does not involve the rank count), drop never repeats a sample, pad's valid
// samples cover the epoch once, and the bytes are those of the samples. Then: resume inside a window,
// prefetch depth, pooled memory and in-memory datasets change nothing, a 1-rank reader holds this
// rank's batch as its slice (augmented), and a window reads few runs.
TEST(ShardedReader, WindowReadsAreTheSameBatchesAtAnyRankCount) {
  test::TempDir dir;
  const int p = world_size(), r = world_rank();
  if (60 % p != 0) GTEST_SKIP() << "global batch 60 needs np in 1..6";
  const int64_t B = 60;
  struct Case {
    int64_t k;
    bool shuffle;
    io::ReaderMode mode;
  };
  for (int64_t n : {131, 300}) {
    for (io::Layout layout : {io::Layout::contiguous, io::Layout::chunked}) {
      const std::string path = make_index_dataset(dir, n, layout);
      for (const Case c : {Case{7, true, io::ReaderMode::train}, Case{30, true, io::ReaderMode::train},
                           Case{1, false, io::ReaderMode::train}, Case{1, false, io::ReaderMode::eval}}) {
        for (int64_t window : {2, 3}) {
          for (io::TailPolicy tail : {io::TailPolicy::drop, io::TailPolicy::pad}) {
            io::ReaderOptions opt;
            opt.mode = c.mode;
            opt.shuffle = c.shuffle;
            opt.shuffle_block = c.k;
            opt.window_batches = window;
            opt.tail = tail;
            opt.normalize = false;
            opt.in_memory_limit_bytes = 0;
            opt.collective = (c.k + window) % 2 == 0;  // both transfers
            io::ShardedReader reader(MPI_COMM_WORLD, path, B, 77, opt);
            const bool pad = tail == io::TailPolicy::pad || c.mode == io::ReaderMode::eval;
            const int64_t steps = reader.steps_per_epoch();
            ASSERT_EQ(steps, pad ? (n + B - 1) / B : n / B);
            for (int64_t epoch = 0; epoch < 2; ++epoch) {
              const auto order = io::ShardedReader::epoch_order(n, 77, epoch, c.shuffle, c.k, B, window);
              std::multiset<int64_t> seen;
              for (int64_t s = 0; s < steps; ++s) {
                const io::Batch b = reader.next();
                ASSERT_EQ(b.epoch, epoch);
                ASSERT_EQ(b.step, s);
                check_step(reader, b, order, n, seen);
                ASSERT_FALSE(HasFatalFailure()) << "n=" << n << " k=" << c.k << " window=" << window << " step " << s;
              }
              EXPECT_EQ(int64_t(seen.size()), pad ? n : steps * B);
              EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample repeated";
            }
            if (p > 1 && opt.collective) {
              EXPECT_EQ(reader.stats().independent_fallbacks, 0);
            }
          }
        }
      }
    }
  }

  if (p > 1) {  // file order, 5 steps a window: every rank's shares are 5 strided runs, read in two phases
    io::ReaderOptions opt;
    opt.shuffle = false;
    opt.window_batches = 5;
    opt.in_memory_limit_bytes = 0;
    io::ShardedReader reader(MPI_COMM_WORLD, make_index_dataset(dir, 300, io::Layout::contiguous), B, 1, opt);
    for (int64_t s = 0; s < 5; ++s) ASSERT_EQ(reader.next().indices, reader.batch_indices(0, s, r));
    EXPECT_GT(reader.stats().exchange_seconds, 0.0);
  }

  // Resume, prefetch, pooled memory, in memory, rank-count independence with augmentation.
  const std::string path = make_index_dataset(dir, 28 * p + 3, io::Layout::contiguous);  // 7 steps at any np
  io::ReaderOptions opt;
  opt.shuffle_block = 12;  // a rank's stretch of a window (3 x 4 rows) is one block, or two
  opt.window_batches = 3;
  opt.augment = true;
  opt.crop_padding = 1;
  opt.prefetch = 2;
  opt.in_memory_limit_bytes = 0;
  const int64_t B4 = 4 * p;
  io::ShardedReader full(MPI_COMM_WORLD, path, B4, 9, opt);
  const int64_t steps = full.steps_per_epoch();  // 7: windows of 3, 3 and 1 steps
  ASSERT_EQ(steps, 7);
  std::vector<io::Batch> run;
  for (int64_t k = 0; k < 2 * steps + 4; ++k) run.push_back(full.next());
  // A window reads one or two runs per rank, counted on its first batch.
  int64_t runs = full.stats().runs, all_runs = 0;
  MPI_Allreduce(&runs, &all_runs, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_GT(all_runs, 0);
  EXPECT_LE(all_runs, 7 * 2 * p) << "too many runs for window reads";  // 6 windows + 1 read ahead
  EXPECT_EQ(full.stats().batches, int64_t(run.size()));
  EXPECT_EQ(full.stats().exchange_seconds, 0.0) << "interleaved windows: every rank reads its own shares";

  for (int64_t limit : {int64_t(0), int64_t(1) << 20})
    for (int prefetch : {0, 3}) {
      io::ReaderOptions other = opt;
      other.in_memory_limit_bytes = limit;
      other.prefetch = prefetch;
      other.reuse_batch_memory = prefetch == 3;
      io::ShardedReader resumed(MPI_COMM_WORLD, path, B4, 9, other);
      resumed.resume(1, 4);  // inside the second window of epoch 1
      for (int64_t k = steps + 4; k < int64_t(run.size()); ++k)
        EXPECT_TRUE(same_batch(resumed.next(), run[size_t(k)])) << "batch " << k << " limit " << limit << " prefetch " << prefetch;
      resumed.set_epoch(0);
      EXPECT_TRUE(same_batch(resumed.next(), run[0]));
    }

  expect_rank_slices(path, B4, 9, opt, run, steps + 2);
}

// Pooled batch memory: the same bytes as fresh memory, and a batch outlives its reader.
TEST(ShardedReader, ReusedBatchMemoryOutlivesTheReader) {
  test::TempDir dir;
  const int p = world_size();
  const std::string path = make_index_dataset(dir, 40);
  io::ReaderOptions fresh;
  fresh.in_memory_limit_bytes = 0;
  io::ReaderOptions pooled = fresh;
  pooled.reuse_batch_memory = true;
  io::ShardedReader a(MPI_COMM_WORLD, path, 2 * p, 4, fresh);
  std::vector<io::Batch> kept;
  {
    io::ShardedReader b(MPI_COMM_WORLD, path, 2 * p, 4, pooled);
    for (int k = 0; k < 12; ++k) {  // more batches than the pool keeps: buffers are recycled
      io::Batch x = a.next(), y = b.next();
      ASSERT_TRUE(y.memory != nullptr);
      ASSERT_FALSE(y.images.is_owning());
      ASSERT_TRUE(same_batch(x, y)) << "batch " << k;
      if (k % 5 == 0) kept.push_back(y);
    }
  }
  a.set_epoch(0);
  for (int k = 0; k < 12; ++k) {
    const io::Batch x = a.next();
    if (k % 5 == 0) {
      EXPECT_TRUE(same_batch(x, kept[size_t(k / 5)])) << "a kept batch changed after its reader ended";
    }
  }
}

bool same_batch(const io::Batch& a, const io::Batch& b) {
  return a.epoch == b.epoch && a.step == b.step && a.indices == b.indices &&
         std::memcmp(a.images.data(), b.images.data(), a.images.nbytes()) == 0 &&
         std::memcmp(a.labels.data(), b.labels.data(), a.labels.nbytes()) == 0;
}

// Augmented, normalised batches: resuming at (epoch, step) reproduces an uninterrupted run bit for
// bit, prefetch depth and the decode threads change nothing, and a 1-rank reader of the whole global batch (on
// MPI_COMM_SELF, alive beside the world reader) holds this rank's batch as its slice.
TEST(ShardedReader, ResumeAndPrefetchAndAugmentationAreReproducible) {
  test::TempDir dir;
  const int p = world_size(), r = world_rank();
  const std::string path = make_index_dataset(dir, 45);
  io::ReaderOptions opt;
  opt.augment = true;
  opt.crop_padding = 1;
  opt.prefetch = 3;
  opt.in_memory_limit_bytes = 0;  // `full` reads the file each step; `resumed` below from memory
  const int64_t B = 2 * p;
  io::ShardedReader full(MPI_COMM_WORLD, path, B, 5, opt);
  ASSERT_FALSE(full.in_memory());
  const int64_t steps = full.steps_per_epoch();
  std::vector<io::Batch> run;
  for (int64_t k = 0; k < 2 * steps + 3; ++k) run.push_back(full.next());

  io::ReaderOptions sync = opt;
  sync.prefetch = 0;
  sync.in_memory_limit_bytes = int64_t(1) << 20;
  io::ShardedReader resumed(MPI_COMM_WORLD, path, B, 5, sync);
  ASSERT_TRUE(resumed.in_memory());
  resumed.resume(1, steps - 2);
  for (int64_t k = 2 * steps - 2; k < int64_t(run.size()); ++k)
    EXPECT_TRUE(same_batch(resumed.next(), run[size_t(k)])) << "batch " << k;
  resumed.set_epoch(0);
  EXPECT_TRUE(same_batch(resumed.next(), run[0]));

  // Decoded by 3 threads (the samples split among them; hpdt-train on a GPU), into pooled memory: the same bits.
  io::ReaderOptions threads = opt;
  threads.decode_threads = 3;
  threads.reuse_batch_memory = true;
  io::ShardedReader parallel(MPI_COMM_WORLD, path, B, 5, threads);
  for (int64_t k = 0; k < int64_t(run.size()); ++k)
    EXPECT_TRUE(same_batch(parallel.next(), run[size_t(k)])) << "batch " << k << ", 3 decode threads";

  io::ShardedReader single(MPI_COMM_SELF, path, B, 5, opt);
  ASSERT_EQ(single.local_batch(), B);
  for (int64_t k = 0; k < steps; ++k) {
    const io::Batch g = single.next();
    const io::Batch& mine = run[size_t(k)];
    const size_t per = size_t(mine.images.numel());
    EXPECT_EQ(std::memcmp(g.images.data<float>() + size_t(r) * per, mine.images.data<float>(), per * 4), 0) << "step " << k;
  }
  // Augmentation changed something (padding 1 and flips on 4x4 images).
  io::ReaderOptions plain = opt;
  plain.augment = false;
  io::ShardedReader unaugmented(MPI_COMM_WORLD, path, B, 5, plain);
  bool differs = false;
  for (int64_t k = 0; k < steps; ++k) differs |= !same_batch(unaugmented.next(), run[size_t(k)]);
  int any = differs, all_any = 0;
  MPI_Allreduce(&any, &all_any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_TRUE(all_any);
  EXPECT_EQ(full.stats().batches, int64_t(run.size()));
  if (p > 1) {
    EXPECT_EQ(full.stats().independent_fallbacks, 0) << "HDF5 fell back to independent reads";
  }
}

// raw_pixels: the batches carry the pixels as stored and each sample's crop; kernels::decode_images with the reader's
// normalization() turns them into exactly the images of the reader's own decode (what hpdt-train does on the GPU).
// channels_last: the reader's images are those images transposed to NHWC, and so is decode_images' NHWC output.
TEST(ShardedReader, RawPixelsDecodeToTheReadersImagesBitForBit) {
  test::TempDir dir;
  const int p = world_size();
  const std::string path = make_index_dataset(dir, 37);
  for (const bool augment : {true, false}) {
    for (const bool pooled : {false, true}) {
      SCOPED_TRACE(std::string(augment ? "augmented" : "plain") + (pooled ? ", pooled memory" : ""));
      io::ReaderOptions opt;
      opt.augment = augment;
      opt.crop_padding = 2;
      opt.in_memory_limit_bytes = pooled ? 0 : int64_t(1) << 20;  // both read paths
      io::ReaderOptions raw = opt;
      raw.raw_pixels = true;
      raw.reuse_batch_memory = pooled;
      raw.decode_threads = 2;
      const int64_t B = 3 * p;
      io::ReaderOptions last = opt;
      last.channels_last = true;
      last.reuse_batch_memory = pooled;
      io::ShardedReader decoded(MPI_COMM_WORLD, path, B, 8, opt), undecoded(MPI_COMM_WORLD, path, B, 8, raw);
      io::ShardedReader nhwc(MPI_COMM_WORLD, path, B, 8, last);
      int64_t cropped = 0, flipped = 0;
      for (int64_t k = 0; k < 2 * decoded.steps_per_epoch() + 1; ++k) {
        const io::Batch want = decoded.next(), got = undecoded.next();
        ASSERT_FALSE(got.images.defined());
        ASSERT_EQ(got.pixels.dtype(), DType::u8);
        ASSERT_EQ(got.pixels.shape(), want.images.shape());
        ASSERT_EQ(got.crops.shape(), (Shape{want.images.size(0), 3}));
        ASSERT_EQ(got.indices, want.indices) << "batch " << k;
        ASSERT_EQ(std::memcmp(got.labels.data(), want.labels.data(), want.labels.nbytes()), 0) << "batch " << k;
        for (int64_t i = 0; i < got.crops.size(0); ++i) {
          const int32_t* c = got.crops.data<int32_t>() + 3 * i;
          cropped += c[0] != 0 || c[1] != 0;
          flipped += c[2];
          // The pixels are the sample's own: its id in the first 4 bytes (index_fill).
          uint32_t id = 0;
          std::memcpy(&id, got.pixels.data<uint8_t>() + i * got.pixels.numel() / got.pixels.size(0), 4);
          ASSERT_EQ(int64_t(id), got.indices[size_t(i)]) << "batch " << k << " sample " << i;
        }
        Tensor images = Tensor::empty(want.images.shape(), DType::f32);
        kernels::decode_images(got.pixels, got.crops, undecoded.normalization(), images, Stream());
        ASSERT_EQ(std::memcmp(images.data(), want.images.data(), images.nbytes()), 0) << "batch " << k;
        const io::Batch want_last = nhwc.next();
        const Shape& s = want.images.shape();
        ASSERT_EQ(want_last.images.shape(), (Shape{s[0], s[2], s[3], s[1]}));
        Tensor transposed = Tensor::empty(want_last.images.shape(), DType::f32);
        kernels::nchw_to_nhwc(want.images, transposed, Stream());
        ASSERT_EQ(std::memcmp(want_last.images.data(), transposed.data(), transposed.nbytes()), 0) << "batch " << k;
        Tensor images_last = Tensor::empty(want_last.images.shape(), DType::f32);
        kernels::decode_images(got.pixels, got.crops, undecoded.normalization(), images_last, Stream(),
                               kernels::Layout::nhwc);
        ASSERT_EQ(std::memcmp(images_last.data(), transposed.data(), transposed.nbytes()), 0) << "batch " << k;
      }
      if (augment) {
        EXPECT_GT(cropped, 0);
        EXPECT_GT(flipped, 0);
      } else {
        EXPECT_EQ(cropped + flipped, 0);
      }
    }
  }
}

TEST(ShardedReader, NormalisationUsesTheFileStatistics) {
  test::TempDir dir;
  const std::string path = make_index_dataset(dir, 20);
  const auto info = io::inspect_dataset(path);
  io::ShardedReader reader(MPI_COMM_WORLD, path, world_size(), 3, {});
  const io::Batch b = reader.next();
  const int64_t id = b.indices[0];
  const float raw = float((id * 7 + 5) % 251);  // byte 5 of the sample
  EXPECT_FLOAT_EQ(b.images.data<float>()[5], (raw / 255.0f - info.mean[0]) / info.std[0]);
}

TEST(ShardedReader, BadOptionsAndFilesFailOnEveryRank) {
  test::TempDir dir;
  const int p = world_size();
  const std::string path = make_index_dataset(dir, 10);
  if (p > 1)
    HPDT_EXPECT_THROW_MSG(io::ShardedReader(MPI_COMM_WORLD, path, p + 1, 0, {}), "must be a positive multiple of the number of ranks");
  HPDT_EXPECT_THROW_MSG(io::ShardedReader(MPI_COMM_WORLD, path, 0, 0, {}), "global batch 0");
  HPDT_EXPECT_THROW_MSG(io::ShardedReader(MPI_COMM_WORLD, path, 16 * p, 0, {}), "fewer than one global batch of");
  HPDT_EXPECT_THROW_MSG(io::ShardedReader(MPI_COMM_WORLD, dir.file("none.h5"), p, 0, {}), "dataset file does not exist");
  io::ReaderOptions zero_block;
  zero_block.shuffle_block = 0;
  HPDT_EXPECT_THROW_MSG(io::ShardedReader(MPI_COMM_WORLD, path, p, 0, zero_block), "shuffle block must be >= 1");
  io::ReaderOptions zero_window;
  zero_window.window_batches = 0;
  HPDT_EXPECT_THROW_MSG(io::ShardedReader(MPI_COMM_WORLD, path, p, 0, zero_window), "window_batches must be >= 1");
  io::ReaderOptions no_decoder;
  no_decoder.decode_threads = 0;
  HPDT_EXPECT_THROW_MSG(io::ShardedReader(MPI_COMM_WORLD, path, p, 0, no_decoder),
                        "decode_threads must be >= 1, got 0");
  io::ShardedReader ok(MPI_COMM_WORLD, path, p, 0, {});
  HPDT_EXPECT_THROW_MSG(ok.resume(0, ok.steps_per_epoch()), "step must be in");
  EXPECT_EQ(ok.next().step, 0);
}

}  // namespace
