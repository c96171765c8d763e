// Shim <cudnn.h> of the CPU emulator of CUDA: only the status type that kernels/cuda/cudnn_check.cuh names.
// cuDNN itself is not emulated: the vendor convolution is replaced by tests/cuda_emu/vendor_stubs.cpp.
#pragma once

#include <cuda_runtime.h>

typedef enum {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
} cudnnStatus_t;

typedef struct cudnnContext* cudnnHandle_t;

inline const char* cudnnGetErrorString(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS"
                                   : "the vendor backend is not available in the CUDA emulator";
}
