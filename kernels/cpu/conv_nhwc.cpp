// conv2d on the CPU, NHWC ("channels last"): direct convolution, no im2col matrix.
//
// Every pass is one register tile: MR pixels x NV vectors of channels held in accumulators, fed by a
// broadcast of one input value per pixel and NV vector loads of packed weights (or of dy) per step:
//
//   forward        y[p][co]      = sum_(tap, ci) xpad[p*s + tap][ci]      * w[tap][ci][co]
//   backward-data  dx[phase p][ci] = sum_(tap, co) dypad[p + tap'][co]   * w[tap][ci][co]  (per stride phase)
//   backward-filter dw[tap, ci][co] = sum_p          xpad[p*s + tap][ci] * dy[p][co]
//
// The same tile shape as the SGEMM micro-kernel, but the A operand is read straight from the (zero-
// padded, per-image, L2-resident) activation through one pointer per pixel, so nothing is copied nine
// times. NHWC puts the channels of a pixel next to each other: the vector dimension is always a channel
// dimension, whatever the image width (7, 14 or 28 pixels for ResNet at 28x28).
//
// Weights stay in PyTorch's [co, ci, kh, kw] everywhere else (arena, checkpoints, CUDA); each call packs
// them into [tap][ci][co] blocks of NB = NV*VW output channels (a few KB to a few MB, once per call).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "hpdt/kernels/cpu/conv.h"
#include "simd.h"

namespace hpdt::kernels::cpu {

namespace {

using namespace simd;

// Tile shapes: NV channel vectors per tile (up to NV_MAX) and MR pixels (rows) for that NV, chosen so
// that the MR*NV accumulators, NV weight vectors and one broadcast fit the register file, and MR row
// pointers fit the 16 general registers.
#if defined(HPDT_CONV_NV_MAX)
// Tests only (tests/kernels/test_nhwc_variants): the AVX-512 tile logic (up to 4 channel vectors per
// tile) with whatever vectors this build has, so that it runs on CI machines without AVX-512.
constexpr int NV_MAX = HPDT_CONV_NV_MAX;
constexpr int mr_for(int nv) { return nv == 4 ? 6 : 8; }
#elif defined(__AVX512F__)
constexpr int NV_MAX = 4;
constexpr int mr_for(int nv) { return nv == 4 ? 6 : 8; }  // 24 + 4 + 1 or 16 + 2 + 1 of 32 zmm
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int NV_MAX = 2;
constexpr int mr_for(int) { return 6; }  // 12 + 2 + 1 of 16 ymm
#else
constexpr int NV_MAX = 2;
constexpr int mr_for(int) { return 4; }
#endif

// Calls f.template operator()<M>() for the M == m, 1 <= m <= MAX: remainder tiles get their own
// fully unrolled code.
template <int MAX, class F>
inline void with_rows(int m, F&& f) {
  if constexpr (MAX >= 1) {
    if (m == MAX) {
      f.template operator()<MAX>();
      return;
    }
    with_rows<MAX - 1>(m, f);
  }
}

// The step every pass is made of: acc[r][j] += a[r][at] * b[j*VW + lane] (one broadcast per row, NV
// vector loads, MR*NV FMAs).
template <int MR, int NV>
inline void outer_product_step(const float* const* a, int64_t at, const float* __restrict b, vec (&acc)[MR][NV]) {
  vec bv[NV];
#pragma GCC unroll 4
  for (int j = 0; j < NV; ++j) bv[j] = vload(b + j * VW);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const vec av = vset1(a[r][at]);
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[r][j] = vfma(av, bv[j], acc[r][j]);
  }
}

template <int MR, int NV>
inline void zero_tile(vec (&acc)[MR][NV]) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[r][j] = vzero();
}

