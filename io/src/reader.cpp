// ShardedReader: the sample order, the shared I/O thread, collective hyperslab reads and decoding.
#include "hpdt/io/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "dataset_internal.h"
#include "h5.h"
#include "hpdt/core/allocator.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/philox.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/timer.h"
#include "hpdt/kernels/cpu/image.h"

namespace hpdt::io {

namespace {

// A process-wide FIFO thread: started on first use, idle between tasks, drains its queue and joins at
// exit. Tasks must not throw (they report through promises or packaged tasks).
class Worker {
 public:
  void submit(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }
  template <class R>
  std::future<R> call(std::function<R()> fn) {
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
    std::future<R> f = task->get_future();
    submit([task] { (*task)(); });  // packaged_task stores exceptions in the future
    return f;
  }
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// The I/O thread runs every reader's HDF5 and MPI work in submission order (the same on every rank);
// the decode thread turns bytes into batches (no MPI, no HDF5), so batch k decodes while batch k+1 is
// read; the hint thread asks the kernel to start reading the rows of queued batches. Declared so that
// the I/O thread, which submits to the decode thread, is joined first.
struct Workers {
  Worker decode;
  Worker hint;  // readahead hints (posix_fadvise): runs ahead of the I/O thread
  Worker io;
  static Workers& get() {
    static Workers w;
    return w;
  }
};

template <class R>
std::future<R> ready_future(std::function<R()> fn) {
  std::packaged_task<R()> task(std::move(fn));
  std::future<R> f = task.get_future();
  task();
  return f;
}

constexpr uint64_t kAugmentKey = 0xA5A5F00DCAFEBEEFull;  // augmentation draws use seed ^ this key
constexpr uint64_t kWindowKey = 0x5EEDB10C4D1CE000ull;   // block order: in-window shuffle uses seed ^ this key
constexpr uint64_t kInterleaveKey = 0x1E7E41EAF0C0FFEEull;  // interleaved windows (window_batches > 1)

// A fresh f32 batch is written once, page by page: 4 KiB pages cost a fault each (~1.3 us in this
// VM, ~6 ms per 19 MB batch); transparent huge pages, where the system allows them on request
// (THP "madvise"), cut that ~500-fold. Only a hint: no effect where THP is off or unavailable.
void advise_huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

// Staging memory for raw sample bytes, reused across batches (no zero fill, no page faults after the
// first few batches). Thread-safe: taken on the I/O thread, given back on the decode thread. Keeps at
// most `keep` free buffers.
class BufferPool {
 public:
  explicit BufferPool(size_t keep = 8) : keep_(keep) {}
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t size = 0;
  };
  Buffer take(size_t bytes) {
    {
      std::lock_guard lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].size >= bytes) {
          Buffer b = std::move(free_[i]);
          free_.erase(free_.begin() + std::ptrdiff_t(i));
          return b;
        }
      }
    }
    Buffer b;
    b.data.reset(new uint8_t[std::max<size_t>(bytes, 1)]);  // default-initialised: not zeroed
    b.size = bytes;
    advise_huge_pages(b.data.get(), bytes);  // window buffers (100s of MB): 2 MB pages fault 500x less
    return b;
  }
  void give(Buffer b) {
    if (!b.data) return;
    std::lock_guard lock(mu_);
    free_.push_back(std::move(b));
    if (free_.size() > keep_) free_.erase(free_.begin());  // bounded: a few batches in flight
  }

 private:
  std::mutex mu_;
  std::vector<Buffer> free_;
  size_t keep_;
};

// A read-only descriptor of the dataset file, for readahead hints only; shared with queued hint tasks
// so that it stays open until the last of them ran.
struct HintFile {
  int fd = -1;
  int64_t base = -1;  // file offset of row 0 (contiguous layout)
  int64_t sample_bytes = 0;
  ~HintFile() {
    if (fd >= 0) ::close(fd);
  }
  // posix_fadvise(WILLNEED) on the bytes of `runs`: the kernel starts reading them asynchronously.
  void hint(const std::vector<std::pair<int64_t, int64_t>>& runs) const {
    for (const auto& [first, count] : runs)
      (void)posix_fadvise(fd, base + first * sample_bytes, count * sample_bytes, POSIX_FADV_WILLNEED);
  }
};

// CPU time of the calling thread, seconds.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Batch memory (images then labels in one host allocation) handed out as a shared_ptr whose release
// puts the allocation back. The pool lives as long as its reader or any batch still out.
class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  BatchPool(size_t bytes, bool pinned, size_t keep) : bytes_(bytes), pinned_(pinned), keep_(keep) {}
  std::shared_ptr<void> take() {
    std::shared_ptr<void> raw;
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        raw = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!raw) raw = allocate_host(bytes_, pinned_);
    void* p = raw.get();
    return std::shared_ptr<void>(p, [pool = shared_from_this(), raw](void*) mutable { pool->give(std::move(raw)); });
  }

 private:
  void give(std::shared_ptr<void> raw) {
    std::lock_guard lock(mu_);
    if (free_.size() < keep_) free_.push_back(std::move(raw));
  }
  std::mutex mu_;
  std::vector<std::shared_ptr<void>> free_;
  size_t bytes_;
  bool pinned_;
  size_t keep_;
};

// Sorted rows merged into runs of adjacent rows: {first row, count} per run.
std::vector<std::pair<int64_t, int64_t>> runs_of(const std::vector<int64_t>& sorted_rows) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (size_t i = 0; i < sorted_rows.size();) {
    size_t j = i + 1;
    while (j < sorted_rows.size() && sorted_rows[j] == sorted_rows[j - 1] + 1) ++j;
    runs.emplace_back(sorted_rows[i], int64_t(j - i));
    i = j;
  }
  return runs;
}

std::vector<int64_t> sorted_unique(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// Raises on every rank when any rank had an error, with the lowest failing rank's message.
void agree_on_error(MPI_Comm comm, const std::string& local_error, const std::string& where) {
  int rank = 0, size = 1;
  HPDT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HPDT_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int mine = local_error.empty() ? size : rank;
  int first = size;
  HPDT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return;
  char msg[2048] = {0};
  if (rank == first) std::snprintf(msg, sizeof msg, "%s", local_error.c_str());
  HPDT_MPI_CHECK(MPI_Bcast(msg, sizeof msg, MPI_CHAR, first, comm));
  throw Error(msg, where);
}

}  // namespace

