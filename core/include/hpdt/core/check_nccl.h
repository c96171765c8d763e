// HPDT_NCCL_CHECK(expr): throws hpdt::Error with NCCL's error text and last-error detail.
#pragma once

#include <nccl.h>

#include <source_location>
#include <string>

#include "hpdt/core/error.h"

namespace hpdt::detail {
[[noreturn]] inline void nccl_failed(ncclResult_t r, const char* expr, std::source_location loc) {
  std::string msg = std::string("NCCL error ") + std::to_string(int(r)) + " (" + ncclGetErrorString(r) + ") in " + expr;
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) msg += std::string(": ") + last;
  throw Error(msg, {}, loc);
}
}  // namespace hpdt::detail

#define HPDT_NCCL_CHECK(expr)                                                                      \
  do {                                                                                             \
    const ncclResult_t hpdt_r_ = (expr);                                                           \
    if (hpdt_r_ != ncclSuccess && hpdt_r_ != ncclInProgress) [[unlikely]]                          \
      ::hpdt::detail::nccl_failed(hpdt_r_, #expr, std::source_location::current());                \
  } while (0)
