#include "hpdt/comm/gradient_sync.h"

#include <mpi.h>

#include <algorithm>

#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/timer.h"

namespace hpdt::comm {

GradientSync::GradientSync(Communicator& comm, void* grads, size_t count, DType dtype, GradientSyncOptions options)
    : grads_(static_cast<char*>(grads)), count_(count), dtype_(dtype), options_(std::move(options)) {
  HPDT_CHECK(is_floating(dtype), "GradientSync: dtype ", dtype_name(dtype), " is not supported (expected f32, f16 or bf16)");
  HPDT_CHECK(count == 0 || grads, "GradientSync: null gradient buffer for ", count, " elements");
  HPDT_CHECK(options_.bucket_bytes >= dtype_size(dtype), "GradientSync: bucket_bytes ", options_.bucket_bytes, " is smaller than one element");
  int provided = 0;
  MPI_Query_thread(&provided);
  HPDT_CHECK(provided >= MPI_THREAD_SERIALIZED, "GradientSync needs MPI initialised with at least MPI_THREAD_SERIALIZED "
                                                "(MPI_Init_thread; MPI_THREAD_MULTIPLE if the caller also uses MPI during backward)");
  comm_ = std::make_unique<Communicator>(comm.comm(), comm.options());
  const size_t per = options_.bucket_bytes / dtype_size(dtype);
  for (size_t off = 0; off < count; off += per) buckets_.push_back({off, std::min(per, count - off)});
  bucket_ready_.assign(buckets_.size(), 0);
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
}

void GradientSync::notify_ready(size_t offset, size_t count) {
  HPDT_CHECK(offset <= count_ && count <= count_ - offset, "GradientSync::notify_ready: range [", offset, ", ", offset + count,
             ") is outside the gradient buffer of ", count_, " elements");
  if (count == 0) return;
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    HPDT_CHECK(in_step_, "GradientSync::notify_ready outside a step (call begin_step() first)");
    const size_t per = buckets_[0].count;
    const double t = now_s();
    for (size_t b = offset / per; b < buckets_.size() && buckets_[b].offset < offset + count; ++b) {
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
  cv_.wait(lock, [&] { return next_ == buckets_.size() || error_; });
  in_step_ = false;
  exposed_s_ = now_s() - t0;
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  timings_ = pending_timings_;
  bytes_sent_ = 0;
  for (const auto& t : timings_) bytes_sent_ += t.wire_bytes;
}

double GradientSync::step_comm_s() const {
  if (timings_.empty()) return 0;
  return timings_.back().end_s - timings_.front().start_s;
}

void GradientSync::comm_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (in_step_ && !error_ && next_ < buckets_.size() && bucket_ready_[next_]); });
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
  const uint64_t sent0 = comm_->transport().bytes_sent() + comm_->local_transport().bytes_sent() + comm_->cross_transport().bytes_sent();
  t.start_s = now_s();
  AllreduceOptions o = options_.allreduce;
  o.bucket = int(b);
  void* p = grads_ + k.offset * dtype_size(dtype_);
  allreduce(*comm_, p, p, k.count, dtype_, options_.op, options_.algorithm, o);
  t.end_s = now_s();
  t.wire_bytes = comm_->transport().bytes_sent() + comm_->local_transport().bytes_sent() + comm_->cross_transport().bytes_sent() - sent0;
  const int p_ = comm_->size();
  if (t.wire_bytes == 0 && p_ > 1)  // MPI_Allreduce's own traffic is invisible here: count what ring/rhd would send
    t.wire_bytes = uint64_t(2.0 * (p_ - 1) / p_ * double(k.count * dtype_size(dtype_)));
}

}  // namespace hpdt::comm
