// HPDT_CUDNN_CHECK(expr): throws hpdt::Error naming the cuDNN call and cudnnGetErrorString's text when expr fails.
// Private to kernels/cuda (only the vendor convolution talks to cuDNN).
#pragma once

#include <cudnn.h>

#include <source_location>
#include <string>

#include "hpdt/core/error.h"

namespace hpdt::kernels::cuda::detail {
[[noreturn]] inline void cudnn_failed(cudnnStatus_t status, const char* expr, std::source_location loc) {
  throw Error(std::string("cuDNN error ") + cudnnGetErrorString(status) + " (status " + std::to_string(int(status)) +
                  ") in " + expr,
              {}, loc);
}
}  // namespace hpdt::kernels::cuda::detail

#define HPDT_CUDNN_CHECK(expr)                                                                             \
  do {                                                                                                     \
    const cudnnStatus_t hpdt_cudnn_status_ = (expr);                                                       \
    if (hpdt_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                           \
      ::hpdt::kernels::cuda::detail::cudnn_failed(hpdt_cudnn_status_, #expr, std::source_location::current()); \
  } while (0)