// acc[r][j] = sum_t sum_c a[r][off[t] + c] * w[(t*C + c)*NV*VW + j*VW + lane].
template <int MR, int NV>
inline void tile_direct(const float* const* a, const int64_t* off, int ntaps, int64_t C, const float* __restrict w,
                        vec (&acc)[MR][NV]) {
  zero_tile(acc);
  for (int t = 0; t < ntaps; ++t) {
    const float* p[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) p[r] = a[r] + off[t];
    for (int64_t c = 0; c < C; ++c, w += NV * VW) outer_product_step<MR, NV>(p, c, w, acc);
  }
}

// y[r][lanes of block] = acc[r] (+ bias), writing only the `valid` channels of the block.
template <int MR, int NV>
inline void store_tile(const vec (&acc)[MR][NV], float* const* y, const float* bias, int valid) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const int n = std::clamp(valid - j * VW, 0, VW);
      if (n == 0) continue;
      vec v = acc[r][j];
      if (bias) v = vadd(v, vload(bias + j * VW));
      vstore_first(y[r] + j * VW, v, n);
    }
}

// Per-thread scratch that survives calls (no page faults from fresh allocations in the hot loop).
float* scratch(size_t n) {
  static thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Copies image `src` [h, w, c] into dst [h + top + bottom, w + left + right, c] with zero borders.
void pad_image(const float* src, int64_t h, int64_t w, int64_t c, int64_t top, int64_t bottom, int64_t left,
               int64_t right, float* dst) {
  const int64_t wp = w + left + right, row = wp * c;
  std::memset(dst, 0, size_t(top * row) * sizeof(float));
  for (int64_t y = 0; y < h; ++y) {
    float* d = dst + (top + y) * row;
    std::memset(d, 0, size_t(left * c) * sizeof(float));
    std::memcpy(d + left * c, src + y * w * c, size_t(w * c) * sizeof(float));
    std::memset(d + (left + w) * c, 0, size_t(right * c) * sizeof(float));
  }
  std::memset(dst + (top + h) * row, 0, size_t(bottom * row) * sizeof(float));
}

// How many pieces each of n images is split into so that every thread has work (1 when n covers them).
int64_t pieces_per_image(int64_t n, int64_t pixels) {
  const int64_t threads = omp_get_max_threads();
  if (n >= threads || omp_in_parallel()) return 1;
  return std::max<int64_t>(1, std::min<int64_t>((threads + n - 1) / n, pixels / 16));
}

// Output pixels [f0, f1) of a grid `gw` wide, each reading `in` at in_row/in_col strides and writing
// `out` at out_row/out_col strides: run as MR-pixel tiles (flattened over rows, so narrow images fill
// the tiles too) for every NB-channel block of the output.
struct GridPass {
  const float* in;
  int64_t in_row, in_col;  // floats between input rows / columns of consecutive grid pixels
  float* out;
  int64_t out_row, out_col;
  int64_t gw;
  const int64_t* off;  // tap offsets into `in`
  int ntaps;
  int64_t c_reduce;    // channels summed per tap
  int64_t c_out;       // channels written per pixel
  const float* wpack;  // [block][tap][c_reduce][NB]
  const float* bias;   // padded to the blocks, or null
};

template <int NV>
void run_grid(const GridPass& g, int64_t f0, int64_t f1) {
  constexpr int NB = NV * VW, MR = mr_for(NV);
  const int64_t blocks = (g.c_out + NB - 1) / NB, block_floats = int64_t(g.ntaps) * g.c_reduce * NB;
  for (int64_t cb = 0; cb < blocks; ++cb) {
    const float* wb = g.wpack + cb * block_floats;
    const float* bias = g.bias ? g.bias + cb * NB : nullptr;
    const int valid = int(std::min<int64_t>(NB, g.c_out - cb * NB));
    int64_t gy = f0 / g.gw, gx = f0 % g.gw;
    for (int64_t f = f0; f < f1; f += MR) {
      const int mr = int(std::min<int64_t>(MR, f1 - f));
      const float* a[MR];
      float* y[MR];
      for (int r = 0; r < mr; ++r) {
        a[r] = g.in + gy * g.in_row + gx * g.in_col;
        y[r] = g.out + gy * g.out_row + gx * g.out_col + cb * NB;
        if (++gx == g.gw) gx = 0, ++gy;
      }
      with_rows<MR>(mr, [&]<int M>() {
        vec acc[M][NV];
        tile_direct<M, NV>(a, g.off, g.ntaps, g.c_reduce, wb, acc);
        store_tile<M, NV>(acc, y, bias, valid);
      });
    }
  }
}

// The channel vectors per tile for `channels` output channels: as many as the channels fill, up to NV_MAX.
int pick_nv(int64_t channels) {
  const int64_t v = (channels + VW - 1) / VW;
  if (NV_MAX >= 4 && v >= 4) return 4;
  return v >= 2 ? 2 : 1;
}

// Calls f.template operator()<NV>() for nv = pick_nv(...) (1, 2, or 4 where NV_MAX allows it).
template <class F>
void with_nv(int nv, F&& f) {
  if (nv == 1) {
    f.template operator()<1>();
  } else if (nv == 2) {
    f.template operator()<2>();
  } else if constexpr (NV_MAX >= 4) {
    if (nv == 4) f.template operator()<4>();
  }
}

void run_grid(int nv, const GridPass& g, int64_t f0, int64_t f1) {
  with_nv(nv, [&]<int NV>() { run_grid<NV>(g, f0, f1); });
}

}  // namespace

