// NCHW <-> NHWC on the CPU: each image is a [rows, cols] matrix transposed in 32 x 32 tiles, so that
// both the reads and the writes stay within a few cache lines per tile. One channel (grey images) is
// a plain copy.
#include "hpdt/kernels/cpu/layout.h"

#include <algorithm>
#include <cstring>

namespace hpdt::kernels::cpu {

namespace {
void transpose_images(int64_t n, int64_t rows, int64_t cols, const float* x, float* y) {
  if (rows == 1 || cols == 1) {
    std::memcpy(y, x, size_t(n * rows * cols) * sizeof(float));
    return;
  }
  constexpr int64_t T = 32;
  const int64_t row_tiles = (rows + T - 1) / T, col_tiles = (cols + T - 1) / T;
#pragma omp parallel for schedule(static) if (n * rows * cols > (1 << 15))
  for (int64_t task = 0; task < n * row_tiles * col_tiles; ++task) {
    const int64_t i = task / (row_tiles * col_tiles), rt = task / col_tiles % row_tiles, ct = task % col_tiles;
    const float* xi = x + i * rows * cols;
    float* yi = y + i * rows * cols;
    const int64_t r1 = std::min(rows, (rt + 1) * T), c1 = std::min(cols, (ct + 1) * T);
    for (int64_t r = rt * T; r < r1; ++r)
      for (int64_t c = ct * T; c < c1; ++c) yi[c * rows + r] = xi[r * cols + c];
  }
}
}  // namespace

void nchw_to_nhwc(int64_t n, int64_t c, int64_t hw, const float* x, float* y) { transpose_images(n, c, hw, x, y); }
void nhwc_to_nchw(int64_t n, int64_t c, int64_t hw, const float* x, float* y) { transpose_images(n, hw, c, x, y); }

}  // namespace hpdt::kernels::cpu
