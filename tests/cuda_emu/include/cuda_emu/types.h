// CUDA's built-in vector types (with CUDA's alignments), uint3 and dim3, for the CPU emulator of CUDA
// (tests/cuda_emu). Included by the shim <cuda_runtime.h>.
#pragma once

#include <cstddef>
#include <cstdint>

// name1..name4 with CUDA's alignment (sizeof for 1 and 3, 2 * sizeof for 2, 4 * sizeof up to 16 for 4).
#define CUDA_EMU_VEC(T, name, a2, a4)                                          \
  struct name##1 {                                                             \
    T x;                                                                       \
  };                                                                           \
  struct alignas(a2) name##2 {                                                 \
    T x, y;                                                                    \
  };                                                                           \
  struct name##3 {                                                             \
    T x, y, z;                                                                 \
  };                                                                           \
  struct alignas(a4) name##4 {                                                 \
    T x, y, z, w;                                                              \
  };                                                                           \
  inline constexpr name##1 make_##name##1(T x) { return {x}; }                 \
  inline constexpr name##2 make_##name##2(T x, T y) { return {x, y}; }         \
  inline constexpr name##3 make_##name##3(T x, T y, T z) { return {x, y, z}; } \
  inline constexpr name##4 make_##name##4(T x, T y, T z, T w) { return {x, y, z, w}; }

CUDA_EMU_VEC(signed char, char, 2, 4)
CUDA_EMU_VEC(unsigned char, uchar, 2, 4)
CUDA_EMU_VEC(short, short, 4, 8)
CUDA_EMU_VEC(unsigned short, ushort, 4, 8)
CUDA_EMU_VEC(int, int, 8, 16)
CUDA_EMU_VEC(unsigned int, uint, 8, 16)
CUDA_EMU_VEC(long, long, 16, 16)
CUDA_EMU_VEC(unsigned long, ulong, 16, 16)
CUDA_EMU_VEC(long long, longlong, 16, 16)
CUDA_EMU_VEC(unsigned long long, ulonglong, 16, 16)
CUDA_EMU_VEC(float, float, 8, 16)
CUDA_EMU_VEC(double, double, 16, 16)
#undef CUDA_EMU_VEC

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};
