// The algorithms behind allreduce(), each a small class over a Transport that sums an f32 buffer in
// place (Gloo style: no global state; the entry point in allreduce.cpp widens/narrows dtypes, applies
// averaging and picks the class). Private to comm/.
#pragma once

#include <cstddef>

#include <string_view>

#include "hpdt/comm/allreduce.h"
#include "hpdt/comm/communicator.h"
#include "hpdt/comm/tuning.h"
#include "hpdt/comm/transport.h"

namespace hpdt::comm::detail {

// Reusable scratch memory of the calling thread (grows, never shrinks): collectives run back to back
// on the same thread, and fresh allocations would page-fault on every call.
float* scratch(size_t floats, int slot);

// Reduce-scatter + all-gather around the ring 0 -> 1 -> ... -> p-1 -> 0. Each chunk travels in segments
// and every received segment is forwarded as soon as it is reduced (pipelined across steps).
class RingAllreduce {
 public:
  RingAllreduce(Transport& t, size_t segment_floats) : t_(t), seg_(segment_floats ? segment_floats : 1) {}
  void run(float* data, size_t n);

 private:
  Transport& t_;
  size_t seg_;
};

// Pipelined binary tree (heap numbering, root 0): segments are reduced up the tree and broadcast down;
// a node adds its children's segments to its own in a fixed order (left, then right).
class TreeAllreduce {
 public:
  TreeAllreduce(Transport& t, size_t segment_floats) : t_(t), seg_(segment_floats ? segment_floats : 1) {}
  void run(float* data, size_t n);

 private:
  Transport& t_;
  size_t seg_;
};

// Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather among the largest
// power of two p2 <= p ranks; the first 2(p-p2) ranks pair up first (even sends to odd) and the even
// ones get the result back at the end.
class RhdAllreduce {
 public:
  explicit RhdAllreduce(Transport& t) : t_(t) {}
  void run(float* data, size_t n);

 private:
  Transport& t_;
};

// Hierarchical: the buffer is cut into K = (smallest node size) shards; shard k is reduced onto local
// rank k of every node (contributions added in local-rank order), all-reduced across nodes by a flat
// algorithm over the cross-node communicator, and copied back to the other ranks of the node. Uneven
// nodes work: local ranks >= K only contribute and receive. The phases inside a node go through the
// node's shared window (IntraNode::shm: chunk by chunk of the window's slot, each chunk's shards
// crossing the nodes in turn) or as direct messages (IntraNode::p2p: the whole buffer at once).
class HierAllreduce {
 public:
  // Host memory: the communicator's MPI transports (and its shared window for IntraNode::shm).
  HierAllreduce(Communicator& c, Algorithm inter, IntraNode intra, size_t segment_floats)
      : c_(&c), local_(c.local_transport()), cross_(c.node_count() > 1 ? &c.cross_transport() : nullptr),
        K_(c.min_local_size()), inter_(inter), intra_(intra), seg_(segment_floats) {}
  // Any memory, intra-node phases as direct messages: `local` holds the ranks of this node, `cross` the
  // ranks with this local rank (one per node; null for one node); K = the smallest node's size.
  HierAllreduce(Transport& local, Transport* cross, int K, Algorithm inter, size_t segment_floats)
      : c_(nullptr), local_(local), cross_(cross), K_(K), inter_(inter), intra_(IntraNode::p2p), seg_(segment_floats) {}
  void run(float* data, size_t n);

 private:
  void run_p2p(float* data, size_t n);
  void run_shm(float* data, size_t n);
  Communicator* c_;
  Transport& local_;
  Transport* cross_;
  int K_;
  Algorithm inter_;
  IntraNode intra_;
  size_t seg_;
};

// Runs ring, tree or rhd over `t`.
void flat_allreduce(Algorithm a, Transport& t, float* data, size_t n, size_t segment_floats);

// What an all-reduce entry point resolved: the algorithm (auto resolved), the segment size, the context.
struct CallPlan {
  Algorithm algorithm;
  size_t segment_bytes;
  OperationContext context;
};
// Argument checks, auto resolution (resolve_auto, or resolve_auto_device for `device_memory`), the operation
// context (named after `entry`) set on the MPI transports, and the debug check (signature `collective`) of an
// all-reduce call.
CallPlan plan_call(Communicator& comm, std::string_view entry, int collective, const void* send, void* recv,
                   size_t count, DType dtype, ReduceOp op, Algorithm algorithm, const AllreduceOptions& options,
                   bool device_memory = false);
// The reduction of host buffers after plan_call (algorithm resolved; not nccl): MPI_Allreduce for mpi
// f32, else widen to f32, run the algorithm class, average, narrow. `options` gives hier's phases;
// segment_bytes is the resolved pipelining unit.
void host_allreduce(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                    Algorithm algorithm, const AllreduceOptions& options, size_t segment_bytes);

// Element range [begin, end) of part i when n elements are cut into `parts` nearly equal parts (the first
// n % parts parts get one more element).
inline size_t part_begin(size_t n, size_t parts, size_t i) {
  const size_t base = n / parts, extra = n % parts;
  return i * base + (i < extra ? i : extra);
}

}  // namespace hpdt::comm::detail
