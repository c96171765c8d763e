// CPU oracle of the gradient-compression kernels: top-k selection, QSGD quantisation, sparse updates.
// The same selection rule, rounding, random numbers and bit layout as comm/src/compression.cpp.
#include "hpdt/kernels/cpu/compress.h"

#include <algorithm>
#include <cstring>
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

// The k-th largest key of |x| (bits with the sign cleared: for IEEE floats the bit order is the order of
// |x|) by radix select: three histogram passes over 11, 11 and 9 bits, each counting only the keys that
// share the digits fixed so far; then one pass collects the keys above it and, in index order, as many keys
// equal to it as k still needs. Streaming O(n), where nth_element on an index array was random access
// through x (23.5 M normal values, ResNet-50's gradient size, k = 1 %: 67-77 ms against 480-510 ms on one
// core shared with a training run).
void topk_select(int64_t n, const float* x, int64_t k, int32_t* indices, float* values) {
  if (k == 0) return;
  auto key = [x](int64_t i) { return f32_bits(x[i]) & 0x7fffffffu; };
  struct Digit {
    int shift, bits;
  };
  constexpr Digit kDigits[3] = {{20, 11}, {9, 11}, {0, 9}};
  uint32_t prefix = 0, fixed = 0;  // the threshold's bits found so far, and which bits those are
  int64_t above = 0;               // keys known to be larger than the threshold
  std::vector<int64_t> hist;
  for (const Digit d : kDigits) {
    const uint32_t mask = (1u << d.bits) - 1;
    hist.assign(size_t(mask) + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t kk = key(i);
      if ((kk & fixed) == prefix) ++hist[(kk >> d.shift) & mask];
    }
    // From the top digit down until the keys counted reach k; the candidates number at least k - above.
    uint32_t v = mask;
    for (int64_t need = k - above; hist[v] < need; --v) {
      need -= hist[v];
      above += hist[v];
    }
    prefix |= v << d.shift;
    fixed |= mask << d.shift;
  }
  const uint32_t threshold = prefix;
  int64_t ties = k - above, j = 0;  // keys equal to the threshold still to take, lowest index first
  for (int64_t i = 0; i < n && j < k; ++i) {
    const uint32_t kk = key(i);
    if (kk > threshold || (kk == threshold && ties-- > 0)) {
      indices[j] = int32_t(i);
      values[j++] = x[i];
    }
  }
}

void qsgd_quantize(int64_t n, const float* x, int bits, const QsgdRandom& rng, uint8_t* packed, float* scales,
                   float* residual) {
  const int L = qsgd::levels(bits);
  const int64_t chunks = (n + kQsgdChunk - 1) / kQsgdChunk;
  if (n > 0) std::memset(packed, 0, size_t((n * bits + 7) / 8));  // (n = 0: packed may be null)
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
