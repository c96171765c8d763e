// Helpers shared by hpdt's tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hpdt/core/env.h"
#include "hpdt/core/runtime.h"
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
#include <cuda_runtime.h>  // the emulator's: cuda_emu::launches_named
#endif

// In a gpu-labelled test: skip (visibly, never pass) when no GPU is usable, saying why.
#define HPDT_REQUIRE_GPU()                                                                         \
  do {                                                                                             \
    if (!::hpdt::cuda_available()) GTEST_SKIP() << "no GPU: " << ::hpdt::cuda_unavailable_reason(); \
  } while (0)

// EXPECT_THROW that also checks the message contains `needle`.
#define HPDT_EXPECT_THROW_MSG(stmt, needle)                                                        \
  do {                                                                                             \
    try {                                                                                          \
      stmt;                                                                                        \
      ADD_FAILURE() << "expected an exception containing '" << (needle) << "' from: " #stmt;       \
    } catch (const std::exception& hpdt_caught_) {                                               \
      EXPECT_NE(std::string(hpdt_caught_.what()).find(needle), std::string::npos)                  \
          << "message: " << hpdt_caught_.what() << "\nexpected to contain: " << (needle);          \
    }                                                                                              \
  } while (0)

namespace hpdt::test {

// Launches so far of kernels whose name holds `name`: the CUDA emulator's record; -1 elsewhere (a GPU keeps none).
inline int64_t emu_launches(const char* name) {
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
  return int64_t(cuda_emu::launches_named(name));
#else
  (void)name;
  return -1;
#endif
}

// A fresh temporary directory, removed with the object.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Batch norm's reductions in the epilogues of the convolutions (and of max pool's backward) for the scope,
// HPDT_CONV_BN_STATS=epilogue: the tests of those reductions pin them, batch norm's own passes being the default
// since the H200 run of 2026-11-29.
struct EpilogueBnReductions : ScopedEnv {
  EpilogueBnReductions() : ScopedEnv("HPDT_CONV_BN_STATS", "epilogue") {}
};

// Bits of a float, for exact comparisons that also distinguish -0 and NaN payloads.
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace hpdt::test
