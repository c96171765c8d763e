// allreduce_device(): the device-memory all-reduce (GPU builds). Paths and semantics in allreduce.h:
// nccl -> ncclAllReduce on the communicator's NCCL stream; ring/tree/rhd/hier -> the algorithm classes
// over NcclTransport, reduced by a CUDA kernel on that stream (or staged); mpi f32 with a CUDA-aware
// MPI -> MPI_Allreduce on the device pointers; everything else -> staged through two pinned host
// buffers, pipelined in chunks, reduced on the host by the same code as allreduce().
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <climits>
#include <exception>

#include "../src/algorithms.h"
#include "../src/debug_check.h"
#include "cuda_util.h"
#include "hpdt/comm/allreduce.h"
#include "hpdt/core/check_cuda.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/check_nccl.h"
#include "hpdt/core/error.h"
#include "hpdt/kernels/accumulate.h"

namespace hpdt::comm {

namespace {

constexpr size_t kDefaultStagingBytes = size_t(4) << 20;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    default:
      break;
  }
  HPDT_FAIL("allreduce_device: dtype ", dtype_name(t), " has no NCCL reduction here (expected f32, f16 or bf16)");
}

// Two pinned host buffers of the calling thread for the staged path (grow, never shrink): collectives
// run back to back on one thread, and cudaHostAlloc is slow.
struct PinnedPair {
  void* p[2] = {nullptr, nullptr};
  size_t bytes = 0;
  PinnedPair() = default;
  PinnedPair(const PinnedPair&) = delete;
  PinnedPair& operator=(const PinnedPair&) = delete;
  ~PinnedPair() { release(); }
  void release() {
    for (void*& q : p) {
      if (q) (void)cudaFreeHost(q);  // also runs at thread exit, possibly after CUDA shut down: errors ignored
      q = nullptr;
    }
    bytes = 0;
  }
  void reserve(size_t b) {
    if (bytes >= b) return;
    release();
    for (void*& q : p) HPDT_CUDA_CHECK(cudaHostAlloc(&q, b, cudaHostAllocDefault));
    bytes = b;
  }
};

PinnedPair& pinned_buffers() {
  thread_local PinnedPair pair;
  return pair;
}

Algorithm resolved(const Communicator& comm, size_t count, DType dtype, Algorithm a, const AllreduceOptions& o) {
  return a == Algorithm::automatic ? resolve_auto_device(comm, count * dtype_size(dtype), o).algorithm : a;
}

DevicePath path_of(const Communicator& comm, Algorithm a, DType dtype, const AllreduceOptions& o) {
  if (a == Algorithm::nccl) return DevicePath::nccl;
  if (a == Algorithm::mpi && dtype == DType::f32 && mpi_cuda_aware()) return DevicePath::mpi_direct;
  const bool ours = a == Algorithm::ring || a == Algorithm::tree || a == Algorithm::rhd || a == Algorithm::hier;
  if (ours && (o.device_transport == DeviceTransport::nccl ||
               (o.device_transport == DeviceTransport::automatic && comm.gpu_per_rank())))
    return DevicePath::nccl_p2p;
  return DevicePath::staged;
}

// Makes `to` wait for the work queued on `from` so far (nothing when they are the same stream).
void join(cudaStream_t from, cudaStream_t to) {
  if (from == to) return;
  const detail::Event e;
  HPDT_CUDA_CHECK(cudaEventRecord(e.get(), from));
  HPDT_CUDA_CHECK(cudaStreamWaitEvent(to, e.get(), 0));
}

const std::string kLocalGpu = "none (waiting for this rank's GPU work)";

void via_nccl(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
              cudaStream_t caller, const OperationContext& ctx) {
  ncclComm_t nc = comm.nccl();
  const auto cs = static_cast<cudaStream_t>(comm.nccl_stream());
  const detail::DeviceScope scope(comm.nccl_device());
  join(caller, cs);  // start after the caller's queued work
  HPDT_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(dtype), op == ReduceOp::avg ? ncclAvg : ncclSum, nc, cs));
  detail::wait_stream_watched(cs, nc, comm.options().watchdog, ctx,
                              "unknown (an NCCL collective over all " + std::to_string(comm.size()) + " ranks)");
}

void mpi_direct(Communicator& comm, const void* send, void* recv, size_t count, ReduceOp op, cudaStream_t caller,
                const OperationContext& ctx) {
  const WatchdogOptions& w = comm.options().watchdog;
  detail::wait_stream_watched(caller, nullptr, w, ctx, kLocalGpu);  // the input is ready
  const bool in_place = send == recv;
  for (size_t off = 0; off < count; off += size_t(INT_MAX)) {
    const int c = int(std::min(count - off, size_t(INT_MAX)));
    float* out = static_cast<float*>(recv) + off;
    HPDT_MPI_CHECK(MPI_Allreduce(in_place ? MPI_IN_PLACE : static_cast<const float*>(send) + off, out, c, MPI_FLOAT,
                                 MPI_SUM, comm.comm()));
  }
  if (op == ReduceOp::avg) {
    kernels::cuda::divide_f32(static_cast<float*>(recv), count, float(comm.size()), caller);
    detail::wait_stream_watched(caller, nullptr, w, ctx, kLocalGpu);
  }
}

