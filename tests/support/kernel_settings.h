// The process-wide kernel settings (hpdt/kernels/backend.h) changed for one scope and restored when the
// test leaves it, also on a failed assertion or an exception.
#pragma once

#include "hpdt/kernels/backend.h"

namespace hpdt::test {

class BackendScope {
 public:
  explicit BackendScope(kernels::KernelBackend b) : prev_(kernels::kernel_backend()) { kernels::set_kernel_backend(b); }
  ~BackendScope() { kernels::set_kernel_backend(prev_); }
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;

 private:
  kernels::KernelBackend prev_;
};

class GemmChoiceScope {
 public:
  explicit GemmChoiceScope(kernels::GemmChoice c) : prev_(kernels::gemm_choice()) { kernels::set_gemm_choice(c); }
  ~GemmChoiceScope() { kernels::set_gemm_choice(prev_); }
  GemmChoiceScope(const GemmChoiceScope&) = delete;
  GemmChoiceScope& operator=(const GemmChoiceScope&) = delete;

 private:
  kernels::GemmChoice prev_;
};

}  // namespace hpdt::test
