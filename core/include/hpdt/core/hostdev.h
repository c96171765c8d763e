// Macros that let one header serve host C++ and CUDA device code.
#pragma once

#if defined(__CUDACC__)
#define HPDT_HD __host__ __device__
#define HPDT_HD_INLINE __host__ __device__ __forceinline__
#else
#define HPDT_HD
#define HPDT_HD_INLINE inline
#endif

#if defined(__CUDA_ARCH__)
#define HPDT_DEVICE_CODE 1
#else
#define HPDT_DEVICE_CODE 0
#endif