// ring/tree/rhd/hier on the GPU: the host's algorithm classes over NcclTransport (NCCL send/recv and the
// accumulate kernel, all queued on the NCCL stream in program order), with the host path's widening,
// averaging (division) and narrowing as kernels on that stream, so every element is summed in the host
// path's order and the result has its bits.
// `queued` (allreduce_device_enqueue): the transports only issue, the host waits for nothing, and the caller's stream
// waits for the result (the last join).
void via_nccl_p2p(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Algorithm a,
                  const AllreduceOptions& o, size_t segment_bytes, cudaStream_t caller, const OperationContext& ctx,
                  bool queued = false) {
  NcclTransport& t = comm.nccl_transport();  // creates the NCCL communicator on first use
  const auto cs = static_cast<cudaStream_t>(comm.nccl_stream());
  const detail::DeviceScope scope(comm.nccl_device());
  t.set_context(ctx);
  struct Queued {  // (set back when the call ends, also by an exception)
    std::vector<NcclTransport*> ts;
    ~Queued() {
      for (NcclTransport* x : ts) x->set_queued(false);
    }
  } queued_transports;
  const auto queue_on = [&](NcclTransport& x) {
    if (!queued) return;
    x.set_queued(true);
    queued_transports.ts.push_back(&x);
  };
  queue_on(t);
  join(caller, cs);
  const size_t seg_floats = std::max<size_t>(1, segment_bytes / sizeof(float));
  float* work;
  if (dtype == DType::f32) {
    work = static_cast<float*>(recv);
    if (send != recv) HPDT_CUDA_CHECK(cudaMemcpyAsync(recv, send, count * sizeof(float), cudaMemcpyDefault, cs));
  } else {
    work = t.scratch(count, 3);  // the algorithms use slots 0-2
    kernels::cuda::convert(work, DType::f32, send, dtype, count, cs);
  }
  if (a == Algorithm::hier) {
    HPDT_CHECK(o.inter_node == Algorithm::ring || o.inter_node == Algorithm::tree || o.inter_node == Algorithm::rhd,
               "allreduce_device: hier over NCCL needs a ring, tree or rhd inter-node algorithm, not ",
               algorithm_name(o.inter_node), " (or device_transport staged)");
    NcclTransport& local = comm.nccl_local_transport();
    NcclTransport* cross = comm.nccl_cross_transport();
    local.set_context(ctx);
    if (cross) cross->set_context(ctx);
    queue_on(local);
    if (cross) queue_on(*cross);
    detail::HierAllreduce(local, cross, comm.min_local_size(), o.inter_node, seg_floats).run(work, count);
  } else {
    detail::flat_allreduce(a, t, work, count, seg_floats);
  }
  if (op == ReduceOp::avg) kernels::cuda::divide_f32(work, count, float(comm.size()), cs);
  if (dtype != DType::f32) kernels::cuda::convert(recv, dtype, work, DType::f32, count, cs);
  if (!queued) detail::wait_stream_watched(cs, comm.nccl(), comm.options().watchdog, ctx, kLocalGpu);
  join(cs, caller);  // work the caller queues next sees the result (complete for the host too, unless queued)
}

// Chunk k: copy down (device -> pinned buffer k % 2) on the caller's stream and record copied[k % 2];
// wait for it, all-reduce the buffer on the host, queue the copy back (pinned -> device). The copy
// down of chunk k + 1 is queued before chunk k is reduced, so it overlaps the reduction; it reuses the
// buffer of chunk k - 1, whose copy back was queued earlier on the same stream and so has finished
// before the copy down starts (stream order).
void staged(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Algorithm a,
            const AllreduceOptions& o, size_t segment_bytes, cudaStream_t s, const OperationContext& ctx) {
  const WatchdogOptions& w = comm.options().watchdog;
  const size_t es = dtype_size(dtype);
  const size_t chunk =
      std::min(count, std::max<size_t>(1, (o.staging_bytes ? o.staging_bytes : kDefaultStagingBytes) / es));
  const size_t chunks = (count + chunk - 1) / chunk;
  PinnedPair& pin = pinned_buffers();
  pin.reserve(chunk * es);
  const detail::Event copied[2];
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);
  auto len = [&](size_t k) { return std::min(chunk, count - k * chunk); };
  auto copy_down = [&](size_t k) {
    HPDT_CUDA_CHECK(cudaMemcpyAsync(pin.p[k & 1], src + k * chunk * es, len(k) * es, cudaMemcpyDefault, s));
    HPDT_CUDA_CHECK(cudaEventRecord(copied[k & 1].get(), s));
  };
  try {
    copy_down(0);
    for (size_t k = 0; k < chunks; ++k) {
      if (k + 1 < chunks) copy_down(k + 1);
      const cudaEvent_t e = copied[k & 1].get();
      detail::wait_cuda_watched([e] { return cudaEventQuery(e); }, nullptr, w, ctx, kLocalGpu);
      detail::host_allreduce(comm, pin.p[k & 1], pin.p[k & 1], len(k), dtype, op, a, o, segment_bytes);
      HPDT_CUDA_CHECK(cudaMemcpyAsync(dst + k * chunk * es, pin.p[k & 1], len(k) * es, cudaMemcpyDefault, s));
    }
    detail::wait_stream_watched(s, nullptr, w, ctx, kLocalGpu);
  } catch (...) {
    // Copies may still be queued on the pinned buffers, which the next call reuses: let them finish.
    (void)cudaStreamSynchronize(s);
    throw;
  }
}

}  // namespace

