// Debug mode: before a collective, every rank tells every other rank what it is about to call, so a
// mismatch (another collective, size, dtype or algorithm) is reported on all ranks instead of hanging or
// corrupting data, and a rank that never arrives is named by the watchdog. Private to comm/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hpdt/comm/communicator.h"

namespace hpdt::comm::detail {

struct CallSignature {
  int32_t collective;  // 1 allreduce, 2 broadcast, 3 allgather, 4 allreduce_device, 5 allreduce_device_enqueue
  int32_t algorithm;   // or root for broadcast
  int32_t dtype;
  int32_t op;
  uint64_t count;  // elements, or bytes
};

// Collective over comm; throws hpdt::Error on every rank that sees a difference, naming the ranks.
void check_same_call(Communicator& comm, const CallSignature& mine);

}  // namespace hpdt::comm::detail
