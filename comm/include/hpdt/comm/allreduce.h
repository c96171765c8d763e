// The all-reduce family: one entry point, one set of names (ring, tree, rhd, hier, mpi, nccl, auto).
//
//   hpdt::comm::Communicator comm(MPI_COMM_WORLD);
//   allreduce(comm, send, recv, count, DType::f32, ReduceOp::avg, Algorithm::ring);
//
// Every algorithm: any rank count and element count (0, 1, fewer than ranks, primes), f32/f16/bf16
// with f32 accumulation (2-byte inputs are widened once, reduced in f32 and narrowed once), in place
// (send == recv) or out of place, sum or average. Results are bitwise identical on every rank and from
// run to run: each element's sum is formed in a fixed order on one rank and then copied to the others.
// Buffers are host memory; device pointers are staged through host memory (GPU builds).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "hpdt/comm/communicator.h"
#include "hpdt/comm/tuning.h"
#include "hpdt/core/dtype.h"

namespace hpdt::comm {

enum class ReduceOp { sum, avg };

// "ring", "tree", "rhd", "hier", "mpi", "nccl", "auto"; throws hpdt::Error listing the names.
Algorithm parse_algorithm(std::string_view name);
std::string_view algorithm_name(Algorithm a);
ReduceOp parse_reduce_op(std::string_view name);  // "sum", "avg"
std::string_view reduce_op_name(ReduceOp op);

struct AllreduceOptions {
  size_t segment_bytes = 0;               // pipelining unit; 0: the algorithm's default
  Algorithm inter_node = Algorithm::rhd;  // hier: the flat algorithm across nodes
  const TuningTable* tuning = nullptr;    // auto: this table (else HPDT_TUNING_FILE, else built-in)
  int bucket = -1;                        // for watchdog and debug messages
};

// Default segment size of each algorithm (bytes of f32 working data).
size_t default_segment_bytes(Algorithm a);

// The algorithm `auto` resolves to for this message (bytes = count * dtype size) on this communicator.
TuningChoice resolve_auto(const Communicator& comm, size_t bytes, const AllreduceOptions& options = {});

void allreduce(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
               Algorithm algorithm, const AllreduceOptions& options = {});

// Broadcast `bytes` bytes from `root` (binomial tree over the transport).
void broadcast(Communicator& comm, void* data, size_t bytes, int root);
// Every rank contributes `bytes` bytes; `recv` receives size()*bytes bytes in rank order (ring).
void allgather(Communicator& comm, const void* send, void* recv, size_t bytes);

}  // namespace hpdt::comm
