#include "hpdt/comm/transport.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <sstream>

#include "algorithms.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/kernels/accumulate.h"

namespace hpdt::comm {

std::string OperationContext::describe() const {
  std::string s = operation.empty() ? std::string("(no operation)") : operation;
  if (bucket >= 0) s += " on bucket " + std::to_string(bucket);
  return s;
}

void Transport::accumulate(float* dst, const float* src, size_t n) { kernels::accumulate_f32(dst, src, n); }

float* Transport::scratch(size_t floats, int slot) {
  HPDT_CHECK(slot >= 0 && slot < 8, "transport scratch: slot ", slot, " out of range [0, 8)");
  return detail::scratch(floats, slot);
}

namespace {
// MPI counts are int: larger transfers go as pieces of this many bytes, matched in order.
constexpr size_t kMaxPiece = size_t(1) << 30;
}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  HPDT_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  HPDT_MPI_CHECK(MPI_Comm_size(comm, &size_));
  MPI_Group group, world;
  HPDT_MPI_CHECK(MPI_Comm_group(comm, &group));
  HPDT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> mine(size_t(size_), 0);
  for (int i = 0; i < size_; ++i) mine[size_t(i)] = i;
  world_ranks_.assign(size_t(size_), -1);
  HPDT_MPI_CHECK(MPI_Group_translate_ranks(group, size_, mine.data(), world, world_ranks_.data()));
  HPDT_MPI_CHECK(MPI_Group_free(&group));
  HPDT_MPI_CHECK(MPI_Group_free(&world));
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Outstanding requests after an error (watchdog): cancel receives, free everything.
  for (auto& s : slots_)
    for (auto& r : s.reqs)
      if (r != MPI_REQUEST_NULL) {
        if (s.recv) MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
}

Transport::Request MpiTransport::post(void* data, size_t bytes, int peer, int tag, bool recv) {
  HPDT_CHECK(peer >= 0 && peer < size_, "transport: peer ", peer, " out of range [0, ", size_, ")");
  Slot s;
  s.peer = peer;
  s.recv = recv;
  char* p = static_cast<char*>(data);
  size_t off = 0;
  do {
    const size_t piece = std::min(kMaxPiece, bytes - off);
    MPI_Request r;
    if (recv)
      HPDT_MPI_CHECK(MPI_Irecv(p + off, int(piece), MPI_BYTE, peer, tag, comm_, &r));
    else
      HPDT_MPI_CHECK(MPI_Isend(p + off, int(piece), MPI_BYTE, peer, tag, comm_, &r));
    s.reqs.push_back(r);
    off += piece;
  } while (off < bytes);
  slots_.push_back(std::move(s));
  ++open_;
  return slots_.size() - 1;
}

Transport::Request MpiTransport::isend(const void* data, size_t bytes, int peer, int tag) {
  bytes_sent_ += bytes;
  return post(const_cast<void*>(data), bytes, peer, tag, false);
}

Transport::Request MpiTransport::irecv(void* data, size_t bytes, int peer, int tag) {
  return post(data, bytes, peer, tag, true);
}

bool MpiTransport::test(Slot& s) {
  if (s.done) return true;
  int flag = 0;
  HPDT_MPI_CHECK(MPI_Testall(int(s.reqs.size()), s.reqs.data(), &flag, MPI_STATUSES_IGNORE));
  if (flag) {
    s.done = true;
    --open_;
  }
  return flag != 0;
}

void MpiTransport::wait(Request r) {
  HPDT_CHECK(r < slots_.size(), "transport: unknown request ", r);
  Slot& s = slots_[r];
  if (s.done) return;
  if (watchdog_.timeout_s <= 0) {
    HPDT_MPI_CHECK(MPI_Waitall(int(s.reqs.size()), s.reqs.data(), MPI_STATUSES_IGNORE));
    s.done = true;
    --open_;
    return;
  }
  // Poll so that the watchdog can fire; yield between polls, which matters when ranks outnumber cores.
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned spin = 0;; ++spin) {
    if (test(s)) return;
    if ((spin & 63) == 63) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited > watchdog_.timeout_s) timed_out(waited);
      sched_yield();
    }
  }
}

void MpiTransport::wait_all() {
  for (size_t i = 0; i < slots_.size(); ++i) wait(i);
  slots_.clear();
  open_ = 0;
}

void MpiTransport::timed_out(double waited_s) {
  std::vector<int> waiting_for;
  for (auto& s : slots_)
    if (!s.done && !test(s)) waiting_for.push_back(world_rank_of(s.peer));
  std::sort(waiting_for.begin(), waiting_for.end());
  waiting_for.erase(std::unique(waiting_for.begin(), waiting_for.end()), waiting_for.end());
  std::ostringstream os;
  os << "watchdog: " << context_.describe() << " has not finished after " << waited_s << " s (timeout "
     << watchdog_.timeout_s << " s); ranks not arrived:";
  for (int r : waiting_for) os << ' ' << r;
  os << " (world ranks)";
  if (watchdog_.action == WatchdogOptions::Action::abort) {
    HPDT_LOG(error) << os.str() << "; aborting the job";
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  // Leave the transport usable for the error path: cancel and free what is outstanding.
  for (auto& s : slots_) {
    for (auto& r : s.reqs)
      if (r != MPI_REQUEST_NULL) {
        if (s.recv) MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
  }
  slots_.clear();
  open_ = 0;
  throw Error(os.str());
}

}  // namespace hpdt::comm