struct ShardedReader::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm xcomm = MPI_COMM_NULL;  // the two-phase exchange (I/O thread only)
  MPI_Datatype sample_type = MPI_DATATYPE_NULL;
  int rank = 0, size = 1;
  std::string path;
  DatasetInfo info;
  std::vector<int32_t> labels;
  ReaderOptions opt;
  int64_t global_batch = 0, local_batch = 0, steps = 0;
  uint64_t seed = 0;
  bool threaded = false;
  bool exchange = false;  // two-phase reads (block order, several ranks, file reads)
  bool windowed = false;  // window reads (window_batches > 1, file reads)
  int depth = 0;

  // HDF5 state: used only by tasks (on the I/O thread, or inline when not threaded).
  h5::Id file, images, dxpl;
  std::vector<uint8_t> memory;  // all images, when they fit in_memory_limit_bytes
  BufferPool buffers;           // staging bytes, I/O thread -> decode thread
  BufferPool window_buffers{6};  // window reads: a window's part, send and staging bytes (~2 windows)
  std::shared_ptr<const HintFile> hints;  // readahead hints, when enabled and the layout allows
  std::shared_ptr<BatchPool> batch_pool;  // reuse_batch_memory
  kernels::PixelNormalization norm;       // the decode's (normalization())

  // Submission side (calling thread only).
  int64_t submit_epoch = 0, submit_step = 0;
  int64_t hint_next = 0;  // the next batch (epoch * steps + step) to ask the kernel to read ahead
  std::vector<int64_t> hint_ends;  // rows just past the runs of the last batch hinted
  std::deque<std::future<Batch>> pending;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders;  // a few recent epochs
  struct WindowData;
  // Window reads submitted and not yet passed: (epoch, window index) -> its bytes (when read).
  std::map<std::pair<int64_t, int64_t>, std::shared_future<std::shared_ptr<const WindowData>>> windows;
  ReaderStats stats;
  bool warned_fallback = false;

  template <class R>
  std::future<R> run(std::function<R()> fn) {
    return threaded ? Workers::get().io.call<R>(std::move(fn)) : ready_future<R>(std::move(fn));
  }

  bool block_order() const { return opt.shuffle && opt.shuffle_block > 1; }

  std::vector<int64_t> make_order(int64_t epoch) const {
    return epoch_order(info.n, seed, epoch, opt.shuffle, opt.shuffle_block, global_batch, opt.window_batches);
  }

  std::shared_ptr<const std::vector<int64_t>> order(int64_t epoch) {
    auto it = orders.find(epoch);
    if (it != orders.end()) return it->second;
    auto o = std::make_shared<const std::vector<int64_t>>(make_order(epoch));
    if (orders.size() >= 3) orders.erase(orders.begin());
    orders[epoch] = o;
    return o;
  }

  std::vector<int64_t> indices(const std::vector<int64_t>& ord, int64_t step, int r, int64_t* valid) const {
    const int64_t q0 = step * global_batch + r * local_batch;
    std::vector<int64_t> idx(static_cast<size_t>(local_batch));
    for (int64_t i = 0; i < local_batch; ++i) idx[size_t(i)] = ord[size_t((q0 + i) % info.n)];
    if (valid) *valid = std::clamp<int64_t>(info.n - q0, 0, local_batch);
    return idx;
  }

  // What a step means for this rank, computed on the calling thread at submission: its share, its
  // distinct rows, and the rows it reads from the file (its own rows, or with the two-phase exchange
  // its equal part of the global batch's distinct rows, file order).
  struct Plan {
    int64_t epoch = 0, step = 0, valid = 0;
    std::vector<int64_t> indices, rows;            // share; its distinct rows in file order
    std::vector<std::vector<int64_t>> share_rows;  // exchange: every rank's distinct rows
    std::vector<int64_t> all, mine;                // exchange: global distinct rows; this rank's part
    int64_t calls = 1;  // H5Dread calls for this step (chunked layout: one per run, as many on every rank)
    bool exchange = false;  // read in two phases (disjoint parts + MPI_Alltoallv)
  };

  Plan plan(int64_t epoch, int64_t step, const std::vector<int64_t>& ord) const {
    Plan p;
    p.epoch = epoch;
    p.step = step;
    p.indices = indices(ord, step, rank, &p.valid);
    p.rows = sorted_unique(p.indices);  // wrap-around padding can repeat a sample
    const bool per_run = info.layout == Layout::chunked && memory.empty();
    // Two phases for block orders (ReaderOptions::exchange), and for collective reads of a global
    // batch larger than the dataset: its wrap-around puts the same rows in several ranks' selections,
    // and Open MPI 4.1's ompio returns wrong bytes for collective reads whose selections overlap
    // (reproduced without hpdt; ROMIO is correct). The parts of the two-phase read are disjoint.
    p.exchange = exchange || (opt.collective && size > 1 && memory.empty() && global_batch > info.n);
    if (!p.exchange) {
      if (per_run) p.calls = max_runs([&](int r) { return r == rank ? p.rows : sorted_unique(indices(ord, step, r, nullptr)); });
      return p;
    }
    p.share_rows.resize(size_t(size));
    for (int r = 0; r < size; ++r) {
      p.share_rows[size_t(r)] = r == rank ? p.rows : sorted_unique(indices(ord, step, r, nullptr));
      p.all.insert(p.all.end(), p.share_rows[size_t(r)].begin(), p.share_rows[size_t(r)].end());
    }
    p.all = sorted_unique(std::move(p.all));
    p.mine.assign(p.all.begin() + part_begin(p, rank), p.all.begin() + part_begin(p, rank + 1));
    if (per_run)
      p.calls = max_runs([&](int r) {
        return std::vector<int64_t>(p.all.begin() + part_begin(p, r), p.all.begin() + part_begin(p, r + 1));
      });
    return p;
  }
  // A window read: steps [first, last) of epoch `epoch` in one read, direct or in two phases (see
  // ReaderOptions::window_batches). rows and share_rows hold the distinct rows of all those steps.
  Plan window_plan(int64_t epoch, int64_t first, int64_t last, const std::vector<int64_t>& ord) const {
    Plan p;
    p.epoch = epoch;
    p.step = first;
    p.exchange = true;
    p.share_rows.resize(size_t(size));
    for (int r = 0; r < size; ++r) {
      std::vector<int64_t> rows;
      rows.reserve(size_t((last - first) * local_batch));
      for (int64_t s = first; s < last; ++s) {
        const auto idx = indices(ord, s, r, nullptr);
        rows.insert(rows.end(), idx.begin(), idx.end());
      }
      p.share_rows[size_t(r)] = sorted_unique(std::move(rows));
      p.all.insert(p.all.end(), p.share_rows[size_t(r)].begin(), p.share_rows[size_t(r)].end());
    }
    p.rows = p.share_rows[size_t(rank)];
    const size_t total = p.all.size();
    p.all = sorted_unique(std::move(p.all));
    // Read the shares directly (no exchange) when they are disjoint (the overlapping selections of a
    // wrap-around would hit ompio's bug, see plan()) and take no more runs than the equal parts: the
    // interleaved block order. Every rank decides the same from the same plans.
    int64_t share_runs = 0, part_runs = 0;
    for (int r = 0; r < size; ++r) {
      share_runs += int64_t(runs_of(p.share_rows[size_t(r)]).size());
      part_runs += int64_t(runs_of(std::vector<int64_t>(p.all.begin() + part_begin(p, r), p.all.begin() + part_begin(p, r + 1))).size());
    }
    p.exchange = size > 1 && !(total == p.all.size() && share_runs <= part_runs + size);
    if (!p.exchange) {
      p.mine = p.rows;
      if (info.layout == Layout::chunked) p.calls = max_runs([&](int r) { return p.share_rows[size_t(r)]; });
      return p;
    }
    p.mine.assign(p.all.begin() + part_begin(p, rank), p.all.begin() + part_begin(p, rank + 1));
    if (info.layout == Layout::chunked)
      p.calls = max_runs([&](int r) {
        return std::vector<int64_t>(p.all.begin() + part_begin(p, r), p.all.begin() + part_begin(p, r + 1));
      });
    return p;
  }

  // Chunked layout: HDF5 1.10 maps a hyperslab union to chunks by visiting every chunk in the
  // union's bounding box, ~35 us each (170 ms of CPU per step for 32 random ImageNet samples in 5000
  // chunks), so chunked reads go one run per H5Dread. Collective transfers need the same number of
  // calls on every rank: the most runs of any rank (all ranks compute the same plans), padded with
  // empty selections. Independent transfers use their own count.
  template <class RowsOf>
  int64_t max_runs(RowsOf rows_of) const {
    if (!opt.collective) return int64_t(runs_of(rows_of(rank)).size());
    int64_t most = 1;
    for (int r = 0; r < size; ++r) most = std::max<int64_t>(most, int64_t(runs_of(rows_of(r)).size()));
    return most;
  }
  int64_t part_begin(const Plan& p, int q) const { return int64_t(p.all.size()) * q / size; }

  // A batch between the read (I/O thread) and the decode (decode thread): staging holds plan.rows[k]
  // at k * sample_bytes (unless the images are in memory).
  struct Work {
    Batch batch;
    std::shared_ptr<const Plan> plan;
    BufferPool::Buffer staging;
  };

  // Bytes of a window read: `rows` (this rank's distinct rows of steps [first, last), file order)
  // at k * sample_bytes of `staging`; the read's statistics go to the batch of step `first`.
  struct WindowData {
    int64_t first = 0, last = 0;
    std::vector<int64_t> rows;
    BufferPool::Buffer staging;
    Batch stats;  // read/exchange seconds, runs, read CPU, collective
    BufferPool* pool = nullptr;
    ~WindowData() {
      if (pool) pool->give(std::move(staging));
    }
  };
  int64_t windows_per_epoch() const { return (steps + opt.window_batches - 1) / opt.window_batches; }

  // Submits the read of window `k` of epoch `e` from step `first` (its first step, or a later one
  // after a resume) unless it is already submitted; returns its future.
  std::shared_future<std::shared_ptr<const WindowData>> submit_window(int64_t e, int64_t k, int64_t first) {
    auto key = std::make_pair(e, k);
    if (auto it = windows.find(key); it != windows.end()) return it->second;
    const int64_t last = std::min(steps, (k + 1) * opt.window_batches);
    auto pl = std::make_shared<const Plan>(window_plan(e, first, last, *order(e)));
    auto f = run<std::shared_ptr<const WindowData>>([this, pl, last]() -> std::shared_ptr<const WindowData> {
                Work w;
                w.plan = pl;
                const double cpu0 = thread_cpu_s();
                Stopwatch sw;
                w.staging = two_phase(*pl, w.batch, window_buffers);
                w.batch.read_seconds = sw.elapsed_s();
                w.batch.read_cpu_seconds = thread_cpu_s() - cpu0;
                auto d = std::make_shared<WindowData>();
                d->first = pl->step;
                d->last = last;
                d->rows = pl->rows;
                d->staging = std::move(w.staging);
                d->stats = std::move(w.batch);
                d->pool = &window_buffers;
                return d;
              }).share();
    windows.emplace(key, f);
    return f;
  }

  // Window mode: the batch of step (e, s) is cut from its window's bytes on the decode thread. Every
  // step also makes sure the next window's read is submitted (the I/O thread reads it while this
  // window is consumed). Windows already passed are forgotten (their bytes live while batches use them).
  void submit_windowed(int64_t e, int64_t s, const std::vector<int64_t>& ord) {
    const int64_t k = s / opt.window_batches;
    while (!windows.empty() && windows.begin()->first < std::make_pair(e, k)) windows.erase(windows.begin());
    auto win = submit_window(e, k, s);
    if (depth > 0) {  // read ahead: the next window (idempotent)
      if (k + 1 < windows_per_epoch()) submit_window(e, k + 1, (k + 1) * opt.window_batches);
      else submit_window(e + 1, 0, 0);
    }
    auto done = std::make_shared<std::promise<Batch>>();
    pending.push_back(done->get_future());
    Batch b;
    b.epoch = e;
    b.step = s;
    b.indices = indices(ord, s, rank, &b.valid);
    // The job drops its references to the window before it fulfils the promise: the reader may be
    // destroyed right after its last batch is delivered, and the window's bytes go back to its pool.
    auto job = [this, done, win, b = std::move(b)]() mutable {
      try {
        std::shared_ptr<const WindowData> d = win.get();
        win = {};
        if (b.step == d->first) {
          b.read_seconds = d->stats.read_seconds;
          b.exchange_seconds = d->stats.exchange_seconds;
          b.read_cpu_seconds = d->stats.read_cpu_seconds;
          b.runs = d->stats.runs;
        }
        b.collective = d->stats.collective;
        Stopwatch sw;
        const double cpu0 = thread_cpu_s();
        decode(b, d->rows, d->staging.data.get(), /*in_memory=*/false);
        b.decode_seconds = sw.elapsed_s();
        b.decode_cpu_seconds = thread_cpu_s() - cpu0;
        d.reset();
        done->set_value(std::move(b));
      } catch (...) {
        win = {};
        done->set_exception(std::current_exception());
      }
    };
    if (threaded) {
      Workers::get().decode.submit(std::move(job));
    } else {
      job();
    }
  }
  void submit_one() {
    const int64_t e = submit_epoch, s = submit_step;
    auto ord = order(e);
    if (++submit_step == steps) submit_step = 0, ++submit_epoch;
    if (windowed) {
      submit_windowed(e, s, *ord);
      return;
    }
    auto pl = std::make_shared<const Plan>(plan(e, s, *ord));
    hint_ahead(e * steps + s);
    auto done = std::make_shared<std::promise<Batch>>();
    pending.push_back(done->get_future());
    auto decode_job = [this, done](std::shared_ptr<Work> w) {
      try {
        Stopwatch sw;
        const double cpu0 = thread_cpu_s();
        const uint8_t* src = memory.empty() ? w->staging.data.get() : memory.data();
        decode(w->batch, w->plan->rows, src, /*in_memory=*/!memory.empty());
        w->batch.decode_seconds = sw.elapsed_s();
        w->batch.decode_cpu_seconds = thread_cpu_s() - cpu0;
        buffers.give(std::move(w->staging));
        done->set_value(std::move(w->batch));
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    };
    auto read_job = [this, pl, done, decode_job] {
      auto w = std::make_shared<Work>();
      w->plan = pl;
      try {
        const double cpu0 = thread_cpu_s();
        read(*w);
        w->batch.read_cpu_seconds = thread_cpu_s() - cpu0;
      } catch (...) {
        done->set_exception(std::current_exception());
        return;
      }
      if (threaded) {
        Workers::get().decode.submit([decode_job, w] { decode_job(w); });
      } else {
        decode_job(w);
      }
    };
    if (threaded) {
      Workers::get().io.submit(read_job);
    } else {
      read_job();
    }
  }

  void drain() {
    for (auto& f : pending) {
      try {
        f.get();
      } catch (...) {  // the error was (or will be) reported by next(); here we only wait
      }
    }
    pending.clear();
  }

  // Readahead: keep the rows of the batches from `position` (epoch * steps + step) up to about
  // kReadaheadBytes of this rank's reads (at most 16 batches) beyond the prefetch queue requested
  // from the kernel.
  static constexpr int64_t kReadaheadBytes = int64_t(32) << 20;
  void hint_ahead(int64_t position) {
    if (!hints || !threaded || windowed) return;  // window reads are long streams: the kernel reads ahead
    const int64_t per_batch = std::max<int64_t>(1, local_batch * info.sample_bytes());
    const int64_t ahead = std::max<int64_t>(depth, 1) + std::min<int64_t>(16, (kReadaheadBytes + per_batch - 1) / per_batch);
    hint_next = std::max(hint_next, position);
    for (; hint_next < position + ahead; ++hint_next) {
      const int64_t e = hint_next / steps, st = hint_next % steps;
      const Plan pl = plan(e, st, *order(e));
      // Runs that continue a run of the previous batch are a sequential stream, which the kernel
      // reads ahead by itself (better than hints: measured 2.1 GB/s without hints against 1.0-1.2
      // with them for blocks of 1024); hint only the jumps.
      std::vector<std::pair<int64_t, int64_t>> jumps, runs = runs_of(pl.exchange ? pl.mine : pl.rows);
      std::vector<int64_t> ends;
      for (const auto& run : runs) {
        ends.push_back(run.first + run.second);
        if (std::find(hint_ends.begin(), hint_ends.end(), run.first) == hint_ends.end()) jumps.push_back(run);
      }
      hint_ends = std::move(ends);
      if (!jumps.empty()) Workers::get().hint.submit([h = hints, jumps = std::move(jumps)] { h->hint(jumps); });
    }
  }

  void restart(int64_t epoch, int64_t step) {
    drain();
    windows.clear();
    hint_next = epoch * steps + step;
    hint_ends.clear();
    submit_epoch = epoch;
    submit_step = step;
    for (int i = 0; i < depth; ++i) submit_one();
  }

  // ---- tasks (I/O thread) ----

  std::string open_task() {
    std::lock_guard lock(hdf5_mutex());
    quiet_hdf5_errors();
    try {
      h5::Id fapl = h5::make(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", path);
      h5check(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), "H5Pset_fapl_mpio", path);
      h5check(H5Pset_all_coll_metadata_ops(fapl, true), "H5Pset_all_coll_metadata_ops", path);
      file = h5::make(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "H5Fopen (MPI-IO)", path);
      info = detail::read_dataset_info(file, path, /*check_labels=*/true, &labels);
      // Uncompressed chunks: no chunk cache, so a read of one sample moves that sample's bytes only
      // (with the default 1 MiB cache HDF5 reads whole chunks, 6x more for ImageNet-sized chunks).
      h5::Id dapl = h5::make(H5Pcreate(H5P_DATASET_ACCESS), "H5Pcreate", path);
      if (!info.compressed)
        h5check(H5Pset_chunk_cache(dapl, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT), "H5Pset_chunk_cache", path);
      images = h5::make(H5Dopen2(file, "/images", dapl), "H5Dopen", path + ":/images");
      dxpl = h5::make(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", path);
      h5check(H5Pset_dxpl_mpio(dxpl, opt.collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT),
              "H5Pset_dxpl_mpio", path);
      const int64_t total = info.n * info.sample_bytes();
      if (opt.readahead && !info.compressed && total > opt.in_memory_limit_bytes) hints = make_hints();
      if (total <= opt.in_memory_limit_bytes) {
        memory.resize(size_t(total));
        h5check(H5Dread(images, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, dxpl, memory.data()), "H5Dread (whole dataset)",
                path + ":/images");
      }
      // The first max_samples only: every order and shard below is cut from info.n (the whole file was read above).
      if (opt.max_samples > 0 && opt.max_samples < info.n) info.n = opt.max_samples;
    } catch (const std::exception& e) {
      close_task();
      return e.what();
    }
    return {};
  }

  // Where the rows lie in the file (contiguous layout), or null. (Chunked: the chunk addresses would
  // need H5Dget_chunk_info_by_coord, a collective metadata read per chunk: 0.2-0.4 s at open for the
  // 5000 chunks of the benchmark file, so chunked datasets get no hints.)
  std::shared_ptr<const HintFile> make_hints() {
    if (info.layout != Layout::contiguous) return nullptr;
    const haddr_t a = H5Dget_offset(images);
    if (a == HADDR_UNDEF) return nullptr;
    auto h = std::make_shared<HintFile>();
    h->sample_bytes = info.sample_bytes();
    h->base = int64_t(a);
    h->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    return h->fd >= 0 ? h : nullptr;
  }

  void close_task() {
    std::lock_guard lock(hdf5_mutex());
    hints.reset();
    dxpl.reset();
    images.reset();
    file.reset();
    memory.clear();
    memory.shrink_to_fit();
  }

  // H5Dread of `rows` (sorted, distinct) into dst, rows[k] at k * sample_bytes: one call with the
  // union of the runs, or (calls > 1, chunked layout) one call per run and empty calls up to `calls`.
  // Collective when opt.collective (every rank makes the same calls, possibly with no rows). Returns
  // whether every call was collective.
  bool read_rows(const std::vector<int64_t>& rows, uint8_t* dst, int64_t calls) {
    std::lock_guard lock(hdf5_mutex());
    const std::string where = path + ":/images";
    const auto runs = runs_of(rows);
    const hsize_t C = hsize_t(info.c), H = hsize_t(info.h), W = hsize_t(info.w);
    const size_t S = size_t(info.sample_bytes());
    auto one_read = [&](size_t first_run, size_t last_run, uint8_t* out) {
      h5::Id fspace = h5::make(H5Dget_space(images), "H5Dget_space", where);
      h5check(H5Sselect_none(fspace), "H5Sselect_none", where);
      hsize_t n = 0;
      for (size_t i = first_run; i < last_run; ++i) {
        const hsize_t start[4] = {hsize_t(runs[i].first), 0, 0, 0};
        const hsize_t cnt[4] = {hsize_t(runs[i].second), C, H, W};
        h5check(H5Sselect_hyperslab(fspace, H5S_SELECT_OR, start, nullptr, cnt, nullptr), "H5Sselect_hyperslab", where);
        n += hsize_t(runs[i].second);
      }
      const hsize_t mdims[4] = {std::max<hsize_t>(n, 1), C, H, W};
      h5::Id mspace = h5::make(H5Screate_simple(4, mdims, nullptr), "H5Screate_simple", where);
      if (n == 0) h5check(H5Sselect_none(mspace), "H5Sselect_none", where);
      h5check(H5Dread(images, H5T_NATIVE_UINT8, mspace, fspace, dxpl, out), "H5Dread", where);
      H5D_mpio_actual_io_mode_t mode{};
      h5check(H5Pget_mpio_actual_io_mode(dxpl, &mode), "H5Pget_mpio_actual_io_mode", where);
      return mode != H5D_MPIO_NO_COLLECTIVE;
    };
    if (calls <= 1) return one_read(0, runs.size(), dst);
    bool collective = true;
    size_t offset = 0;
    for (int64_t c = 0; c < calls; ++c) {
      const size_t i = size_t(c);
      if (i < runs.size()) {
        collective &= one_read(i, i + 1, dst + offset);
        offset += size_t(runs[i].second) * S;
      } else {
        collective &= one_read(0, 0, dst);
      }
    }
    return collective;
  }

  void read(Work& w) {
    const Plan& p = *w.plan;
    Batch& b = w.batch;
    b.epoch = p.epoch;
    b.step = p.step;
    b.valid = p.valid;
    b.indices = p.indices;
    if (!memory.empty()) return;  // in memory: no I/O, rows index `memory`
    const size_t S = size_t(info.sample_bytes());
    Stopwatch sw;
    if (!p.exchange) {
      w.staging = buffers.take(p.rows.size() * S);
      b.collective = read_rows(p.rows, w.staging.data.get(), p.calls);
      b.runs = int64_t(runs_of(p.rows).size());
      b.read_seconds = sw.elapsed_s();
      return;
    }
    w.staging = two_phase(p, b, buffers);
    b.read_seconds = sw.elapsed_s();
  }

  // Two phases. 1: rank q reads the q-th equal part of the distinct rows of all shares (p.all) in
  // file order (a few long runs). 2: MPI_Alltoallv sends every row to the ranks whose shares hold it;
  // each rank receives its rows (p.rows) grouped by source rank, which (parts being ascending ranges
  // of rows) is file order, as decode expects. Returns the staging bytes; sets b.collective, b.runs,
  // b.exchange_seconds. One rank, or a plan without exchange: its rows, read straight into the staging bytes.
  BufferPool::Buffer two_phase(const Plan& p, Batch& b, BufferPool& pool) {
    const size_t S = size_t(info.sample_bytes());
    b.runs = int64_t(runs_of(p.mine).size());
    if (size == 1 || !p.exchange) {  // one rank, or window reads of disjoint shares: read them directly
      BufferPool::Buffer staging = pool.take(p.rows.size() * S);
      b.collective = read_rows(p.rows, staging.data.get(), p.calls);
      return staging;
    }
    BufferPool::Buffer part = pool.take(p.mine.size() * S);
    b.collective = read_rows(p.mine, part.data.get(), p.calls);
    Stopwatch xw;
    const int64_t u = int64_t(p.all.size());
    auto owner = [&](int64_t row) {  // the rank whose part holds `row`
      const int64_t pos = std::lower_bound(p.all.begin(), p.all.end(), row) - p.all.begin();
      int q = int(std::min<int64_t>(size - 1, pos * size / std::max<int64_t>(u, 1)));
      while (q > 0 && pos < part_begin(p, q)) --q;
      while (q + 1 < size && pos >= part_begin(p, q + 1)) ++q;
      return q;
    };
    std::vector<int> scount(size_t(size), 0), sdispl(size_t(size), 0), rcount(size_t(size), 0), rdispl(size_t(size), 0);
    std::vector<int64_t> send_rows;  // positions in `mine`, grouped by destination rank
    for (int r = 0; r < size; ++r) {
      sdispl[size_t(r)] = int(send_rows.size());
      for (const int64_t row : p.share_rows[size_t(r)])
        if (owner(row) == rank) send_rows.push_back(std::lower_bound(p.mine.begin(), p.mine.end(), row) - p.mine.begin());
      scount[size_t(r)] = int(send_rows.size()) - sdispl[size_t(r)];
    }
    BufferPool::Buffer send = pool.take(send_rows.size() * S);
    for (size_t i = 0; i < send_rows.size(); ++i)
      std::memcpy(send.data.get() + i * S, part.data.get() + size_t(send_rows[i]) * S, S);
    for (const int64_t row : p.rows) rcount[size_t(owner(row))]++;
    for (int q = 1; q < size; ++q) rdispl[size_t(q)] = rdispl[size_t(q - 1)] + rcount[size_t(q - 1)];
    BufferPool::Buffer staging = pool.take(p.rows.size() * S);
    HPDT_MPI_CHECK(MPI_Alltoallv(send.data.get(), scount.data(), sdispl.data(), sample_type, staging.data.get(),
                                 rcount.data(), rdispl.data(), sample_type, xcomm));
    pool.give(std::move(send));
    pool.give(std::move(part));
    b.exchange_seconds = xw.elapsed_s();
    return staging;
  }

  // ---- decode (decode thread) ----

  // A pooled batch allocation: the images (f32) or the pixels (u8) and the crops, then the labels, each 64-byte
  // aligned.
  static size_t aligned(size_t bytes) { return (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment; }
  size_t crops_offset() const { return aligned(size_t(local_batch * info.sample_bytes())); }
  size_t labels_offset() const {
    if (opt.raw_pixels) return crops_offset() + aligned(size_t(local_batch) * 3 * sizeof(int32_t));
    return aligned(size_t(local_batch * info.sample_bytes()) * sizeof(float));
  }

  // staging holds rows[k] at position k, or (in_memory) every sample at its own index.
  void decode(Batch& b, const std::vector<int64_t>& rows, const uint8_t* staging, bool in_memory) {
    const int64_t C = info.c, H = info.h, W = info.w, S = C * H * W, n = local_batch;
    const bool raw = opt.raw_pixels;
    const Shape image_shape = opt.channels_last ? Shape{n, H, W, C} : Shape{n, C, H, W};
    if (batch_pool) {
      b.memory = batch_pool->take();
      char* base = static_cast<char*>(b.memory.get());
      if (raw) {
        b.pixels = Tensor::wrap(base, {n, C, H, W}, DType::u8);
        b.crops = Tensor::wrap(base + crops_offset(), {n, 3}, DType::i32);
      } else {
        b.images = Tensor::wrap(base, image_shape, DType::f32);
      }
      b.labels = Tensor::wrap(base + labels_offset(), {n}, DType::i32);
    } else {
      AllocOptions alloc;
      alloc.pinned = opt.pinned;
      if (raw) {
        b.pixels = Tensor::empty({n, C, H, W}, DType::u8, Device::cpu(), alloc);
        b.crops = Tensor::empty({n, 3}, DType::i32, Device::cpu(), alloc);
        if (!opt.pinned) advise_huge_pages(b.pixels.data(), b.pixels.nbytes());
      } else {
        b.images = Tensor::empty(image_shape, DType::f32, Device::cpu(), alloc);
        if (!opt.pinned) advise_huge_pages(b.images.data(), b.images.nbytes());
      }
      b.labels = Tensor::empty({n}, DType::i32, Device::cpu(), alloc);
    }
    int32_t* lab = b.labels.data<int32_t>();
    const bool augment = opt.augment && opt.mode == ReaderMode::train;
    const int64_t pad = augment ? opt.crop_padding : 0;
    const int64_t q0 = b.step * global_batch + int64_t(rank) * local_batch;
    // Samples apart: each writes its own rows and label, its augmentation a function of its position alone.
#pragma omp parallel for schedule(static) num_threads(opt.decode_threads) if (opt.decode_threads > 1 && n > 1)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = b.indices[size_t(i)];
      lab[i] = labels[size_t(row)];
      const size_t pos = in_memory ? size_t(row) : size_t(std::lower_bound(rows.begin(), rows.end(), row) - rows.begin());
      const uint8_t* src = staging + pos * size_t(S);
      int32_t dy = 0, dx = 0;
      bool flip = false;
      if (augment) {
        // A function of (seed, epoch, position in the epoch): the same at any rank count.
        const Philox4x32 r = philox_block(seed ^ kAugmentKey, uint64_t(b.epoch), uint64_t(q0 + i));
        dy = pad > 0 ? int32_t(int64_t(r.v[0] % uint32_t(2 * pad + 1)) - pad) : 0;
        dx = pad > 0 ? int32_t(int64_t(r.v[1] % uint32_t(2 * pad + 1)) - pad) : 0;
        flip = opt.hflip && (r.v[2] & 1u);
      }
      if (raw) {  // the consumer decodes (kernels::decode_images): the pixels as stored and the crop
        std::memcpy(b.pixels.data<uint8_t>() + i * S, src, size_t(S));
        int32_t* crop = b.crops.data<int32_t>() + 3 * i;
        crop[0] = dy, crop[1] = dx, crop[2] = flip ? 1 : 0;
      } else {
        kernels::cpu::decode_image(src, C, H, W, dy, dx, flip, norm.scale.data(), norm.shift.data(),
                                   b.images.data<float>() + i * S, opt.channels_last);
      }
    }
  }
};

std::vector<int64_t> ShardedReader::epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int64_t block,
                                                int64_t window, int64_t window_batches) {
  HPDT_CHECK(block >= 1, "epoch_order: shuffle block must be >= 1, got ", block);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  if (!shuffle) return order;
  HPDT_CHECK(n < (int64_t(1) << 32), "epoch_order: ", n, " samples are more than the shuffle supports (2^32)");
  Rng rng(seed, uint64_t(epoch));
  if (block == 1) {  // per-sample Fisher-Yates: the order of every earlier version
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[rng.below(uint32_t(i + 1))]);
    return order;
  }
  HPDT_CHECK(window >= 1, "epoch_order: a block order (block ", block, ") needs a window >= 1 (the global batch)");
  HPDT_CHECK(window_batches >= 1, "epoch_order: window_batches must be >= 1, got ", window_batches);
  // 1: Fisher-Yates over the blocks (the same draws as the per-sample shuffle of nb items).
  const int64_t nb = (n + block - 1) / block;
  std::vector<int64_t> blocks(static_cast<size_t>(nb));
  for (int64_t j = 0; j < nb; ++j) blocks[size_t(j)] = j;
  for (int64_t j = nb - 1; j > 0; --j) std::swap(blocks[size_t(j)], blocks[rng.below(uint32_t(j + 1))]);
  size_t k = 0;
  for (const int64_t j : blocks)
    for (int64_t i = j * block; i < std::min(n, (j + 1) * block); ++i) order[k++] = i;
  // 2a, window_batches = W > 1: interleave every window of W batches of `window` (= B) positions
  // (the last one may hold fewer batches): position j of its step s takes row
  // j*W' + pi_j(s) of the window's rows in block order (W' = its number of steps, pi_j a seeded
  // permutation of [0, W') per column j). Every global batch takes one row from each of B stretches of
  // W' consecutive rows, and the rows of positions [r*b, (r+1)*b) of all the window's steps -- the
  // shares of rank r of p, for any p dividing B -- are the contiguous stretch [r*b*W', (r+1)*b*W'):
  // each rank reads its own few long runs, with no exchange. A window whose length is not a
  // multiple of B (the epoch's tail) gets the in-window Fisher-Yates of step 2b below instead.
  std::vector<int64_t> rows;
  int64_t w0 = 0, w = 0;
  if (window_batches > 1) {
    for (; w0 + window <= n; w0 += window * window_batches, ++w) {
      const int64_t steps = std::min(window_batches, (n - w0) / window);
      rows.assign(order.begin() + w0, order.begin() + w0 + steps * window);
      Rng wr(seed ^ kInterleaveKey, uint64_t(epoch), uint64_t(w) << 40);  // one counter range per window
      std::vector<int64_t> pi(static_cast<size_t>(steps));
      for (int64_t j = 0; j < window; ++j) {
        for (int64_t t = 0; t < steps; ++t) pi[size_t(t)] = t;
        for (int64_t t = steps - 1; t > 0; --t) std::swap(pi[size_t(t)], pi[wr.below(uint32_t(t + 1))]);
        for (int64_t t = 0; t < steps; ++t) order[size_t(w0 + t * window + j)] = rows[size_t(j * steps + pi[size_t(t)])];
      }
      if (steps < window_batches) {
        w0 += steps * window;
        ++w;
        break;
      }
    }
    if (w0 >= n) return order;
  }
  // 2b: Fisher-Yates inside each window of `window` positions (the last one may be shorter), with its
  // own Philox counter range per (epoch, window): mixes the blocks of a global batch across its ranks.
  for (; w0 < n; w0 += window, ++w) {
    Rng wr(seed ^ kWindowKey, uint64_t(epoch), uint64_t(w) << 32);
    const int64_t len = std::min(window, n - w0);
    HPDT_CHECK(len < (int64_t(1) << 32), "epoch_order: window ", len, " is more than the shuffle supports (2^32)");
    for (int64_t i = len - 1; i > 0; --i) std::swap(order[size_t(w0 + i)], order[size_t(w0 + wr.below(uint32_t(i + 1)))]);
  }
  return order;
}

