#include "hpdt/comm/gradient_sync.h"

#include <mpi.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>

#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/timer.h"

namespace hpdt::comm {

std::vector<MatrixView> bucket_matrices(const std::vector<MatrixView>& tensors, size_t offset, size_t count) {
  std::vector<MatrixView> mats;
  for (const MatrixView& t : tensors)
    if (t.offset >= offset && t.offset + t.rows * t.cols <= offset + count)
      mats.push_back({t.offset - offset, t.rows, t.cols});
  // Without a layout PowerSGD sees each bucket as one matrix; with one, only the layout's matrices.
  if (!tensors.empty() && mats.empty()) mats.push_back({0, 1, count});
  return mats;
}

std::vector<std::pair<size_t, size_t>> gradient_buckets(size_t count, size_t element_bytes, size_t bucket_bytes,
                                                        std::vector<MatrixView> tensors) {
  const size_t per = std::max<size_t>(1, bucket_bytes / element_bytes);
  std::sort(tensors.begin(), tensors.end(),
            [](const MatrixView& a, const MatrixView& b) { return a.offset < b.offset; });
  // A cut that falls inside a tensor moves to the tensor's end.
  auto snap = [&](size_t cut) {
    auto it = std::upper_bound(tensors.begin(), tensors.end(), cut,
                               [](size_t c, const MatrixView& t) { return c < t.offset; });
    if (it != tensors.begin()) {
      const MatrixView& t = *std::prev(it);
      if (cut > t.offset && cut < t.offset + t.rows * t.cols) cut = t.offset + t.rows * t.cols;
    }
    return cut;
  };
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t off = 0; off < count;) {
    const size_t end = std::min(count, snap(off + std::min(per, count - off)));
    out.emplace_back(off, end - off);
    off = end;
  }
  return out;
}

GradientSync::GradientSync(Communicator& comm, void* grads, size_t count, DType dtype, GradientSyncOptions options)
    : grads_(static_cast<char*>(grads)), count_(count), dtype_(dtype), options_(std::move(options)) {
  HPDT_CHECK(is_floating(dtype), "GradientSync: dtype ", dtype_name(dtype), " is not supported (expected f32, f16 or bf16)");
  HPDT_CHECK(count == 0 || grads, "GradientSync: null gradient buffer for ", count, " elements");
  HPDT_CHECK(options_.bucket_bytes >= dtype_size(dtype), "GradientSync: bucket_bytes ", options_.bucket_bytes, " is smaller than one element");
  int provided = 0;
  HPDT_MPI_CHECK(MPI_Query_thread(&provided));
  HPDT_CHECK(provided >= MPI_THREAD_SERIALIZED, "GradientSync needs MPI initialised with at least MPI_THREAD_SERIALIZED "
                                                "(MPI_Init_thread; MPI_THREAD_MULTIPLE if the caller also uses MPI during backward)");
  comm_ = std::make_unique<Communicator>(comm.comm(), comm.options());
  auto tensors = options_.tensors;
  std::sort(tensors.begin(), tensors.end(), [](const MatrixView& a, const MatrixView& b) { return a.offset < b.offset; });
  for (size_t i = 0; i < tensors.size(); ++i) {
    const MatrixView& t = tensors[i];
    HPDT_CHECK(t.offset <= count && t.rows * t.cols <= count - t.offset, "GradientSync: tensor ", i, " at ", t.offset, " (", t.rows, "x", t.cols,
               ") lies outside the gradient buffer of ", count, " elements");
    HPDT_CHECK(i == 0 || tensors[i - 1].offset + tensors[i - 1].rows * tensors[i - 1].cols <= t.offset, "GradientSync: tensors overlap at element ",
               t.offset);
  }
  for (const auto& [off, n] : gradient_buckets(count, dtype_size(dtype), options_.bucket_bytes, tensors)) {
    buckets_.push_back({off, n});
    bucket_offsets_.push_back(off);
  }
  bucket_ready_.assign(buckets_.size(), 0);
  if (!options_.compression.lossless()) {
    HPDT_CHECK(dtype == DType::f32, "GradientSync: compression ", compression_name(options_.compression), " needs an f32 gradient buffer, not ",
               dtype_name(dtype));
    for (size_t b = 0; b < buckets_.size(); ++b)
      compressors_.push_back(make_compressor(options_.compression, buckets_[b].count,
                                             bucket_matrices(tensors, buckets_[b].offset, buckets_[b].count),
                                             options_.seed, b));
  }
  thread_ = std::thread([this] { comm_loop(); });
}

GradientSync::~GradientSync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradientSync::begin_step() {
  std::lock_guard<std::mutex> lock(mu_);
  HPDT_CHECK(!in_step_, "GradientSync::begin_step: the previous step was not waited for (call wait() first)");
  for (auto& b : buckets_) b.ready = 0;
  std::fill(bucket_ready_.begin(), bucket_ready_.end(), 0);
  pending_timings_.assign(buckets_.size(), BucketTiming{});
  for (size_t i = 0; i < buckets_.size(); ++i) {
    pending_timings_[i].bucket = int(i);
    pending_timings_[i].offset = buckets_[i].offset;
    pending_timings_[i].count = buckets_[i].count;
  }
  next_ = 0;
  error_ = nullptr;
  in_step_ = true;
  waiting_ = false;
}

