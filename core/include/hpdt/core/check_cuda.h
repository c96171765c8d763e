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

namespace hpdt::detail {
// The answer of cudaStreamQuery / cudaEventQuery: true when the work is done, false when it is not yet
// (cudaErrorNotReady); any other error throws. A runtime may also leave "not ready" as the thread's last error, which
// the next HPDT_CUDA_CHECK_LAUNCH would then report as a launch's failure (PyTorch's caching allocator met it, and
// clears it likewise): it is cleared here, and only it.
inline bool cuda_query_done(cudaError_t e, const char* expr,
                            std::source_location loc = std::source_location::current()) {
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady) cuda_failed(e, expr, loc);
  if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
  return false;
}
}  // namespace hpdt::detail
