#include "debug_check.h"

#include <sstream>
#include <vector>

#include "hpdt/comm/allreduce.h"
#include "hpdt/core/error.h"

namespace hpdt::comm::detail {

namespace {
std::string describe(const CallSignature& s) {
  std::ostringstream os;
  switch (s.collective) {
    case 1:
    case 4:
    case 5:
      os << (s.collective == 5   ? "allreduce_device_enqueue "
             : s.collective == 4 ? "allreduce_device "
                                 : "allreduce ")
         << (s.algorithm >= 0 && s.algorithm <= int(Algorithm::automatic) ? algorithm_name(Algorithm(s.algorithm))
                                                                          : "?")
         << " " << s.count << " x " << (s.dtype >= 0 && s.dtype <= 4 ? dtype_name(DType(s.dtype)) : "?") << " "
         << (s.op == 0   ? "sum"
             : s.op == 1 ? "avg"
                         : "?");
      break;
    case 2: os << "broadcast " << s.count << " bytes from rank " << s.algorithm; break;
    case 3: os << "allgather " << s.count << " bytes"; break;
    default: os << "collective #" << s.collective;
  }
  return os.str();
}
}  // namespace

void check_same_call(Communicator& comm, const CallSignature& mine) {
  Transport& t = comm.transport();
  const int p = t.size(), r = t.rank();
  if (p == 1) return;
  std::vector<CallSignature> all(static_cast<size_t>(p));
  all[size_t(r)] = mine;
  // Point to point (not a collective), so the watchdog can name the ranks that never arrive.
  for (int j = 0; j < p; ++j)
    if (j != r) {
      t.irecv(&all[size_t(j)], sizeof(CallSignature), j, 301);
      t.isend(&all[size_t(r)], sizeof(CallSignature), j, 301);
    }
  t.wait_all();
  std::ostringstream diff;
  for (int j = 0; j < p; ++j) {
    const CallSignature& o = all[size_t(j)];
    if (o.collective != mine.collective || o.algorithm != mine.algorithm || o.dtype != mine.dtype || o.op != mine.op ||
        o.count != mine.count)
      diff << "; rank " << t.world_rank_of(j) << " calls " << describe(o);
  }
  if (!diff.str().empty())
    HPDT_FAIL("collective mismatch (debug checks): rank ", t.world_rank_of(r), " calls ", describe(mine), diff.str());
}

}  // namespace hpdt::comm::detail
