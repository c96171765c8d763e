// GradientSync: data-parallel gradient averaging overlapped with the backward pass.
//
// The gradients live in one flat buffer (nn's ParameterArena, in reverse execution order, so the
// gradients that backward finishes first come first). The buffer is cut into buckets: contiguous
// slices of it (no copy into a fusion buffer), bucket_bytes each (default 25 MiB). During backward the
// arena calls notify_ready(offset, count) as each layer's gradients are complete; as soon as every
// element of a bucket has been notified, the bucket is all-reduced in place on the communication
// thread. wait() blocks until all buckets are done (call it before the optimizer) and rethrows any
// error from the communication thread.
//
//   GradientSync sync(comm, arena.grad_data(), arena.grad_count(), DType::f32, {});
//   sync.begin_step();
//   ... backward, with arena callback [&](size_t off, size_t n) { sync.notify_ready(off, n); } ...
//   sync.wait();
//   optimizer.step();
//
// With `tensors` (every parameter tensor's place in the buffer) buckets end on tensor boundaries, as
// in PyTorch DDP: a bucket takes whole tensors until it holds at least bucket_bytes. PowerSGD needs
// them to find the matrices. With `compression` other than none, each bucket has a Compressor (its
// error-feedback residual and PowerSGD state persist across steps); the buffer must be f32.
// overlap = false starts the first bucket only in wait(), after backward (for measuring what overlap
// hides).
//
// Buckets are reduced strictly in bucket order on every rank (a bucket completing early waits for the
// earlier ones), so ranks always run the same collective sequence whatever order their gradients
// complete in. The sync owns a duplicate of the communicator: its traffic never mixes with the caller's.
// MPI must provide MPI_THREAD_MULTIPLE if the caller makes MPI calls between begin_step() and wait().
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hpdt/comm/allreduce.h"
#include "hpdt/comm/communicator.h"
#include "hpdt/comm/compression.h"

namespace hpdt::comm {

struct GradientSyncOptions {
  size_t bucket_bytes = size_t(25) << 20;
  Algorithm algorithm = Algorithm::automatic;
  ReduceOp op = ReduceOp::avg;  // avg: gradients averaged over ranks
  AllreduceOptions allreduce;   // segment size, tuning table, inter-node algorithm
  CompressionSpec compression;  // none: the all-reduce as chosen
  std::vector<MatrixView> tensors;  // parameter tensors (rows x cols; vectors 1 x n), offsets in elements
  uint64_t seed = 0;                // QSGD rounding, PowerSGD's initial Q
  bool overlap = true;
};

struct BucketTiming {
  int bucket = 0;
  size_t offset = 0, count = 0;   // elements of the gradient buffer
  double ready_s = 0;             // when its last gradient was notified (hpdt::now_s())
  double start_s = 0, end_s = 0;  // its all-reduce on the communication thread
  uint64_t wire_bytes = 0;        // bytes this rank sent for it
  uint64_t raw_bytes = 0;         // what an uncompressed ring all-reduce of it would send
};

// The buckets GradientSync cuts a buffer of `count` elements of `element_bytes` into, as (offset, count) in
// elements: consecutive ranges of bucket_bytes (at least one element), a cut that falls inside one of `tensors`
// moved to that tensor's end. (hpdt-train's GPU paths cut theirs with it too, so that each bucket's compressor sees
// the same range whichever path runs.)
std::vector<std::pair<size_t, size_t>> gradient_buckets(size_t count, size_t element_bytes, size_t bucket_bytes,
                                                        std::vector<MatrixView> tensors);
// The matrices PowerSGD sees in the bucket [offset, offset + count): the tensors inside it, offsets relative to the
// bucket. With tensors given but none inside, one 1 x count "matrix" (nothing compressed: a bucket of vectors);
// without tensors, none (make_compressor then takes the bucket as one matrix).
std::vector<MatrixView> bucket_matrices(const std::vector<MatrixView>& tensors, size_t offset, size_t count);

class GradientSync {
 public:
  GradientSync(Communicator& comm, void* grads, size_t count, DType dtype, GradientSyncOptions options = {});
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  void begin_step();                                // before backward; the previous step must be waited
  void notify_ready(size_t offset, size_t count);  // thread-safe; throws on ranges out of bounds or notified twice
  void wait();                                      // all buckets reduced; rethrows communication errors

  size_t bucket_count() const { return buckets_.size(); }
  // Of the last finished step:
  const std::vector<BucketTiming>& timings() const { return timings_; }
  double exposed_s() const { return exposed_s_; }  // time wait() blocked: communication not hidden by backward
  double step_comm_s() const;                      // first bucket start to last bucket end
  uint64_t bytes_sent() const { return bytes_sent_; }  // this rank, last step, all buckets
  uint64_t raw_bytes() const { return raw_bytes_; }    // uncompressed ring equivalent of the same step
  const std::vector<size_t>& bucket_offsets() const { return bucket_offsets_; }  // first element of each bucket
  // Compressor state of all buckets (error feedback, PowerSGD Q), for checkpoints; empty without compression.
  std::vector<float> compression_state() const;
  void set_compression_state(const std::vector<float>& state);  // throws when the sizes do not match
  Compressor* compressor(size_t bucket) { return bucket < compressors_.size() ? compressors_[bucket].get() : nullptr; }
  const Communicator& communicator() const { return *comm_; }

 private:
  struct Bucket {
    size_t offset, count;
    size_t ready = 0;
  };
  void comm_loop();
  void reduce_bucket(size_t b);

  std::unique_ptr<Communicator> comm_;
  char* grads_;
  size_t count_;
  DType dtype_;
  GradientSyncOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_offsets_;
  std::vector<std::unique_ptr<Compressor>> compressors_;  // per bucket, when compressing
  std::vector<BucketTiming> timings_, pending_timings_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> bucket_ready_;  // per bucket: fully notified
  size_t next_ = 0;                 // next bucket the comm thread reduces
  bool in_step_ = false, stop_ = false, waiting_ = false;
  std::exception_ptr error_;
  double exposed_s_ = 0;
  uint64_t bytes_sent_ = 0, raw_bytes_ = 0;
  std::thread thread_;
};

}  // namespace hpdt::comm
