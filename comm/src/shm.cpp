#include "shm.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <sstream>
#include <vector>

#include "algorithms.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/timer.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HPDT_CPU_RELAX() _mm_pause()
#else
#define HPDT_CPU_RELAX() ((void)0)
#endif

namespace hpdt::comm::detail {

namespace {
constexpr size_t kLine = 128;  // one arrival counter per (adjacent-pair-prefetch) cache line
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory barriers need lock-free 64-bit atomics");

size_t header_bytes(int p) { return (size_t(p) * kLine + 4095) / 4096 * 4096; }
}  // namespace

ShmSegment::ShmSegment(MPI_Comm local, size_t slot_bytes) : local_(local) {
  HPDT_MPI_CHECK(MPI_Comm_rank(local, &rank_));
  HPDT_MPI_CHECK(MPI_Comm_size(local, &size_));
  slot_floats_ = std::max<size_t>(1024, slot_bytes / sizeof(float) / 64 * 64);
  const size_t p = size_t(size_);
  const size_t bytes = header_bytes(size_) + (2 * p + 2) * slot_floats_ * sizeof(float);
  void* mine = nullptr;
  // Everything in rank 0's part, so that one base pointer addresses it from every rank.
  HPDT_MPI_CHECK(MPI_Win_allocate_shared(MPI_Aint(rank_ == 0 ? bytes : 0), 1, MPI_INFO_NULL, local, &mine, &win_));
  MPI_Aint size0 = 0;
  int disp = 0;
  void* base0 = nullptr;
  HPDT_MPI_CHECK(MPI_Win_shared_query(win_, 0, &size0, &disp, &base0));
  HPDT_CHECK(size_t(size0) >= bytes && base0, "shm all-reduce: the shared window of ", bytes, " bytes could not be mapped on local rank ", rank_);
  base_ = static_cast<char*>(base0);
  if (rank_ == 0)
    for (int q = 0; q < size_; ++q) new (base_ + size_t(q) * kLine) std::atomic<uint64_t>(0);
  HPDT_MPI_CHECK(MPI_Barrier(local));  // counters initialised before anyone arrives
  // More ranks than cores: a spinning rank burns the time slice of the rank it waits for, so yield at
  // once (measured here with 4 ranks on 2 cores: 4 KiB took 176 us with 4096 spins before yielding).
  // Otherwise spin for a bounded time, not a count: a PAUSE takes ~10 cycles on some cores and ~140 on
  // others, and 4096 of them (~270 us on a Xeon) made every barrier of a node whose partner had been
  // descheduled by ranks of other nodes on the same cores cost that much (hier on the emulated cluster).
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  spin_s_ = cores > 0 && size_ > cores ? 0.0 : 20e-6;
}

ShmSegment::~ShmSegment() {
  int finalized = 0;
  MPI_Finalized(&finalized);  // a segment of a static Communicator may outlive MPI
  if (!finalized && win_ != MPI_WIN_NULL) MPI_Win_free(&win_);  // collective; destructors do not throw
}

std::atomic<uint64_t>* ShmSegment::arrival(int rank) const {
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + size_t(rank) * kLine));
}

float* ShmSegment::slot(int set, int rank) const {
  return reinterpret_cast<float*>(base_ + header_bytes(size_)) + (size_t(set) * size_t(size_) + size_t(rank)) * slot_floats_;
}

float* ShmSegment::result(int set) const {
  return reinterpret_cast<float*>(base_ + header_bytes(size_)) + (2 * size_t(size_) + size_t(set)) * slot_floats_;
}

void ShmSegment::barrier(const WatchdogOptions& w, const OperationContext& ctx) {
  const uint64_t b = ++barriers_;
  arrival(rank_)->store(b, std::memory_order_release);  // publishes this rank's writes
  const double t0 = now_s();
  bool yielding = spin_s_ <= 0;
  for (uint64_t spin = 0;; ++spin) {
    bool all = true;
    for (int q = 0; q < size_ && all; ++q) all = arrival(q)->load(std::memory_order_acquire) >= b;
    if (all) return;
    if (spin < 16) {
      HPDT_CPU_RELAX();
      continue;
    }
    if (!yielding) {  // poll for spin_s_, reading the clock every 16th poll
      if ((spin & 15) != 0 || now_s() - t0 < spin_s_) {
        HPDT_CPU_RELAX();
        continue;
      }
      yielding = true;
    }
    sched_yield();  // ranks may outnumber cores: let the one we wait for run
    if ((spin & 255) == 0 && w.timeout_s > 0) {
      const double waited = now_s() - t0;
      if (waited > w.timeout_s) {
        std::ostringstream os;
        os << "watchdog: " << ctx.describe() << " has not finished after " << waited << " s (timeout " << w.timeout_s
           << " s); ranks not arrived:";
        for (int q = 0; q < size_; ++q)
          if (arrival(q)->load(std::memory_order_acquire) < b) os << ' ' << q;
        os << " (node-local ranks)";
        if (w.action == WatchdogOptions::Action::abort) {
          HPDT_LOG(error) << os.str() << "; aborting the job";
          MPI_Abort(MPI_COMM_WORLD, 3);
        }
        throw Error(os.str());
      }
    }
  }
}

void shm_allreduce(ShmSegment& s, float* data, size_t n, const WatchdogOptions& w, const OperationContext& ctx) {
  const int p = s.size(), r = s.rank();
  if (p == 1 || n == 0) return;
  const size_t S = s.slot_floats();
  for (size_t off = 0; off < n; off += S) {
    const size_t m = std::min(S, n - off);
    const int set = s.next_set();
    auto part = [&](int q) { return part_begin(m, size_t(p), size_t(q)); };
    // In: only the parts other ranks reduce (rank r reads its own part from `data` itself).
    float* mine = s.slot(set, r);
    for (int q = 0; q < p; ++q)
      if (q != r) std::memcpy(mine + part(q), data + off + part(q), (part(q + 1) - part(q)) * sizeof(float));
    s.barrier(w, ctx);
    const size_t lo = part(r), len = part(r + 1) - lo;
    float* res = s.result(set) + lo;
    auto input = [&](int q) -> const float* { return q == r ? data + off + lo : s.slot(set, q) + lo; };
    std::memcpy(res, input(0), len * sizeof(float));
    for (int q = 1; q < p; ++q) {  // rank order: the same sum on every run
      const float* in = input(q);
      for (size_t i = 0; i < len; ++i) res[i] += in[i];
    }
    std::memcpy(data + off + lo, res, len * sizeof(float));
    s.barrier(w, ctx);
    // Out: the other ranks' parts of the result.
    for (int q = 0; q < p; ++q)
      if (q != r) std::memcpy(data + off + part(q), s.result(set) + part(q), (part(q + 1) - part(q)) * sizeof(float));
  }
}

}  // namespace hpdt::comm::detail
