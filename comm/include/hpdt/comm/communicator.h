// Communicator: who is who in the job. World rank and size, the ranks sharing a node (node-local
// communicator), the ranks with the same local rank on every node (cross-node communicator), node
// count and placement, and the transports the all-reduce algorithms run on. With CUDA, an NCCL
// communicator (one GPU per local rank) and its NcclTransport are created on first use.
//
// Virtual nodes, for testing hierarchical algorithms on one machine: HPDT_RANKS_PER_NODE=2 groups
// consecutive world ranks two by two (the last node takes the rest); a comma list such as "3,1" gives
// each node's size (uneven nodes allowed; the sizes must add up to the world size).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "hpdt/comm/transport.h"  // also declares ncclComm_t in GPU builds

namespace hpdt::comm {

namespace detail {
class ShmSegment;  // comm/src/shm.h
}

struct CommunicatorOptions {
  // Virtual node sizes ("2" or "3,1"); empty: read HPDT_RANKS_PER_NODE, and when unset use the real
  // shared-memory nodes (MPI_Comm_split_type).
  std::string ranks_per_node;
  WatchdogOptions watchdog;  // also read from HPDT_COMM_TIMEOUT (seconds)
  // Check before every collective that all ranks call the same one with the same size and dtype
  // (one small extra collective each). Also on with HPDT_COMM_DEBUG=1.
  bool debug_checks = false;
};

class Communicator {
 public:
  // Duplicates `parent`, so hpdt's traffic never matches the caller's messages. Collective over parent.
  explicit Communicator(MPI_Comm parent = MPI_COMM_WORLD, CommunicatorOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node() const { return node_; }  // index of this rank's node, 0..node_count()-1
  int node_count() const { return node_count_; }
  int node_of(int rank) const { return node_of_rank_.at(size_t(rank)); }
  std::vector<int> node_sizes() const;
  int min_local_size() const { return min_local_size_; }
  bool virtual_nodes() const { return virtual_nodes_; }

  MPI_Comm comm() const { return comm_; }              // all ranks (a duplicate of the parent)
  MPI_Comm local_comm() const { return local_comm_; }  // ranks on this node, ordered by world rank
  MPI_Comm cross_comm() const { return cross_comm_; }  // ranks with this local rank, one per node

  MpiTransport& transport() { return *world_transport_; }
  MpiTransport& local_transport() { return *local_transport_; }
  MpiTransport& cross_transport() { return *cross_transport_; }
  // Bytes this rank has posted on the three host transports (MPI_Allreduce and shm are not seen here).
  uint64_t bytes_sent() const {
    return world_transport_->bytes_sent() + local_transport_->bytes_sent() + cross_transport_->bytes_sent();
  }

  const CommunicatorOptions& options() const { return options_; }
  void set_watchdog(const WatchdogOptions& w);
  bool debug_checks() const { return options_.debug_checks; }
  void set_debug_checks(bool on) { options_.debug_checks = on; }

  // A one-line description: "4 ranks on 2 nodes (2,2, virtual)".
  std::string describe() const;

  // The node's shared-memory segment of the `shm` algorithm, created on first use (collective over
  // the node-local communicator).
  detail::ShmSegment& shm_segment();

#if HPDT_HAVE_CUDA
  // NCCL communicator over all ranks, created on first call (collective): the ncclUniqueId is made on
  // rank 0 and broadcast over MPI; each rank uses GPU local_rank() % device count.
  ncclComm_t nccl();
  void* nccl_stream();  // the communication stream (cudaStream_t) NCCL work is queued on
  bool has_nccl() const { return nccl_ != nullptr; }  // created already (nccl() was called), without creating it
  int nccl_device();    // the CUDA device of the NCCL communicator
  // Device-memory transport over the NCCL communicator (created with it; semantics in transport.h).
  NcclTransport& nccl_transport();
  // For hier on device memory: NCCL communicators of this node's ranks (ordered by local rank) and of the
  // ranks with this local rank (one per node, ordered by node), split from nccl() on first call
  // (collective), with their transports on nccl_stream(). cross is null on one node.
  NcclTransport& nccl_local_transport();
  NcclTransport* nccl_cross_transport();
  // Whether every rank has a GPU of its own: on every node, local_size() <= the CUDA device count
  // (agreed on by all ranks at construction). NCCL needs it for communicators of several ranks.
  bool gpu_per_rank() const { return gpu_per_rank_; }
#endif

 private:
  CommunicatorOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL, local_comm_ = MPI_COMM_NULL, cross_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_ = 0, node_count_ = 1, min_local_size_ = 1;
  bool virtual_nodes_ = false;
  std::vector<int> node_of_rank_;
  std::unique_ptr<MpiTransport> world_transport_, local_transport_, cross_transport_;
  std::unique_ptr<detail::ShmSegment> shm_;
#if HPDT_HAVE_CUDA
  void destroy_nccl();
  void split_nccl();
  ncclComm_t nccl_ = nullptr, nccl_local_ = nullptr, nccl_cross_ = nullptr;
  bool nccl_split_ = false, gpu_per_rank_ = false;
  std::unique_ptr<NcclTransport> nccl_local_transport_, nccl_cross_transport_;
  void* nccl_stream_ = nullptr;
  int nccl_device_ = -1;
  std::unique_ptr<NcclTransport> nccl_transport_;
#endif
};

}  // namespace hpdt::comm
