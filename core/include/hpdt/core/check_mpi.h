// HPDT_MPI_CHECK(expr): throws hpdt::Error with MPI's error text when expr does not return MPI_SUCCESS.
//
// MPI's default handler (MPI_ERRORS_ARE_FATAL) aborts before a code is ever returned; hpdt sets
// MPI_ERRORS_RETURN on the communicators it uses (set_errors_return) so these checks see the codes.
#pragma once

#include <mpi.h>

#include <source_location>
#include <string>

#include "hpdt/core/error.h"

namespace hpdt::detail {
[[noreturn]] inline void mpi_failed(int rc, const char* expr, std::source_location loc) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  throw Error("MPI error " + std::to_string(rc) + " (" + std::string(text, size_t(len)) + ") in " + expr, {}, loc);
}
}  // namespace hpdt::detail

#define HPDT_MPI_CHECK(expr)                                                                       \
  do {                                                                                             \
    const int hpdt_rc_ = (expr);                                                                   \
    if (hpdt_rc_ != MPI_SUCCESS) [[unlikely]]                                                      \
      ::hpdt::detail::mpi_failed(hpdt_rc_, #expr, std::source_location::current());                \
  } while (0)

namespace hpdt {
// Makes MPI calls on `comm` return error codes instead of aborting the job.
inline void set_errors_return(MPI_Comm comm) { HPDT_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN)); }
}  // namespace hpdt
