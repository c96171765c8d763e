// compare_checkpoints A B [--atol X] [--rtol Y]: compares the parameters of two hpdt checkpoints
// element by element; prints the largest differences; exit 0 when every |a-b| <= atol + rtol*|b|
// (atol = rtol = 0: bitwise equality), 1 otherwise, 2 on bad input.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "hpdt/core/error.h"
#include "hpdt/io/checkpoint.h"

int main(int argc, char** argv) {
  std::string a_path, b_path;
  double atol = 0, rtol = 0;
  bool include_optimizer = false;
  CLI::App app{"compare the parameters of two hpdt checkpoints"};
  app.add_option("a", a_path)->required();
  app.add_option("b", b_path)->required();
  app.add_option("--atol", atol);
  app.add_option("--rtol", rtol);
  app.add_flag("--optimizer", include_optimizer, "compare optimizer state too");
  CLI11_PARSE(app, argc, argv);
  try {
    auto a = hpdt::io::load_checkpoint(a_path), b = hpdt::io::load_checkpoint(b_path);
    auto compare = [&](const auto& ma, const auto& mb, const char* what) {
      int bad = 0;
      double worst = 0;
      std::string worst_name;
      if (ma.size() != mb.size()) {
        std::printf("%s: %zu tensors vs %zu\n", what, ma.size(), mb.size());
        return 1;
      }
      for (const auto& [name, ta] : ma) {
        auto it = mb.find(name);
        if (it == mb.end() || it->second.numel() != ta.numel() || ta.dtype() != hpdt::DType::f32) {
          std::printf("%s: %s missing or different in %s\n", what, name.c_str(), b_path.c_str());
          ++bad;
          continue;
        }
        const float* x = ta.template data<float>();
        const float* y = it->second.template data<float>();
        for (int64_t i = 0; i < ta.numel(); ++i) {
          const double d = std::fabs(double(x[i]) - double(y[i]));
          const double excess = d - (atol + rtol * std::fabs(double(y[i])));
          if (d > worst) {
            worst = d;
            worst_name = name + "[" + std::to_string(i) + "]";
          }
          if (excess > 0 || std::isnan(d)) ++bad;
        }
      }
      std::printf("%s: %zu tensors, max |a-b| = %.3g at %s, %d element(s) out of tolerance\n", what, ma.size(), worst,
                  worst_name.c_str(), bad);
      return bad ? 1 : 0;
    };
    int rc = compare(a.params, b.params, "parameters");
    if (include_optimizer) rc |= compare(a.optimizer, b.optimizer, "optimizer");
    if (a.step != b.step) {
      std::printf("steps differ: %lld vs %lld\n", (long long)a.step, (long long)b.step);
      rc = 1;
    }
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_checkpoints: %s\n", e.what());
    return 2;
  }
}
