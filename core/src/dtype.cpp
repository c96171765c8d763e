#include "hpdt/core/dtype.h"

#include "hpdt/core/device.h"
#include "hpdt/core/error.h"

namespace hpdt {

DType parse_dtype(std::string_view n) {
  if (n == "f32" || n == "fp32" || n == "float32" || n == "float") return DType::f32;
  if (n == "f16" || n == "fp16" || n == "float16" || n == "half") return DType::f16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "i32" || n == "int32" || n == "int") return DType::i32;
  if (n == "u8" || n == "uint8") return DType::u8;
  HPDT_FAIL("unknown dtype '", n, "' (expected f32, f16, bf16, i32 or u8)");
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  if (name.rfind("cuda:", 0) == 0 && name.size() > 5) {
    int idx = 0;
    for (size_t i = 5; i < name.size(); ++i) {
      if (name[i] < '0' || name[i] > '9') HPDT_FAIL("unknown device '", name, "' (expected cpu, cuda or cuda:N)");
      idx = idx * 10 + (name[i] - '0');
    }
    return Device::cuda(idx);
  }
  HPDT_FAIL("unknown device '", name, "' (expected cpu, cuda or cuda:N)");
}

}  // namespace hpdt