void conv2d_forward_nhwc(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t oh = s.out_h(), ow = s.out_w(), taps = s.kh * s.kw;
  const int nv = pick_nv(s.c_out);
  const int64_t NB = int64_t(nv) * VW, blocks = (s.c_out + NB - 1) / NB;
  // weights -> [block][tap][ci][NB], zero lanes past c_out; bias padded the same way
  std::vector<float> wp(size_t(blocks * taps * s.c_in * NB), 0.0f), bp;
  for (int64_t co = 0; co < s.c_out; ++co)
    for (int64_t ci = 0; ci < s.c_in; ++ci)
      for (int64_t t = 0; t < taps; ++t)
        wp[size_t(((co / NB * taps + t) * s.c_in + ci) * NB + co % NB)] = w[(co * s.c_in + ci) * taps + t];
  if (bias) {
    bp.assign(size_t(blocks * NB), 0.0f);
    std::copy(bias, bias + s.c_out, bp.begin());
  }
  const int64_t hp = s.h + 2 * s.pad, wpd = s.w + 2 * s.pad;
  std::vector<int64_t> off(static_cast<size_t>(taps));
  for (int64_t t = 0; t < taps; ++t) off[size_t(t)] = ((t / s.kw) * wpd + t % s.kw) * s.c_in;
  const int64_t pixels = oh * ow, pieces = pieces_per_image(s.n, oh);
#pragma omp parallel for schedule(static) if (s.n * pieces > 1)
  for (int64_t task = 0; task < s.n * pieces; ++task) {
    const int64_t n = task / pieces, piece = task % pieces;
    const float* xn = x + n * s.h * s.w * s.c_in;
    if (s.pad > 0) {
      float* buf = scratch(size_t(hp * wpd * s.c_in));
      pad_image(xn, s.h, s.w, s.c_in, s.pad, s.pad, s.pad, s.pad, buf);
      xn = buf;
    }
    const GridPass g{xn, s.stride * wpd * s.c_in, s.stride * s.c_in, y + n * pixels * s.c_out, ow * s.c_out,
                     s.c_out, ow, off.data(), int(taps), s.c_in, s.c_out, wp.data(), bias ? bp.data() : nullptr};
    run_grid(nv, g, pixels * piece / pieces, pixels * (piece + 1) / pieces);
  }
}

