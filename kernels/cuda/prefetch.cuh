// L2 prefetch of the global inputs an epilogue will read (band_epilogue.cuh's band_prefetch_inputs for GEMM v3 and
// conv v3; conv.cu's and conv_nhwc.cu's v2 backward-data with batch norm's sums). Why: an epilogue loads its inputs
// (C, the residual, batch norm's x and y, the GELU's input) a few rows at a time and waits for them, so an SM has a
// few KiB in flight and, at a DRAM latency of ~0.6-0.8 us, moves a few GB/s (Little's law), where the stores stream
// at the memory's rate. Prefetched when the tile's k loop starts, the lines are in L2 by the epilogue, and each of
// its round trips is an L2 hit. A prefetch is a hint (no register, no wait, nothing written); every address named
// here lies inside the input (the CUDA emulator refuses one outside device memory and records the lines:
// cuda_emu::prefetched_lines).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "hpdt/core/error.h"

namespace hpdt::kernels::cuda {

// How the kernels prefetch their epilogue's inputs, HPDT_EPILOGUE_PREFETCH (read at every call; anything else is an
// error naming the variable):
//   unset or "on": each unit's (tile's) as its k loop starts, and in the persistent pipelines of GEMM v3 and conv v3
//     (ws, pingpong) the block's next unit's too, then (Params::prefetch ahead): where a unit's k loop is short (K =
//     64-256, ResNet-50's 1x1 convolutions at 56x56: 1-4 k tiles), the lines asked for as it starts are still on
//     their way from DRAM when its epilogue reads them; asked for one unit earlier they have a whole unit's time;
//   "unit": each unit's own only (as before 2026-11-30; the A/B of the lookahead);
//   "off": none (the A/B of the prefetch).
enum class EpiloguePrefetch { off, unit, ahead };
inline EpiloguePrefetch epilogue_prefetch_mode() {
  const char* e = std::getenv("HPDT_EPILOGUE_PREFETCH");
  if (e == nullptr || std::strcmp(e, "on") == 0) return EpiloguePrefetch::ahead;
  if (std::strcmp(e, "unit") == 0) return EpiloguePrefetch::unit;
  HPDT_CHECK(std::strcmp(e, "off") == 0, "HPDT_EPILOGUE_PREFETCH=", e, ": expected on, unit or off");
  return EpiloguePrefetch::off;
}
// Whether they prefetch at all (conv v2: GemmConv's and NhwcGemm's prefetch, one tile per block: no lookahead).
inline bool epilogue_prefetch() { return epilogue_prefetch_mode() != EpiloguePrefetch::off; }

__device__ __forceinline__ void prefetch_l2(const void* ptr) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr)); }

// The 128-byte lines of [ptr, ptr + bytes), bytes > 0: lines part, part + parts, .. of them, each named by a byte
// inside the range (the first by ptr itself).
__device__ __forceinline__ void prefetch_lines_l2(const void* ptr, uint32_t bytes, int part, int parts) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  const int lines = int(((a + bytes - 1) >> 7) - (a >> 7)) + 1;
  for (int k = part; k < lines; k += parts)
    prefetch_l2(reinterpret_cast<const void*>(k == 0 ? a : ((a >> 7) + uintptr_t(k)) << 7));
}

// The same for an epilogue input of element type T that may be absent (base null: nothing): `bytes` from element
// `offset` of it.
template <class T>
__device__ __forceinline__ void prefetch_input_lines(const void* base, int64_t offset, uint32_t bytes, int part,
                                                     int parts) {
  if (base) prefetch_lines_l2(static_cast<const T*>(base) + offset, bytes, part, parts);
}

}  // namespace hpdt::kernels::cuda
