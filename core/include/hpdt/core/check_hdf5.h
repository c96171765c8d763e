// HDF5 return codes: h5check(value, "what", "where") returns value when it is >= 0 and otherwise
// throws hpdt::Error carrying the HDF5 error stack (innermost messages), what was attempted and
// where (file and dataset). Call quiet_hdf5_errors() once so HDF5 does not also print its own stack.
#pragma once

#include <hdf5.h>

#include <source_location>
#include <string>

#include "hpdt/core/error.h"

namespace hpdt {

namespace detail {
inline herr_t h5_walk(unsigned n, const H5E_error2_t* e, void* client) {
  auto* out = static_cast<std::string*>(client);
  if (n < 4 && e && e->desc) {  // the innermost few frames say what went wrong
    if (!out->empty()) out->append("; ");
    out->append(e->desc);
  }
  return 0;
}
inline std::string h5_error_stack() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk, &s);
  H5Eclear2(H5E_DEFAULT);
  return s;
}
}  // namespace detail

inline void quiet_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

template <class T>
T h5check(T value, const std::string& what, const std::string& where,
          std::source_location loc = std::source_location::current()) {
  if (value < 0) [[unlikely]] {
    std::string stack = detail::h5_error_stack();
    throw Error("HDF5: " + what + " failed" + (stack.empty() ? "" : " (" + stack + ")"), where, loc);
  }
  return value;
}

}  // namespace hpdt
