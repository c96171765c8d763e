// Where a tensor's memory lives.
#pragma once

#include <cstdint>
#include <string>

namespace hpdt {

struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static constexpr Device cpu() { return {Kind::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return {Kind::cuda, i}; }
  constexpr bool is_cpu() const { return kind == Kind::cpu; }
  constexpr bool is_cuda() const { return kind == Kind::cuda; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  friend constexpr bool operator==(const Device&, const Device&) = default;
};

// "cpu", "cuda" or "cuda:N"; throws hpdt::Error otherwise.
Device parse_device(const std::string& name);

}  // namespace hpdt
