#include "hpdt/kernels/backend.h"

#include <atomic>

#include "hpdt/core/error.h"

namespace hpdt::kernels {

namespace {
std::atomic<KernelBackend> g_backend{KernelBackend::ours};
std::atomic<GemmChoice> g_gemm{GemmChoice::v3};
std::atomic<ConvChoice> g_conv{ConvChoice::v2};
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

void set_gemm_choice(GemmChoice choice) { g_gemm.store(choice, std::memory_order_relaxed); }
GemmChoice gemm_choice() { return g_gemm.load(std::memory_order_relaxed); }

std::string_view gemm_choice_name(GemmChoice choice) { return choice == GemmChoice::v3 ? "v3" : "v2"; }

GemmChoice parse_gemm_choice(std::string_view name) {
  if (name == "v2") return GemmChoice::v2;
  if (name == "v3") return GemmChoice::v3;
  HPDT_FAIL("GEMM choice must be 'v2' or 'v3', got '", name, "'");
}

void set_conv_choice(ConvChoice choice) { g_conv.store(choice, std::memory_order_relaxed); }
ConvChoice conv_choice() { return g_conv.load(std::memory_order_relaxed); }

std::string_view conv_choice_name(ConvChoice choice) { return choice == ConvChoice::v3 ? "v3" : "v2"; }

ConvChoice parse_conv_choice(std::string_view name) {
  if (name == "v2") return ConvChoice::v2;
  if (name == "v3") return ConvChoice::v3;
  HPDT_FAIL("convolution choice must be 'v2' or 'v3', got '", name, "'");
}

}  // namespace hpdt::kernels
