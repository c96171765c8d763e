// Which implementation the GPU entry points use for GEMM and convolution:
//   ours:   hpdt's own CUDA kernels (the default, and the point of the project);
//   vendor: cuBLAS for GEMM (matmul, linear) and cuDNN for convolution, for side-by-side comparison
//           and as a fallback a user can choose (hpdt-train --kernels vendor).
// One setting per process, chosen once at start-up by the application (like PyTorch's
// torch.backends flags); CPU ops ignore it. Every other op has one implementation per device.
#pragma once

#include <string_view>

namespace hpdt::kernels {

enum class KernelBackend { ours, vendor };

void set_kernel_backend(KernelBackend backend);
KernelBackend kernel_backend();
// "ours" / "vendor"; parse throws hpdt::Error naming the bad value.
std::string_view kernel_backend_name(KernelBackend backend);
KernelBackend parse_kernel_backend(std::string_view name);

// Which of our tensor-core GEMMs runs for 16-bit inputs under KernelBackend::ours (cuda::gemm's `automatic`):
//   v3: Hopper wgmma + TMA where it can take the call (compute capability 9.0, a build for sm_90, 16-byte
//       aligned operands), v2 elsewhere. The default since 2026-11-27: on an H200 it was 1.15-2.3x v2 on every
//       GEMM timed, and the ViT-B/16 step 23 % faster with it (results/gpu/README.md);
//   v2: mma.sync everywhere.
// One setting per process like the backend (hpdt-train / hpdt-bench-train-step --gemm).
enum class GemmChoice { v2, v3 };

void set_gemm_choice(GemmChoice choice);
GemmChoice gemm_choice();
// "v2" / "v3"; parse throws hpdt::Error naming the bad value.
std::string_view gemm_choice_name(GemmChoice choice);
GemmChoice parse_gemm_choice(std::string_view name);

// Which of our kernels the NHWC 16-bit convolutions run under KernelBackend::ours (ConvVariant::automatic):
//   v2: the mma.sync implicit GEMMs (the default: on an H200, 2026-11-27, v3 lost the 1x1 convolutions with 64
//       output channels, and the NHWC ResNet-50 step was 15 % slower with it);
//   v3: the 1x1 stride-1 ones as GEMM v3, the others with 64k input channels on conv v3 (wgmma + TMA), each where
//       it can take the call (a Hopper GPU, an sm_90 build), v2 elsewhere.
//   find: per convolution (shape, direction, dtypes, fused epilogue), the faster of the two, timed at its first call
//       on scratch outputs (as GemmTuning::find for GEMM v3's plans; cuda::conv_found() lists the choices). Inside a
//       CUDA-graph capture a convolution not yet timed runs v2 and stays untimed.
// One setting per process (hpdt-train / hpdt-bench-train-step --conv). NCHW convolutions have one kernel family.
enum class ConvChoice { v2, v3, find };

void set_conv_choice(ConvChoice choice);
ConvChoice conv_choice();
// "v2" / "v3" / "find"; parse throws hpdt::Error naming the bad value.
std::string_view conv_choice_name(ConvChoice choice);
ConvChoice parse_conv_choice(std::string_view name);

// How the vendor backend's convolutions choose a cuDNN algorithm, per shape, direction, dtype and layout, once per
// process (KernelBackend::vendor and the benchmarks' cuDNN peer):
//   heuristic: the first deterministic algorithm cuDNN's v7 heuristics rank (the default: no first-use cost,
//              bitwise-repeatable steps, as PyTorch with torch.backends.cudnn.benchmark = False);
//   find:      the fastest one cuDNN's Find measures at first use, deterministic or not (cudnnFind*Algorithm: it
//              times every algorithm on buffers of its own), as PyTorch with cudnn.benchmark = True, which is
//              how bench/peers/torch_gpu_train_step.py runs. On the H200 (2026-11-27) the heuristic's pick for
//              some shapes ran at a fraction of cuDNN's best (1x1 256->64 at 56^2, NCHW forward: 1.4 ms, 19
//              TFLOP/s), which flattered every "ours / cuDNN" ratio against it: the benchmarks time both.
// One setting per process (hpdt-train / hpdt-bench-train-step --cudnn-algo).
enum class CudnnAlgo { heuristic, find };

void set_cudnn_algo(CudnnAlgo algo);
CudnnAlgo cudnn_algo();
// "heuristic" / "find"; parse throws hpdt::Error naming the bad value.
std::string_view cudnn_algo_name(CudnnAlgo algo);
CudnnAlgo parse_cudnn_algo(std::string_view name);

// How GEMM v3 (our Hopper GEMM, GemmChoice::v3) and conv v3 (ConvChoice::v3) pick their pipeline and block tile, per
// call shape (sizes, layouts, dtypes, epilogue), once per process:
//   heuristic: by rule (the default): the "barrier" pipeline, the tile by whole waves (kernels/cuda/split_k.cuh);
//   find:      the fastest of their pipelines ("barrier", "ws", "pingpong") and tiles (128 x 128, 128 x 256; 128 x 64
//              where N <= 64; conv v3's backward-filter: barrier or ws, its tile following co), timed at the shape's
//              first call on scratch outputs, as cuDNN's Find (CudnnAlgo) and PyTorch's cudnn.benchmark do for
//              convolutions. The choices: cuda::gemm_v3_found() (GEMM v3's, then conv v3's). A call inside a
//              CUDA-graph capture cannot be timed: an untimed shape there takes the heuristic's plan (time it in a
//              warm-up step first, as hpdt-bench-train-step does). HPDT_GEMM_V3_PIPELINE / HPDT_GEMM_V3_TILE, when
//              set, still pin theirs; Find then times the rest.
// One setting per process (hpdt-train / hpdt-bench-train-step --gemm-tuning).
enum class GemmTuning { heuristic, find };

void set_gemm_tuning(GemmTuning tuning);
GemmTuning gemm_tuning();
// "heuristic" / "find"; parse throws hpdt::Error naming the bad value.
std::string_view gemm_tuning_name(GemmTuning tuning);
GemmTuning parse_gemm_tuning(std::string_view name);

// A setting changed for one scope and restored when the scope ends, also on an exception (tests, benchmarks):
//   const ScopedGemmChoice v3(GemmChoice::v3);
template <class T, T (*Get)(), void (*Set)(T)>
class ScopedSetting {
 public:
  explicit ScopedSetting(T value) : prev_(Get()) { Set(value); }
  ~ScopedSetting() { Set(prev_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  T prev_;
};
using ScopedKernelBackend = ScopedSetting<KernelBackend, kernel_backend, set_kernel_backend>;
using ScopedGemmChoice = ScopedSetting<GemmChoice, gemm_choice, set_gemm_choice>;
using ScopedConvChoice = ScopedSetting<ConvChoice, conv_choice, set_conv_choice>;
using ScopedCudnnAlgo = ScopedSetting<CudnnAlgo, cudnn_algo, set_cudnn_algo>;
using ScopedGemmTuning = ScopedSetting<GemmTuning, gemm_tuning, set_gemm_tuning>;

}  // namespace hpdt::kernels