ShardedReader::ShardedReader(MPI_Comm comm, const std::string& path, int64_t global_batch, uint64_t seed,
                             ReaderOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  HPDT_MPI_CHECK(MPI_Comm_dup(comm, &m.comm));
  set_errors_return(m.comm);
  HPDT_MPI_CHECK(MPI_Comm_rank(m.comm, &m.rank));
  HPDT_MPI_CHECK(MPI_Comm_size(m.comm, &m.size));
  m.path = path;
  m.seed = seed;
  m.opt = options;
  if (m.opt.mode == ReaderMode::eval) {
    m.opt.shuffle = false;
    m.opt.augment = false;
    m.opt.tail = TailPolicy::pad;
  }
  m.opt.pinned = m.opt.pinned && cuda_available();
  try {
    HPDT_CHECK(global_batch > 0 && global_batch % m.size == 0, "global batch ", global_batch,
               " must be a positive multiple of the number of ranks (", m.size, ")");
    HPDT_CHECK(m.opt.prefetch >= 0, "prefetch depth must be >= 0, got ", m.opt.prefetch);
    HPDT_CHECK(m.opt.crop_padding >= 0, "crop padding must be >= 0, got ", m.opt.crop_padding);
    HPDT_CHECK(m.opt.decode_threads >= 1, "decode_threads must be >= 1, got ", m.opt.decode_threads);
    HPDT_CHECK(m.opt.shuffle_block >= 1, "shuffle block must be >= 1, got ", m.opt.shuffle_block);
    HPDT_CHECK(m.opt.window_batches >= 1, "window_batches must be >= 1, got ", m.opt.window_batches);
    HPDT_CHECK(m.opt.in_memory_limit_bytes >= 0, "in_memory_limit_bytes must be >= 0");
    HPDT_CHECK(m.opt.max_samples >= 0, "max_samples must be >= 0 (0: all), got ", m.opt.max_samples);
    if (!std::filesystem::exists(path)) throw Error("dataset file does not exist", path);
    std::lock_guard lock(hdf5_mutex());  // the I/O thread may be in HDF5 for another reader
    quiet_hdf5_errors();
    if (H5Fis_hdf5(path.c_str()) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      throw Error("not an HDF5 file", path);
    }
  } catch (...) {
    MPI_Comm_free(&m.comm);
    throw;
  }
  m.global_batch = global_batch;
  m.local_batch = global_batch / m.size;
  int provided = MPI_THREAD_SINGLE;
  HPDT_MPI_CHECK(MPI_Query_thread(&provided));
  m.threaded = provided == MPI_THREAD_MULTIPLE;
  if (!m.threaded && m.opt.prefetch > 0 && m.rank == 0) {
    HPDT_LOG(warn) << "MPI was not initialised with MPI_THREAD_MULTIPLE: " << path
                   << " is read on the calling thread, without prefetch";
  }
  m.depth = m.threaded ? std::max(m.opt.prefetch, 0) : 0;

  std::string error;
  try {
    error = m.run<std::string>([&m] { return m.open_task(); }).get();
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    agree_on_error(m.comm, error, path);
    m.steps = m.opt.tail == TailPolicy::drop ? m.info.n / global_batch : (m.info.n + global_batch - 1) / global_batch;
    if (m.steps == 0)
      throw Error("the dataset has " + std::to_string(m.info.n) + " samples, fewer than one global batch of " +
                      std::to_string(global_batch) + " (use a smaller batch or TailPolicy::pad)",
                  path);
    HPDT_CHECK(m.info.sample_bytes() < (int64_t(1) << 31), "samples of ", m.info.sample_bytes(),
               " bytes are more than the reader supports (2^31)");
    m.norm = m.opt.normalize ? kernels::PixelNormalization::from_mean_std(m.info.c, m.info.mean, m.info.std)
                             : kernels::PixelNormalization::from_mean_std(m.info.c, {}, {});
  } catch (...) {
    if (error.empty()) m.run<void>([&m] { m.close_task(); }).get();
    MPI_Comm_free(&m.comm);
    throw;
  }
  m.exchange = m.opt.exchange && m.block_order() && m.size > 1 && m.memory.empty();
  m.windowed = m.opt.window_batches > 1 && m.memory.empty();
  if (m.opt.reuse_batch_memory)
    m.batch_pool = std::make_shared<BatchPool>(m.labels_offset() + size_t(m.local_batch) * sizeof(int32_t), m.opt.pinned,
                                               size_t(m.depth) + 4);
  HPDT_MPI_CHECK(MPI_Comm_dup(m.comm, &m.xcomm));
  set_errors_return(m.xcomm);
  HPDT_MPI_CHECK(MPI_Type_contiguous(int(m.info.sample_bytes()), MPI_BYTE, &m.sample_type));
  HPDT_MPI_CHECK(MPI_Type_commit(&m.sample_type));
  m.restart(0, 0);
}

