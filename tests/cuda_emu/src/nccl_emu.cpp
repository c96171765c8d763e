// The emulator's NCCL over MPI (semantics and limits in include/nccl.h). Every call checks its arguments as
// NCCL does and returns ncclInvalidArgument / ncclInvalidUsage with a message for ncclGetLastError.
#include <mpi.h>
#include <nccl.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hpdt/core/float16.h"
#include "internal.h"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
};

namespace {

thread_local std::string last_error;

ncclResult_t fail(ncclResult_t r, std::string msg) {
  last_error = std::move(msg);
  return r;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

struct P2p {
  void* data;
  size_t bytes;
  int peer;
  bool recv;
  ncclComm_t comm;
};
thread_local int group_depth = 0;
thread_local std::vector<P2p> group_ops;
// The open group's send/recv queued on a stream this thread captures (all of the group's, on that one stream) or on
// none: the group is kept for the graph and runs, as one group, at each of its launches.
thread_local cudaStream_t group_capture = nullptr;
thread_local bool group_outside_capture = false;

double timeout_s() {
  const char* e = std::getenv("CUDA_EMU_NCCL_TIMEOUT_S");
  return e && *e ? std::atof(e) : 60.0;
}

// Posts every operation (split below MPI's int count), then polls until all are complete or the timeout.
ncclResult_t run_ops(const std::vector<P2p>& ops) {
  std::vector<MPI_Request> reqs;
  constexpr size_t kPiece = size_t(1) << 30;
  for (const P2p& op : ops) {
    char* p = static_cast<char*>(op.data);
    for (size_t off = 0; off < op.bytes; off += kPiece) {  // zero bytes: nothing moves, as in NCCL
      const int n = int(std::min(kPiece, op.bytes - off));
      MPI_Request r;
      const int rc = op.recv ? MPI_Irecv(p + off, n, MPI_BYTE, op.peer, 0, op.comm->mpi, &r)
                             : MPI_Isend(p + off, n, MPI_BYTE, op.peer, 0, op.comm->mpi, &r);
      if (rc != MPI_SUCCESS) return fail(ncclSystemError, "nccl emu: MPI_Isend/Irecv failed");
      reqs.push_back(r);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const double limit = timeout_s();
  for (;;) {
    int done = 0;
    if (MPI_Testall(int(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
      return fail(ncclSystemError, "nccl emu: MPI_Testall failed");
    if (done) return ncclSuccess;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit) {
      int world = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &world);
      std::string what;
      for (const P2p& op : ops)
        what += std::string(what.empty() ? "" : ", ") + (op.recv ? "recv " : "send ") + std::to_string(op.bytes) +
                " B " + (op.recv ? "from " : "to ") + std::to_string(op.peer);
      std::fprintf(stderr,
                   "nccl emu (world rank %d): a group of point-to-point operations has not completed after %.0f s "
                   "(CUDA_EMU_NCCL_TIMEOUT_S): %s. Its peers never issued the matching operations: on a GPU this "
                   "group deadlocks too.\n",
                   world, limit, what.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 4);
    }
    sched_yield();  // ranks oversubscribe the cores in tests
  }
}

ncclResult_t p2p(void* data, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, bool recv) {
  if (!comm) return fail(ncclInvalidArgument, "nccl emu: null communicator");
  if (type_size(t) == 0) return fail(ncclInvalidArgument, "nccl emu: unknown data type");
  if (peer < 0 || peer >= comm->size)
    return fail(ncclInvalidArgument, "nccl emu: peer " + std::to_string(peer) + " outside [0, " +
                                          std::to_string(comm->size) + ")");
  if (count && !data) return fail(ncclInvalidArgument, "nccl emu: null buffer");
  P2p op{data, count * type_size(t), peer, recv, comm};
  if (group_depth > 0) {
    group_ops.push_back(op);
    return ncclSuccess;
  }
  return run_ops({op});
}

// f16/bf16 sums: widened to f32 (the whole message, then one MPI_Allreduce of floats), rounded once.
template <class Widen, class Narrow>
ncclResult_t reduce_16(const void* send, void* recv, size_t count, MPI_Comm c, Widen widen, Narrow narrow) {
  std::vector<float> f(count);
  const auto* s = static_cast<const uint16_t*>(send);
  for (size_t i = 0; i < count; ++i) f[i] = widen(s[i]);
  if (MPI_Allreduce(MPI_IN_PLACE, f.data(), int(count), MPI_FLOAT, MPI_SUM, c) != MPI_SUCCESS)
    return fail(ncclSystemError, "nccl emu: MPI_Allreduce failed");
  auto* d = static_cast<uint16_t*>(recv);
  for (size_t i = 0; i < count; ++i) d[i] = narrow(f[i]);
  return ncclSuccess;
}

// The reduction itself (arguments checked by ncclAllReduce), now or at a graph's launch.
ncclResult_t all_reduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        ncclComm_t comm) {
  if (count == 0) return ncclSuccess;
  ncclResult_t r = ncclSuccess;
  const float scale = op == ncclAvg ? 1.0f / float(comm->size) : 1.0f;
  switch (datatype) {
    case ncclFloat32: {
      const void* in = sendbuff == recvbuff ? MPI_IN_PLACE : sendbuff;
      if (MPI_Allreduce(in, recvbuff, int(count), MPI_FLOAT, MPI_SUM, comm->mpi) != MPI_SUCCESS)
        return fail(ncclSystemError, "nccl emu: MPI_Allreduce failed");
      if (op == ncclAvg)
        for (size_t i = 0; i < count; ++i) static_cast<float*>(recvbuff)[i] *= scale;
      return ncclSuccess;
    }
    case ncclFloat16:
      r = reduce_16(sendbuff, recvbuff, count, comm->mpi, hpdt::f16_bits_to_f32,
                    [scale](float f) { return hpdt::f32_to_f16_bits(f * scale); });
      return r;
    case ncclBfloat16:
      r = reduce_16(sendbuff, recvbuff, count, comm->mpi, hpdt::bf16_bits_to_f32,
                    [scale](float f) { return hpdt::f32_to_bf16_bits(f * scale); });
      return r;
    default:
      return fail(ncclInvalidArgument, "nccl emu: ncclAllReduce emulates f32, f16 and bf16 only");
  }
}

// Send/recv in a capture: only inside a group (kept for the graph with it); alone they are not emulated.
ncclResult_t p2p_on(cudaStream_t stream, void* data, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                    bool recv) {
  if (cuda_emu::captures(stream)) {
    if (group_depth == 0)
      return fail(ncclInvalidUsage, std::string("nccl emu: ") + (recv ? "ncclRecv" : "ncclSend") +
                                        " outside a group in a CUDA graph capture is not emulated");
    if (group_capture && group_capture != stream)
      return fail(ncclInvalidUsage, "nccl emu: a captured send/recv group on two streams is not emulated");
    group_capture = stream;
    return p2p(data, count, datatype, peer, comm, recv);  // (in the group: recorded, not run)
  }
  if (group_depth > 0) group_outside_capture = true;
  cuda_emu::drain_stream(stream);  // (deferred streams: the collectives run at once, over MPI)
  return p2p(data, count, datatype, peer, comm, recv);
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "nccl emu: null version");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return fail(ncclInvalidArgument, "nccl emu: null id");
  std::random_device rd;
  for (size_t i = 0; i < sizeof id->internal; i += 4) {
    const uint32_t v = rd();
    std::memcpy(id->internal + i, &v, 4);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "nccl emu: ncclCommInitRank: bad arguments");
  auto* c = new ncclComm;
  int rc;
  if (nranks == 1) {
    rc = MPI_Comm_dup(MPI_COMM_SELF, &c->mpi);
  } else {
    uint32_t h = 2166136261u;  // FNV-1a of the id: the colour of this communicator's ranks
    for (char b : id.internal) h = (h ^ uint8_t(b)) * 16777619u;
    rc = MPI_Comm_split(MPI_COMM_WORLD, int(h & 0x3fffffff), rank, &c->mpi);
  }
  if (rc != MPI_SUCCESS) {
    delete c;
    return fail(ncclSystemError, "nccl emu: MPI_Comm_split failed");
  }
  MPI_Comm_rank(c->mpi, &c->rank);
  MPI_Comm_size(c->mpi, &c->size);
  if (c->size != nranks || c->rank != rank) {
    const std::string m = "nccl emu: ncclCommInitRank(nranks " + std::to_string(nranks) + ", rank " +
                          std::to_string(rank) + ") found " + std::to_string(c->size) +
                          " ranks with this id (every world rank must create a communicator at the same time)";
    MPI_Comm_free(&c->mpi);
    delete c;
    return fail(ncclInvalidUsage, m);
  }
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  if (!comm || !newcomm) return fail(ncclInvalidArgument, "nccl emu: ncclCommSplit: null communicator");
  MPI_Comm out;
  if (MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &out) != MPI_SUCCESS)
    return fail(ncclSystemError, "nccl emu: MPI_Comm_split failed");
  if (out == MPI_COMM_NULL) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  auto* c = new ncclComm;
  c->mpi = out;
  MPI_Comm_rank(out, &c->rank);
  MPI_Comm_size(out, &c->size);
  *newcomm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return fail(ncclInvalidArgument, "nccl emu: ncclCommCount: null argument");
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return fail(ncclInvalidArgument, "nccl emu: ncclCommUserRank: null argument");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return fail(ncclInvalidArgument, "nccl emu: ncclCommCuDevice: null argument");
  *device = 0;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!comm || !asyncError) return fail(ncclInvalidArgument, "nccl emu: ncclCommGetAsyncError: null argument");
  *asyncError = ncclSuccess;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(ncclInvalidUsage, "nccl emu: ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<P2p> ops;
  ops.swap(group_ops);
  const cudaStream_t captured = group_capture;
  const bool mixed = captured && group_outside_capture;
  group_capture = nullptr;
  group_outside_capture = false;
  if (mixed)
    return fail(ncclInvalidUsage, "nccl emu: a group of send/recv partly in a CUDA graph capture is not emulated");
  if (captured && cuda_emu::capture_collective(captured, [ops] {
        if (run_ops(ops) != ncclSuccess) {
          std::fprintf(stderr, "nccl emu: a send/recv group in a CUDA graph: %s\n", last_error.c_str());
          cuda_emu::set_last_error(cudaErrorLaunchFailure);
        }
      }))
    return ncclSuccess;
  return run_ops(ops);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return p2p_on(stream, const_cast<void*>(sendbuff), count, datatype, peer, comm, false);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return p2p_on(stream, recvbuff, count, datatype, peer, comm, true);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (!comm) return fail(ncclInvalidArgument, "nccl emu: null communicator");
  if (op != ncclSum && op != ncclAvg)
    return fail(ncclInvalidArgument, "nccl emu: only ncclSum and ncclAvg are emulated");
  if (count > size_t(INT32_MAX)) return fail(ncclInvalidArgument, "nccl emu: count above 2^31 - 1");
  if (datatype != ncclFloat32 && datatype != ncclFloat16 && datatype != ncclBfloat16)
    return fail(ncclInvalidArgument, "nccl emu: ncclAllReduce emulates f32, f16 and bf16 only");
  if (group_depth > 0 && cuda_emu::captures(stream))
    return fail(ncclInvalidUsage, "nccl emu: a collective inside a group, in a CUDA graph capture, is not emulated");
  // In a capture, kept for the graph: it runs at each launch (a failure there names itself and fails the launch).
  if (cuda_emu::capture_collective(stream, [=] {
        if (all_reduce(sendbuff, recvbuff, count, datatype, op, comm) != ncclSuccess) {
          std::fprintf(stderr, "nccl emu: ncclAllReduce in a CUDA graph: %s\n", last_error.c_str());
          cuda_emu::set_last_error(cudaErrorLaunchFailure);
        }
      }))
    return ncclSuccess;
  cuda_emu::drain_stream(stream);
  return all_reduce(sendbuff, recvbuff, count, datatype, op, comm);
}

}  // extern "C"
