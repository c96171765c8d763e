// CPU oracle of the gradient-compression kernels: top-k selection, QSGD quantisation, sparse updates.
// The same selection rule, rounding, random numbers and bit layout as comm/src/compression.cpp.
#include "hpdt/kernels/cpu/compress.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

namespace hpdt::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;

// comm's Qsgd::put: OR the value's bits into a zeroed stream.
void put(uint8_t* buf, int64_t i, int bits, uint32_t v) {
  const int64_t bit = i * bits;
  uint32_t w = v << (bit & 7);
  for (int64_t b = bit >> 3; w; ++b, w >>= 8) buf[b] |= uint8_t(w);
}
}  // namespace

void topk_select(int64_t n, const float* x, int64_t k, int32_t* indices, float* values) {
  if (k == 0) return;
  std::vector<uint32_t> key(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) key[size_t(i)] = f32_bits(x[i]) & 0x7fffffffu;
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  // Largest |x| first; ties broken by index so the choice is a pure function of the values (as comm's TopK).
  auto larger = [&](int32_t a, int32_t b) {
    const uint32_t ka = key[size_t(a)], kb = key[size_t(b)];
    return ka > kb || (ka == kb && a < b);
  };
  if (k < n) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), larger);
  std::sort(idx.begin(), idx.begin() + k);
  for (int64_t j = 0; j < k; ++j) {
    indices[j] = idx[size_t(j)];
    values[j] = x[idx[size_t(j)]];
  }
}

void qsgd_quantize(int64_t n, const float* x, int bits, const QsgdRandom& rng, uint8_t* packed, float* scales,
                   float* residual) {
  const int L = qsgd::levels(bits);
  const int64_t chunks = (n + kQsgdChunk - 1) / kQsgdChunk;
  std::memset(packed, 0, size_t((n * bits + 7) / 8));
  // Chunks own whole bytes (512 values x bits bits), so they pack independently.
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t lo = ch * kQsgdChunk, hi = std::min(n, lo + kQsgdChunk);
    float s = 0;
    for (int64_t i = lo; i < hi; ++i) s = std::max(s, std::fabs(x[i]));
    scales[ch] = s;
    const float st = qsgd::step(s, L);
    for (int64_t i = lo; i < hi; ++i) {
      const int q = qsgd::level(x[i], s, L, philox_u32(rng.seed, rng.stream, rng.offset + uint64_t(i)));
      put(packed, i, bits, uint32_t(q + L));
      if (residual) residual[i] = qsgd::residual(x[i], q, st);
    }
  }
}

void qsgd_dequantize(int64_t n, const uint8_t* packed, const float* scales, int bits, float* out, bool accumulate) {
  const int L = qsgd::levels(bits);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const int q = int(qsgd::get(packed, i, bits)) - L;
    const float st = qsgd::step(scales[i / kQsgdChunk], L);
    out[i] = accumulate ? qsgd::decode_add(out[i], q, st) : qsgd::decode(q, st);
  }
}

void sparse_accumulate(int64_t k, const int32_t* indices, const float* values, float* out) {
  for (int64_t j = 0; j < k; ++j) out[indices[j]] += values[j];
}

void sparse_fill(int64_t k, const int32_t* indices, float value, float* x) {
  for (int64_t j = 0; j < k; ++j) x[indices[j]] = value;
}

}  // namespace hpdt::kernels::cpu
