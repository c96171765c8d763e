// Internals shared by the emulator's sources (not included by emulated code).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "cuda.h"
#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDA_EMU_ASAN 1
#endif
#endif
#ifndef CUDA_EMU_ASAN
#define CUDA_EMU_ASAN 0
#endif

// racecheck: the build tells ThreadSanitizer about the CUDA threads (HPDT_EMU_RACECHECK, docs/cuda-emulator.md)
#ifndef CUDA_EMU_TSAN
#define CUDA_EMU_TSAN 0
#endif

#if !defined(__x86_64__) && !defined(CUDA_EMU_UCONTEXT)
#define CUDA_EMU_UCONTEXT 1  // no hand-written switch for this architecture
#endif
#ifndef CUDA_EMU_UCONTEXT
#define CUDA_EMU_UCONTEXT 0
#endif
#if CUDA_EMU_UCONTEXT
#include <ucontext.h>
#endif

namespace cuda_emu {

// The H100 (SXM) the emulator pretends to be.
constexpr int kSmCount = 132;
constexpr size_t kSmemPerBlockDefault = 48 * 1024;
constexpr size_t kSmemPerBlockOptin = 227 * 1024;
constexpr size_t kSmemPerSm = 228 * 1024;
constexpr size_t kStaticSmemMax = 48 * 1024;
constexpr int kMaxThreadsPerBlock = 1024;

// CUDA_EMU_STREAMS=lazy|random (runtime.cpp): runs the work queued on `stream` (every stream's for the legacy one,
// nullptr) before work that runs at once on it (the NCCL emulation's collectives over MPI) or before the emulator's
// counters are read (launches_named, tma_stores, ...). Nothing in the eager mode.
void drain_stream(const void* stream);
// The NCCL emulation's collective queued on a stream this thread captures into a graph: `op` is kept for the
// graph (true), and a graph holding one runs at once at cudaGraphLaunch, as the collectives do (the MPI calls on
// the launching thread, never from another thread's wait on deferred work). False when `stream` is not captured.
bool capture_collective(const void* stream, std::function<void()> op);
// Whether this thread captures `stream` into a graph now (the NCCL calls not emulated in a capture refuse then).
bool captures(const void* stream);

// Dynamic shared memory limit a kernel was given with cudaFuncSetAttribute (default 48 KiB).
size_t max_dynamic_smem(const void* kernel);

// What the emulated cuTensorMapEncodeTiled and cuTensorMapEncodeIm2col store in a CUtensorMap's opaque bytes
// (rank 1 to 5; im2col 3 to 5), and the TMA loads read back.
constexpr int kTensorMapMaxRank = 5;
struct TensorMap {
  uint64_t magic;
  const unsigned char* base;
  uint32_t rank;
  uint32_t elem_bytes;
  uint64_t dim[kTensorMapMaxRank];         // elements; dim[0] contiguous
  uint64_t stride[kTensorMapMaxRank - 1];  // stride[i]: bytes between consecutive indices of dimension i + 1
  uint16_t box[kTensorMapMaxRank];         // boxDim: elements traversed per dimension (im2col: box[0] only, the
                                           // channelsPerPixel)
  uint8_t step[kTensorMapMaxRank];         // elementStrides (1 for dimension 0): ceil(box / step) are loaded; im2col:
                                           // the traversal stride of each spatial dimension
  uint8_t swizzle;                         // CUtensorMapSwizzle
  uint8_t oob_nan;                         // out-of-bounds elements read as NaN instead of zero
  uint8_t im2col;                          // made by cuTensorMapEncodeIm2col
  // im2col: the bounding box's corners per spatial dimension (dimension 1 first: W, H, D), and the pixels a load
  // walks (pixelsPerColumn)
  int16_t lower[kTensorMapMaxRank - 2], upper[kTensorMapMaxRank - 2];
  uint16_t pixels;
};
static_assert(sizeof(TensorMap) <= sizeof(CUtensorMap));
constexpr uint64_t kTensorMapMagic = 0x3250414d54554465ull;

// Host-side error state (runtime.cpp).
void set_last_error(cudaError_t e);
bool is_live_stream(const void* s);
// Whether [p, p + n) lies wholly inside one device allocation (cudaMalloc'd).
bool in_device_memory(const void* p, size_t n);
// From the fault handler: says when `addr` lies just past a device allocation.
void describe_global_fault(const void* addr);
void write_launch_log();  // CUDA_EMU_LAUNCH_LOG (scheduler.cpp), registered at start-up by runtime.cpp

}  // namespace cuda_emu
