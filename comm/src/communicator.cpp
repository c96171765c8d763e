#include "hpdt/comm/communicator.h"

#include "shm.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <sstream>

#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/runtime.h"

namespace hpdt::comm {

namespace {

// "2" -> consecutive groups of 2 (last group takes the rest); "3,1" -> explicit sizes.
std::vector<int> parse_node_sizes(const std::string& spec, int world, const char* source) {
  std::vector<int> sizes;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    HPDT_CHECK(!item.empty() && end && *end == 0 && v > 0, source, "='", spec,
               "': expected a positive ranks-per-node count or a comma list of node sizes such as 3,1");
    sizes.push_back(int(v));
  }
  HPDT_CHECK(!sizes.empty(), source, " is empty");
  if (sizes.size() == 1) {
    const int per = sizes[0];
    sizes.clear();
    for (int left = world; left > 0; left -= per) sizes.push_back(std::min(per, left));
    return sizes;
  }
  const int total = std::accumulate(sizes.begin(), sizes.end(), 0);
  HPDT_CHECK(total == world, source, "='", spec, "': node sizes add up to ", total, " but the job has ", world, " ranks");
  return sizes;
}

}  // namespace

Communicator::Communicator(MPI_Comm parent, CommunicatorOptions options) : options_(std::move(options)) {
  HPDT_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  set_errors_return(comm_);
  HPDT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  HPDT_MPI_CHECK(MPI_Comm_size(comm_, &size_));

  if (const char* t = std::getenv("HPDT_COMM_TIMEOUT")) options_.watchdog.timeout_s = std::atof(t);
  if (const char* d = std::getenv("HPDT_COMM_DEBUG")) options_.debug_checks = options_.debug_checks || std::atoi(d) != 0;
  std::string spec = options_.ranks_per_node;
  const char* source = "ranks_per_node";
  if (spec.empty())
    if (const char* e = std::getenv("HPDT_RANKS_PER_NODE")) {
      spec = e;
      source = "HPDT_RANKS_PER_NODE";
    }

  node_of_rank_.assign(size_t(size_), 0);
  if (!spec.empty()) {
    virtual_nodes_ = true;
    const std::vector<int> sizes = parse_node_sizes(spec, size_, source);
    int r = 0;
    for (size_t n = 0; n < sizes.size(); ++n)
      for (int i = 0; i < sizes[n]; ++i) node_of_rank_[size_t(r++)] = int(n);
    node_ = node_of_rank_[size_t(rank_)];
    HPDT_MPI_CHECK(MPI_Comm_split(comm_, node_, rank_, &local_comm_));
  } else {
    HPDT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_comm_));
    // Name each node by the lowest world rank on it; number nodes in that order.
    int leader = rank_;
    HPDT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local_comm_));
    std::vector<int> leaders(size_t(size_), 0);
    HPDT_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm_));
    std::vector<int> distinct = leaders;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (int r = 0; r < size_; ++r)
      node_of_rank_[size_t(r)] = int(std::lower_bound(distinct.begin(), distinct.end(), leaders[size_t(r)]) - distinct.begin());
    node_ = node_of_rank_[size_t(rank_)];
  }
  set_errors_return(local_comm_);
  HPDT_MPI_CHECK(MPI_Comm_rank(local_comm_, &local_rank_));
  HPDT_MPI_CHECK(MPI_Comm_size(local_comm_, &local_size_));
  node_count_ = *std::max_element(node_of_rank_.begin(), node_of_rank_.end()) + 1;
  const std::vector<int> sizes = node_sizes();
  min_local_size_ = *std::min_element(sizes.begin(), sizes.end());
  HPDT_MPI_CHECK(MPI_Comm_split(comm_, local_rank_, node_, &cross_comm_));
  set_errors_return(cross_comm_);

  world_transport_ = std::make_unique<MpiTransport>(comm_);
  local_transport_ = std::make_unique<MpiTransport>(local_comm_);
  cross_transport_ = std::make_unique<MpiTransport>(cross_comm_);
#if HPDT_HAVE_CUDA
  int mine = cuda_device_count() >= local_size_ ? 1 : 0;
  HPDT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MIN, comm_));
  gpu_per_rank_ = mine == 1;
#endif
  set_watchdog(options_.watchdog);
}

Communicator::~Communicator() {
  // A Communicator that outlives MPI (a static, say) must not call MPI any more.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  shm_.reset();  // frees its window (collective over the node) before the communicators go
  world_transport_.reset();
  local_transport_.reset();
  cross_transport_.reset();
#if HPDT_HAVE_CUDA
  destroy_nccl();
#endif
  for (MPI_Comm* c : {&cross_comm_, &local_comm_, &comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

void Communicator::set_watchdog(const WatchdogOptions& w) {
  options_.watchdog = w;
  for (MpiTransport* t : {world_transport_.get(), local_transport_.get(), cross_transport_.get()})
    if (t) t->set_watchdog(w);
#if HPDT_HAVE_CUDA
  for (NcclTransport* t : {nccl_transport_.get(), nccl_local_transport_.get(), nccl_cross_transport_.get()})
    if (t) t->set_watchdog(w);
#endif
}

std::vector<int> Communicator::node_sizes() const {
  std::vector<int> sizes(size_t(node_count_), 0);
  for (int n : node_of_rank_) ++sizes[size_t(n)];
  return sizes;
}

std::string Communicator::describe() const {
  std::ostringstream os;
  os << size_ << (size_ == 1 ? " rank" : " ranks") << " on " << node_count_ << (node_count_ == 1 ? " node (" : " nodes (");
  const auto sizes = node_sizes();
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? "," : "") << sizes[i];
  os << (virtual_nodes_ ? ", virtual)" : ")");
  return os.str();
}

detail::ShmSegment& Communicator::shm_segment() {
  if (!shm_) shm_ = std::make_unique<detail::ShmSegment>(local_comm_, size_t(1) << 20);
  return *shm_;
}

}  // namespace hpdt::comm