ShardedReader::~ShardedReader() {
  Impl& m = *impl_;
  m.drain();  // every rank finishes the same reads (they are collective)
  try {
    m.run<void>([&m] { m.close_task(); }).get();
  } catch (const std::exception& e) {
    HPDT_LOG(warn) << "closing " << m.path << ": " << e.what();
  }
  if (m.sample_type != MPI_DATATYPE_NULL) MPI_Type_free(&m.sample_type);
  if (m.xcomm != MPI_COMM_NULL) MPI_Comm_free(&m.xcomm);
  MPI_Comm_free(&m.comm);
}

const DatasetInfo& ShardedReader::info() const { return impl_->info; }
const ReaderOptions& ShardedReader::options() const { return impl_->opt; }
const kernels::PixelNormalization& ShardedReader::normalization() const { return impl_->norm; }
int64_t ShardedReader::global_batch() const { return impl_->global_batch; }
int64_t ShardedReader::local_batch() const { return impl_->local_batch; }
int64_t ShardedReader::steps_per_epoch() const { return impl_->steps; }
bool ShardedReader::in_memory() const { return !impl_->memory.empty(); }
ReaderStats ShardedReader::stats() const { return impl_->stats; }

void ShardedReader::set_epoch(int64_t epoch) { resume(epoch, 0); }

