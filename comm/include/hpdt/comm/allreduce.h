// The all-reduce family: one entry point, one set of names (ring, tree, rhd, hier, mpi, nccl, shm, auto).
//
//   hpdt::comm::Communicator comm(MPI_COMM_WORLD);
//   allreduce(comm, send, recv, count, DType::f32, ReduceOp::avg, Algorithm::ring);
//
// Every algorithm: any rank count and element count (0, 1, fewer than ranks, primes), f32/f16/bf16
// with f32 accumulation (2-byte inputs are widened once, reduced in f32 and narrowed once), in place
// (send == recv) or out of place, sum or average. Results are bitwise identical on every rank and from
// run to run: each element's sum is formed in a fixed order on one rank and then copied to the others.
// allreduce() takes host memory; allreduce_device() (GPU builds) takes device memory and adds `nccl`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "hpdt/comm/communicator.h"
#include "hpdt/comm/tuning.h"
#include "hpdt/core/dtype.h"

namespace hpdt::comm {

enum class ReduceOp { sum, avg };

// "ring", "tree", "rhd", "hier", "mpi", "nccl", "shm", "auto"; throws hpdt::Error listing the names.
Algorithm parse_algorithm(std::string_view name);
std::string_view algorithm_name(Algorithm a);
ReduceOp parse_reduce_op(std::string_view name);  // "sum", "avg"
std::string_view reduce_op_name(ReduceOp op);

// hier: how the ranks of a node reduce-scatter and all-gather. shm: through the node's shared window
// (the `shm` algorithm's segment; copies in shared memory, no messages); p2p: direct messages over the
// node-local transport. Both give the same placement of shards; their sums differ in order (shm adds
// the local ranks in rank order, p2p the own part first).
enum class IntraNode { shm, p2p };
std::string_view intra_node_name(IntraNode m);
IntraNode parse_intra_node(std::string_view name);  // "shm" or "p2p"; throws hpdt::Error otherwise

// allreduce_device: where ring, tree, rhd and hier run on device memory. nccl: on the GPU, over
// NcclTransport (NCCL point-to-point; the reduction a CUDA kernel on the communicator's NCCL stream);
// staged: on the host, through pinned buffers; automatic: nccl when every rank has a GPU of its own
// (Communicator::gpu_per_rank(); an NCCL communicator cannot hold two ranks of one GPU), else staged.
enum class DeviceTransport { automatic, staged, nccl };
std::string_view device_transport_name(DeviceTransport d);  // "auto", "staged", "nccl"
DeviceTransport parse_device_transport(std::string_view name);

struct AllreduceOptions {
  size_t segment_bytes = 0;               // pipelining unit; 0: the algorithm's default
  Algorithm inter_node = Algorithm::rhd;  // hier: the flat algorithm across nodes
  IntraNode intra_node = IntraNode::shm;  // hier: the phases inside each node
  const TuningTable* tuning = nullptr;    // auto: this table (else HPDT_TUNING_FILE, else built-in)
  int bucket = -1;                        // for watchdog and debug messages
  size_t staging_bytes = 0;               // allreduce_device, staged path: pipelining chunk; 0: 4 MiB
  DeviceTransport device_transport = DeviceTransport::automatic;  // allreduce_device: ring/tree/rhd/hier
};

// What one rank sends in a ring all-reduce of `bytes` bytes over `ranks` ranks: 2(p-1)/p bytes. The
// yardstick for wire bytes the transports cannot see (MPI_Allreduce, shm) and for compression ratios.
inline uint64_t ring_allreduce_bytes(int ranks, size_t bytes) {
  return ranks > 1 ? uint64_t(2.0 * (ranks - 1) / ranks * double(bytes)) : 0;
}

// Default segment size of each algorithm (bytes of f32 working data).
size_t default_segment_bytes(Algorithm a);

// The algorithm `auto` resolves to for this message of host memory (bytes = count * dtype size) on this
// communicator: the tuning table's entry (options.tuning, else HPDT_TUNING_FILE's), else the built-in choice
// (TuningTable::fallback). An entry naming nccl, which reduces device memory only (a table measured with
// hpdt-allreduce-perf --device cuda), gives way to the built-in choice; rank 0 logs a warning once.
TuningChoice resolve_auto(const Communicator& comm, size_t bytes, const AllreduceOptions& options = {});

void allreduce(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
               Algorithm algorithm, const AllreduceOptions& options = {});

// Whether MPI accepts device pointers: HPDT_MPI_CUDA_AWARE=0/1 when set (1 asserts it, for an MPI
// without the query; a wrong 1 crashes), else Open MPI's MPIX_Query_cuda_support() where <mpi-ext.h>
// has the CUDA extension, else false. Call after MPI_Init.
bool mpi_cuda_aware();

#if HPDT_HAVE_CUDA
// Device-memory all-reduce (GPU builds). `send`/`recv` are device memory of this rank's GPU; `stream`
// (a cudaStream_t; nullptr: the legacy default stream) is the caller's stream: the reduction starts
// after the work queued on it before the call, and the result is complete in `recv` when the call
// returns (every path is blocking for the host, under the watchdog). Paths:
//   nccl                         ncclAllReduce (ncclSum / ncclAvg) on comm.nccl_stream() of the
//                                communicator's NCCL communicator (created on first use, collective);
//                                f16/bf16 are reduced by NCCL in their own type, in NCCL's order (not
//                                the f32-accumulated, bitwise-reproducible result of the others).
//   ring, tree, rhd, hier        (options.device_transport nccl, or auto with a GPU per rank) the same
//     on the GPU ("nccl-p2p")    algorithm classes as allreduce(), over NcclTransport: NCCL send/recv on
//                                comm.nccl_stream(), the reduction a CUDA kernel queued there, f16/bf16
//                                widened to f32 on the GPU first. Sums in the same order as on the host,
//                                so the result is bitwise equal to allreduce() of the same data. hier
//                                runs its intra-node phases as messages (p2p) over NCCL communicators
//                                split per node and across nodes; its inter-node algorithm must be ring,
//                                tree or rhd.
//   mpi, f32, CUDA-aware MPI     MPI_Allreduce directly on the device pointers (mpi_cuda_aware()).
//   everything else              staged: chunks of options.staging_bytes (default 4 MiB) are copied to
//                                two pinned host buffers on `stream` and all-reduced on the host by the
//                                same code as allreduce(), while the next chunk is copied down and the
//                                previous one copied back (pipelined): mpi (not CUDA-aware), shm, and
//                                ring/tree/rhd/hier with device_transport staged (or auto without a GPU
//                                per rank).
// The staged result is the same on every rank, and bitwise equal to allreduce() of the same data when
// one chunk holds the whole message (with several chunks each chunk is its own all-reduce, so the
// summation order of an element may differ from a one-chunk call on inexact inputs).
void allreduce_device(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                      Algorithm algorithm, const AllreduceOptions& options = {}, void* stream = nullptr);

// In-place all-reduce of device memory queued on the caller's `stream` (a cudaStream_t): ncclAllReduce on that
// stream itself, and the host does not wait. The result is there for the work queued after it on `stream`, and a
// CUDA graph capturing `stream` captures it. For small messages that must stay in the stream's order (SyncBN's
// batch statistics). Needs a GPU per rank (gpu_per_rank(); throws naming the rank otherwise) and the NCCL
// communicator made before any capture (comm.nccl(), collective). NCCL's summation order; f32, f16 or bf16.
// No watchdog (the host does not wait): a peer that never joins leaves the stream unfinished (wait_enqueued below
// is the watched wait). Debug mode (debug_checks) checks the call on the host, as a distinct collective.
void allreduce_device_enqueue(Communicator& comm, void* data, size_t count, DType dtype, ReduceOp op, void* stream);
// The same, the algorithm chosen as allreduce_device's (auto resolved for device memory): nccl as above, or
// ring/tree/rhd/hier over NCCL send/recv (the nccl-p2p path: allreduce_device's bits, the f32 sums in the host path's
// order), queued: the algorithm's groups and reductions on comm.nccl_stream() after the work queued on `stream`, which
// then waits for them; the host issues each step's group and waits for none. A graph capturing `stream` captures them
// (the transports' scratch must be sized by an eager call of that size first). The staged and mpi-direct paths need the
// host and are refused. Debug mode checks the call (with its algorithm).
void allreduce_device_enqueue(Communicator& comm, void* data, size_t count, DType dtype, ReduceOp op,
                              Algorithm algorithm, const AllreduceOptions& options, void* stream);
// The host waits until the work queued on `stream` so far is done, under comm's watchdog: NCCL's asynchronous errors
// of comm.nccl() throw, and past the timeout the watchdog's message names `what` (and `bucket`, >= 0) and aborts or
// throws as its options say. For streams that hold allreduce_device_enqueue's all-reduces (GPU builds).
void wait_enqueued(Communicator& comm, void* stream, const std::string& what, int bucket = -1);

enum class DevicePath { nccl, nccl_p2p, mpi_direct, staged };
std::string_view device_path_name(DevicePath p);  // "nccl", "nccl-p2p", "mpi-direct", "staged"
// The path allreduce_device takes for this call (auto resolved as it would be).
DevicePath device_allreduce_path(const Communicator& comm, size_t count, DType dtype, Algorithm algorithm,
                                 const AllreduceOptions& options = {});
// The algorithm `auto` resolves to for a message of device memory (allreduce_device): the tuning table's entry,
// whatever it names (but nccl where ranks share a GPU); without one, nccl when every rank has a GPU of its own
// (NCCL picks its own algorithm and protocol per size and topology), else the built-in choice of host memory
// (staged).
TuningChoice resolve_auto_device(const Communicator& comm, size_t bytes, const AllreduceOptions& options = {});
#endif

// Broadcast `bytes` bytes from `root` (binomial tree over the transport).
void broadcast(Communicator& comm, void* data, size_t bytes, int root);
// Every rank contributes `bytes` bytes; `recv` receives size()*bytes bytes in rank order (ring).
void allgather(Communicator& comm, const void* send, void* recv, size_t bytes);

}  // namespace hpdt::comm
