// Transport: non-blocking point-to-point byte transfers between the ranks of one group, plus a wait.
// The all-reduce algorithms are written once against this interface (Gloo style); MpiTransport moves
// host memory, and GPU builds add NcclTransport for device memory over NCCL point-to-point.
//
// Every wait is guarded by the watchdog: when a transfer has not completed after the timeout, the
// error names the operation in progress (set with set_context), the bucket, and the ranks (world
// numbering) whose transfers are still outstanding, then either aborts the job (the default) or
// throws hpdt::Error (for tests and for callers that want to handle it).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#if HPDT_HAVE_CUDA
typedef struct ncclComm* ncclComm_t;
#endif

namespace hpdt::comm {

struct WatchdogOptions {
  double timeout_s = 300;  // <= 0 disables the watchdog
  enum class Action { abort, throw_error } action = Action::abort;
};

// What a transport is doing, for the watchdog's and the debug checks' messages.
struct OperationContext {
  std::string operation;  // e.g. "allreduce ring 1048576 x f32"
  int bucket = -1;        // gradient bucket index, -1 when not a bucket
  std::string describe() const;
};

class Transport {
 public:
  using Request = size_t;
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int world_rank_of(int peer) const = 0;  // for messages

  // Start a transfer of `bytes` bytes to/from `peer` (a rank of this transport's group). Matching is
  // in posting order per (peer, tag). The buffer must stay untouched until the request is waited.
  virtual Request isend(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual Request irecv(void* data, size_t bytes, int peer, int tag) = 0;
  virtual void wait(Request r) = 0;
  virtual void wait_all() = 0;  // waits for every outstanding request and forgets them

  // The memory the algorithms work in is the transport's: host memory for MpiTransport, this rank's GPU
  // for NcclTransport (the same algorithm code runs on both). accumulate: dst[i] += src[i] (f32, i < n),
  // ordered after the transfers waited for and before the transfers posted afterwards (MpiTransport: on
  // the host at once; NcclTransport: a kernel queued on its stream).
  virtual void accumulate(float* dst, const float* src, size_t n);
  // At least `floats` floats of the transport's memory for slot `slot` (0..7), kept and grown between
  // calls (MpiTransport: the calling thread's host buffers, shared by all MPI transports of the thread).
  virtual float* scratch(size_t floats, int slot);
  // Whether an algorithm may post a receive before the step whose send the peer issues next (MPI: yes).
  // NcclTransport: no. Each wait there issues everything posted so far as one NCCL group and completes
  // it, so a receive posted a step early would wait on a send the peer issues only after its own group
  // completed: every rank waits for its left neighbour, a deadlock. The ring then posts step by step.
  // A transport that says no also completes, in wait(r), every transfer issued before r.
  virtual bool posts_ahead() const { return true; }

  void set_context(OperationContext c) { context_ = std::move(c); }
  const OperationContext& context() const { return context_; }
  void set_watchdog(const WatchdogOptions& w) { watchdog_ = w; }
  const WatchdogOptions& watchdog() const { return watchdog_; }
  // Bytes this rank has posted for sending since construction (what went on the wire from here).
  uint64_t bytes_sent() const { return bytes_sent_; }

 protected:
  uint64_t bytes_sent_ = 0;
  OperationContext context_;
  WatchdogOptions watchdog_;
};

// Host memory over MPI point-to-point on a communicator this object does not own. Transfers larger
// than MPI's int count are split into pieces (matched in order).
class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank_of(int peer) const override { return world_ranks_.at(size_t(peer)); }
  MPI_Comm comm() const { return comm_; }

  Request isend(const void* data, size_t bytes, int peer, int tag) override;
  Request irecv(void* data, size_t bytes, int peer, int tag) override;
  void wait(Request r) override;
  void wait_all() override;

