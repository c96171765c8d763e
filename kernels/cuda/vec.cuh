// 16-byte vector loads and stores of f32/f16/bf16 rows, widened to f32 in registers (private to
// kernels/cuda; shared by the memory-bound layer kernels).
#pragma once

#include <cstdint>

#include "hpdt/core/float16.h"

namespace hpdt::kernels::cuda {

template <class T>
constexpr int kVec = int(16 / sizeof(T));  // elements per 16-byte vector

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T e[V];
};

template <int V, class T>
__device__ __forceinline__ void load(const T* p, float (&v)[V]) {
  const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] = to_f32(pk.e[k]);
}

template <int V, class T>
__device__ __forceinline__ void store(T* p, const float (&v)[V]) {
  Pack<T, V> pk;
#pragma unroll
  for (int k = 0; k < V; ++k) pk.e[k] = from_f32<T>(v[k]);
  *reinterpret_cast<Pack<T, V>*>(p) = pk;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
inline bool aligned8(const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }
inline bool aligned4(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; }

}  // namespace hpdt::kernels::cuda
