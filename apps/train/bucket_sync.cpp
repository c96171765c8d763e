#include "bucket_sync.h"

#include <algorithm>

#include "hpdt/core/error.h"
#include "hpdt/core/timer.h"

namespace hpdt::train {

BucketSync::BucketSync(comm::Communicator& comm, Tensor grads, Options options)
    : comm_(comm), grads_(std::move(grads)), o_(options) {
  const size_t n = size_t(grads_.numel());
  const size_t per = std::max<size_t>(1, o_.bucket_bytes / dtype_size(grads_.dtype()));
  bounds_.push_back(0);
  for (size_t b = 0; b < n; b += per) bounds_.push_back(std::min(n, b + per));
  if (n == 0) bounds_.push_back(0);
  ready_.assign(bounds_.size() - 1, 0);
  timings_.resize(bounds_.size() - 1);
  thread_ = std::thread([this] { run(); });
}

BucketSync::~BucketSync() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

size_t BucketSync::bytes_per_step() const {
  const size_t p = size_t(comm_.size());
  return p > 1 ? size_t(2.0 * double(p - 1) / double(p) * double(grads_.nbytes())) : 0;
}

void BucketSync::begin_step() {
  std::lock_guard lock(mutex_);
  std::fill(ready_.begin(), ready_.end(), 0);
  done_ = 0;
  error_ = nullptr;
}

void BucketSync::enqueue(int bucket) {
  queue_.push_back(bucket);
  cv_.notify_all();
}

void BucketSync::notify_ready(size_t offset, size_t count) {
  std::lock_guard lock(mutex_);
  const size_t end = offset + count;
  HPDT_CHECK(end <= size_t(grads_.numel()), "BucketSync: ready range [", offset, ", ", end, ") beyond ", grads_.numel());
  // The range may span several buckets: credit each one with its overlap.
  auto it = std::upper_bound(bounds_.begin(), bounds_.end(), offset);
  for (int b = int(it - bounds_.begin()) - 1; b < buckets() && bounds_[size_t(b)] < end; ++b) {
    const size_t lo = std::max(offset, bounds_[size_t(b)]), hi = std::min(end, bounds_[size_t(b) + 1]);
    ready_[size_t(b)] += hi - lo;
    HPDT_CHECK(ready_[size_t(b)] <= bounds_[size_t(b) + 1] - bounds_[size_t(b)], "BucketSync: bucket ", b,
               " marked ready twice in one step");
    if (o_.overlap && ready_[size_t(b)] == bounds_[size_t(b) + 1] - bounds_[size_t(b)]) enqueue(b);
  }
}

double BucketSync::wait() {
  const double t0 = now_s();
  std::unique_lock lock(mutex_);
  for (int b = 0; b < buckets(); ++b) {
    const size_t size = bounds_[size_t(b) + 1] - bounds_[size_t(b)];
    HPDT_CHECK(ready_[size_t(b)] == size, "BucketSync: bucket ", b, " has ", ready_[size_t(b)], " of ", size,
               " gradients ready at wait(): a layer did not report its gradients");
    if (!o_.overlap) enqueue(b);
  }
  cv_.wait(lock, [&] { return done_ == buckets() || error_; });
  if (error_) std::rethrow_exception(error_);
  return now_s() - t0;
}

void BucketSync::run() {
  for (;;) {
    int b;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      b = queue_.front();
      queue_.pop_front();
    }
    BucketTiming t{b, bounds_[size_t(b)], bounds_[size_t(b) + 1] - bounds_[size_t(b)], now_s(), 0};
    try {
      char* base = static_cast<char*>(grads_.data()) + t.offset * dtype_size(grads_.dtype());
      comm::AllreduceOptions ao = o_.allreduce;
      ao.bucket = b;
      comm::allreduce(comm_, base, base, t.count, grads_.dtype(), comm::ReduceOp::avg, o_.algorithm, ao);
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
      cv_.notify_all();
      continue;
    }
    t.end = now_s();
    std::lock_guard lock(mutex_);
    timings_[size_t(b)] = t;
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace hpdt::train
