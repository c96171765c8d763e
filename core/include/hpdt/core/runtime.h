// What accelerator this process can use. Everything here answers without throwing: a build without
// CUDA, a machine without a driver ("driver version is insufficient") or without a GPU all mean
// "no GPU", and the reason says which.
#pragma once

#include <string>

namespace hpdt {

bool built_with_cuda();
int cuda_device_count();              // 0 when no usable GPU
bool cuda_available();                // cuda_device_count() > 0
std::string cuda_unavailable_reason();  // empty when a GPU is usable
void cuda_set_device(int device);     // throws hpdt::Error (CUDA error or built without CUDA)
int cuda_current_device();            // throws like cuda_set_device
std::string cuda_device_name(int device);  // "" when unknown
int cuda_driver_version();            // e.g. 13000; 0 when unknown
int cuda_runtime_version();           // e.g. 13000; 0 when unknown

}  // namespace hpdt
