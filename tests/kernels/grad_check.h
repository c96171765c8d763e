// Central finite differences in double precision for the layer gradient tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpdt/core/philox.h"

namespace hpdt::test {

inline std::vector<double> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = lo + (hi - lo) * double(rng.uniform());
  return v;
}

// Compares analytic[i] with (loss(x + h e_i) - loss(x - h e_i)) / 2h for up to `max_checks` indices
// spread over x (all of them when x is small). loss() reads x by reference.
inline void expect_gradient(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                            const std::function<double()>& loss, double rtol = 1e-6, double atol = 1e-8,
                            size_t max_checks = 64, double h = 1e-5) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const size_t stride = x.size() <= max_checks ? 1 : x.size() / max_checks;
  size_t failures = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const double keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    const double numeric = (lp - lm) / (2 * h);
    if (std::abs(numeric - analytic[i]) > atol + rtol * std::abs(numeric)) {
      if (++failures <= 5)
        ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric;
    }
  }
  EXPECT_EQ(failures, 0u) << what;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace hpdt::test
