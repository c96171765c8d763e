// An environment variable set (or unset) for a scope. hpdt's kernel tuning switches (HPDT_GEMM_V3_TILE,
// HPDT_GEMM_V3_PIPELINE, HPDT_ATTENTION_V2_TILES, ...) are read from the environment at every call, so that a
// benchmark line can set one for a whole run; tests and benchmarks pin them for one case this way.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "hpdt/core/error.h"

namespace hpdt {

// Sets `name` to `value` (null: unsets it) until the end of the scope, then restores what it was. Not thread-safe:
// setenv and getenv are not.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// A two-way pin read from the environment: -1 where `name` is unset, 0 where it is `first`, 1 where it is `second`;
// anything else is an error naming the variable and both values ("HPDT_BN_FLAT=yes: expected on or off").
inline int env_pin(const char* name, const char* first, const char* second) {
  const char* e = std::getenv(name);
  if (e == nullptr) return -1;
  if (std::strcmp(e, first) == 0) return 0;
  HPDT_CHECK(std::strcmp(e, second) == 0, name, "=", e, ": expected ", first, " or ", second);
  return 1;
}

// A two-way switch with a default: `name` unset or `first`: true; `second`: false; anything else an error (env_pin).
inline bool env_switch(const char* name, const char* first, const char* second) {
  return env_pin(name, first, second) != 1;
}

}  // namespace hpdt
