#include "hpdt/kernels/backend.h"

#include <atomic>

#include "hpdt/core/error.h"

namespace hpdt::kernels {

namespace {
std::atomic<KernelBackend> g_backend{KernelBackend::ours};
}

void set_kernel_backend(KernelBackend backend) { g_backend.store(backend, std::memory_order_relaxed); }
KernelBackend kernel_backend() { return g_backend.load(std::memory_order_relaxed); }

std::string_view kernel_backend_name(KernelBackend backend) {
  return backend == KernelBackend::vendor ? "vendor" : "ours";
}

KernelBackend parse_kernel_backend(std::string_view name) {
  if (name == "ours") return KernelBackend::ours;
  if (name == "vendor") return KernelBackend::vendor;
  HPDT_FAIL("kernel backend must be 'ours' or 'vendor', got '", name, "'");
}

}  // namespace hpdt::kernels