// Transposed convolution by stride phases: input pixels (iy, ix) = (s*my + ry, s*mx + rx) of phase
// (ry, rx) receive dy at (my + dy_off, mx + dx_off) through the taps with ky = ry + pad (mod s); with
// dy zero-padded far enough on every side, each phase is a dense "forward" pass over its own grid.
void conv2d_backward_data_nhwc(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  const int64_t oh = s.out_h(), ow = s.out_w(), st = s.stride;
  const int nv = pick_nv(s.c_in);
  const int64_t NB = int64_t(nv) * VW, blocks = (s.c_in + NB - 1) / NB;
  struct Phase {
    int64_t ry, rx, gh, gw;
    std::vector<int64_t> ky, kx, oy, ox;  // taps and their dy offsets (rows, columns)
  };
  // floor division for the negative offsets of the first phases
  auto offset = [st](int64_t num) { return num >= 0 ? num / st : -((-num + st - 1) / st); };
  std::vector<Phase> phases;
  int64_t top = 0, bottom = 0, left = 0, right = 0;
  for (int64_t ry = 0; ry < st; ++ry)
    for (int64_t rx = 0; rx < st; ++rx) {
      Phase p{ry, rx, ry < s.h ? (s.h - ry + st - 1) / st : 0, rx < s.w ? (s.w - rx + st - 1) / st : 0, {}, {}, {}, {}};
      for (int64_t ky = 0; ky < s.kh; ++ky) {
        if ((ry + s.pad - ky) % st != 0) continue;
        for (int64_t kx = 0; kx < s.kw; ++kx) {
          if ((rx + s.pad - kx) % st != 0) continue;
          p.ky.push_back(ky), p.kx.push_back(kx);
          p.oy.push_back(offset(ry + s.pad - ky)), p.ox.push_back(offset(rx + s.pad - kx));
          top = std::max(top, -p.oy.back()), left = std::max(left, -p.ox.back());
          bottom = std::max(bottom, p.gh - 1 + p.oy.back() - (oh - 1));
          right = std::max(right, p.gw - 1 + p.ox.back() - (ow - 1));
        }
      }
      phases.push_back(std::move(p));
    }
  const int64_t dhp = oh + top + bottom, dwp = ow + left + right;
  // per phase: weights [block][tap][co][NB] (lanes: input channels), tap offsets into padded dy
  std::vector<std::vector<float>> wp(phases.size());
  std::vector<std::vector<int64_t>> offs(phases.size());
  for (size_t q = 0; q < phases.size(); ++q) {
    const Phase& p = phases[q];
    const int64_t taps = int64_t(p.ky.size());
    wp[q].assign(size_t(blocks * taps * s.c_out * NB), 0.0f);
    for (int64_t t = 0; t < taps; ++t) {
      offs[q].push_back(((p.oy[size_t(t)] + top) * dwp + p.ox[size_t(t)] + left) * s.c_out);
      for (int64_t co = 0; co < s.c_out; ++co)
        for (int64_t ci = 0; ci < s.c_in; ++ci)
          wp[q][size_t(((ci / NB * taps + t) * s.c_out + co) * NB + ci % NB)] =
              w[((co * s.c_in + ci) * s.kh + p.ky[size_t(t)]) * s.kw + p.kx[size_t(t)]];
    }
  }
  const bool padded = top + bottom + left + right > 0;
  const int64_t pieces = pieces_per_image(s.n, s.h);
#pragma omp parallel for schedule(static) if (s.n * pieces > 1)
  for (int64_t task = 0; task < s.n * pieces; ++task) {
    const int64_t n = task / pieces, piece = task % pieces;
    const float* dyn = dy + n * oh * ow * s.c_out;
    if (padded) {
      float* buf = scratch(size_t(dhp * dwp * s.c_out));
      pad_image(dyn, oh, ow, s.c_out, top, bottom, left, right, buf);
      dyn = buf;
    }
    float* dxn = dx + n * s.h * s.w * s.c_in;
    for (size_t q = 0; q < phases.size(); ++q) {
      const Phase& p = phases[q];
      const int64_t pixels = p.gh * p.gw, f0 = pixels * piece / pieces, f1 = pixels * (piece + 1) / pieces;
      float* out = dxn + (p.ry * s.w + p.rx) * s.c_in;
      if (p.ky.empty()) {  // no tap reaches this phase (kernel smaller than the stride): zero gradient
        for (int64_t f = f0; f < f1; ++f)
          std::fill_n(out + ((f / p.gw) * st * s.w + (f % p.gw) * st) * s.c_in, s.c_in, 0.0f);
        continue;
      }
      const GridPass g{dyn, dwp * s.c_out, s.c_out, out, st * s.w * s.c_in, st * s.c_in, p.gw, offs[q].data(),
                       int(p.ky.size()), s.c_out, s.c_in, wp[q].data(), nullptr};
      run_grid(nv, g, f0, f1);
    }
  }
}

