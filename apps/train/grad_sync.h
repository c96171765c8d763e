// Data-parallel gradient averaging for hpdt-train on either device, behind one interface for the step
// loop (begin_step, notify_ready from the arena's grad-ready callback, wait before the optimizer):
//
//   cpu                 comm::GradientSync on the arena's gradient buffer itself (what it always was).
//   cuda, one rank      --algo auto (the default) without --compress on a single rank: nothing to average, so
//                       nothing is done (no host mirror, no stager thread, no wait). Path name "none (one
//                       rank)". An algorithm named on the command line still runs, on one rank as on many.
//   cuda, ours on GPU   ring, tree, rhd, hier uncompressed when every rank has a GPU of its own: as nccl
//                       below, with comm::allreduce_device running that algorithm on the GPU over NCCL
//                       send/recv (comm's nccl-p2p path). Path name "nccl-p2p".
//   cuda, auto          --algo auto (the default) uncompressed on several ranks, each with a GPU of its own: as
//                       nccl below, each bucket's algorithm resolved for device memory by its size
//                       (comm::resolve_auto_device): the tuning file's entry (nccl: ncclAllReduce; ring..hier:
//                       nccl-p2p; mpi, shm: staged through the host, or MPI on device pointers where it is
//                       CUDA-aware), and without a file ncclAllReduce. Path name: the distinct paths in bucket
//                       order ("nccl" without a tuning file; "nccl-p2p + nccl" where a file says ring for the
//                       small buckets and nccl for the large). Until 2026-12-01 auto took the host mirror.
//   cuda, compressed    --compress (any method) with any host algorithm: buckets cut as GradientSync cuts them (and
//                       PowerSGD's matrices: comm::bucket_matrices), each compressed on the device
//                       (comm::DeviceCompressor: the host compressors' messages and results, bit for bit) on the
//                       stager thread as soon as it is complete; only the messages (fp16/bf16: the 16-bit values;
//                       PowerSGD: P, Q and the values outside the matrices) cross to the host. Path name "device
//                       compression" (HPDT_DEVICE_COMPRESSION=off: the host mirror below).
//   cuda, host algos    ring, tree, rhd, hier, auto (ranks sharing a GPU), mpi, shm:
//                       GradientSync on a pinned host mirror of the device gradients. A ready slice is copied down on a
//                       copy stream once the compute stream has reached it (event), and a stager thread
//                       hands it to GradientSync when the copy is done, so buckets are still reduced
//                       while backward runs. wait() queues the copy of the averaged mirror back up on the
//                       compute stream (the optimizer's kernels follow it in stream order).
//   cuda, nccl          buckets of whole tensors (the same cut as GradientSync) reduced in place in device
//                       memory by ncclAllReduce (average); no compression.
//   queued              (since 2026-12-02) nccl and nccl-p2p, every bucket by one of them and a GPU per rank: no
//                       stager thread. notify_ready, on the training thread, queues each bucket's all-reduce as
//                       soon as it is complete in the work queued so far: on copy_stream_, after an event of the
//                       compute stream (comm::allreduce_device_enqueue: ncclAllReduce, or our algorithm's send/recv
//                       groups and reductions on the NCCL stream, issued without a host wait); wait() makes the
//                       compute stream wait for them; the host waits only in finish_step, under comm's watchdog. A
//                       CUDA graph that captures the backward and wait() holds the all-reduces (begin_capture,
//                       launched_in_graph). HPDT_GRAD_SYNC_QUEUED=off, or a staged bucket of auto's in the mix:
//                       comm::allreduce_device on the stager thread, which waits for each bucket on the host.
//
// GradientSync itself takes host memory only; the mirror is the stop-gap until comm grows a device
// mode (per-bucket ready events + allreduce_device), which would make both CUDA paths one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hpdt/comm/allreduce.h"
#include "hpdt/comm/communicator.h"
#include "hpdt/comm/compression.h"
#include "hpdt/comm/gradient_sync.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"

