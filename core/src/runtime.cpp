#include "hpdt/core/runtime.h"

#include <mutex>

#include "hpdt/core/error.h"

#if HPDT_HAVE_CUDA
#include "hpdt/core/check_cuda.h"
#endif

namespace hpdt {

namespace {
struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
#if HPDT_HAVE_CUDA
    const cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      r.count = 0;
      r.reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
      (void)cudaGetLastError();  // do not leave the error for the next caller
    } else if (r.count == 0) {
      r.reason = "no CUDA device present";
    }
#else
    r.reason = "hpdt was built without CUDA (HPDT_CUDA=OFF or no nvcc at configure time)";
#endif
    return r;
  }();
  return p;
}
}  // namespace

bool built_with_cuda() { return HPDT_HAVE_CUDA != 0; }
int cuda_device_count() { return probe().count; }
bool cuda_available() { return probe().count > 0; }
std::string cuda_unavailable_reason() { return probe().reason; }

void cuda_set_device(int device) {
#if HPDT_HAVE_CUDA
  HPDT_CHECK(device >= 0 && device < cuda_device_count(), "CUDA device ", device, " does not exist (",
             cuda_device_count(), " usable; ", cuda_unavailable_reason(), ")");
  HPDT_CUDA_CHECK(cudaSetDevice(device));
#else
  HPDT_FAIL("cannot select CUDA device ", device, ": ", cuda_unavailable_reason());
#endif
}

int cuda_current_device() {
#if HPDT_HAVE_CUDA
  int d = 0;
  HPDT_CUDA_CHECK(cudaGetDevice(&d));
  return d;
#else
  HPDT_FAIL("no current CUDA device: ", cuda_unavailable_reason());
#endif
}

std::string cuda_device_name(int device) {
#if HPDT_HAVE_CUDA
  if (device < 0 || device >= cuda_device_count()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return prop.name;
#else
  (void)device;
  return "";
#endif
}

int cuda_driver_version() {
#if HPDT_HAVE_CUDA
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
#else
  return 0;
#endif
}

int cuda_runtime_version() {
#if HPDT_HAVE_CUDA
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
#else
  return 0;
#endif
}

}  // namespace hpdt
