// ranks_without_gpu(comm): whether every rank of an MPI communicator has a usable GPU, agreed by all of them.
//
// Collective: each rank calls it before it touches a GPU. Where some rank has none, every rank learns it and can stop
// cleanly with one message from the root. A rank-local check would leave the other ranks waiting in their next
// collective, or end the job in MPI_Abort. Header-only, like check_mpi.h (core itself does not link MPI).
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hpdt/core/check_mpi.h"
#include "hpdt/core/runtime.h"

namespace hpdt {

// "" on every rank when every rank of `comm` has a usable GPU. Otherwise a non-empty string on every rank: on `root`,
// "rank R (HOST: REASON)" for each rank without one, joined by "; "; on the other ranks, "(listed by rank ROOT)".
inline std::string ranks_without_gpu(MPI_Comm comm, int root = 0) {
  constexpr int kLen = 512;  // host and reason of one rank, cut to fit
  const std::string why = cuda_unavailable_reason();
  int ok = why.empty() ? 1 : 0, all_ok = 0;
  HPDT_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
  if (all_ok) return {};
  int rank = 0, size = 1, len = 0;
  HPDT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HPDT_MPI_CHECK(MPI_Comm_size(comm, &size));
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  HPDT_MPI_CHECK(MPI_Get_processor_name(host, &len));
  char mine[kLen] = {0};
  if (!ok) std::snprintf(mine, sizeof mine, "%s: %s", host, why.c_str());
  std::vector<char> all(rank == root ? size_t(size) * kLen : 1);
  HPDT_MPI_CHECK(MPI_Gather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, root, comm));
  if (rank != root) return "(listed by rank " + std::to_string(root) + ")";
  std::string list;
  for (int r = 0; r < size; ++r) {
    const char* entry = &all[size_t(r) * kLen];
    if (!*entry) continue;
    if (!list.empty()) list += "; ";
    list += "rank " + std::to_string(r) + " (" + std::string(entry, strnlen(entry, kLen)) + ")";
  }
  return list;
}

}  // namespace hpdt
