// Element types of tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hpdt/core/float16.h"

namespace hpdt {

enum class DType : uint8_t { f32, f16, bf16, i32, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// Parses "f32", "float32", "fp32", "f16", "fp16", "half", "bf16", "bfloat16", "i32", "int32", "u8", "uint8".
// Throws hpdt::Error naming the text and the accepted names.
DType parse_dtype(std::string_view name);

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<f16_t> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<bf16_t> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Calls f(T{}) with T the C++ type of a floating dtype (float, f16_t, bf16_t); throws for others.
template <class F>
decltype(auto) dispatch_floating(DType t, std::string_view op, F&& f);

}  // namespace hpdt

#include "hpdt/core/error.h"

template <class F>
decltype(auto) hpdt::dispatch_floating(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f16: return f(f16_t{});
    case DType::bf16: return f(bf16_t{});
    default: break;
  }
  HPDT_FAIL(op, ": dtype ", dtype_name(t), " is not supported (expected f32, f16 or bf16)");
}