namespace {

// Backward-filter as a GEMM over output pixels: dw[(tap, ci)][co] += xpad[pixel + roff(tap, ci)] * dy[pixel][co].
// Pixels go in chunks of KC: the chunk's dy columns for one block of NB output channels are packed into
// an L1-resident panel (zero lanes past c_out) that every MR-row tile of the pass reuses, and each
// pixel's padded-input offset is looked up once per k step. Without the panel every tile streamed dy
// from L2 for 7- and 14-pixel rows (102-117 GFLOP/s against 140 for the forward on 2 Zen 3 cores).
constexpr int64_t KC = 256;

template <int MR, int NV>
void filter_tile(const float* const* p, const int64_t* xoff, const float* __restrict panel, int64_t kc,
                 vec (&acc)[MR][NV]) {
  const float* pr[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) pr[r] = p[r];
  for (int64_t k = 0; k < kc; ++k, panel += NV * VW) outer_product_step<MR, NV>(pr, xoff[k], panel, acc);
}

// One group of `images` (padded input xpad, dy of the same images) into this thread's dwp [rows][co_pad].
template <int NV>
void filter_pass(const Conv2dShape& s, const float* xpad, int64_t images, int64_t image_floats, int64_t in_row,
                 const float* dy, const std::vector<int64_t>& roff_all, int64_t co_pad, float* dwp) {
  constexpr int NB = NV * VW, MR = mr_for(NV);
  const int64_t oh = s.out_h(), ow = s.out_w(), rows_total = int64_t(roff_all.size()), pixels = images * oh * ow;
  const int64_t blocks = (s.c_out + NB - 1) / NB, in_col = s.stride * s.c_in;
  alignas(64) float panel[KC * NB];
  int64_t xoff[KC];
  int64_t i = 0, oy = 0, ox = 0;  // the next pixel, counted without divisions
  for (int64_t k0 = 0; k0 < pixels; k0 += KC) {
    const int64_t kc = std::min(KC, pixels - k0);
    for (int64_t k = 0; k < kc; ++k) {
      xoff[k] = i * image_floats + oy * in_row + ox * in_col;
      if (++ox == ow) {
        ox = 0;
        if (++oy == oh) oy = 0, ++i;
      }
    }
    for (int64_t cb = 0; cb < blocks; ++cb) {
      const int valid = int(std::min<int64_t>(NB, s.c_out - cb * NB));
      const float* pan = panel;
      if (s.c_out == NB) {
        pan = dy + k0 * NB;  // one full block: dy's rows are the panel already
      } else {
        for (int64_t k = 0; k < kc; ++k) {
          const float* src = dy + (k0 + k) * s.c_out + cb * NB;
#pragma GCC unroll 4
          for (int j = 0; j < NV; ++j)
            vstore(panel + k * NB + j * VW, vload_first(src + j * VW, std::clamp(valid - j * VW, 0, VW)));
        }
      }
      for (int64_t r0 = 0; r0 < rows_total; r0 += MR) {
        const int mr = int(std::min<int64_t>(MR, rows_total - r0));
        with_rows<MR>(mr, [&]<int M>() {
          vec acc[M][NV];
          zero_tile(acc);
          const float* p[M];
          for (int r = 0; r < M; ++r) p[r] = xpad + roff_all[size_t(r0 + r)];
          filter_tile<M, NV>(p, xoff, pan, kc, acc);
#pragma GCC unroll 8
          for (int r = 0; r < M; ++r) {
            float* out = dwp + (r0 + r) * co_pad + cb * NB;
#pragma GCC unroll 4
            for (int j = 0; j < NV; ++j) vstore(out + j * VW, vadd(vload(out + j * VW), acc[r][j]));
          }
        });
      }
    }
  }
}

}  // namespace