void ShardedReader::resume(int64_t epoch, int64_t step) {
  HPDT_CHECK(epoch >= 0 && step >= 0 && step < impl_->steps, "resume(", epoch, ", ", step, "): step must be in [0, ",
             impl_->steps, ") for ", impl_->path);
  impl_->restart(epoch, step);
}

std::vector<int64_t> ShardedReader::batch_indices(int64_t epoch, int64_t step, int rank) const {
  HPDT_CHECK(rank >= 0 && rank < impl_->size, "batch_indices: rank ", rank, " of ", impl_->size);
  return impl_->indices(impl_->make_order(epoch), step, rank, nullptr);
}

Batch ShardedReader::next() {
  Impl& m = *impl_;
  if (m.pending.empty()) m.submit_one();  // prefetch 0 (or not threaded): read now
  Stopwatch sw;
  std::future<Batch> f = std::move(m.pending.front());
  m.pending.pop_front();
  Batch b = f.get();
  b.wait_seconds = sw.elapsed_s();
  while (int(m.pending.size()) < m.depth) m.submit_one();
  m.stats.batches++;
  m.stats.wait_seconds += b.wait_seconds;
  m.stats.read_seconds += b.read_seconds;
  m.stats.exchange_seconds += b.exchange_seconds;
  m.stats.decode_seconds += b.decode_seconds;
  m.stats.bytes_read += int64_t(b.indices.size()) * m.info.sample_bytes();
  m.stats.runs += b.runs;
  m.stats.read_cpu_seconds += b.read_cpu_seconds;
  m.stats.decode_cpu_seconds += b.decode_cpu_seconds;
  if (m.opt.collective && !b.collective) {
    m.stats.independent_fallbacks++;
    if (!m.warned_fallback) {
      m.warned_fallback = true;
      HPDT_LOG(warn) << "HDF5 fell back from collective to independent reads for " << m.path
                     << " (H5Pget_mpio_actual_io_mode); counted in ReaderStats::independent_fallbacks";
    }
  }
  return b;
}

}  // namespace hpdt::io
