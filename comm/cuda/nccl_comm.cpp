// The NCCL side of Communicator (GPU builds only): the communicator is created on first use by
// broadcasting rank 0's ncclUniqueId over MPI; each rank drives GPU local_rank() % device count.
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "hpdt/comm/communicator.h"
#include "hpdt/core/check_cuda.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/check_nccl.h"
#include "hpdt/core/runtime.h"

namespace hpdt::comm {

ncclComm_t Communicator::nccl() {
  if (nccl_) return nccl_;
  // Every rank must reach the collective MPI_Bcast below, or the others hang in it. So the local
  // checks (a usable GPU; on rank 0 also ncclGetUniqueId) are agreed on first with one all-gather,
  // and every rank throws the same message, naming the ranks that failed, when any did.
  const int devices = cuda_device_count();
  std::string why;
  if (devices <= 0) why = "no usable GPU (" + cuda_unavailable_reason() + ")";
#if !HPDT_CUDA_EMU
  // NCCL refuses two ranks of one communicator on the same GPU ("Duplicate GPU detected", seen on an
  // H100); say so in our words, before every rank dies in ncclCommInitRank. (The emulated NCCL of
  // tests/cuda_emu gives each process its own emulated device 0, so there ranks may share it.)
  else if (devices < local_size_)
    why = std::to_string(local_size_) + " ranks on this node share its " + std::to_string(devices) +
          " GPU(s); an NCCL communicator of several ranks needs a GPU per rank (use the staged path, "
          "or fewer ranks per node)";
#endif
  ncclUniqueId id{};
  if (why.empty()) {
    cuda_set_device(local_rank_ % devices);
    if (rank_ == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) why = std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r);
    }
  }
  const int ok = why.empty() ? 1 : 0;
  std::vector<int> oks(size_t(size_), 0);
  HPDT_MPI_CHECK(MPI_Allgather(&ok, 1, MPI_INT, oks.data(), 1, MPI_INT, comm_));
  std::string failed;
  for (int r = 0; r < size_; ++r)
    if (!oks[size_t(r)]) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  HPDT_CHECK(failed.empty(), "NCCL communicator: cannot be created: rank(s) ", failed, " failed",
             ok ? std::string() : std::string(" (this rank, ") + std::to_string(rank_) + ": " + why + ")");
  HPDT_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm_));
  HPDT_NCCL_CHECK(ncclCommInitRank(&nccl_, size_, id, rank_));
  nccl_device_ = local_rank_ % devices;
  cudaStream_t s;
  HPDT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  nccl_stream_ = s;
  std::vector<int> world(size_t(size_), -1);
  for (int i = 0; i < size_; ++i) world[size_t(i)] = world_transport_->world_rank_of(i);
  nccl_transport_ = std::make_unique<NcclTransport>(nccl_, nccl_stream_, nccl_device_, std::move(world));
  nccl_transport_->set_watchdog(options_.watchdog);
  return nccl_;
}

void* Communicator::nccl_stream() {
  nccl();
  return nccl_stream_;
}

int Communicator::nccl_device() {
  nccl();
  return nccl_device_;
}

NcclTransport& Communicator::nccl_transport() {
  nccl();
  HPDT_CHECK(nccl_transport_, "NCCL transport: the NCCL communicator's setup failed earlier on rank ", rank_);
  return *nccl_transport_;
}

void Communicator::split_nccl() {
  if (nccl_split_) return;
  ncclComm_t parent = nccl();
  // Collective over nccl(): every rank splits twice, in the same order.
  HPDT_NCCL_CHECK(ncclCommSplit(parent, node_, local_rank_, &nccl_local_, nullptr));
  HPDT_NCCL_CHECK(ncclCommSplit(parent, node_count_ > 1 ? local_rank_ : NCCL_SPLIT_NOCOLOR, node_, &nccl_cross_, nullptr));
  auto world_of = [](MPI_Comm c) {
    int n = 0;
    HPDT_MPI_CHECK(MPI_Comm_size(c, &n));
    MpiTransport t(c);
    std::vector<int> w(size_t(n), -1);
    for (int i = 0; i < n; ++i) w[size_t(i)] = t.world_rank_of(i);
    return w;
  };
  // The MPI communicators have the same members in the same order (split by the same colour and key).
  nccl_local_transport_ = std::make_unique<NcclTransport>(nccl_local_, nccl_stream_, nccl_device_, world_of(local_comm_));
  nccl_local_transport_->set_watchdog(options_.watchdog);
  if (nccl_cross_) {
    nccl_cross_transport_ = std::make_unique<NcclTransport>(nccl_cross_, nccl_stream_, nccl_device_, world_of(cross_comm_));
    nccl_cross_transport_->set_watchdog(options_.watchdog);
  }
  nccl_split_ = true;
}

NcclTransport& Communicator::nccl_local_transport() {
  split_nccl();
  return *nccl_local_transport_;
}

NcclTransport* Communicator::nccl_cross_transport() {
  split_nccl();
  return nccl_cross_transport_.get();
}

void Communicator::destroy_nccl() {
  // Destructors do not throw: failures here are ignored on purpose (the job is ending).
  nccl_local_transport_.reset();
  nccl_cross_transport_.reset();
  for (ncclComm_t* c : {&nccl_local_, &nccl_cross_})
    if (*c) ncclCommDestroy(*c);
  nccl_local_ = nccl_cross_ = nullptr;
  nccl_split_ = false;
  nccl_transport_.reset();
  if (nccl_) ncclCommDestroy(nccl_);
  if (nccl_stream_) cudaStreamDestroy(static_cast<cudaStream_t>(nccl_stream_));
  nccl_ = nullptr;
  nccl_stream_ = nullptr;
}

}  // namespace hpdt::comm