void allreduce_device_enqueue(Communicator& comm, void* data, size_t count, DType dtype, ReduceOp op, void* stream) {
  allreduce_device_enqueue(comm, data, count, dtype, op, Algorithm::nccl, {}, stream);
}

void allreduce_device_enqueue(Communicator& comm, void* data, size_t count, DType dtype, ReduceOp op,
                              Algorithm algorithm, const AllreduceOptions& options, void* stream) {
  HPDT_CHECK(comm.gpu_per_rank(), "allreduce_device_enqueue: rank ", comm.rank(), " shares its GPU with other ranks (",
             comm.describe(), "); an NCCL communicator needs a GPU per rank");
  // (debug mode: the call checked here, on the host; a graph's replays are not checked again)
  const detail::CallPlan plan = detail::plan_call(comm, "allreduce_device_enqueue", 5, data, data, count, dtype, op,
                                                  algorithm, options, /*device_memory=*/true);
  const DevicePath path = path_of(comm, plan.algorithm, dtype, options);
  HPDT_CHECK(path == DevicePath::nccl || path == DevicePath::nccl_p2p,
             "allreduce_device_enqueue: ", algorithm_name(plan.algorithm), " of ", dtype_name(dtype), " takes the ",
             device_path_name(path),
             " path, whose host waits cannot be queued (queued: nccl, and ring/tree/rhd/hier over NCCL)");
  if (count == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (path == DevicePath::nccl) {
    ncclComm_t nc = comm.nccl();
    const detail::DeviceScope scope(comm.nccl_device());
    HPDT_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(dtype), op == ReduceOp::avg ? ncclAvg : ncclSum, nc, s));
    return;
  }
  via_nccl_p2p(comm, data, data, count, dtype, op, plan.algorithm, options, plan.segment_bytes, s, plan.context,
               /*queued=*/true);
}

void wait_enqueued(Communicator& comm, void* stream, const std::string& what, int bucket) {
  ncclComm_t nc = comm.nccl();
  const detail::DeviceScope scope(comm.nccl_device());
  detail::wait_stream_watched(static_cast<cudaStream_t>(stream), nc, comm.options().watchdog,
                              OperationContext{what, bucket},
                              "unknown (an NCCL collective over all " + std::to_string(comm.size()) + " ranks)");
}

std::string_view device_path_name(DevicePath p) {
  switch (p) {
    case DevicePath::nccl:
      return "nccl";
    case DevicePath::nccl_p2p:
      return "nccl-p2p";
    case DevicePath::mpi_direct:
      return "mpi-direct";
    case DevicePath::staged:
      return "staged";
  }
  return "?";
}

DevicePath device_allreduce_path(const Communicator& comm, size_t count, DType dtype, Algorithm algorithm,
                                 const AllreduceOptions& options) {
  return path_of(comm, resolved(comm, count, dtype, algorithm, options), dtype, options);
}

void allreduce_device(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                      Algorithm algorithm, const AllreduceOptions& options, void* stream) {
  const detail::CallPlan plan = detail::plan_call(comm, "allreduce_device", 4, send, recv, count, dtype, op, algorithm,
                                                  options, /*device_memory=*/true);
  if (count == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (path_of(comm, plan.algorithm, dtype, options)) {
    case DevicePath::nccl: {
      NcclTransport& t = comm.nccl_transport();  // creates the NCCL communicator on first use
      t.set_context(plan.context);
      via_nccl(comm, send, recv, count, dtype, op, s, plan.context);
      return;
    }
    case DevicePath::nccl_p2p:
      via_nccl_p2p(comm, send, recv, count, dtype, op, plan.algorithm, options, plan.segment_bytes, s, plan.context);
      return;
    case DevicePath::mpi_direct:
      mpi_direct(comm, send, recv, count, op, s, plan.context);
      return;
    case DevicePath::staged:
      staged(comm, send, recv, count, dtype, op, plan.algorithm, options, plan.segment_bytes, s, plan.context);
      return;
  }
}

}  // namespace hpdt::comm
