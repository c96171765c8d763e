#include "hpdt/kernels/backend.h"

#include <atomic>

#include "hpdt/core/error.h"

namespace hpdt::kernels {

namespace {
std::atomic<KernelBackend> g_backend{KernelBackend::ours};
std::atomic<GemmChoice> g_gemm{GemmChoice::v3};
std::atomic<ConvChoice> g_conv{ConvChoice::v2};
std::atomic<CudnnAlgo> g_cudnn_algo{CudnnAlgo::heuristic};
std::atomic<GemmTuning> g_gemm_tuning{GemmTuning::heuristic};
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

namespace {
// GemmChoice and ConvChoice alike: v2 or v3 (or ConvChoice's find) by name; `what` names the choice in the error.
template <class Choice>
std::string_view choice_name(Choice choice) {
  if constexpr (requires { Choice::find; })
    if (choice == Choice::find) return "find";
  return choice == Choice::v3 ? "v3" : "v2";
}
template <class Choice>
Choice parse_choice(std::string_view name, const char* what) {
  if (name == "v2") return Choice::v2;
  if (name == "v3") return Choice::v3;
  if constexpr (requires { Choice::find; }) {
    if (name == "find") return Choice::find;
    HPDT_FAIL(what, " must be 'v2', 'v3' or 'find', got '", name, "'");
  }
  HPDT_FAIL(what, " must be 'v2' or 'v3', got '", name, "'");
}
}  // namespace

void set_gemm_choice(GemmChoice choice) { g_gemm.store(choice, std::memory_order_relaxed); }
GemmChoice gemm_choice() { return g_gemm.load(std::memory_order_relaxed); }
std::string_view gemm_choice_name(GemmChoice choice) { return choice_name(choice); }
GemmChoice parse_gemm_choice(std::string_view name) { return parse_choice<GemmChoice>(name, "GEMM choice"); }

void set_conv_choice(ConvChoice choice) { g_conv.store(choice, std::memory_order_relaxed); }
ConvChoice conv_choice() { return g_conv.load(std::memory_order_relaxed); }
std::string_view conv_choice_name(ConvChoice choice) { return choice_name(choice); }
ConvChoice parse_conv_choice(std::string_view name) { return parse_choice<ConvChoice>(name, "convolution choice"); }

namespace {
// CudnnAlgo and GemmTuning alike: heuristic or find by name; `what` names the setting in the error.
template <class Tuning>
std::string_view heuristic_or_find_name(Tuning t) {
  return t == Tuning::find ? "find" : "heuristic";
}
template <class Tuning>
Tuning parse_heuristic_or_find(std::string_view name, const char* what) {
  if (name == "heuristic") return Tuning::heuristic;
  if (name == "find") return Tuning::find;
  HPDT_FAIL(what, " must be 'heuristic' or 'find', got '", name, "'");
}
}  // namespace

void set_cudnn_algo(CudnnAlgo algo) { g_cudnn_algo.store(algo, std::memory_order_relaxed); }
CudnnAlgo cudnn_algo() { return g_cudnn_algo.load(std::memory_order_relaxed); }
std::string_view cudnn_algo_name(CudnnAlgo algo) { return heuristic_or_find_name(algo); }
CudnnAlgo parse_cudnn_algo(std::string_view name) {
  return parse_heuristic_or_find<CudnnAlgo>(name, "cuDNN algorithm choice");
}

void set_gemm_tuning(GemmTuning tuning) { g_gemm_tuning.store(tuning, std::memory_order_relaxed); }
GemmTuning gemm_tuning() { return g_gemm_tuning.load(std::memory_order_relaxed); }
std::string_view gemm_tuning_name(GemmTuning tuning) { return heuristic_or_find_name(tuning); }
GemmTuning parse_gemm_tuning(std::string_view name) { return parse_heuristic_or_find<GemmTuning>(name, "GEMM tuning"); }

}  // namespace hpdt::kernels
