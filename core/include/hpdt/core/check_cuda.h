// HPDT_CUDA_CHECK(expr): throws hpdt::Error with the CUDA error name and text when expr fails.
// Header-only so that core does not force the CUDA runtime on code that does not use it.
#pragma once

#include <cuda_runtime.h>

#include <source_location>
#include <string>

#include "hpdt/core/error.h"

namespace hpdt::detail {
[[noreturn]] inline void cuda_failed(cudaError_t e, const char* expr, std::source_location loc) {
  throw Error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + expr, {},
              loc);
}
}  // namespace hpdt::detail

#define HPDT_CUDA_CHECK(expr)                                                                      \
  do {                                                                                             \
    const cudaError_t hpdt_e_ = (expr);                                                            \
    if (hpdt_e_ != cudaSuccess) [[unlikely]]                                                       \
      ::hpdt::detail::cuda_failed(hpdt_e_, #expr, std::source_location::current());                \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define HPDT_CUDA_CHECK_LAUNCH() HPDT_CUDA_CHECK(cudaGetLastError())