void GradientSync::notify_ready(size_t offset, size_t count) {
  HPDT_CHECK(offset <= count_ && count <= count_ - offset, "GradientSync::notify_ready: range [", offset, ", ", offset + count,
             ") is outside the gradient buffer of ", count_, " elements");
  if (count == 0) return;
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    HPDT_CHECK(in_step_, "GradientSync::notify_ready outside a step (call begin_step() first)");
    const double t = now_s();
    size_t first = size_t(std::upper_bound(bucket_offsets_.begin(), bucket_offsets_.end(), offset) - bucket_offsets_.begin()) - 1;
    for (size_t b = first; b < buckets_.size() && buckets_[b].offset < offset + count; ++b) {
      Bucket& k = buckets_[b];
      const size_t lo = std::max(offset, k.offset), hi = std::min(offset + count, k.offset + k.count);
      k.ready += hi - lo;
      HPDT_CHECK(k.ready <= k.count, "GradientSync::notify_ready: bucket ", b, " notified for more elements (", k.ready,
                 ") than it holds (", k.count, "): a gradient range was notified twice");
      if (k.ready == k.count) {
        bucket_ready_[b] = 1;
        pending_timings_[b].ready_s = t;
        any = true;
      }
    }
  }
  if (any) cv_.notify_all();
}

void GradientSync::wait() {
  const double t0 = now_s();
  std::unique_lock<std::mutex> lock(mu_);
  HPDT_CHECK(in_step_, "GradientSync::wait outside a step (call begin_step() first)");
  waiting_ = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return next_ == buckets_.size() || error_; });
  in_step_ = false;
  exposed_s_ = now_s() - t0;
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  timings_ = pending_timings_;
  bytes_sent_ = raw_bytes_ = 0;
  for (const auto& t : timings_) {
    bytes_sent_ += t.wire_bytes;
    raw_bytes_ += t.raw_bytes;
  }
}

double GradientSync::step_comm_s() const {
  if (timings_.empty()) return 0;
  return timings_.back().end_s - timings_.front().start_s;
}

void GradientSync::comm_loop() {
#ifdef _OPENMP
  // Compressors call OpenMP kernels (PowerSGD's GEMMs); from this thread they must not start a team
  // of their own that competes with backward's threads for the cores.
  omp_set_num_threads(1);
#endif
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (in_step_ && (options_.overlap || waiting_) && !error_ && next_ < buckets_.size() && bucket_ready_[next_]); });
    if (stop_) return;
    const size_t b = next_;
    lock.unlock();
    try {
      reduce_bucket(b);
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      cv_.notify_all();
      continue;
    }
    lock.lock();
    ++next_;
    if (next_ == buckets_.size()) cv_.notify_all();
  }
}

void GradientSync::reduce_bucket(size_t b) {
  const Bucket& k = buckets_[b];
  BucketTiming& t = pending_timings_[b];  // this slot is only touched by this thread until next_ passes b
  const uint64_t sent0 = comm_->bytes_sent();
  t.start_s = now_s();
  AllreduceOptions o = options_.allreduce;
  o.bucket = int(b);
  void* p = grads_ + k.offset * dtype_size(dtype_);
  const int p_ = comm_->size();
  t.raw_bytes = ring_allreduce_bytes(p_, k.count * dtype_size(dtype_));
  if (!compressors_.empty()) {
    Compressor& c = *compressors_[b];
    c.allreduce(*comm_, reinterpret_cast<float*>(p), options_.op, options_.algorithm, o);
    t.end_s = now_s();
    t.wire_bytes = c.wire_bytes();
    return;
  }
  allreduce(*comm_, p, p, k.count, dtype_, options_.op, options_.algorithm, o);
  t.end_s = now_s();
  t.wire_bytes = comm_->bytes_sent() - sent0;
  if (t.wire_bytes == 0 && p_ > 1)  // MPI_Allreduce's own traffic is invisible here: count what ring/rhd would send
    t.wire_bytes = t.raw_bytes;
}

std::vector<float> GradientSync::compression_state() const {
  std::vector<float> all;
  for (const auto& c : compressors_) {
    const std::vector<float> s = c->state();
    all.insert(all.end(), s.begin(), s.end());
  }
  return all;
}

void GradientSync::set_compression_state(const std::vector<float>& state) {
  std::lock_guard<std::mutex> lock(mu_);
  HPDT_CHECK(!in_step_, "GradientSync::set_compression_state during a step");
  std::vector<size_t> sizes;
  for (const auto& c : compressors_) sizes.push_back(c->state().size());
  const auto parts = split_compression_state(state, sizes,
                                             "GradientSync (" + compression_name(options_.compression) + " over " +
                                                 std::to_string(count_) + " gradients in " +
                                                 std::to_string(compressors_.size()) + " buckets)");
  for (size_t b = 0; b < compressors_.size(); ++b) compressors_[b]->set_state(parts[b]);
}

}  // namespace hpdt::comm
