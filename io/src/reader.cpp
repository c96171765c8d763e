// ShardedReader: the sample order, the shared I/O thread, collective hyperslab reads and decoding.
#include "hpdt/io/reader.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "dataset_internal.h"
#include "h5.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/philox.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/timer.h"

namespace hpdt::io {

namespace {

// The one thread of the process that runs readers' HDF5 work, in submission order. Started on first
// use; idle between tasks; joined at exit.
class IoThread {
 public:
  static IoThread& get() {
    static IoThread t;
    return t;
  }
  template <class R>
  std::future<R> submit(std::function<R()> fn) {
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
    std::future<R> f = task->get_future();
    {
      std::lock_guard lock(mu_);
      queue_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return f;
  }
  ~IoThread() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  IoThread() : thread_([this] { loop(); }) {}
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
      task();  // packaged_task stores exceptions in the future
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

template <class R>
std::future<R> ready_future(std::function<R()> fn) {
  std::packaged_task<R()> task(std::move(fn));
  std::future<R> f = task.get_future();
  task();
  return f;
}

constexpr uint64_t kAugmentKey = 0xA5A5F00DCAFEBEEFull;  // augmentation draws use seed ^ this key

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
  int rank = 0, size = 1;
  std::string path;
  DatasetInfo info;
  std::vector<int32_t> labels;
  ReaderOptions opt;
  int64_t global_batch = 0, local_batch = 0, steps = 0;
  uint64_t seed = 0;
  bool threaded = false;
  int depth = 0;

  // HDF5 state: used only by tasks (on the I/O thread, or inline when not threaded).
  h5::Id file, images, dxpl;
  std::vector<uint8_t> memory;  // all images, when they fit in_memory_limit_bytes

  // Submission side (calling thread only).
  int64_t submit_epoch = 0, submit_step = 0;
  std::deque<std::future<Batch>> pending;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders;  // a few recent epochs
  ReaderStats stats;
  bool warned_fallback = false;

  template <class R>
  std::future<R> run(std::function<R()> fn) {
    return threaded ? IoThread::get().submit<R>(std::move(fn)) : ready_future<R>(std::move(fn));
  }

  std::shared_ptr<const std::vector<int64_t>> order(int64_t epoch) {
    auto it = orders.find(epoch);
    if (it != orders.end()) return it->second;
    auto o = std::make_shared<const std::vector<int64_t>>(epoch_order(info.n, seed, epoch, opt.shuffle));
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

  void submit_one() {
    const int64_t e = submit_epoch, s = submit_step;
    auto ord = order(e);
    if (++submit_step == steps) submit_step = 0, ++submit_epoch;
    pending.push_back(run<Batch>([this, e, s, ord] { return read_batch(e, s, *ord); }));
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

  void restart(int64_t epoch, int64_t step) {
    drain();
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
      if (total <= opt.in_memory_limit_bytes) {
        memory.resize(size_t(total));
        h5check(H5Dread(images, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, dxpl, memory.data()), "H5Dread (whole dataset)",
                path + ":/images");
      }
    } catch (const std::exception& e) {
      close_task();
      return e.what();
    }
    return {};
  }

  void close_task() {
    std::lock_guard lock(hdf5_mutex());
    dxpl.reset();
    images.reset();
    file.reset();
    memory.clear();
    memory.shrink_to_fit();
  }

  Batch read_batch(int64_t epoch, int64_t step, const std::vector<int64_t>& ord) {
    Batch b;
    b.epoch = epoch;
    b.step = step;
    b.indices = indices(ord, step, rank, &b.valid);
    const int64_t S = info.sample_bytes();
    // Rows in file order, without repeats (wrap-around padding can repeat a sample).
    std::vector<int64_t> rows = b.indices;
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    if (!memory.empty()) {  // in memory: no I/O, rows are positions in `memory`
      Stopwatch sw;
      decode(b, rows, memory, /*in_memory=*/true);
      b.decode_seconds = sw.elapsed_s();
      return b;
    }
    std::vector<uint8_t> staging(size_t(int64_t(rows.size()) * S));
    Stopwatch sw;
    {
      std::lock_guard lock(hdf5_mutex());
      const std::string where = path + ":/images";
      h5::Id fspace = h5::make(H5Dget_space(images), "H5Dget_space", where);
      h5check(H5Sselect_none(fspace), "H5Sselect_none", where);
      for (size_t i = 0; i < rows.size();) {
        size_t j = i + 1;
        while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;  // a run of adjacent rows
        const hsize_t start[4] = {hsize_t(rows[i]), 0, 0, 0};
        const hsize_t count[4] = {hsize_t(j - i), hsize_t(info.c), hsize_t(info.h), hsize_t(info.w)};
        h5check(H5Sselect_hyperslab(fspace, H5S_SELECT_OR, start, nullptr, count, nullptr), "H5Sselect_hyperslab", where);
        i = j;
      }
      const hsize_t mdims[4] = {hsize_t(rows.size()), hsize_t(info.c), hsize_t(info.h), hsize_t(info.w)};
      h5::Id mspace = h5::make(H5Screate_simple(4, mdims, nullptr), "H5Screate_simple", where);
      h5check(H5Dread(images, H5T_NATIVE_UINT8, mspace, fspace, dxpl, staging.data()), "H5Dread", where);
      H5D_mpio_actual_io_mode_t mode{};
      h5check(H5Pget_mpio_actual_io_mode(dxpl, &mode), "H5Pget_mpio_actual_io_mode", where);
      b.collective = mode != H5D_MPIO_NO_COLLECTIVE;
    }
    b.read_seconds = sw.elapsed_s();
    sw.restart();
    decode(b, rows, staging, /*in_memory=*/false);
    b.decode_seconds = sw.elapsed_s();
    return b;
  }

  // staging holds rows[k] at position k, or (in_memory) every sample at its own index.
  void decode(Batch& b, const std::vector<int64_t>& rows, const std::vector<uint8_t>& staging, bool in_memory) {
    const int64_t C = info.c, H = info.h, W = info.w, S = C * H * W, n = local_batch;
    AllocOptions alloc;
    alloc.pinned = opt.pinned;
    b.images = Tensor::empty({n, C, H, W}, DType::f32, Device::cpu(), alloc);
    b.labels = Tensor::empty({n}, DType::i32, Device::cpu(), alloc);
    float* out = b.images.data<float>();
    int32_t* lab = b.labels.data<int32_t>();
    std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));  // out = v * scale + shift
    for (int64_t c = 0; c < C; ++c) {
      const float m = opt.normalize ? info.mean[size_t(c)] : 0.0f, s = opt.normalize ? info.std[size_t(c)] : 1.0f;
      scale[size_t(c)] = 1.0f / (255.0f * s);
      shift[size_t(c)] = -m / s;
    }
    const bool augment = opt.augment && opt.mode == ReaderMode::train;
    const int64_t pad = augment ? opt.crop_padding : 0;
    const int64_t q0 = b.step * global_batch + int64_t(rank) * local_batch;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = b.indices[size_t(i)];
      lab[i] = labels[size_t(row)];
      const size_t pos = in_memory ? size_t(row) : size_t(std::lower_bound(rows.begin(), rows.end(), row) - rows.begin());
      const uint8_t* src = staging.data() + pos * size_t(S);
      float* dst = out + i * S;
      int64_t dy = 0, dx = 0;
      bool flip = false;
      if (augment) {
        // A function of (seed, epoch, position in the epoch): the same at any rank count.
        const Philox4x32 r = philox_block(seed ^ kAugmentKey, uint64_t(b.epoch), uint64_t(q0 + i));
        dy = pad > 0 ? int64_t(r.v[0] % uint32_t(2 * pad + 1)) - pad : 0;
        dx = pad > 0 ? int64_t(r.v[1] % uint32_t(2 * pad + 1)) - pad : 0;
        flip = opt.hflip && (r.v[2] & 1u);
      }
      for (int64_t c = 0; c < C; ++c) {
        const float sc = scale[size_t(c)], sh = shift[size_t(c)];
        const uint8_t* sp = src + c * H * W;
        float* dp = dst + c * H * W;
        if (!augment) {
          for (int64_t k = 0; k < H * W; ++k) dp[k] = float(sp[k]) * sc + sh;
          continue;
        }
        // out(y, x) = padded(y + dy, x' + dx) with x' = flip ? W-1-x : x; outside the image: 0.
        for (int64_t y = 0; y < H; ++y) {
          const int64_t sy = y + dy;
          for (int64_t x = 0; x < W; ++x) {
            const int64_t sx = (flip ? W - 1 - x : x) + dx;
            const float v = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? float(sp[sy * W + sx]) : 0.0f;
            dp[y * W + x] = v * sc + sh;
          }
        }
      }
    }
  }
};

std::vector<int64_t> ShardedReader::epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  if (!shuffle) return order;
  HPDT_CHECK(n < (int64_t(1) << 32), "epoch_order: ", n, " samples are more than the shuffle supports (2^32)");
  Rng rng(seed, uint64_t(epoch));
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[rng.below(uint32_t(i + 1))]);
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
    HPDT_CHECK(m.opt.in_memory_limit_bytes >= 0, "in_memory_limit_bytes must be >= 0");
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
  } catch (...) {
    if (error.empty()) m.run<void>([&m] { m.close_task(); }).get();
    MPI_Comm_free(&m.comm);
    throw;
  }
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
  MPI_Comm_free(&m.comm);
}

const DatasetInfo& ShardedReader::info() const { return impl_->info; }
const ReaderOptions& ShardedReader::options() const { return impl_->opt; }
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
  const auto ord = epoch_order(impl_->info.n, impl_->seed, epoch, impl_->opt.shuffle);
  return impl_->indices(ord, step, rank, nullptr);
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
  m.stats.decode_seconds += b.decode_seconds;
  m.stats.bytes_read += int64_t(b.indices.size()) * m.info.sample_bytes();
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
