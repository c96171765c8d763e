// CPU reductions. Deterministic by construction: the input is cut into fixed blocks (independent of the
// thread count), each block summed in a fixed lane order, and the block sums added pairwise.
#include "hpdt/kernels/cpu/reduce.h"

#include <vector>

namespace hpdt::kernels::cpu {

namespace {
constexpr int64_t kBlock = 4096;
constexpr int kLanes = 16;  // one AVX-512 vector of f32; the compiler vectorises the lane loop

template <class T>
float block_sum(const T* x, int64_t n) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += to_f32(x[i + l]);
  for (int l = 0; i < n; ++i, ++l) lanes[l] += to_f32(x[i]);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
  return lanes[0];
}
}  // namespace

void sum(const Tensor& x, Tensor& out) {
  check_dtype("sum", "out", out, DType::f32);
  HPDT_CHECK(out.numel() == 1, "sum: out must have one element, got ", out.str());
  dispatch_floating(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.data());
    const int64_t n = x.numel();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<float> partial(size_t(std::max<int64_t>(blocks, 1)), 0.0f);
#pragma omp parallel for schedule(static) if (blocks > 4)
    for (int64_t b = 0; b < blocks; ++b) partial[size_t(b)] = block_sum(p + b * kBlock, std::min(kBlock, n - b * kBlock));
    for (size_t w = 1; w < partial.size(); w *= 2)  // pairwise: error grows with log(blocks)
      for (size_t i = 0; i + w < partial.size(); i += 2 * w) partial[i] += partial[i + w];
    *out.data<float>() = partial[0];
  });
}

}  // namespace hpdt::kernels::cpu
