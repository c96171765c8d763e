// Gradient synchronisation for the trainer: the flat gradient buffer split into contiguous buckets
// (the arena lays gradients out in reverse execution order, so buckets fill front to back during
// backward); each bucket is all-reduced (average) on a comm thread as soon as its last gradient is
// ready, while backward continues; wait() blocks until every bucket is done and reports how long it
// blocked (the exposed communication time).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "hpdt/comm/allreduce.h"
#include "hpdt/core/tensor.h"

namespace hpdt::train {

struct BucketTiming {
  int bucket = 0;
  size_t offset = 0, count = 0;
  double start = 0, end = 0;  // now_s()
};

class BucketSync {
 public:
  struct Options {
    size_t bucket_bytes = size_t(25) << 20;
    comm::Algorithm algorithm = comm::Algorithm::ring;
    comm::AllreduceOptions allreduce;
    bool overlap = true;  // false: all buckets start in wait(), after backward
  };
  // `grads` is the flat buffer to all-reduce in place (f32, f16 or bf16). The communicator is used
  // by the comm thread only while a step is in flight (between the first notify and wait's return).
  BucketSync(comm::Communicator& comm, Tensor grads, Options options);
  ~BucketSync();
  BucketSync(const BucketSync&) = delete;
  BucketSync& operator=(const BucketSync&) = delete;

  void begin_step();
  // Gradients [offset, offset+count) are complete (called from backward, on the training thread).
  void notify_ready(size_t offset, size_t count);
  // Blocks until all buckets are reduced; returns the seconds it blocked. Rethrows a comm error.
  double wait();
  const std::vector<BucketTiming>& timings() const { return timings_; }  // of the last step
  int buckets() const { return int(bounds_.size()) - 1; }
  size_t bytes_per_step() const;  // bytes each rank sends per step (ring-equivalent estimate)

 private:
  void run();
  void enqueue(int bucket);
  comm::Communicator& comm_;
  Tensor grads_;
  Options o_;
  std::vector<size_t> bounds_;      // bucket b covers [bounds_[b], bounds_[b+1])
  std::vector<size_t> ready_;       // elements marked ready per bucket
  std::vector<BucketTiming> timings_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<int> queue_;
  int done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace hpdt::train
