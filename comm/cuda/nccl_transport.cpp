// NcclTransport (device memory over NCCL point-to-point) and the watched stream wait it shares with
// allreduce_device. Semantics in transport.h.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "cuda_util.h"
#include "hpdt/comm/transport.h"
#include "hpdt/core/check_cuda.h"
#include "hpdt/core/check_nccl.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/kernels/accumulate.h"

namespace hpdt::comm {

namespace detail {

void wait_cuda_watched(const std::function<cudaError_t()>& query, ncclComm_t nccl, const WatchdogOptions& w,
                       const OperationContext& what, const std::string& not_arrived) {
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned spin = 0;; ++spin) {
    if (hpdt::detail::cuda_query_done(query(), "cudaStreamQuery / cudaEventQuery")) return;
    if ((spin & 63) != 63) continue;
    if (nccl) {
      ncclResult_t async = ncclSuccess;
      HPDT_NCCL_CHECK(ncclCommGetAsyncError(nccl, &async));
      HPDT_NCCL_CHECK(async);
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (w.timeout_s > 0 && waited > w.timeout_s) {
      std::ostringstream os;
      os << "watchdog: " << what.describe() << " has not finished after " << waited << " s (timeout " << w.timeout_s
         << " s); ranks not arrived: " << not_arrived;
      if (w.action == WatchdogOptions::Action::abort) {
        HPDT_LOG(error) << os.str() << "; aborting the job";
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
      throw Error(os.str());
    }
    sched_yield();
  }
}

DeviceScope::DeviceScope(int device) {
  HPDT_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) HPDT_CUDA_CHECK(cudaSetDevice(device));
}

DeviceScope::~DeviceScope() {
  int now = previous_;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_)
    (void)cudaSetDevice(previous_);  // destructors do not throw
}

Event::Event() { HPDT_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }

Event::~Event() {
  if (e_) (void)cudaEventDestroy(e_);  // destructors do not throw
}

}  // namespace detail

NcclTransport::NcclTransport(ncclComm_t comm, void* stream, int device, std::vector<int> world_ranks)
    : comm_(comm), stream_(stream), device_(device), world_ranks_(std::move(world_ranks)) {
  HPDT_CHECK(comm_ && stream_, "NcclTransport: null NCCL communicator or stream");
  HPDT_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  HPDT_NCCL_CHECK(ncclCommCount(comm_, &size_));
  HPDT_CHECK(world_ranks_.size() == size_t(size_), "NcclTransport: ", world_ranks_.size(),
             " world ranks for an NCCL communicator of ", size_, " ranks");
}

NcclTransport::~NcclTransport() {
  for (Scratch& b : scratch_)
    if (b.p) (void)cudaFree(b.p);  // destructors do not throw
}

void NcclTransport::accumulate(float* dst, const float* src, size_t n) {
  if (n == 0) return;
  const detail::DeviceScope scope(device_);
  kernels::cuda::accumulate_f32(dst, src, n, stream_);
}

float* NcclTransport::scratch(size_t floats, int slot) {
  HPDT_CHECK(slot >= 0 && slot < 8, "NCCL transport scratch: slot ", slot, " out of range [0, 8)");
  Scratch& b = scratch_[slot];
  if (b.floats < floats) {
    const detail::DeviceScope scope(device_);
    // The old buffer may still be read or written by work queued on the stream: let it finish first.
    HPDT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
    if (b.p) HPDT_CUDA_CHECK(cudaFree(b.p));
    b.p = nullptr;
    b.floats = 0;
    HPDT_CUDA_CHECK(cudaMalloc(&b.p, floats * sizeof(float)));
    b.floats = floats;
  }
  return b.p;
}

Transport::Request NcclTransport::record(void* data, size_t bytes, int peer, bool recv) {
  HPDT_CHECK(peer >= 0 && peer < size_, "NCCL transport: peer ", peer, " out of range [0, ", size_, ")");
  HPDT_CHECK(bytes == 0 || data, "NCCL transport: null buffer for ", bytes, " bytes");
  ops_.push_back(Op{data, bytes, peer, recv});
  return ops_.size() - 1;
}

Transport::Request NcclTransport::isend(const void* data, size_t bytes, int peer, int /*tag*/) {
  const Request r = record(const_cast<void*>(data), bytes, peer, false);
  bytes_sent_ += bytes;
  return r;
}

Transport::Request NcclTransport::irecv(void* data, size_t bytes, int peer, int /*tag*/) {
  return record(data, bytes, peer, true);
}

void NcclTransport::flush() {
  if (issued_ == ops_.size()) return;
  const detail::DeviceScope scope(device_);
  const auto s = static_cast<cudaStream_t>(stream_);
  HPDT_NCCL_CHECK(ncclGroupStart());
  // The first failure stops issuing; the group is always closed before the failure is reported.
  ncclResult_t first = ncclSuccess;
  const char* what = "";
  for (size_t i = issued_; i < ops_.size() && first == ncclSuccess; ++i) {
    const Op& op = ops_[i];
    if (op.bytes == 0) continue;
    const ncclResult_t r = op.recv ? ncclRecv(op.data, op.bytes, ncclInt8, op.peer, comm_, s)
                                   : ncclSend(op.data, op.bytes, ncclInt8, op.peer, comm_, s);
    if (r != ncclSuccess && r != ncclInProgress) {
      first = r;
      what = op.recv ? "ncclRecv" : "ncclSend";
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  issued_ = ops_.size();
  if (first != ncclSuccess) ::hpdt::detail::nccl_failed(first, what, std::source_location::current());
  HPDT_NCCL_CHECK(end);
}

void NcclTransport::drain() {
  std::vector<int> peers;
  for (size_t i = completed_; i < issued_; ++i)
    if (ops_[i].bytes) peers.push_back(world_rank_of(ops_[i].peer));
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  std::ostringstream who;
  for (int r : peers) who << r << ' ';
  who << "(world ranks)";
  detail::wait_stream_watched(static_cast<cudaStream_t>(stream_), comm_, watchdog_, context_, who.str());
  completed_ = issued_;
}

void NcclTransport::wait(Request r) {
  HPDT_CHECK(r < ops_.size(), "NCCL transport: unknown request ", r);
  if (r < completed_) return;
  flush();
  if (queued_)
    completed_ = issued_;  // (complete for the work queued on the stream after them)
  else
    drain();
}

void NcclTransport::wait_all() {
  flush();
  if (!queued_) drain();
  ops_.clear();
  issued_ = completed_ = 0;
}

}  // namespace hpdt::comm