void conv2d_backward_filter_nhwc(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                        float* dbias, bool accumulate) {
  const int64_t oh = s.out_h(), ow = s.out_w(), taps = s.kh * s.kw, rows = taps * s.c_in;
  const int nv = pick_nv(s.c_out);
  const int64_t NB = int64_t(nv) * VW, co_pad = (s.c_out + NB - 1) / NB * NB;
  const int64_t hp = s.h + 2 * s.pad, wpd = s.w + 2 * s.pad, image_floats = hp * wpd * s.c_in;
  std::vector<int64_t> roff(static_cast<size_t>(rows));  // row (tap, ci) -> offset from a pixel's padded position
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t ci = 0; ci < s.c_in; ++ci) roff[size_t(t * s.c_in + ci)] = ((t / s.kw) * wpd + t % s.kw) * s.c_in + ci;
  // Images in groups whose padded input and dy stay in L2 across all row blocks of a pass.
  const int64_t bytes = (image_floats + oh * ow * s.c_out) * int64_t(sizeof(float));
  const int64_t group = std::max<int64_t>(1, (256 << 10) / std::max<int64_t>(bytes, 1));
  const int threads = int(std::max<int64_t>(1, std::min<int64_t>(omp_in_parallel() ? 1 : omp_get_max_threads(), s.n)));
  // one private [rows][co_pad] (+ [co_pad] bias) per thread, summed at the end in thread order
  const int64_t slot = rows * co_pad + co_pad;
  std::vector<float> partial(size_t(threads * slot), 0.0f);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int tid = omp_get_thread_num();
    float* dwp = partial.data() + tid * slot;
    float* dbp = dwp + rows * co_pad;
    const int64_t n0 = s.n * tid / threads, n1 = s.n * (tid + 1) / threads;
    for (int64_t g0 = n0; g0 < n1; g0 += group) {
      const int64_t images = std::min(group, n1 - g0);
      const float* xin = x + g0 * s.h * s.w * s.c_in;
      if (s.pad > 0) {
        float* buf = scratch(size_t(images * image_floats));
        for (int64_t i = 0; i < images; ++i)
          pad_image(xin + i * s.h * s.w * s.c_in, s.h, s.w, s.c_in, s.pad, s.pad, s.pad, s.pad, buf + i * image_floats);
        xin = buf;
      }
      const float* dyg = dy + g0 * oh * ow * s.c_out;
      with_nv(nv, [&]<int NV>() {
        filter_pass<NV>(s, xin, images, image_floats, s.stride * wpd * s.c_in, dyg, roff, co_pad, dwp);
      });
      if (dbias)
        for (int64_t p = 0; p < images * oh * ow; ++p)
          for (int64_t co = 0; co < s.c_out; ++co) dbp[co] += dyg[p * s.c_out + co];
    }
    // Sum the threads' partials in thread order, rows split over the threads, into dw [co, ci, kh, kw].
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t t = row / s.c_in, ci = row % s.c_in;
      for (int64_t co = 0; co < s.c_out; ++co) {
        float& out = dw[(co * s.c_in + ci) * taps + t];
        float acc = accumulate ? out : 0.0f;
        for (int th = 0; th < threads; ++th) acc += partial[size_t(th * slot + row * co_pad + co)];
        out = acc;
      }
    }
  }
  if (dbias)
    for (int64_t co = 0; co < s.c_out; ++co) {
      float acc = accumulate ? dbias[co] : 0.0f;
      for (int th = 0; th < threads; ++th) acc += partial[size_t(th * slot + rows * co_pad + co)];
      dbias[co] = acc;
    }
}

}  // namespace hpdt::kernels::cpu