 private:
  struct Slot {
    std::vector<MPI_Request> reqs;
    int peer = -1;
    bool recv = false;
    bool done = false;
  };
  Request post(void* data, size_t bytes, int peer, int tag, bool recv);
  bool test(Slot& s);
  [[noreturn]] void timed_out(double waited_s);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  std::vector<Slot> slots_;
  size_t open_ = 0;  // slots not yet done
};

#if HPDT_HAVE_CUDA

// Device memory over NCCL point-to-point (GPU builds only; Communicator::nccl_transport()).
//
// Semantics:
// - isend/irecv only record the transfer. The first wait()/wait_all() after them issues every recorded
//   transfer in one ncclGroupStart/ncclGroupEnd on stream(), so a rank may post sends and receives in
//   any order without deadlocking (the group makes them progress together).
// - wait(r) waits until stream() has no pending work, so it completes r and everything issued with or
//   before it; wait_all() does the same and forgets all requests (ids restart at 0, as in MpiTransport).
//   Waiting polls cudaStreamQuery under the watchdog (same message and actions as MpiTransport; the
//   ranks named are the peers of the transfers still outstanding) and checks ncclCommGetAsyncError.
// - Matching: NCCL has no tags. Transfers between two ranks match in posting order per direction
//   whatever their tag (MpiTransport matches per (peer, tag)); the tag is accepted and ignored.
// - Buffers are device memory of this rank's GPU (or anything NCCL accepts). Data to send must be ready
//   as seen from stream(): produced by work that has completed or that was queued earlier on stream().
//   Received data is ready for the host and every stream once wait() returns.
// - Sending to oneself is allowed (NCCL supports self send/recv within a group). Zero-byte transfers
//   are accepted and move nothing.
// - After a watchdog error thrown (Action::throw_error) the transfers may still be queued on the stream
//   and the NCCL communicator may be stuck: end the job (Action::abort, the default, does).
class NcclTransport final : public Transport {
 public:
  // `comm` and `stream` (a cudaStream_t) are not owned; `device` is the CUDA device of `comm`;
  // world_ranks[i] is the world rank of NCCL rank i (for messages).
  NcclTransport(ncclComm_t comm, void* stream, int device, std::vector<int> world_ranks);
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank_of(int peer) const override { return world_ranks_.at(size_t(peer)); }
  ncclComm_t nccl() const { return comm_; }
  void* stream() const { return stream_; }
  int device() const { return device_; }
  ~NcclTransport() override;

  Request isend(const void* data, size_t bytes, int peer, int tag) override;
  Request irecv(void* data, size_t bytes, int peer, int tag) override;
  void wait(Request r) override;
  void wait_all() override;
  void accumulate(float* dst, const float* src, size_t n) override;  // a kernel on stream()
  float* scratch(size_t floats, int slot) override;                   // device memory of device()
  bool posts_ahead() const override { return false; }
  // Queued (allreduce_device_enqueue's nccl-p2p path): wait() and wait_all() issue what is posted (one group) and
  // return without the host waiting; the transfers complete in stream() order, before any work queued on it after
  // them. Then the host waits nowhere here (the caller's wait does: comm::wait_enqueued). scratch() must not grow
  // while a CUDA graph captures stream() (an allocation): size it by an eager call first.
  void set_queued(bool queued) { queued_ = queued; }

 private:
  struct Op {
    void* data;
    size_t bytes;
    int peer;
    bool recv;
  };
  Request record(void* data, size_t bytes, int peer, bool recv);
  void flush();  // issues ops_[issued_, end) in one NCCL group on stream_
  void drain();  // waits (watched) until stream_ is idle; then every issued op is complete

  ncclComm_t comm_;
  void* stream_;
  int device_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  std::vector<Op> ops_;   // every op since the last wait_all, indexed by request id
  size_t issued_ = 0;     // ops_[0, issued_) are queued on stream_
  size_t completed_ = 0;  // ops_[0, completed_) are known to be complete (queued_: in stream order)
  bool queued_ = false;
  struct Scratch {
    float* p = nullptr;
    size_t floats = 0;
  };
  Scratch scratch_[8];
};

#endif

}  // namespace hpdt::comm
