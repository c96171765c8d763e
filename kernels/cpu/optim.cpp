// Optimizer steps on flat f32 buffers, following torch.optim (1.13) operation for operation.
#include "hpdt/kernels/cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hpdt::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
}

void sgd_step(int64_t n, const SgdOptions& o, bool first_step, float* p, const float* g, float* buf) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float d = o.weight_decay != 0.0f ? g[i] + o.weight_decay * p[i] : g[i];
    if (o.momentum != 0.0f) {
      buf[i] = first_step ? d : o.momentum * buf[i] + (1.0f - o.dampening) * d;
      d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
    }
    p[i] -= o.lr * d;
  }
}

void adamw_step(int64_t n, const AdamWOptions& o, int64_t step, float* p, const float* g, float* m, float* v) {
  const double bc1 = 1.0 - std::pow(double(o.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(o.beta2), double(step));
  const float step_size = float(double(o.lr) / bc1);
  const float bc2_sqrt = float(std::sqrt(bc2));
  const float decay = 1.0f - o.lr * o.weight_decay;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    p[i] *= decay;
    m[i] = m[i] * o.beta1 + (1.0f - o.beta1) * g[i];
    v[i] = v[i] * o.beta2 + (1.0f - o.beta2) * g[i] * g[i];
    const float denom = std::sqrt(v[i]) / bc2_sqrt + o.eps;
    p[i] -= step_size * (m[i] / denom);
  }
}

double sum_squares(int64_t n, const float* g) {
  // fixed 4096-element blocks, each summed in double, block sums added in order: the same bits for any
  // thread count
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0;
    const int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; ++i) s += double(g[i]) * double(g[i]);
    partial[size_t(b)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void scale(int64_t n, float s, float* x) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

bool has_nonfinite(int64_t n, const float* x) {
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(x[i]);
  return bad != 0;
}

}  // namespace hpdt::kernels::cpu
