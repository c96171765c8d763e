// Optimizer steps on flat f32 buffers, following torch.optim (1.13) operation for operation. The
// per-element arithmetic is hpdt/kernels/math/optim_math.h, the same functions the CUDA kernels call.
#include "hpdt/kernels/cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "hpdt/core/error.h"
#include "hpdt/core/float16.h"
#include "hpdt/kernels/math/optim_math.h"

namespace hpdt::kernels {

double GradStats::norm() const { return std::sqrt(sum_squares); }

namespace cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
constexpr int64_t kSumBlock = 4096;  // sum_squares / grad_stats: fixed blocks, summed in order
}  // namespace

void sgd_step(int64_t n, const SgdOptions& o, bool first_step, float* p, const float* g, float* buf) {
  const math::SgdScalars c = math::sgd_scalars(o, first_step);
  const bool momentum = o.momentum != 0.0f;  // without momentum the buffer is never touched
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float unused = 0;
    math::sgd_update(p[i], momentum ? buf[i] : unused, g[i], c);
  }
}

void adamw_step(int64_t n, const AdamWOptions& o, int64_t step, float* p, const float* g, float* m, float* v) {
  const math::AdamWScalars c = math::adamw_scalars(o, step);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) math::adamw_update(p[i], m[i], v[i], g[i], c);
}

double sum_squares(int64_t n, const float* g) {
  // fixed 4096-element blocks, each summed in double, block sums added in order: the same bits for any
  // thread count
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0;
    const int64_t end = std::min(n, (b + 1) * kSumBlock);
    for (int64_t i = b * kSumBlock; i < end; ++i) s = math::add_square(s, g[i]);
    partial[size_t(b)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void scale(int64_t n, float s, float* x) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = math::optim_mul(x[i], s);
}

bool has_nonfinite(int64_t n, const float* x) {
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) bad |= int(math::optim_nonfinite(x[i]));
  return bad != 0;
}

template <class G>
void grad_stats(int64_t n, const G* g, float inv_scale, GradStats& stats) {
  // The blocks of sum_squares over the unscaled values: for f32 gradients the same bits as
  // scale(g, inv_scale) followed by sum_squares (and has_nonfinite).
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0;
    const int64_t end = std::min(n, (b + 1) * kSumBlock);
    for (int64_t i = b * kSumBlock; i < end; ++i) {
      const float u = math::optim_mul(to_f32(g[i]), inv_scale);
      s = math::add_square(s, u);
      bad |= int(math::optim_nonfinite(u));
    }
    partial[size_t(b)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  stats.sum_squares += total;
  stats.nonfinite |= bad;
}

template <class G, class M>
void fused_step(int64_t n, const FusedStepOptions& o, const GradStats* stats, float* p, const G* g, float* state1,
                float* state2, M* model) {
  HPDT_CHECK(stats != nullptr || !(o.max_norm > 0), "fused_step: clipping (max_norm ", o.max_norm,
             ") needs grad_stats");
  if (stats && stats->nonfinite) return;  // GradScaler: skip the step, nothing changes
  const float inv = o.inv_scale;
  const float clip = stats ? math::clip_coefficient(stats->sum_squares, o.max_norm) : 1.0f;
  if (o.kind == OptimizerKind::adamw) {
    const math::AdamWScalars c = math::adamw_scalars(o.adamw, o.step);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      math::adamw_update(p[i], state1[i], state2[i], math::unscale_clip(to_f32(g[i]), inv, clip), c);
      if (model) model[i] = from_f32<M>(p[i]);
    }
  } else {
    const math::SgdScalars c = math::sgd_scalars(o.sgd, o.first_step);
    const bool momentum = o.sgd.momentum != 0.0f;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      float unused = 0;
      math::sgd_update(p[i], momentum ? state1[i] : unused, math::unscale_clip(to_f32(g[i]), inv, clip), c);
      if (model) model[i] = from_f32<M>(p[i]);
    }
  }
}

#define HPDT_INSTANTIATE_GRAD(G)                                                                                    \
  template void grad_stats<G>(int64_t, const G*, float, GradStats&);                                                \
  template void fused_step<G, float>(int64_t, const FusedStepOptions&, const GradStats*, float*, const G*, float*,  \
                                     float*, float*);                                                               \
  template void fused_step<G, f16_t>(int64_t, const FusedStepOptions&, const GradStats*, float*, const G*, float*,  \
                                     float*, f16_t*);                                                               \
  template void fused_step<G, bf16_t>(int64_t, const FusedStepOptions&, const GradStats*, float*, const G*, float*, \
                                      float*, bf16_t*);
HPDT_INSTANTIATE_GRAD(float)
HPDT_INSTANTIATE_GRAD(f16_t)
HPDT_INSTANTIATE_GRAD(bf16_t)
#undef HPDT_INSTANTIATE_GRAD

}  // namespace cpu
}  // namespace hpdt::kernels