namespace hpdt::train {

class GradSync {
 public:
  // `grads`: the flat gradient buffer to average in place (a CPU tensor, or device memory on
  // `compute`'s device); `compute`: the stream backward runs on (the CPU stream for CPU gradients).
  GradSync(comm::Communicator& comm, const Tensor& grads, comm::GradientSyncOptions options, const Stream& compute);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  void begin_step();
  // Called on the training thread when [offset, offset + count) is complete in the work queued so far.
  void notify_ready(size_t offset, size_t count);
  // All buckets averaged; on CUDA the result is in `grads` for work queued on `compute` after this call.
  void wait();
  // The queued path (queued()): the calls from here to wait() are being captured into a CUDA graph (no timing events
  // among them); launched_in_graph(): this step's graph, which holds them, was launched, so wait() queues nothing.
  void begin_capture();
  void launched_in_graph();
  // After the step's work is queued (the optimizer's too): the queued path waits here for the compute stream, under
  // comm's watchdog (a peer that never joins an all-reduce is named, not waited for forever), and reads the buckets'
  // timings; the other paths do nothing.
  void finish_step();
  bool queued() const { return queued_; }

  // "host" (CPU gradients), "none (one rank)", "host mirror", "device compression", "nccl" or "nccl-p2p" (with
  // auto, the device paths its buckets take, joined by " + ").
  const std::string& path() const { return path_; }
  bool averages() const { return !one_rank_; }  // false: one rank, --algo auto, lossless (nothing to average)
  size_t bucket_count() const;
  // The first gradient element of each bucket, ascending (backward fills the buffer front to back); empty on one rank.
  std::vector<size_t> bucket_offsets() const;
  // The last step's buckets (the queued path: after finish_step; a graph's replays have no times, only bytes).
  const std::vector<comm::BucketTiming>& timings() const;
  double exposed_s() const;
  uint64_t bytes_sent() const;
  uint64_t raw_bytes() const;
  std::vector<float> compression_state() const;
  void set_compression_state(const std::vector<float>& state);

 private:
  struct Slice {
    Event done;  // the slice is complete where the stager reads it (mirror: copied down; nccl: computed)
    size_t offset, count;
  };
  struct Bucket {
    size_t offset, count, ready = 0;
    uint64_t wire_bytes = 0, raw_bytes = 0;  // the queued path: its all-reduce's, as last queued (a graph replays it)
    comm::Algorithm algo = comm::Algorithm::nccl;    // device paths: what reduces it (auto resolved)
#if HPDT_HAVE_CUDA
    comm::DevicePath path = comm::DevicePath::nccl;  // ... and where (comm::device_allreduce_path; GPU builds)
#endif
  };
  static bool device_compression_wanted(const comm::CompressionSpec& spec, comm::Algorithm algo);
  void cut_buckets(size_t n);
  comm::AllreduceOptions bucket_options(int b) const;
  void stager_loop();
  void reduce_device_bucket(size_t b);
  void queue_due_buckets(bool all);
  void queue_bucket(size_t b);
#if HPDT_HAVE_CUDA
  uint64_t p2p_bytes_sent(const Bucket& k) const;
#endif

  std::string path_;
  bool one_rank_ = false;  // path "none (one rank)": notify_ready and wait do nothing
  Tensor grads_;
  Stream compute_;
  comm::GradientSyncOptions options_;
  std::unique_ptr<comm::GradientSync> host_;  // cpu and host mirror
  Tensor mirror_;                             // host mirror: pinned, same dtype and size as grads_
  Stream copy_stream_;                        // host mirror: device -> host copies
  // nccl and device compression: a duplicate communicator, its traffic apart from the caller's
  std::unique_ptr<comm::Communicator> reduce_comm_;
  std::vector<std::unique_ptr<comm::DeviceCompressor>> compressors_;  // device compression: one a bucket
  std::vector<Bucket> buckets_;                                       // nccl and device compression
  std::vector<size_t> bucket_offsets_;
  size_t next_bucket_ = 0;  // the next bucket to reduce (strict order on every rank)
  std::vector<comm::BucketTiming> timings_, pending_;
  double exposed_s_ = 0;
  uint64_t bytes_sent_ = 0, raw_bytes_ = 0;

  // The queued path: no stager thread; the events of each bucket (ready on the compute stream, the all-reduce's start
  // and end on copy_stream_; timing ones, left out in a capture), `origin` on the compute stream at begin_step.
  struct Marks {
    Event ready, start, end;
  };
  bool queued_ = false, capturing_ = false, in_graph_ = false, timed_ = false;
  std::vector<Marks> marks_;
  Event origin_, fork_, join_;
  double origin_host_s_ = 0;

  // The stager thread (cuda paths but the queued one).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Slice> queue_;
  size_t in_flight_ = 0;  // slices taken from the queue and not yet handed on
  bool waiting_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread stager_;
};

}  // namespace hpdt::train
