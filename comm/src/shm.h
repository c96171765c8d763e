// The intra-node shared-memory all-reduce (`shm`): the ranks of one node share an MPI-3 window
// (MPI_Win_allocate_shared on the node-local communicator). Each chunk: every rank copies into its
// slot the parts of its input that other ranks reduce (the single copy in), a barrier, rank r sums
// part r (its own values read from its buffer, the others' from their slots) in rank order into the
// shared result and its own buffer, a barrier, every rank copies the other parts of the result out:
// (p-1)/p of the data in and out per rank. Two sets of slots alternate
// between chunks, so a rank may write the next chunk's input while slower ranks still read this
// chunk's result, and one chunk needs two barriers, not three. The barriers are per-rank arrival
// counters in the window (atomics, spin then yield: ranks may outnumber cores), watched by the
// watchdog, which names the ranks that have not arrived. Private to comm/.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "hpdt/comm/transport.h"

namespace hpdt::comm::detail {

class ShmSegment {
 public:
  // Collective over `local` (ranks that share memory). slot_bytes: per-rank chunk size.
  ShmSegment(MPI_Comm local, size_t slot_bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_floats() const { return slot_floats_; }
  float* slot(int set, int rank) const;
  float* result(int set) const;
  // All ranks of the segment arrive; the watchdog (options and context for its message) guards the wait.
  void barrier(const WatchdogOptions& w, const OperationContext& ctx);
  int next_set() { return int(chunks_++ & 1); }  // the buffer set of the next chunk (same sequence on every rank)

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Comm local_;
  int rank_ = 0, size_ = 1;
  size_t slot_floats_ = 0;
  char* base_ = nullptr;  // rank 0's allocation: arrival counters, then the slots and results
  uint64_t barriers_ = 0, chunks_ = 0;
  double spin_s_ = 20e-6;  // how long the barrier polls before it starts yielding the core
  std::atomic<uint64_t>* arrival(int rank) const;
};

// Sums `n` floats in place over the ranks of the segment (bitwise identical on every rank: element i
// is summed by one rank, in rank order).
void shm_allreduce(ShmSegment& s, float* data, size_t n, const WatchdogOptions& w, const OperationContext& ctx);

}  // namespace hpdt::comm::detail
