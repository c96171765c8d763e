// GPU conv2d against the CPU oracle (kernels/cpu/conv.cpp), every implementation x direction x dtype:
//   v1 (SIMT), v2 (tensor cores: f16, bf16) and cuDNN, called through hpdt/kernels/cuda/conv.h; then the public
//   entry points (device dispatch, the vendor switch, the fused epilogue, the error messages) on GPU tensors.
// NHWC (kernels/cuda/conv_nhwc.cu, cuDNN with NHWC descriptors) against the CPU NHWC oracle
//   (kernels/cpu/conv_nhwc.cpp, itself checked against the NCHW oracle by test_nhwc_cpu), the same way, with
//   shapes for both of its activation loaders: channel counts that are multiples of 8 (16-byte cp.async) and odd
//   ones (3, 5, 17: element gathers); and the CUDA NCHW <-> NHWC transposes (kernels/cuda/layout.cu), bit-exact.
// Inputs are fresh uniform [-1, 1) numbers, rounded through the dtype for the oracle (round_through); y and dx are
// poisoned (NaN) before each run; dw and dbias, accumulated (+=), start from random values. Built again for the
// CPU emulator of CUDA (HPDT_CUDA_EMU), the same cases run smaller and without cuDNN.
//
// Tolerances, for a sum of L products of numbers in [-1, 1) (L = ci*kh*kw forward, co*kh*kw backward-data,
// n*oh*ow backward-filter; partial sums are O(sqrt(L))):
//   f32: rtol 1e-5, atol 1e-6 + 4e-7 * L. Two f32 sums of L terms in different orders differ by about
//        eps * L / 3 = 2e-8 * L where they cancel; 4e-7 * L is 20x that and still far below one missing term.
//   f16, bf16: default_tolerance (one rounding of the output to the storage type) plus the same 4e-7 * L: both
//        sides see the same rounded inputs, products are exact in f32 and the sums are f32.
//   cuDNN additionally: its heuristics may pick Winograd or FFT algorithms, whose transforms round intermediates
//        (in the storage type for f16/bf16): + max(eps_dt, 2^-17) * sqrt(L) absolute, and rtol x 10 for f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cuda_oracle.h"
#include "hpdt/core/cuda_graph.h"
#include "hpdt/core/env.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/conv.h"
#include "hpdt/kernels/cpu/activation.h"
#include "hpdt/kernels/cpu/conv.h"
#include "hpdt/kernels/cpu/layout.h"
#include "hpdt/kernels/cpu/norm.h"
#include "hpdt/kernels/layout.h"
#include "hpdt/kernels/norm.h"
#include "hpdt_test.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/conv.h"
#include "hpdt/kernels/cuda/gemm.h"
#endif

namespace {

using namespace hpdt;
using kernels::Conv2dEpilogue;
using kernels::Conv2dShape;
using kernels::Layout;
using test::Tolerance;

// Under the CPU emulator of CUDA (tests/cuda_emu: one CUDA thread at a time) the big shapes shrink (sized) and cuDNN,
// which cannot run on the CPU, is left out (test::vendor_available); both also under racecheck.
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

// cudnn: the vendor backend's default algorithms (the heuristic's), in every test; cudnn_find: --cudnn-algo find's
// (the fastest cuDNN's Find times, deterministic or not), in CudnnFindMatchesTheOracle only (Find times every
// algorithm of each new shape, slowly under compute-sanitizer).
enum class Impl { v1, v2, cudnn, cudnn_find };
const char* impl_name(Impl i) {
  return i == Impl::v1 ? "v1-simt" : i == Impl::v2 ? "v2-tensor-core" : i == Impl::cudnn ? "cudnn" : "cudnn-find";
}
bool is_cudnn(Impl i) { return i == Impl::cudnn || i == Impl::cudnn_find; }
std::vector<Impl> impls_for(DType dt) {
  std::vector<Impl> impls{Impl::v1};
  if (dt != DType::f32) impls.push_back(Impl::v2);
  if (test::vendor_available()) impls.push_back(Impl::cudnn);
  return impls;
}

double storage_eps(DType dt) { return dt == DType::f32 ? 0x1p-24 : dt == DType::f16 ? 0x1p-11 : 0x1p-8; }

Tolerance conv_tolerance(DType dt, double L, Impl impl) {
  Tolerance t = test::default_tolerance(dt);
  t.atol += 4e-7 * L;
  if (is_cudnn(impl)) {
    t.atol += std::max(storage_eps(dt), 0x1p-17) * std::sqrt(L);
    if (dt == DType::f32) t.rtol *= 10;
  }
  return t;
}

struct Case {
  const char* name;
  int64_t n, ci, h, w, co, k, stride, pad;
  Conv2dShape shape() const { return Conv2dShape{n, ci, h, w, co, k, k, stride, pad}; }
};

// The case as run: under emulation (and racecheck: test::small_shapes) at most 2 images of at most max(16, 2k) x
// max(16, 2k) (channels, kernel, stride and padding kept, so every code path stays).
Case sized(Case c) {
  if (!test::small_shapes()) return c;
  const int64_t plane = std::max<int64_t>(16, 2 * c.k);
  c.n = std::min<int64_t>(c.n, 2), c.h = std::min(c.h, plane), c.w = std::min(c.w, plane);
  return c;
}

// StridedFewChannelsRunOnSpaceToDepth's cases: a strided convolution of few channels, kernels of any shape.
struct S2dCase {
  const char* name;
  int64_t n, ci, h, w, co, kh, kw, stride, pad;
};
const S2dCase kStridedFewChannelsCases[] = {
    {"7x7/2 p3 3->16 at 19x17", 2, 3, 19, 17, 16, 7, 7, 2, 3},
    {"3x3/2 p1 1->8 at 9x11", 3, 1, 9, 11, 8, 3, 3, 2, 1},
    {"5x5/2 p2 4->24 at 12x10", 1, 4, 12, 10, 24, 5, 5, 2, 2},
    {"4x4/2 p0 2->8 at 11x9", 2, 2, 11, 9, 8, 4, 4, 2, 0},
    {"7x3/2 p1 3->70 at 16x13", 2, 3, 16, 13, 70, 7, 3, 2, 1},
    {"2x2/2 p0 5->5 at 8x8 (20 channels: 32)", 2, 5, 8, 8, 5, 2, 2, 2, 0},
    {"5x5/3 p1 2->9 at 13x11", 2, 2, 13, 11, 9, 5, 5, 3, 1},
    {"4x4/4 1->12 at 28x28 (one tap, 16 channels)", 2, 1, 28, 28, 12, 4, 4, 4, 0},
    {"16x16/16 3->40 at 64x64 (one tap, 768 channels, direct loads)", 2, 3, 64, 64, 40, 16, 16, 16, 0},
    {"16x16/16 3->24 at 32x48 (one tap, 768 channels)", 1, 3, 32, 48, 24, 16, 16, 16, 0}};

// The oracle's results for one case and dtype, from the inputs rounded through the dtype.
struct Expected {
  Tensor y, dx, dw, db;
};

class ConvCuda : public test::CudaOracleTest {
 protected:
#if HPDT_HAVE_CUDA
  // Whether GEMM v3, and with it conv v3, runs here (a compute capability 9.0 device and an sm_90 build): what GEMM
  // v3 resolves to on a 64 x 64 bf16 problem.
  bool wgmma_runs_here() {
    const Tensor probe = poisoned({64, 64}, DType::bf16);
    return kernels::cuda::gemm_resolve(kernels::cuda::GemmVariant::v3_wgmma, false, true, 64, 64, probe.data(),
                                       probe.data(), DType::bf16, stream) == kernels::cuda::GemmVariant::v3_wgmma;
  }
  // A conv v3 forward (under the caller's --conv v3) with `name` set to a value it does not take: an error naming the
  // variable, `message`.
  void expect_bad_conv_v3_variable(const char* name, const char* value, const char* message) {
    const Conv2dShape s{1, 64, 5, 5, 64, 3, 3, 1, 1};
    const Tensor x = to_gpu(random({1, 5, 5, 64}), DType::bf16), w = to_gpu(random({64, 64, 3, 3}), DType::bf16);
    Tensor y = poisoned({1, 5, 5, 64}, DType::bf16);
    const ScopedEnv bad(name, value);
    HPDT_EXPECT_THROW_MSG(
        kernels::cuda::conv2d_forward_nhwc(s, x, w, Conv2dEpilogue{}, y, stream, kernels::cuda::ConvVariant::automatic),
        message);
  }
#endif
  // ---- the implementations under test ----
  void forward(Impl impl, const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& e, Tensor& y,
               Layout layout = Layout::nchw) {
#if HPDT_HAVE_CUDA
    const kernels::ScopedCudnnAlgo how(algo(impl));
    if (is_cudnn(impl)) return kernels::cuda::conv2d_forward_vendor(s, x, w, e, y, stream, layout);
    if (layout == Layout::nhwc) return kernels::cuda::conv2d_forward_nhwc(s, x, w, e, y, stream, variant(impl));
    kernels::cuda::conv2d_forward(s, x, w, e, y, stream, variant(impl));
#else
    (void)impl, (void)s, (void)x, (void)w, (void)e, (void)y, (void)layout;
#endif
  }
  void backward_data(Impl impl, const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx,
                     Layout layout = Layout::nchw, const Tensor* residual = nullptr,
                     kernels::ChannelGradSums* bn_grad = nullptr) {
#if HPDT_HAVE_CUDA
    const kernels::ScopedCudnnAlgo how(algo(impl));
    if (is_cudnn(impl)) return kernels::cuda::conv2d_backward_data_vendor(s, dy, w, dx, stream, layout, residual);
    if (layout == Layout::nhwc)
      return kernels::cuda::conv2d_backward_data_nhwc(s, dy, w, dx, stream, variant(impl), residual, bn_grad);
    kernels::cuda::conv2d_backward_data(s, dy, w, dx, stream, variant(impl), residual, bn_grad);
#else
    (void)impl, (void)s, (void)dy, (void)w, (void)dx, (void)layout, (void)residual, (void)bn_grad;
#endif
  }
  void backward_filter(Impl impl, const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db,
                       Layout layout = Layout::nchw) {
#if HPDT_HAVE_CUDA
    const kernels::ScopedCudnnAlgo how(algo(impl));
    if (is_cudnn(impl)) return kernels::cuda::conv2d_backward_filter_vendor(s, x, dy, dw, db, stream, layout);
    if (layout == Layout::nhwc)
      return kernels::cuda::conv2d_backward_filter_nhwc(s, x, dy, dw, db, stream, variant(impl));
    kernels::cuda::conv2d_backward_filter(s, x, dy, dw, db, stream, variant(impl));
#else
    (void)impl, (void)s, (void)x, (void)dy, (void)dw, (void)db, (void)layout;
#endif
  }
#if HPDT_HAVE_CUDA
  static kernels::CudnnAlgo algo(Impl impl) {
    return impl == Impl::cudnn_find ? kernels::CudnnAlgo::find : kernels::CudnnAlgo::heuristic;
  }
  static kernels::cuda::ConvVariant variant(Impl impl) {
    return impl == Impl::v2 ? kernels::cuda::ConvVariant::v2_tensor_core : kernels::cuda::ConvVariant::v1_simt;
  }
#endif

  // ---- one case: every dtype, every implementation, every direction ----
  // NHWC: x, dx [n, h, w, ci] and y, dy [n, oh, ow, co], the oracle kernels/cpu/conv_nhwc.cpp. misaligned: x, dy
  // and the outputs are views one element into their buffers, so the 16-byte loaders fall back to gathers.
  // `only`: these implementations instead of impls_for(dtype)'s.
  void check_strided_few_channels(const S2dCase& c);
  void check_case(const Case& full, bool bias, Layout layout = Layout::nchw, bool misaligned = false,
                  const std::vector<Impl>& only = {}) {
    const Case c = sized(full);
    const Conv2dShape s = c.shape();
    const int64_t oh = s.out_h(), ow = s.out_w();
    const bool nhwc = layout == Layout::nhwc;
    const Shape xs = nhwc ? Shape{s.n, s.h, s.w, s.c_in} : Shape{s.n, s.c_in, s.h, s.w};
    const Shape ys = nhwc ? Shape{s.n, oh, ow, s.c_out} : Shape{s.n, s.c_out, oh, ow};
    const Shape ws{s.c_out, s.c_in, s.kh, s.kw}, bs{s.c_out};
    const double l_fwd = double(s.c_in * s.kh * s.kw), l_data = double(s.c_out * s.kh * s.kw),
                 l_filter = double(s.n * oh * ow);
    for (DType dt : test::kCudaTestDtypes) {
      const Tensor x = random(xs), w = random(ws), b = random(bs), dy = random(ys), dw0 = random(ws), db0 = random(bs);
      const Expected want = oracle(s, round_through(x, dt), round_through(w, dt), bias ? &b : nullptr,
                                   round_through(dy, dt), round_through(dw0, dt), round_through(db0, dt), dt, layout);
      const Tensor gx = gpu(x, dt, misaligned), gw = to_gpu(w, dt), gb = to_gpu(b, dt), gdy = gpu(dy, dt, misaligned);
      const Tensor res = random(xs), gres = gpu(res, dt, misaligned);
      Tensor want_dx_res = round_through(res, dt);
      for (int64_t i = 0; i < want_dx_res.numel(); ++i) want_dx_res.data<float>()[i] += want.dx.data<float>()[i];
      for (Impl impl : only.empty() ? impls_for(dt) : only) {
        SCOPED_TRACE(std::string(c.name) + " " + s.str() + " " + std::string(dtype_name(dt)) + " " + impl_name(impl) +
                     (bias ? " bias" : " no bias") + " " + kernels::layout_name(layout) +
                     (misaligned ? " misaligned" : ""));
        Tensor y = poison(ys, dt, misaligned);
        Conv2dEpilogue e;
        e.bias = bias ? &gb : nullptr;
        forward(impl, s, gx, gw, e, y, layout);
        EXPECT_TRUE(close(want.y, to_cpu_f32(y), conv_tolerance(dt, l_fwd, impl))) << "forward";

        Tensor dx = poison(xs, dt, misaligned);
        backward_data(impl, s, gdy, gw, dx, layout);
        EXPECT_TRUE(close(want.dx, to_cpu_f32(dx), conv_tolerance(dt, l_data, impl))) << "backward-data";

        // dx = conv^T(dy) + residual (a ResNet block's input gradient), including the pixels no tap reaches
        Tensor dxr = poison(xs, dt, misaligned);
        backward_data(impl, s, gdy, gw, dxr, layout, &gres);
        EXPECT_TRUE(close(want_dx_res, to_cpu_f32(dxr), conv_tolerance(dt, l_data, impl))) << "backward-data + residual";

        Tensor dw = to_gpu(dw0, dt), db = to_gpu(db0, dt);
        backward_filter(impl, s, gx, gdy, dw, bias ? &db : nullptr, layout);
        EXPECT_TRUE(close(want.dw, to_cpu_f32(dw), conv_tolerance(dt, l_filter, impl))) << "backward-filter dw";
        if (bias) {
          EXPECT_TRUE(close(want.db, to_cpu_f32(db), conv_tolerance(dt, l_filter, Impl::v1))) << "backward-filter dbias";
        }
      }
    }
  }

  static Expected oracle(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& dy,
                         const Tensor& dw0, const Tensor& db0, DType dt, Layout layout = Layout::nchw) {
    Expected e;
    e.y = Tensor::empty({s.n, s.c_out, s.out_h(), s.out_w()}, DType::f32);
    // b is the f32 draw; the GPU sees it rounded through dt
    Tensor br;
    if (b) {
      br = Tensor::empty(b->shape(), DType::f32);
      std::memcpy(br.data(), b->data(), b->nbytes());
      if (dt != DType::f32) {
        Tensor narrow = Tensor::empty(b->shape(), dt);
        kernels::cpu::cast(*b, narrow);
        kernels::cpu::cast(narrow, br);
      }
    }
    e.dw = dw0, e.db = db0;  // already private copies (round_through returns new tensors)
    if (layout == Layout::nhwc) {
      e.y = Tensor::empty({s.n, s.out_h(), s.out_w(), s.c_out}, DType::f32);
      kernels::cpu::conv2d_forward_nhwc(s, x.data<float>(), w.data<float>(), b ? br.data<float>() : nullptr,
                                        e.y.data<float>());
      e.dx = Tensor::empty({s.n, s.h, s.w, s.c_in}, DType::f32);
      kernels::cpu::conv2d_backward_data_nhwc(s, dy.data<float>(), w.data<float>(), e.dx.data<float>());
      kernels::cpu::conv2d_backward_filter_nhwc(s, x.data<float>(), dy.data<float>(), e.dw.data<float>(),
                                                b ? e.db.data<float>() : nullptr, true);
      return e;
    }
    kernels::cpu::conv2d_forward<float>(s, x.data<float>(), w.data<float>(), b ? br.data<float>() : nullptr,
                                        e.y.data<float>());
    e.dx = Tensor::empty({s.n, s.c_in, s.h, s.w}, DType::f32);
    kernels::cpu::conv2d_backward_data<float>(s, dy.data<float>(), w.data<float>(), e.dx.data<float>());
    kernels::cpu::conv2d_backward_filter<float>(s, x.data<float>(), dy.data<float>(), e.dw.data<float>(),
                                                b ? e.db.data<float>() : nullptr, true);
    return e;
  }

  // A GPU copy of `host` (f32) stored as `dt`, optionally one element past a 16-byte boundary (a view).
  Tensor gpu(const Tensor& host, DType dt, bool misaligned = false) {
    if (!misaligned) return to_gpu(host, dt);
    Tensor big = poisoned({host.numel() + 8}, dt);
    Tensor v = big.flat(1, host.numel()).view(host.shape());
    Tensor narrow = host;
    if (dt != DType::f32) {
      narrow = Tensor::empty(host.shape(), dt);
      kernels::cpu::cast(host, narrow);
    }
    copy(narrow, v, stream);
    stream.synchronize();
    return v;
  }
  Tensor poison(const Shape& sh, DType dt, bool misaligned = false) {
    if (!misaligned) return poisoned(sh, dt);
    return poisoned({sh.numel() + 8}, dt).flat(1, sh.numel()).view(sh);
  }

#if HPDT_HAVE_CUDA
  // The three directions of NHWC convolution `c` (ConvVariant::automatic: as the kernel choices say) against the
  // oracle: the forward with a bias, the backward-data (with a residual when `residual`), the backward-filter
  // accumulating onto dw and dbias.
  void expect_nhwc_directions_right(const Case& c, DType dt, bool residual) {
    const auto auto_v = kernels::cuda::ConvVariant::automatic;
    const Conv2dShape s = c.shape();
    const Shape xs{s.n, s.h, s.w, s.c_in}, ys{s.n, s.out_h(), s.out_w(), s.c_out}, ws{s.c_out, s.c_in, s.kh, s.kw};
    const Tensor x = random(xs), w = random(ws), b = random({s.c_out}), dy = random(ys), dw0 = random(ws),
                 db0 = random({s.c_out}), res = random(xs);
    const Expected want = oracle(s, round_through(x, dt), round_through(w, dt), &b, round_through(dy, dt),
                                 round_through(dw0, dt), round_through(db0, dt), dt, Layout::nhwc);
    const Tensor gx = to_gpu(x, dt), gw = to_gpu(w, dt), gb = to_gpu(b, dt), gdy = to_gpu(dy, dt), gres = to_gpu(res, dt);
    Tensor y = poisoned(ys, dt), dx = poisoned(xs, dt), dw = to_gpu(dw0, dt), db = to_gpu(db0, dt);
    Conv2dEpilogue e;
    e.bias = &gb;
    kernels::cuda::conv2d_forward_nhwc(s, gx, gw, e, y, stream, auto_v);
    kernels::cuda::conv2d_backward_data_nhwc(s, gdy, gw, dx, stream, auto_v, residual ? &gres : nullptr);
    kernels::cuda::conv2d_backward_filter_nhwc(s, gx, gdy, dw, &db, stream, auto_v);
    Tensor want_dx = want.dx;
    if (residual) {
      want_dx = round_through(res, dt);
      for (int64_t i = 0; i < want_dx.numel(); ++i) want_dx.data<float>()[i] += want.dx.data<float>()[i];
    }
    const double l_filter = double(s.n * s.out_h() * s.out_w());
    EXPECT_TRUE(close(want.y, to_cpu_f32(y), conv_tolerance(dt, double(s.c_in * s.kh * s.kw), Impl::v2))) << "forward";
    EXPECT_TRUE(close(want_dx, to_cpu_f32(dx), conv_tolerance(dt, double(s.c_out * s.kh * s.kw), Impl::v2)))
        << "backward-data" << (residual ? " + residual" : "");
    EXPECT_TRUE(close(want.dw, to_cpu_f32(dw), conv_tolerance(dt, l_filter, Impl::v2))) << "backward-filter dw";
    EXPECT_TRUE(close(want.db, to_cpu_f32(db), conv_tolerance(dt, l_filter, Impl::v1))) << "backward-filter dbias";
  }
#endif
};

// ---- shapes ------------------------------------------------------------------------------------------------

TEST_F(ConvCuda, OnePixelOneChannel) { check_case({"1x1x1x1 k1", 1, 1, 1, 1, 1, 1, 1, 0}, true); }

#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
// On the emulator, which counts shared-memory bank conflicts (docs/cuda-emulator.md): the tensor-core
// convolutions' ldmatrix reads and 16- and 8-byte cp.async writes are conflict-free in both layouts and all three
// directions (k_chunk's and k_chunk8's lane orders; with 4 lanes per 80-byte row every cp.async write was 2-way
// conflicted). 14 x 14 planes take the 8-byte chunks (backward-filter's dy; the 1x1's activations everywhere).
TEST_F(ConvCuda, EmulatedSharedMemoryAccessesAreConflictFree) {
  test::expect_conflict_free_shared_memory([&] {
    check_case({"3x3 64->64", 2, 64, 14, 14, 64, 3, 1, 1}, false);                // channels gather, weights by cp.async
    check_case({"1x1 64->128", 2, 64, 8, 8, 128, 1, 1, 0}, false);                // 1x1: both operands by cp.async
    check_case({"1x1 64->128 at 14", 2, 64, 14, 14, 128, 1, 1, 0}, false);        // 1x1: 8-byte chunks
    check_case({"3x3 64->64", 2, 64, 14, 14, 64, 3, 1, 1}, false, Layout::nhwc);  // 16-byte activation loads
  });
}
#endif

TEST_F(ConvCuda, SmallOddShapes) {
  // n 3, ci 5, co 7 on 9 x 11: every tile is a partial one, K is not a multiple of 8 or 32.
  const Case cases[] = {{"k3 s1 p1", 3, 5, 9, 11, 7, 3, 1, 1}, {"k3 s2 p1", 3, 5, 9, 11, 7, 3, 2, 1},
                        {"k1 s2 p0", 3, 5, 9, 11, 7, 1, 2, 0}, {"k5 s1 p2", 3, 5, 9, 11, 7, 5, 1, 2},
                        {"k7 s2 p3", 3, 5, 9, 11, 7, 7, 2, 3}};
  for (const Case& c : cases)
    for (bool bias : {true, false}) check_case(c, bias);
}

TEST_F(ConvCuda, TileEdges) {
  // co 130: two 128-row tiles, the second with 2 rows; ci 96: whole 32-channel k tiles (the channels gather);
  // 1x1 on 8 x 8: the 16-byte direct loads through the 4-stage pipeline (7 k tiles, the last partial), pixels
  // 192 = 1.5 pixel tiles; stride 3 with a 4x4 kernel: phases with 1 and 2 taps; kernel 2 stride 3: phases
  // without taps (dx zeros there). 1x1 on 14 x 14 and 6 x 2 (planes of 4k pixels, not 8k): the 8-byte direct loads
  // (kDirect4), 196 pixels per image so that 128-pixel tiles straddle images.
  const Case cases[] = {{"co 130 ci 96 3x3", 2, 96, 13, 13, 130, 3, 1, 1},
                        {"1x1 direct 200->72", 3, 200, 8, 8, 72, 1, 1, 0},
                        {"1x1 direct 64->200", 1, 64, 16, 8, 200, 1, 1, 0},
                        {"1x1 direct4 14x14 72->136", 3, 72, 14, 14, 136, 1, 1, 0},
                        {"1x1 direct4 6x2 40->24", 5, 40, 6, 2, 24, 1, 1, 0},
                        {"3x3 14x14 32->48 (dy in 8-byte chunks)", 2, 32, 14, 14, 48, 3, 1, 1},
                        {"3x3 14x14 5->7 (dy in 8-byte chunks, x gathered)", 3, 5, 14, 14, 7, 3, 1, 1},
                        {"k4 s3 p1", 2, 32, 17, 17, 33, 4, 3, 1},
                        {"k2 s3 p0", 2, 6, 10, 10, 5, 2, 3, 0}};
  for (size_t i = 0; i < std::size(cases); ++i) check_case(cases[i], i % 2 == 0);
}

TEST_F(ConvCuda, ResNet20At28) {
  // ResNet-20's convolutions on 28 x 28 inputs, batch 8: 16, 32, 64 channels, strided transitions, 1x1 projection.
  const Case cases[] = {{"stem 1->16", 8, 1, 28, 28, 16, 3, 1, 1},    {"16->16", 8, 16, 28, 28, 16, 3, 1, 1},
                        {"16->32 s2", 8, 16, 28, 28, 32, 3, 2, 1},    {"32->32", 8, 32, 14, 14, 32, 3, 1, 1},
                        {"proj 16->32 s2", 8, 16, 28, 28, 32, 1, 2, 0}, {"32->64 s2", 8, 32, 14, 14, 64, 3, 2, 1},
                        {"64->64", 8, 64, 7, 7, 64, 3, 1, 1}};
  for (size_t i = 0; i < std::size(cases); ++i) check_case(cases[i], i % 2 == 1);
}

// v2's backward-filter with the 128-row tile (more than 64 output channels) on both of dy's chunk loads (8 pixels on
// 16 x 16 planes, 4 on 14 x 14) and both of x's gathers (by channels: 32 input channels; element by element: 5),
// NCHW, and NHWC's 128-row tile with gathered dy and x. No test reached these instances before 2026-12-01
// (scripts/gpu/kernel_instances.py: compiled, never launched on the emulator).
TEST_F(ConvCuda, WeightGradientWideTiles) {
  for (int64_t plane : {16, 14}) {
    const std::string at = " at " + std::to_string(plane);
    check_case({("3x3 32->128" + at).c_str(), 2, 32, plane, plane, 128, 3, 1, 1}, plane == 16);
    check_case({("3x3 5->72" + at).c_str(), 2, 5, plane, plane, 72, 3, 1, 1}, plane == 14);
  }
  check_case({"3x3 5->72 at 16", 2, 5, 16, 16, 72, 3, 1, 1}, false, Layout::nhwc);
}

TEST_F(ConvCuda, ResNet50BottleneckAt56) {
  const Case cases[] = {{"1x1 64->64", 2, 64, 56, 56, 64, 1, 1, 0},
                        {"3x3 64->64", 2, 64, 56, 56, 64, 3, 1, 1},
                        {"1x1 64->256", 2, 64, 56, 56, 256, 1, 1, 0}};
  for (const Case& c : cases) check_case(c, false);
}

// cuDNN with --cudnn-algo find's algorithms (the fastest Find times, deterministic or not; f32 without TF32) against
// the oracle: ResNet's kinds of convolution in both layouts, every dtype, with and without bias.
TEST_F(ConvCuda, CudnnFindMatchesTheOracle) {
  HPDT_SKIP_WITHOUT_VENDOR();
  const Case cases[] = {{"3x3 s1 p1 64->64 at 14", 2, 64, 14, 14, 64, 3, 1, 1},
                        {"3x3 s2 p1 32->48 at 15", 3, 32, 15, 15, 48, 3, 2, 1},
                        {"1x1 64->128 at 14", 2, 64, 14, 14, 128, 1, 1, 0},
                        {"1x1 s2 32->64 at 14", 2, 32, 14, 14, 64, 1, 2, 0},
                        {"7x7/2 3->64 at 32", 2, 3, 32, 32, 64, 7, 2, 3}};
  for (Layout layout : {Layout::nchw, Layout::nhwc})
    for (size_t i = 0; i < std::size(cases); ++i) check_case(cases[i], i % 2 == 0, layout, false, {Impl::cudnn_find});
}

TEST_F(ConvCuda, ResNet50Stem) { check_case({"7x7/2 3->64", 2, 3, 64, 64, 64, 7, 2, 3}, false); }

// StridedFewChannelsRunOnSpaceToDepth's checks of one case (below).
void ConvCuda::check_strided_few_channels(const S2dCase& c) {
  // x [n, c, h, w] as NHWC [n, h, w, c] (the CPU's transpose)
  const auto to_nhwc = [](const Tensor& t) {
    Tensor out = Tensor::empty({t.size(0), t.size(2), t.size(3), t.size(1)}, DType::f32);
    kernels::cpu::nchw_to_nhwc(t.size(0), t.size(1), t.size(2) * t.size(3), t.data<float>(), out.data<float>());
    return out;
  };
  for (Layout layout : {Layout::nchw, Layout::nhwc})
    for (DType dt : {DType::bf16, DType::f16}) {
      const Conv2dShape s{c.n, c.ci, c.h, c.w, c.co, c.kh, c.kw, c.stride, c.pad};
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)) + " " + kernels::layout_name(layout));
      const bool nhwc = layout == Layout::nhwc;
      const Shape ys = nhwc ? Shape{s.n, s.out_h(), s.out_w(), s.c_out} : Shape{s.n, s.c_out, s.out_h(), s.out_w()};
      const Tensor x = round_through(random({s.n, s.c_in, s.h, s.w}), dt);
      const Tensor w = round_through(random({s.c_out, s.c_in, s.kh, s.kw}), dt);
      Tensor want = Tensor::empty({s.n, s.c_out, s.out_h(), s.out_w()}, DType::f32);
      kernels::cpu::conv2d_forward<float>(s, x.data<float>(), w.data<float>(), nullptr, want.data<float>());
      if (nhwc) want = to_nhwc(want);
      const Tensor gx = to_gpu(nhwc ? to_nhwc(x) : x, dt), gw = to_gpu(w, dt);
      const Tolerance tol = conv_tolerance(dt, double(s.c_in * s.kh * s.kw), Impl::v2);
      // the backward-filter onto a dw that holds a gradient already (on space-to-depth too)
      const Tensor dy = round_through(random({s.n, s.c_out, s.out_h(), s.out_w()}), dt);
      const Tensor dw0 = round_through(random({s.c_out, s.c_in, s.kh, s.kw}), dt);
      Tensor want_dw = dw0.clone(cpu);
      kernels::cpu::conv2d_backward_filter<float>(s, x.data<float>(), dy.data<float>(), want_dw.data<float>(), nullptr,
                                                  true);
      const Tensor gdy = to_gpu(nhwc ? to_nhwc(dy) : dy, dt);
      const Tolerance dw_tol = conv_tolerance(dt, double(s.n * s.out_h() * s.out_w()), Impl::v2);
      // the backward-data, and with a residual (which keeps the direct kernels)
      Tensor want_dx = Tensor::empty({s.n, s.c_in, s.h, s.w}, DType::f32);
      kernels::cpu::conv2d_backward_data<float>(s, dy.data<float>(), w.data<float>(), want_dx.data<float>());
      const Tensor r = round_through(random({s.n, s.c_in, s.h, s.w}), dt);
      Tensor want_dx_r = want_dx.clone(cpu);
      for (int64_t i = 0; i < r.numel(); ++i) want_dx_r.data<float>()[i] += r.data<float>()[i];
      if (nhwc) want_dx = to_nhwc(want_dx), want_dx_r = to_nhwc(want_dx_r);
      const Tensor gr = to_gpu(nhwc ? to_nhwc(r) : r, dt);
      const Shape xshape = nhwc ? Shape{s.n, s.h, s.w, s.c_in} : Shape{s.n, s.c_in, s.h, s.w};
      const Tolerance dx_tol = conv_tolerance(dt, double(s.c_out * s.kh * s.kw), Impl::v2);
      for (const char* how : {"on", "off"}) {
        const ScopedEnv env("HPDT_CONV_SPACE_TO_DEPTH", how);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        const bool on = std::strcmp(how, "on") == 0;
        const unsigned long long before = cuda_emu::launches_named("space_to_depth");
#endif
        Tensor y = poisoned(ys, dt);
        forward(Impl::v2, s, gx, gw, {}, y, layout);
        EXPECT_TRUE(close(want, to_cpu_f32(y), tol)) << "HPDT_CONV_SPACE_TO_DEPTH=" << how;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        // the weights' and the input's rearrangement, or nothing
        EXPECT_EQ(cuda_emu::launches_named("space_to_depth") - before, on ? 2u : 0u);
        const unsigned long long before_dw = cuda_emu::launches_named("space_to_depth");
#endif
        Tensor dw = to_gpu(dw0, dt);
        backward_filter(Impl::v2, s, gx, gdy, dw, nullptr, layout);
        EXPECT_TRUE(close(want_dw, to_cpu_f32(dw), dw_tol)) << "backward-filter, HPDT_CONV_SPACE_TO_DEPTH=" << how;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        // the input's rearrangement and dw's there and back
        EXPECT_EQ(cuda_emu::launches_named("space_to_depth") - before_dw, on ? 3u : 0u);
        const unsigned long long before_dx = cuda_emu::launches_named("space_to_depth"),
                                 before_d2s = cuda_emu::launches_named("depth_to_space");
#endif
        Tensor dx = poisoned(xshape, dt);
        backward_data(Impl::v2, s, gdy, gw, dx, layout);
        EXPECT_TRUE(close(want_dx, to_cpu_f32(dx), dx_tol)) << "backward-data, HPDT_CONV_SPACE_TO_DEPTH=" << how;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        // the filter's rearrangement, then dx from the rearranged convolution's
        EXPECT_EQ(cuda_emu::launches_named("space_to_depth") - before_dx, on ? 1u : 0u);
        EXPECT_EQ(cuda_emu::launches_named("depth_to_space") - before_d2s, on ? 1u : 0u);
        const unsigned long long before_r = cuda_emu::launches_named("_to_");
#endif
        Tensor dx_r = poisoned(xshape, dt);
        backward_data(Impl::v2, s, gdy, gw, dx_r, layout, &gr);
        EXPECT_TRUE(close(want_dx_r, to_cpu_f32(dx_r), dx_tol)) << "backward-data with a residual, " << how;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        EXPECT_EQ(cuda_emu::launches_named("_to_"), before_r) << "space-to-depth with a residual";
#endif
      }
    }
}

// v2's forward of a strided convolution of fewer than 16 channels runs as a stride-1 one on space-to-depth
// (space_to_depth.cuh), NCHW and NHWC: strides 2, 3, 4 and 16 (ViT's patch embedding: one tap, NCHW's direct loads
// where the plane allows), 1 to 5 channels, odd planes, every padding parity, even, odd and non-square kernels,
// against the oracle (with HPDT_CONV_SPACE_TO_DEPTH=off too, the direct gathers), and on the emulator, which kernels
// ran and where it must not apply. The other directions and the fused epilogues are check_case's and FusedEpilogue's
// (the stem shape there).
TEST_F(ConvCuda, StridedFewChannelsRunOnSpaceToDepth) {
  for (const S2dCase& c : kStridedFewChannelsCases) check_strided_few_channels(c);
    // not taken: stride 1, 16 channels, a kernel smaller than the stride
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
  const unsigned long long before = cuda_emu::launches_named("space_to_depth");
  for (const Conv2dShape& s : {Conv2dShape{1, 3, 8, 8, 8, 3, 3, 1, 1}, Conv2dShape{1, 16, 8, 8, 8, 3, 3, 2, 1},
                               Conv2dShape{1, 3, 8, 8, 8, 1, 1, 2, 0}, Conv2dShape{1, 3, 9, 9, 8, 2, 2, 3, 0}}) {
    Tensor y = poisoned({s.n, s.c_out, s.out_h(), s.out_w()}, DType::bf16);
    forward(Impl::v2, s, to_gpu(random({s.n, s.c_in, s.h, s.w}), DType::bf16),
            to_gpu(random({s.c_out, s.c_in, s.kh, s.kw}), DType::bf16), {}, y);
  }
  EXPECT_EQ(cuda_emu::launches_named("space_to_depth"), before) << "space-to-depth where it does not apply";
#endif
  const ScopedEnv bad("HPDT_CONV_SPACE_TO_DEPTH", "yes");
  const Conv2dShape s{1, 3, 8, 8, 8, 3, 3, 2, 1};
  Tensor y = poisoned({1, 8, s.out_h(), s.out_w()}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(
      forward(Impl::v2, s, to_gpu(random({1, 3, 8, 8}), DType::bf16), to_gpu(random({8, 3, 3, 3}), DType::bf16), {}, y),
      "HPDT_CONV_SPACE_TO_DEPTH=yes: expected on or off");
}

// racecheck's share of the test above (scripts/gpu/sanitize.txt): its one case that reaches kernels no other case of
// racecheck's parts does (v2's NHWC forward with the 128-wide tile on gathered loads, the NCHW weight gradient's
// 128-row tile on scalar loads; found by scripts/gpu/sanitizer_coverage.py), where the whole test launches ~14,000
// kernels (~190 this one).
TEST_F(ConvCuda, StridedFewChannelsSeventyOutputs) { check_strided_few_channels(kStridedFewChannelsCases[4]); }

TEST_F(ConvCuda, ViTPatchEmbedding) {
  check_case({"ViT-B/16 patch 3->192 at 224", 2, 3, 224, 224, 192, 16, 16, 0}, true);
  check_case({"patch 4 1->192 at 28", 8, 1, 28, 28, 192, 4, 4, 0}, true);
}

// ---- the fused forward ---------------------------------------------------------------------------------------

TEST_F(ConvCuda, FusedEpilogue) {
  struct Parts {
    bool bias, scale, shift, residual, relu;
  };
  const Parts combos[] = {{true, false, false, false, false}, {false, true, true, false, false},
                          {false, true, true, true, true},    {true, false, false, false, true},
                          {false, false, false, true, false}, {true, true, true, true, true}};
  const Case cases[] = {{"k3 s1 p1", 3, 5, 9, 11, 7, 3, 1, 1},
                        {"1x1 64->256 at 28", 2, 64, 28, 28, 256, 1, 1, 0},
                        {"3x3 s2 32->64", 4, 32, 14, 14, 64, 3, 2, 1},
                        {"7x7 s2 3->16 (v2 on space-to-depth)", 2, 3, 19, 17, 16, 7, 2, 3}};
  for (const Case& full : cases) {
    const Case c = sized(full);
    const Conv2dShape s = c.shape();
    const Shape ys{s.n, s.c_out, s.out_h(), s.out_w()};
    const int64_t plane = s.out_h() * s.out_w();
    for (DType dt : test::kCudaTestDtypes) {
      const Tensor x = round_through(random({s.n, s.c_in, s.h, s.w}), dt), w = round_through(random({s.c_out, s.c_in, s.kh, s.kw}), dt);
      const Tensor b = round_through(random({s.c_out}), dt), sc = round_through(random({s.c_out}, 0.5f, 2.0f), dt);
      const Tensor sh = round_through(random({s.c_out}), dt), res = round_through(random(ys), dt);
      const Tensor gx = to_gpu(x, dt), gw = to_gpu(w, dt), gb = to_gpu(b, dt), gsc = to_gpu(sc, dt), gsh = to_gpu(sh, dt),
                   gres = to_gpu(res, dt);
      for (const Parts& p : combos) {
        // The reference: the CPU ops composed (conv + bias, a per-channel affine, add, relu).
        Tensor want = Tensor::empty(ys, DType::f32);
        kernels::cpu::conv2d_forward<float>(s, x.data<float>(), w.data<float>(), p.bias ? b.data<float>() : nullptr,
                                            want.data<float>());
        std::vector<float> zero(size_t(s.c_out), 0.0f), one(size_t(s.c_out), 1.0f);
        kernels::cpu::batchnorm_apply<float>(s.n, s.c_out, plane, want.data<float>(), zero.data(), one.data(),
                                             p.scale ? sc.data<float>() : one.data(),
                                             p.shift ? sh.data<float>() : zero.data(), want.data<float>());
        if (p.residual) kernels::cpu::add_forward<float>(want.numel(), want.data<float>(), res.data<float>(), want.data<float>());
        if (p.relu) kernels::cpu::relu_forward<float>(want.numel(), want.data<float>(), want.data<float>());
        Conv2dEpilogue e;
        e.bias = p.bias ? &gb : nullptr, e.scale = p.scale ? &gsc : nullptr, e.shift = p.shift ? &gsh : nullptr;
        e.residual = p.residual ? &gres : nullptr, e.relu = p.relu;
        // scale up to 2 and the residual add widen the absolute error: x 3 on atol
        for (Impl impl : impls_for(dt)) {
          SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)) + " " + impl_name(impl) + " bias " +
                       std::to_string(p.bias) + " scale/shift " + std::to_string(p.scale) + " residual " +
                       std::to_string(p.residual) + " relu " + std::to_string(p.relu));
          Tensor y = poisoned(ys, dt);
          forward(impl, s, gx, gw, e, y);
          Tolerance tol = conv_tolerance(dt, double(s.c_in * s.kh * s.kw), impl);
          tol.atol *= 3;
          EXPECT_TRUE(close(want, to_cpu_f32(y), tol));
        }
        // and through the public entry point, on the GPU and (the composition of CPU ops) on the CPU
        Tensor y = poisoned(ys, dt);
        kernels::conv2d_forward_fused(gx, gw, e, y, s.stride, s.pad, stream);
        Tolerance tol = conv_tolerance(dt, double(s.c_in * s.kh * s.kw), Impl::v2);
        tol.atol *= 3;
        EXPECT_TRUE(close(want, to_cpu_f32(y), tol)) << c.name << " public entry point";
        if (dt == DType::f32) {
          Conv2dEpilogue ce;
          ce.bias = p.bias ? &b : nullptr, ce.scale = p.scale ? &sc : nullptr, ce.shift = p.shift ? &sh : nullptr;
          ce.residual = p.residual ? &res : nullptr, ce.relu = p.relu;
          Tensor yc = Tensor::empty(ys, DType::f32);
          kernels::conv2d_forward_fused(x, w, ce, yc, s.stride, s.pad, cpu);
          EXPECT_TRUE(close(want, yc, Tolerance{0, 0})) << c.name << " CPU composition";
        }
      }
    }
  }
}

// ---- ours against cuDNN on a large bf16 case ------------------------------------------------------------------

TEST_F(ConvCuda, OursVsCudnnLargeBf16) {
  HPDT_SKIP_WITHOUT_VENDOR();
  // Too big for the CPU oracle to be quick: the reference is v1 in f32 on the bf16-rounded inputs (v1 f32 is
  // itself checked against the CPU above). Ours (v2, bf16) and cuDNN (bf16) must each be within the bf16
  // tolerance of it, and within two bf16 roundings of each other.
  // Both layouts: NHWC runs ours (conv_nhwc.cu) against cuDNN with NHWC descriptors.
  const Case cases[] = {{"ResNet-50 3x3 256->256 at 14, batch 32", 32, 256, 14, 14, 256, 3, 1, 1},
                        {"ResNet-50 1x1 256->1024 at 14, batch 32", 32, 256, 14, 14, 1024, 1, 1, 0}};
  for (Layout layout : {Layout::nchw, Layout::nhwc})
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + " " + kernels::layout_name(layout));
      const Conv2dShape s = c.shape();
      const bool nhwc = layout == Layout::nhwc;
      const Shape xs = nhwc ? Shape{s.n, s.h, s.w, s.c_in} : Shape{s.n, s.c_in, s.h, s.w};
      const Shape ys = nhwc ? Shape{s.n, s.out_h(), s.out_w(), s.c_out} : Shape{s.n, s.c_out, s.out_h(), s.out_w()};
      const Shape ws{s.c_out, s.c_in, s.kh, s.kw};
      const DType bf = DType::bf16;
      const Tensor x = round_through(random(xs), bf), w = round_through(random(ws), bf),
                   dy = round_through(random(ys), bf);
      const Tensor x32 = to_gpu(x), w32 = to_gpu(w), dy32 = to_gpu(dy), xb = to_gpu(x, bf), wb = to_gpu(w, bf),
                   dyb = to_gpu(dy, bf);
      const double lf = double(s.c_in * s.kh * s.kw), ld = double(s.c_out * s.kh * s.kw),
                   lw = double(s.n * s.out_h() * s.out_w());
      // references (f32, v1)
      Tensor y_ref = poisoned(ys), dx_ref = poisoned(xs),
             dw_ref = Tensor::zeros(ws, DType::f32, Device::cuda(0), AllocOptions{.stream = &stream});
      forward(Impl::v1, s, x32, w32, Conv2dEpilogue{}, y_ref, layout);
      backward_data(Impl::v1, s, dy32, w32, dx_ref, layout);
      backward_filter(Impl::v1, s, x32, dy32, dw_ref, nullptr, layout);
      const Tensor want_y = to_cpu_f32(y_ref), want_dx = to_cpu_f32(dx_ref), want_dw = to_cpu_f32(dw_ref);
      Tensor got[2][3];
      for (Impl impl : {Impl::v2, Impl::cudnn}) {
        SCOPED_TRACE(impl_name(impl));
        Tensor y = poisoned(ys, bf), dx = poisoned(xs, bf);
        Tensor dw = Tensor::zeros(ws, bf, Device::cuda(0), AllocOptions{.stream = &stream});
        forward(impl, s, xb, wb, Conv2dEpilogue{}, y, layout);
        backward_data(impl, s, dyb, wb, dx, layout);
        backward_filter(impl, s, xb, dyb, dw, nullptr, layout);
        Tensor* g = got[impl == Impl::v2 ? 0 : 1];
        g[0] = to_cpu_f32(y), g[1] = to_cpu_f32(dx), g[2] = to_cpu_f32(dw);
        EXPECT_TRUE(close(want_y, g[0], conv_tolerance(bf, lf, impl))) << "forward";
        EXPECT_TRUE(close(want_dx, g[1], conv_tolerance(bf, ld, impl))) << "backward-data";
        EXPECT_TRUE(close(want_dw, g[2], conv_tolerance(bf, lw, impl))) << "backward-filter";
      }
      const double l[3] = {lf, ld, lw};
      for (int d = 0; d < 3; ++d) {
        Tolerance t = conv_tolerance(bf, l[d], Impl::cudnn);
        t.rtol *= 2, t.atol *= 2;
        EXPECT_TRUE(close(got[1][d], got[0][d], t)) << "ours vs cuDNN, direction " << d;
      }
    }
}

// ---- determinism, entry points, errors --------------------------------------------------------------------------

TEST_F(ConvCuda, BackwardFilterIsDeterministic) {
  // Many split-K partials (the 3x3 64->64 at 56 x 56 has 5 column tiles, so the pixel sum is split ~24 ways).
  const Conv2dShape s = sized({"3x3 64->64 at 56", 2, 64, 56, 56, 64, 3, 1, 1}).shape();
  const Shape xs{s.n, s.c_in, s.h, s.w}, ws{s.c_out, s.c_in, 3, 3}, ys{s.n, s.c_out, s.h, s.w};
  for (DType dt : test::kCudaTestDtypes) {
    const Tensor x = to_gpu(random(xs), dt), dy = to_gpu(random(ys), dt), dw0 = random(ws), db0 = random({s.c_out});
    for (Impl impl : impls_for(dt)) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + impl_name(impl));
      Tensor first_dw, first_db;
      for (int run = 0; run < 3; ++run) {
        Tensor dw = to_gpu(dw0, dt), db = to_gpu(db0, dt);
        backward_filter(impl, s, x, dy, dw, &db);
        Tensor hw = dw.to(Device::cpu(), stream), hb = db.to(Device::cpu(), stream);
        stream.synchronize();
        if (run == 0) {
          first_dw = hw, first_db = hb;
          continue;
        }
        EXPECT_EQ(std::memcmp(first_dw.data(), hw.data(), hw.nbytes()), 0) << "dw differs on run " << run;
        EXPECT_EQ(std::memcmp(first_db.data(), hb.data(), hb.nbytes()), 0) << "dbias differs on run " << run;
      }
    }
  }
}


TEST_F(ConvCuda, PublicEntryPointsBothBackends) {
  const Case c{"k3 s2 p1", 4, 32, 15, 15, 48, 3, 2, 1};
  const Conv2dShape s = c.shape();
  const Shape xs{s.n, s.c_in, s.h, s.w}, ws{s.c_out, s.c_in, 3, 3}, ys{s.n, s.c_out, s.out_h(), s.out_w()};
  for (kernels::KernelBackend backend : {kernels::KernelBackend::ours, kernels::KernelBackend::vendor}) {
    if (backend == kernels::KernelBackend::vendor && !test::vendor_available()) continue;
    kernels::ScopedKernelBackend scope(backend);
    const Impl as = backend == kernels::KernelBackend::vendor ? Impl::cudnn : Impl::v2;
    for (DType dt : test::kCudaTestDtypes) {
      SCOPED_TRACE(std::string(kernels::kernel_backend_name(backend)) + " " + std::string(dtype_name(dt)));
      const Tensor x = random(xs), w = random(ws), b = random({s.c_out}), dy = random(ys), dw0 = random(ws),
                   db0 = random({s.c_out});
      const Expected want = oracle(s, round_through(x, dt), round_through(w, dt), &b, round_through(dy, dt),
                                   round_through(dw0, dt), round_through(db0, dt), dt);
      const Tensor gx = to_gpu(x, dt), gw = to_gpu(w, dt), gb = to_gpu(b, dt), gdy = to_gpu(dy, dt);
      Tensor y = poisoned(ys, dt), dx = poisoned(xs, dt), dw = to_gpu(dw0, dt), db = to_gpu(db0, dt);
      kernels::conv2d_forward(gx, gw, &gb, y, s.stride, s.pad, stream);
      kernels::conv2d_backward_data(gdy, gw, dx, s.stride, s.pad, stream);
      kernels::conv2d_backward_filter(gx, gdy, dw, &db, s.stride, s.pad, stream);
      EXPECT_TRUE(close(want.y, to_cpu_f32(y), conv_tolerance(dt, 32 * 9, as)));
      EXPECT_TRUE(close(want.dx, to_cpu_f32(dx), conv_tolerance(dt, 48 * 9, as)));
      const Tensor res = random(xs), gres = to_gpu(res, dt);
      Tensor dxr = poisoned(xs, dt), want_dxr = round_through(res, dt);
      for (int64_t i = 0; i < want_dxr.numel(); ++i) want_dxr.data<float>()[i] += want.dx.data<float>()[i];
      kernels::conv2d_backward_data(gdy, gw, dxr, s.stride, s.pad, stream, Layout::nchw, &gres);
      EXPECT_TRUE(close(want_dxr, to_cpu_f32(dxr), conv_tolerance(dt, 48 * 9, as))) << "dx + residual";
      EXPECT_TRUE(close(want.dw, to_cpu_f32(dw), conv_tolerance(dt, double(s.n * s.out_h() * s.out_w()), as)));
      EXPECT_TRUE(close(want.db, to_cpu_f32(db), conv_tolerance(dt, double(s.n * s.out_h() * s.out_w()), Impl::v1)));
    }
  }
}

// v2's epilogues write 4 outputs per 8-byte store where shape and pointers allow (NCHW: 4 pixels of a channel on
// dense planes that are multiples of 4; NHWC: 4 channels of a pixel); HPDT_CONV_V2_EPILOGUE=scalar writes one
// element at a time. Both must give the same bits: forward with every epilogue part, backward-data with a residual,
// stride 1 and 2 (NCHW's strided phases stay scalar), both layouts, f16 and bf16. A bad value of the switch throws.
TEST_F(ConvCuda, V2VectorEpilogueGivesTheScalarBits) {
  const Case cases[] = {{"1x1 64->256 at 28", 2, 64, 28, 28, 256, 1, 1, 0},
                        {"3x3 s1 p1 24->40 at 12", 3, 24, 12, 12, 40, 3, 1, 1},
                        {"3x3 s2 p1 32->64 at 14", 2, 32, 14, 14, 64, 3, 2, 1}};
  for (const Case& full : cases)
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (DType dt : {DType::bf16, DType::f16}) {
        const Conv2dShape s = sized(full).shape();
        SCOPED_TRACE(std::string(full.name) + " " + kernels::layout_name(layout) + " " + std::string(dtype_name(dt)));
        const bool nhwc = layout == Layout::nhwc;
        const Shape xs = nhwc ? Shape{s.n, s.h, s.w, s.c_in} : Shape{s.n, s.c_in, s.h, s.w};
        const Shape ys = nhwc ? Shape{s.n, s.out_h(), s.out_w(), s.c_out} : Shape{s.n, s.c_out, s.out_h(), s.out_w()};
        const Tensor x = to_gpu(random(xs), dt), w = to_gpu(random({s.c_out, s.c_in, s.kh, s.kw}), dt);
        const Tensor b = to_gpu(random({s.c_out}), dt), sc = to_gpu(random({s.c_out}, 0.5f, 2.0f), dt);
        const Tensor sh = to_gpu(random({s.c_out}), dt), res = to_gpu(random(ys), dt);
        const Tensor dy = to_gpu(random(ys), dt), dres = to_gpu(random(xs), dt);
        Conv2dEpilogue e;
        e.bias = &b, e.scale = &sc, e.shift = &sh, e.residual = &res, e.relu = true;
        Tensor got[2][2];  // [vec, scalar][forward, backward-data]
        for (int scalar = 0; scalar < 2; ++scalar) {
          const ScopedEnv epilogue("HPDT_CONV_V2_EPILOGUE", scalar ? "scalar" : nullptr);
          Tensor y = poisoned(ys, dt), dx = poisoned(xs, dt);
          forward(Impl::v2, s, x, w, e, y, layout);
          backward_data(Impl::v2, s, dy, w, dx, layout, &dres);
          got[scalar][0] = y.to(Device::cpu(), stream), got[scalar][1] = dx.to(Device::cpu(), stream);
        }
        stream.synchronize();
        for (int d = 0; d < 2; ++d)
          EXPECT_EQ(std::memcmp(got[0][d].data(), got[1][d].data(), got[0][d].nbytes()), 0)
              << (d == 0 ? "forward" : "backward-data") << ": the 4-wide epilogue's bits differ from the scalar one's";
      }
  const Conv2dShape s = sized(cases[0]).shape();
  const Tensor x = to_gpu(random({s.n, s.c_in, s.h, s.w}), DType::bf16);
  const Tensor w = to_gpu(random({s.c_out, s.c_in, 1, 1}), DType::bf16);
  Tensor y = poisoned({s.n, s.c_out, s.h, s.w}, DType::bf16);
  const ScopedEnv bad("HPDT_CONV_V2_EPILOGUE", "wide");
  HPDT_EXPECT_THROW_MSG(forward(Impl::v2, s, x, w, Conv2dEpilogue{}, y), "HPDT_CONV_V2_EPILOGUE=wide: expected vec or scalar");
}

// ---- batch norm's statistics from v2's forward epilogue ------------------------------------------------------

// Batch-norm partials (kernels::ChannelStats) against y as stored (host f32, `count` pixels of `plane` per image,
// in double): they merge to each channel's count exactly, its mean and variance closely.
void expect_statistics_of(const kernels::ChannelStats& st, const Tensor& yc, const Tensor& part, bool nhwc, int64_t c,
                          int64_t count, int64_t plane) {
  const float* pp = part.data<float>();
  for (int64_t ch = 0; ch < c; ++ch) {
    test::Moments got, want;
    for (int64_t k = 0; k < st.splits; ++k) {
      const float* q = pp + (ch * st.splits + k) * 3;
      got = test::merge(got, {q[0], q[1], q[2]});
    }
    const auto at = [&](int64_t i) {
      const int64_t img = i / plane, px = i % plane;
      return yc.data<float>()[nhwc ? i * c + ch : (img * c + ch) * plane + px];
    };
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < count; ++i) sum += at(i);
    want.n = double(count), want.mean = sum / double(count);
    for (int64_t i = 0; i < count; ++i) sq += (at(i) - want.mean) * (at(i) - want.mean);
    want.m2 = sq;
    ASSERT_EQ(got.n, want.n) << "channel " << ch << ": counts";
    const double sd = std::sqrt(want.m2 / want.n);
    EXPECT_NEAR(got.mean, want.mean, 1e-5 * (std::abs(want.mean) + sd) + 1e-7) << "channel " << ch << ": mean";
    EXPECT_NEAR(got.m2 / got.n, want.m2 / want.n, 1e-4 * want.m2 / want.n + 1e-7) << "channel " << ch << ": var";
  }
}

// v2's forward epilogue hands batch norm the per-channel partials of y as stored (kernels::ChannelStats): they merge
// to y's own statistics, batch norm given them computes what its own pass does (and what the CPU oracle does), it
// ignores partials that describe another tensor, and only v2 with a plain epilogue writes them.
TEST_F(ConvCuda, BatchNormStatisticsFromTheEpilogue) {
  const test::EpilogueBnReductions epilogue_reductions;

  // 1568 pixels (a partial last pixel tile, direct loads), 40 channels (a partial channel tile), odd everything
  const Case cases[] = {{"1x1 64->256 at 28", 2, 64, 28, 28, 256, 1, 1, 0},
                        {"3x3 s1 p1 24->40 at 12", 3, 24, 12, 12, 40, 3, 1, 1},
                        {"3x3 s2 p1 5->9 at 11x7", 3, 5, 11, 7, 9, 3, 2, 1},
                        {"7x7 s2 p3 3->20 at 19x17 (NCHW: space-to-depth)", 2, 3, 19, 17, 20, 7, 2, 3}};
  constexpr float kEps = 1e-5f, kMomentum = 0.1f;
  for (const Case& full : cases)
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (DType dt : {DType::bf16, DType::f16}) {
        const Conv2dShape s = sized(full).shape();
        SCOPED_TRACE(std::string(full.name) + " " + s.str() + " " + kernels::layout_name(layout) + " " +
                     std::string(dtype_name(dt)));
        const bool nhwc = layout == Layout::nhwc;
        const int64_t c = s.c_out, plane = s.out_h() * s.out_w(), count = s.n * plane;
        const Shape xs = nhwc ? Shape{s.n, s.h, s.w, s.c_in} : Shape{s.n, s.c_in, s.h, s.w};
        const Shape ys = nhwc ? Shape{s.n, s.out_h(), s.out_w(), c} : Shape{s.n, c, s.out_h(), s.out_w()};
        const Tensor x = to_gpu(random(xs), dt), w = to_gpu(random({c, s.c_in, s.kh, s.kw}), dt);
        Tensor y = poisoned(ys, dt);
        kernels::ChannelStats st;
        Conv2dEpilogue e;
        e.stats = &st;
        forward(Impl::v2, s, x, w, e, y, layout);
        ASSERT_TRUE(st.describe(y, c)) << "v2 wrote no statistics";

        // They merge to y's statistics (y as stored, in double): the counts exactly, mean and variance closely.
        const Tensor yc = to_cpu_f32(y), part = st.partial.to(Device::cpu(), stream);
        stream.synchronize();
        expect_statistics_of(st, yc, part, nhwc, c, count, plane);

        // Batch norm given them: its own pass's statistics and output, and the CPU oracle's statistics.
        const Tensor g = random({c}, 0.5f, 1.5f), b = random({c}, -0.5f, 0.5f);
        const Tensor gg = to_gpu(g, dt), bg = to_gpu(b, dt), rm0 = random({c}, -0.2f, 0.2f), rv0 = random({c}, 0.5f, 2.0f);
        const auto batch_norm = [&](const Tensor& in, const kernels::ChannelStats* given, kernels::BatchNormSaved& saved,
                                    Tensor& rm, Tensor& rv) {
          rm = to_gpu(rm0), rv = to_gpu(rv0);
          Tensor out = poisoned(ys, dt);
          kernels::BatchNormFusion fusion;
          fusion.stats = given;
          kernels::batchnorm_forward_train(in, gg, bg, rm, rv, kEps, kMomentum, saved, out, {}, stream, layout, fusion);
          return out;
        };
        kernels::BatchNormSaved own, fused, other;
        Tensor rm_own, rv_own, rm_fused, rv_fused, rm_other, rv_other;
        const Tensor y_own = batch_norm(y, nullptr, own, rm_own, rv_own);
        const Tensor y_fused = batch_norm(y, &st, fused, rm_fused, rv_fused);
        const Tolerance stat{2e-5, 1e-6};
        EXPECT_TRUE(close(to_cpu_f32(own.mean), to_cpu_f32(fused.mean), stat)) << "saved mean";
        EXPECT_TRUE(close(to_cpu_f32(own.invstd), to_cpu_f32(fused.invstd), stat)) << "saved invstd";
        EXPECT_TRUE(close(to_cpu_f32(rv_own), to_cpu_f32(rv_fused), stat)) << "running var";
        // the outputs differ at most where the two means round y's last bit differently
        EXPECT_TRUE(close(to_cpu_f32(y_own), to_cpu_f32(y_fused), test::default_tolerance(dt))) << "y";
        Tensor rm = rm0.clone(cpu), rv = rv0.clone(cpu), y_cpu = Tensor::empty(ys, DType::f32);
        kernels::BatchNormSaved oracle;
        kernels::batchnorm_forward_train(yc, round_through(g, dt), round_through(b, dt), rm, rv, kEps, kMomentum, oracle,
                                         y_cpu, {}, cpu, layout);
        EXPECT_TRUE(close(oracle.mean, to_cpu_f32(fused.mean), stat)) << "saved mean against the CPU oracle";
        EXPECT_TRUE(close(oracle.invstd, to_cpu_f32(fused.invstd), stat)) << "saved invstd against the CPU oracle";

        // Partials of y given with another tensor z are not used: the bits of batch norm's own pass over z.
        const Tensor z = to_gpu(random(ys, 2.0f, 3.0f), dt);
        kernels::BatchNormSaved z_own;
        const Tensor y_z = batch_norm(z, nullptr, z_own, rm_other, rv_other);
        const Tensor y_other = batch_norm(z, &st, other, rm_other, rv_other);
        const Tensor a = y_z.to(Device::cpu(), stream), o = y_other.to(Device::cpu(), stream);
        const Tensor am = z_own.mean.to(Device::cpu(), stream), om = other.mean.to(Device::cpu(), stream);
        stream.synchronize();
        EXPECT_EQ(std::memcmp(a.data(), o.data(), a.nbytes()), 0) << "batch norm used partials of another tensor";
        EXPECT_EQ(std::memcmp(am.data(), om.data(), am.nbytes()), 0) << "batch norm used partials of another tensor";
        // nor for a part of y that starts where y does (its first image: the same data pointer)
        EXPECT_FALSE(st.describe(y.slice(0, 1), c)) << "the statistics of y describe its first image";
        EXPECT_TRUE(st.describe(y, c));
      }

  // Only v2 with a plain epilogue writes them; a path that does not clears what the struct held.
  const Conv2dShape s = sized(cases[1]).shape();
  const Tensor x = to_gpu(random({s.n, s.c_in, s.h, s.w}), DType::bf16);
  const Tensor w = to_gpu(random({s.c_out, s.c_in, 3, 3}), DType::bf16), b = to_gpu(random({s.c_out}), DType::bf16);
  Tensor y = poisoned({s.n, s.c_out, s.h, s.w}, DType::bf16);
  kernels::ChannelStats st;
  Conv2dEpilogue e;
  e.stats = &st;
  forward(Impl::v2, s, x, w, e, y);
  ASSERT_TRUE(st.describe(y, s.c_out));
  forward(Impl::v1, s, x, w, e, y);
  EXPECT_FALSE(st.partial.defined()) << "v1 (SIMT)";
  forward(Impl::v2, s, x, w, e, y);
  e.bias = &b;
  forward(Impl::v2, s, x, w, e, y);
  EXPECT_FALSE(st.partial.defined()) << "v2 with a bias";
  e.bias = nullptr;
  {
    const ScopedEnv off("HPDT_CONV_BN_STATS", "separate");
    forward(Impl::v2, s, x, w, e, y);
    EXPECT_FALSE(st.partial.defined()) << "HPDT_CONV_BN_STATS=separate";
  }
  const ScopedEnv bad("HPDT_CONV_BN_STATS", "fused");
  HPDT_EXPECT_THROW_MSG(forward(Impl::v2, s, x, w, e, y), "HPDT_CONV_BN_STATS=fused: expected separate or epilogue");
}

// Batch-norm backward sums (kernels::ChannelGradSums) against the plain gradient, all on the host: dz (gz, as
// stored, 16-bit) is the plain gradient (gg) through the mask of y > 0 (yc; undefined: no mask) bit for bit, and the
// partials add up to each channel's sums of dz and dz (x - mean) (xc, gc: x and the gradient in f32, mc: the mean).
void expect_grad_sums_of(const kernels::ChannelGradSums& sums, const Tensor& gz, const Tensor& gg, const Tensor& part,
                         const Tensor& xc, const Tensor& yc, const Tensor& gc, const Tensor& mc, bool nhwc, int64_t c,
                         int64_t count, int64_t plane) {
  const bool relu = yc.defined();
  const uint16_t* zb = static_cast<const uint16_t*>(gz.data());
  const uint16_t* gb = static_cast<const uint16_t*>(gg.data());
  int64_t bad = 0;
  for (int64_t i = 0; i < gz.numel(); ++i) bad += zb[i] != (!relu || yc.data<float>()[i] > 0.0f ? gb[i] : uint16_t(0));
  EXPECT_EQ(bad, 0) << "elements of dz that are not the masked gradient";
  const float* pp = part.data<float>();
  for (int64_t ch = 0; ch < c; ++ch) {
    double got[2] = {0, 0}, want[2] = {0, 0}, scale = 0;
    for (int64_t k = 0; k < sums.splits; ++k)
      for (int e = 0; e < 2; ++e) got[e] += pp[(ch * sums.splits + k) * 2 + e];
    for (int64_t i = 0; i < count; ++i) {
      const int64_t at = nhwc ? i * c + ch : (i / plane * c + ch) * plane + i % plane;
      const bool keep = !relu || yc.data<float>()[at] > 0.0f;
      const double v = keep ? gc.data<float>()[at] : 0.0, d = xc.data<float>()[at] - mc.data<float>()[ch];
      want[0] += v, want[1] += v * d, scale += std::abs(v) * (1.0 + std::abs(d));
    }
    for (int e = 0; e < 2; ++e)
      EXPECT_NEAR(got[e], want[e], 1e-5 * scale + 1e-6) << "channel " << ch << (e ? ": sum dz (x - mean)" : ": sum dz");
  }
}

#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
// Every 128-byte line of the given tensors (null: none), in address order: what the epilogues' L2 prefetches must
// name when their tiles cover every element (the emulator's record: cuda_emu::prefetched_lines).
std::vector<uintptr_t> lines_of(std::initializer_list<const Tensor*> tensors) {
  std::set<uintptr_t> lines;
  for (const Tensor* t : tensors) {
    if (!t) continue;
    const auto a = reinterpret_cast<uintptr_t>(t->data());
    for (uintptr_t line = a >> 7; line <= (a + t->nbytes() - 1) >> 7; ++line) lines.insert(line << 7);
  }
  return {lines.begin(), lines.end()};
}
#endif

// v2's backward-data epilogue hands batch norm its backward sums (kernels::ChannelGradSums): dx comes back as the
// gradient through the fused ReLU's mask (the same bits as masking the plain gradient), the partials add up to
// that batch norm's sums, batch norm given them computes what its own reduce pass does (dz copied out where it is
// another tensor), partials given with another gradient are ignored, and only v2 with every dx pixel in some
// stride phase writes them.
TEST_F(ConvCuda, BatchNormBackwardSumsFromTheEpilogue) {
  const test::EpilogueBnReductions epilogue_reductions;

  // 1568 dx pixels (a partial last tile), 40 input channels (a partial channel tile), stride 2 (four phases), odd
  const Case cases[] = {{"1x1 256->64 at 28", 2, 256, 28, 28, 64, 1, 1, 0},
                        {"3x3 s1 p1 40->24 at 12", 3, 40, 12, 12, 24, 3, 1, 1},
                        {"3x3 s2 p1 9->5 at 11x7", 3, 9, 11, 7, 5, 3, 2, 1}};
  for (const Case& full : cases)
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (DType dt : {DType::bf16, DType::f16})
        for (const bool relu : {true, false})
          for (const bool with_residual : {false, true}) {
            const Conv2dShape s = sized(full).shape();
            SCOPED_TRACE(std::string(full.name) + " " + s.str() + " " + kernels::layout_name(layout) + " " +
                         std::string(dtype_name(dt)) + (relu ? " relu" : "") + (with_residual ? " residual" : ""));
            const bool nhwc = layout == Layout::nhwc;
            const int64_t c = s.c_in, plane = s.h * s.w, count = s.n * plane;
            const Shape xs = nhwc ? Shape{s.n, s.h, s.w, c} : Shape{s.n, c, s.h, s.w};
            const Shape ys = nhwc ? Shape{s.n, s.out_h(), s.out_w(), s.c_out} : Shape{s.n, s.c_out, s.out_h(), s.out_w()};
            const Tensor dy = to_gpu(random(ys), dt), w = to_gpu(random({s.c_out, c, s.kh, s.kw}), dt);
            const Tensor res = to_gpu(random(xs), dt);
            kernels::ChannelGradSums sums;
            sums.x = to_gpu(random(xs, -1.0f, 3.0f), dt);
            if (relu) sums.y = to_gpu(random(xs), dt);
            sums.mean = to_gpu(random({c}, 0.5f, 1.5f));
            Tensor dz = poisoned(xs, dt), g = poisoned(xs, dt);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
            cuda_emu::clear_prefetched_lines();
#endif
            backward_data(Impl::v2, s, dy, w, dz, layout, with_residual ? &res : nullptr, &sums);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
            // the epilogue's inputs, prefetched into L2 before each tile's k loop: every line of x, y and the residual
            // (the phases' tiles cover every dx pixel and channel), none other
            stream.synchronize();
            EXPECT_EQ(cuda_emu::prefetched_lines(),
                      lines_of({&sums.x, relu ? &sums.y : nullptr, with_residual ? &res : nullptr}))
                << "the L2 prefetches of the epilogue's inputs";
#endif
            backward_data(Impl::v2, s, dy, w, g, layout, with_residual ? &res : nullptr);
            ASSERT_TRUE(sums.describe(dz, c)) << "v2 wrote no sums";

            // dz: the plain gradient through the mask, bit for bit; the sums: dz's and dz (x - mean)'s
            const Tensor gz = dz.to(Device::cpu(), stream), gg = g.to(Device::cpu(), stream);
            const Tensor part = sums.partial.to(Device::cpu(), stream);
            const Tensor xc = to_cpu_f32(sums.x), yc = relu ? to_cpu_f32(sums.y) : Tensor(), gc = to_cpu_f32(g);
            const Tensor mc = sums.mean.to(Device::cpu(), stream);
            stream.synchronize();
            expect_grad_sums_of(sums, gz, gg, part, xc, yc, gc, mc, nhwc, c, count, plane);

            // Batch norm's backward given them, against its own reduce pass over the plain gradient.
            kernels::BatchNormSaved saved;
            saved.mean = sums.mean, saved.invstd = to_gpu(random({c}, 0.5f, 2.0f));
            const Tensor gamma = to_gpu(random({c}, 0.5f, 1.5f), dt);
            const auto bn_backward = [&](const Tensor& grad, const kernels::ChannelGradSums* given, Tensor& dz_out) {
              Tensor dx = poisoned(xs, dt), dgamma = to_gpu(Tensor::zeros({c}, DType::f32), dt);
              Tensor dbeta = to_gpu(Tensor::zeros({c}, DType::f32), dt);
              const kernels::BatchNormReluGrad rg{relu ? sums.y : Tensor(), dz_out};
              kernels::batchnorm_backward_train(grad, sums.x, gamma, saved, dx, dgamma, dbeta, {}, stream, layout,
                                                relu ? &rg : nullptr, given);
              return std::vector<Tensor>{to_cpu_f32(dx), to_cpu_f32(dgamma), to_cpu_f32(dbeta)};
            };
            Tensor dz_own = poisoned(xs, dt), dz_copy = poisoned(xs, dt);
            const std::vector<Tensor> own = bn_backward(g, nullptr, dz_own);
            const std::vector<Tensor> fused = bn_backward(dz, &sums, dz);  // dz in place: no copy
            const std::vector<Tensor> copied = bn_backward(dz, &sums, dz_copy);
            const Tolerance tol = test::default_tolerance(dt);
            const char* what[3] = {"dx", "dgamma", "dbeta"};
            for (int k = 0; k < 3; ++k) {
              EXPECT_TRUE(close(own[size_t(k)], fused[size_t(k)], {tol.rtol, tol.atol * 4})) << what[k];
              EXPECT_TRUE(close(fused[size_t(k)], copied[size_t(k)], Tolerance{0, 0})) << what[k] << ", dz copied";
            }
            if (relu) {
              const Tensor a = dz_own.to(Device::cpu(), stream), b = dz_copy.to(Device::cpu(), stream);
              stream.synchronize();
              EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << "relu.dz: the copy of dz differs";
            }
            // sums given with another gradient are not used: the bits of the reduce pass over that gradient
            Tensor unused = poisoned(xs, dt), unused2 = poisoned(xs, dt);
            const std::vector<Tensor> other = bn_backward(g, &sums, unused), plain = bn_backward(g, nullptr, unused2);
            for (int k = 0; k < 3; ++k)
              EXPECT_TRUE(close(plain[size_t(k)], other[size_t(k)], Tolerance{0, 0})) << what[k] << ": sums of dz used for g";
          }

  // Where the epilogue does not see every dx pixel (1x1 stride 2: three of four phases have no tap), with v1, and
  // with HPDT_CONV_BN_STATS=separate, no sums: the struct comes back cleared and dx is the plain gradient.
  const auto none = [&](const Case& full, Impl impl) {
    const Conv2dShape s = sized(full).shape();
    const Tensor dy = to_gpu(random({s.n, s.c_out, s.out_h(), s.out_w()}), DType::bf16);
    const Tensor w = to_gpu(random({s.c_out, s.c_in, s.kh, s.kw}), DType::bf16);
    kernels::ChannelGradSums sums;
    sums.x = to_gpu(random({s.n, s.c_in, s.h, s.w}), DType::bf16);
    sums.mean = to_gpu(random({s.c_in}));
    Tensor dx = poisoned({s.n, s.c_in, s.h, s.w}, DType::bf16);
    backward_data(impl, s, dy, w, dx, Layout::nchw, nullptr, &sums);
    return !sums.partial.defined() && sums.of == nullptr;
  };
  EXPECT_TRUE(none({"1x1 s2 16->32 at 14", 2, 16, 14, 14, 32, 1, 2, 0}, Impl::v2)) << "1x1 stride 2";
  EXPECT_TRUE(none(cases[1], Impl::v1)) << "v1";
  const ScopedEnv off("HPDT_CONV_BN_STATS", "separate");
  EXPECT_TRUE(none(cases[1], Impl::v2)) << "HPDT_CONV_BN_STATS=separate";
}

TEST_F(ConvCuda, BadInputsOnGpu) {
  const auto gpu = [&](const Shape& sh, DType dt) { return poisoned(sh, dt); };
  Tensor x = gpu({2, 3, 8, 8}, DType::bf16), w = gpu({4, 3, 3, 3}, DType::bf16), y = gpu({2, 4, 8, 8}, DType::bf16);
  Tensor w32 = gpu({4, 3, 3, 3}, DType::f32), b32 = gpu({4}, DType::f32), b5 = gpu({5}, DType::bf16);
  Tensor ybad = gpu({2, 4, 7, 8}, DType::bf16), wci = gpu({4, 5, 3, 3}, DType::bf16);
  const std::string mix = "on CUDA all tensors of this op share one of f32, f16, bf16";
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward(x, w32, nullptr, y, 1, 1, stream), mix);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward(x, w, &b32, y, 1, 1, stream), mix);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward(x, w, &b5, y, 1, 1, stream), "bias has shape [5], expected [4]");
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward(x, w, nullptr, ybad, 1, 1, stream),
                        "y has shape [2, 4, 7, 8], expected [2, 4, 8, 8]");
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward(x, wci, nullptr, y, 1, 1, stream), "input channels of x [2, 3, 8, 8]");
  Tensor dx = gpu({2, 3, 8, 8}, DType::bf16), dy32 = gpu({2, 4, 8, 8}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_data(dy32, w, dx, 1, 1, stream), mix);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_data(ybad, w, dx, 1, 1, stream), "dy has shape [2, 4, 7, 8]");
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_data(y, w, dx, 1, 1, stream, Layout::nchw, &dx),
                        "conv2d_backward_data: the residual must be a tensor other than dx");
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_data(y, w, dx, 1, 1, stream, Layout::nchw, &y),
                        "residual has shape [2, 4, 8, 8], expected [2, 3, 8, 8]");
  kernels::ChannelGradSums sums;  // the batch norm whose output gradient dx is: its input, fused output, mean
  sums.x = ybad, sums.mean = gpu({3}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_data(y, w, dx, 1, 1, stream, Layout::nchw, nullptr, &sums),
                        "bn_grad.x has shape [2, 4, 7, 8], expected [2, 3, 8, 8]");
  sums.x = x, sums.y = ybad;
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_data(y, w, dx, 1, 1, stream, Layout::nchw, nullptr, &sums),
                        "bn_grad.y has shape [2, 4, 7, 8], expected [2, 3, 8, 8]");
  sums.y = Tensor(), sums.mean = b32;
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_data(y, w, dx, 1, 1, stream, Layout::nchw, nullptr, &sums),
                        "conv2d_backward_data: bn_grad.mean must be f32 [3] on cuda:0");
  Tensor dw = gpu({4, 3, 3, 3}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_filter(x, y, dw, &b32, 1, 1, stream), mix);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_filter(x, y, dw, &b5, 1, 1, stream), "dbias has shape [5]");
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_backward_filter(x, ybad, dw, nullptr, 1, 1, stream), "dy has shape");
  Conv2dEpilogue e;
  e.residual = &ybad;
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward_fused(x, w, e, y, 1, 1, stream), "residual has shape [2, 4, 7, 8]");
  e.residual = &y;
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward_fused(x, w, e, y, 1, 1, stream), "residual must be a tensor other than y");
  e.residual = nullptr, e.scale = &b32;
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward_fused(x, w, e, y, 1, 1, stream), mix);
  Tensor xc = Tensor::empty({2, 3, 8, 8}, DType::f32);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward(xc, w, nullptr, y, 1, 1, stream), "conv2d_forward");
#if HPDT_HAVE_CUDA
  Tensor x32 = gpu({2, 3, 8, 8}, DType::f32), y32 = gpu({2, 4, 8, 8}, DType::f32);
  const Conv2dShape s{2, 3, 8, 8, 4, 3, 3, 1, 1};
  HPDT_EXPECT_THROW_MSG(kernels::cuda::conv2d_forward(s, x32, w32, Conv2dEpilogue{}, y32, stream,
                                                      kernels::cuda::ConvVariant::v2_tensor_core),
                        "the tensor-core variant (v2) takes f16 or bf16 tensors, got f32");
#endif
}

// ---- NHWC ------------------------------------------------------------------------------------------------------
// The same checks in NHWC against the CPU NHWC oracle. The v2 activation loader takes 16-byte cp.async when the
// reduction's channel count (ci forward, co backward-data; co and ci for backward-filter's two tiles) is a
// multiple of 8, element gathers otherwise: the cases cover both, and each alone in backward-filter.

TEST_F(ConvCuda, NhwcOnePixelOneChannel) { check_case({"1x1x1x1 k1", 1, 1, 1, 1, 1, 1, 1, 0}, true, Layout::nhwc); }

TEST_F(ConvCuda, NhwcOddChannelsGather) {
  // ci 5, co 7 (and 3 -> 17) on 9 x 11: gathers everywhere, partial tiles, K not a multiple of 8 or 32.
  const Case cases[] = {{"k3 s1 p1", 3, 5, 9, 11, 7, 3, 1, 1},
                        {"k3 s2 p1", 3, 5, 9, 11, 7, 3, 2, 1},
                        {"k1 s2 p0", 3, 5, 9, 11, 7, 1, 2, 0},
                        {"k5 s1 p2", 2, 3, 9, 11, 17, 5, 1, 2},
                        {"k2 s3 p0 (taps-less phases)", 2, 6, 10, 10, 5, 2, 3, 0},
                        {"3->72 k3 s2 (128-wide channel tiles)", 2, 3, 9, 9, 72, 3, 2, 1}};
  for (size_t i = 0; i < std::size(cases); ++i) check_case(cases[i], i % 2 == 0, Layout::nhwc);
}

TEST_F(ConvCuda, NhwcVectorLoadsAndTileEdges) {
  // ci, co multiples of 8: the 16-byte loaders and the 4-stage pipelines. co 130: two channel tiles, the second of
  // 2; 8 -> 17 and 17 -> 8: one of backward-filter's tiles gathered (co % 8 != 0 gathers dy and x; ci % 8 != 0 only
  // x); stride 4 (phases of one tap), 1x1 (x and dy read as plain [pixels, channels] matrices).
  const Case cases[] = {
      {"co 130 ci 24 3x3", 2, 24, 9, 9, 130, 3, 1, 1}, {"8->17 k3 s2", 2, 8, 11, 9, 17, 3, 2, 1},
      {"17->8 k3 s1", 2, 17, 9, 9, 8, 3, 1, 1},        {"k3 s4 p1 16->16", 2, 16, 13, 13, 16, 3, 4, 1},
      {"1x1 72->40", 2, 72, 8, 9, 40, 1, 1, 0},        {"1x1 s2 32->64", 2, 32, 9, 9, 64, 1, 2, 0}};
  for (size_t i = 0; i < std::size(cases); ++i) check_case(cases[i], i % 2 == 1, Layout::nhwc);
}

TEST_F(ConvCuda, NhwcStemAndPatchConvolutions) {
  check_case({"7x7/2 3->64", 2, 3, 32, 32, 64, 7, 2, 3}, false, Layout::nhwc);
  check_case({"patch 4x4/4 1->48 at 28", 2, 1, 28, 28, 48, 4, 4, 0}, true, Layout::nhwc);
  check_case({"patch 4x4/4 8->32 at 16", 2, 8, 16, 16, 32, 4, 4, 0}, true, Layout::nhwc);
}

TEST_F(ConvCuda, NhwcResNetShapes) {
  // ResNet-20 at 28 x 28 (batch 8: 16, 32, 64 channels, the stride-2 transitions and the 1x1 projection) and
  // ResNet-50's stage-1 bottleneck at 56 x 56.
  const Case cases[] = {
      {"stem 1->16", 8, 1, 28, 28, 16, 3, 1, 1},      {"16->16", 8, 16, 28, 28, 16, 3, 1, 1},
      {"16->32 s2", 8, 16, 28, 28, 32, 3, 2, 1},      {"proj 16->32 s2", 8, 16, 28, 28, 32, 1, 2, 0},
      {"64->64 at 7", 8, 64, 7, 7, 64, 3, 1, 1},      {"R50 1x1 256->64", 2, 256, 56, 56, 64, 1, 1, 0},
      {"R50 3x3 64->64", 2, 64, 56, 56, 64, 3, 1, 1}, {"R50 1x1 64->256", 2, 64, 56, 56, 256, 1, 1, 0}};
  for (size_t i = 0; i < std::size(cases); ++i) check_case(cases[i], false, Layout::nhwc);
}

TEST_F(ConvCuda, NhwcMisalignedViewsGather) {
  // Channel counts that would take the 16-byte loads, but x, dy, y and dx start one element into their buffers.
  check_case({"16->24 k3 s1", 2, 16, 9, 9, 24, 3, 1, 1}, true, Layout::nhwc, true);
}

TEST_F(ConvCuda, NhwcFusedEpilogue) {
  // The fused forward in NHWC (residual [n, oh, ow, co]) against the CPU's composition of its NHWC ops.
  struct Parts {
    bool bias, scale, shift, residual, relu;
  };
  const Parts combos[] = {
      {true, false, false, false, true}, {false, true, true, true, true}, {true, true, true, true, false}};
  const Case cases[] = {{"k3 s1 p1 5->7", 3, 5, 9, 11, 7, 3, 1, 1},
                        {"1x1 64->136 at 14", 2, 64, 14, 14, 136, 1, 1, 0},
                        {"3x3 s2 32->64", 4, 32, 14, 14, 64, 3, 2, 1}};
  for (const Case& full : cases) {
    const Case c = sized(full);
    const Conv2dShape s = c.shape();
    const Shape xs{s.n, s.h, s.w, s.c_in}, ys{s.n, s.out_h(), s.out_w(), s.c_out};
    for (DType dt : test::kCudaTestDtypes) {
      const Tensor x = round_through(random(xs), dt), w = round_through(random({s.c_out, s.c_in, s.kh, s.kw}), dt);
      const Tensor b = round_through(random({s.c_out}), dt), sc = round_through(random({s.c_out}, 0.5f, 2.0f), dt);
      const Tensor sh = round_through(random({s.c_out}), dt), res = round_through(random(ys), dt);
      const Tensor gx = to_gpu(x, dt), gw = to_gpu(w, dt), gb = to_gpu(b, dt), gsc = to_gpu(sc, dt),
                   gsh = to_gpu(sh, dt), gres = to_gpu(res, dt);
      for (const Parts& p : combos) {
        Conv2dEpilogue ce;
        ce.bias = p.bias ? &b : nullptr, ce.scale = p.scale ? &sc : nullptr, ce.shift = p.shift ? &sh : nullptr;
        ce.residual = p.residual ? &res : nullptr, ce.relu = p.relu;
        Tensor want = Tensor::empty(ys, DType::f32);
        kernels::conv2d_forward_fused(x, w, ce, want, s.stride, s.pad, cpu, Layout::nhwc);
        Conv2dEpilogue e;
        e.bias = p.bias ? &gb : nullptr, e.scale = p.scale ? &gsc : nullptr, e.shift = p.shift ? &gsh : nullptr;
        e.residual = p.residual ? &gres : nullptr, e.relu = p.relu;
        Tolerance tol = conv_tolerance(dt, double(s.c_in * s.kh * s.kw), Impl::cudnn);
        tol.atol *= 3;  // scale up to 2 and the residual add widen the absolute error
        for (Impl impl : impls_for(dt)) {
          SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)) + " " + impl_name(impl) + " bias " +
                       std::to_string(p.bias) + " scale/shift " + std::to_string(p.scale) + " residual " +
                       std::to_string(p.residual) + " relu " + std::to_string(p.relu));
          Tensor y = poisoned(ys, dt);
          forward(impl, s, gx, gw, e, y, Layout::nhwc);
          EXPECT_TRUE(close(want, to_cpu_f32(y), tol));
        }
        Tensor y = poisoned(ys, dt);
        kernels::conv2d_forward_fused(gx, gw, e, y, s.stride, s.pad, stream, Layout::nhwc);
        EXPECT_TRUE(close(want, to_cpu_f32(y), tol)) << c.name << " public entry point";
      }
    }
  }
}

TEST_F(ConvCuda, NhwcBackwardFilterIsDeterministic) {
  const Conv2dShape s = sized({"3x3 64->64 at 56", 2, 64, 56, 56, 64, 3, 1, 1}).shape();
  const Shape xs{s.n, s.h, s.w, s.c_in}, ws{s.c_out, s.c_in, 3, 3}, ys{s.n, s.h, s.w, s.c_out};
  for (DType dt : test::kCudaTestDtypes) {
    const Tensor x = to_gpu(random(xs), dt), dy = to_gpu(random(ys), dt), dw0 = random(ws), db0 = random({s.c_out});
    for (Impl impl : impls_for(dt)) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + impl_name(impl));
      Tensor first_dw, first_db;
      for (int run = 0; run < 3; ++run) {
        Tensor dw = to_gpu(dw0, dt), db = to_gpu(db0, dt);
        backward_filter(impl, s, x, dy, dw, &db, Layout::nhwc);
        Tensor hw = dw.to(Device::cpu(), stream), hb = db.to(Device::cpu(), stream);
        stream.synchronize();
        if (run == 0) {
          first_dw = hw, first_db = hb;
          continue;
        }
        EXPECT_EQ(std::memcmp(first_dw.data(), hw.data(), hw.nbytes()), 0) << "dw differs on run " << run;
        EXPECT_EQ(std::memcmp(first_db.data(), hb.data(), hb.nbytes()), 0) << "dbias differs on run " << run;
      }
    }
  }
}

#if HPDT_HAVE_CUDA
// With kernels::conv_choice() v3 and ConvVariant::automatic, NHWC 1x1 stride-1 convolutions run as GEMM v3 in all
// three directions (backward-data with a residual stays on the conv kernels, whose epilogue adds it): against the
// oracle, and on the emulator, which kernels ran.
TEST_F(ConvCuda, NhwcOneByOneRunsOnGemmV3WhenChosen) {
  if (!wgmma_runs_here())
    GTEST_SKIP() << "GEMM v3 does not run here (it needs a compute capability 9.0 device and an sm_90 build)";
  kernels::ScopedConvChoice v3(kernels::ConvChoice::v3);
  const auto auto_v = kernels::cuda::ConvVariant::automatic;
  const Case cases[] = {{"1x1 64->72 at 14", 2, 64, 14, 14, 72, 1, 1, 0}, {"1x1 40->24 at 6x2", 3, 40, 6, 2, 24, 1, 1, 0}};
  for (DType dt : {DType::bf16, DType::f16})
    for (const Case& c : cases) {
      const Conv2dShape s = c.shape();
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)));
      const Shape xs{s.n, s.h, s.w, s.c_in}, ys{s.n, s.h, s.w, s.c_out}, ws{s.c_out, s.c_in, 1, 1};
      const Tensor x = random(xs), w = random(ws), b = random({s.c_out}), dy = random(ys), dw0 = random(ws),
                   db0 = random({s.c_out}), res = random(xs);
      const Expected want = oracle(s, round_through(x, dt), round_through(w, dt), &b, round_through(dy, dt),
                                   round_through(dw0, dt), round_through(db0, dt), dt, Layout::nhwc);
      const Tensor gx = to_gpu(x, dt), gw = to_gpu(w, dt), gb = to_gpu(b, dt), gdy = to_gpu(dy, dt);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      const unsigned long long gemms = cuda_emu::launches_named("gemm_v3"), convs = cuda_emu::launches_named("conv_nhwc_");
#endif
      Tensor y = poisoned(ys, dt), dx = poisoned(xs, dt), dw = to_gpu(dw0, dt), db = to_gpu(db0, dt);
      Conv2dEpilogue e;
      e.bias = &gb;
      kernels::cuda::conv2d_forward_nhwc(s, gx, gw, e, y, stream, auto_v);
      kernels::cuda::conv2d_backward_data_nhwc(s, gdy, gw, dx, stream, auto_v);
      kernels::cuda::conv2d_backward_filter_nhwc(s, gx, gdy, dw, &db, stream, auto_v);
      const double l_filter = double(s.n * s.h * s.w);
      EXPECT_TRUE(close(want.y, to_cpu_f32(y), conv_tolerance(dt, double(s.c_in), Impl::v2))) << "forward";
      EXPECT_TRUE(close(want.dx, to_cpu_f32(dx), conv_tolerance(dt, double(s.c_out), Impl::v2))) << "backward-data";
      EXPECT_TRUE(close(want.dw, to_cpu_f32(dw), conv_tolerance(dt, l_filter, Impl::v2))) << "backward-filter dw";
      EXPECT_TRUE(close(want.db, to_cpu_f32(db), conv_tolerance(dt, l_filter, Impl::v1))) << "backward-filter dbias";
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      EXPECT_EQ(cuda_emu::launches_named("gemm_v3") - gemms, 3u) << "one GEMM v3 per direction";
      EXPECT_EQ(cuda_emu::launches_named("conv_nhwc_"), convs) << "no conv kernel";
#endif
      // backward-data with a residual: the conv kernels (their epilogue adds it)
      Tensor dxr = poisoned(xs, dt), want_dxr = round_through(res, dt);
      for (int64_t i = 0; i < want_dxr.numel(); ++i) want_dxr.data<float>()[i] += want.dx.data<float>()[i];
      const Tensor gres = to_gpu(res, dt);
      kernels::cuda::conv2d_backward_data_nhwc(s, gdy, gw, dxr, stream, auto_v, &gres);
      EXPECT_TRUE(close(want_dxr, to_cpu_f32(dxr), conv_tolerance(dt, double(s.c_out), Impl::v2))) << "dx + residual";
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      EXPECT_GT(cuda_emu::launches_named("conv_nhwc_"), convs) << "the residual takes the conv kernels";
#endif
    }
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
  // conv_choice() v2 (the default) keeps them on the conv kernels, whatever gemm_choice() (v3 by default) says
  const kernels::ScopedConvChoice v2(kernels::ConvChoice::v2);
  const kernels::ScopedGemmChoice gemm_v3(kernels::GemmChoice::v3);
  const Conv2dShape s = cases[0].shape();
  const Tensor x = to_gpu(random({s.n, s.h, s.w, s.c_in}), DType::bf16),
               w = to_gpu(random({s.c_out, s.c_in, 1, 1}), DType::bf16);
  Tensor y = poisoned({s.n, s.h, s.w, s.c_out}, DType::bf16);
  const unsigned long long gemms = cuda_emu::launches_named("gemm_v3"), convs = cuda_emu::launches_named("conv_nhwc_");
  kernels::cuda::conv2d_forward_nhwc(s, x, w, Conv2dEpilogue{}, y, stream, auto_v);
  EXPECT_EQ(cuda_emu::launches_named("gemm_v3"), gemms) << "conv v2 chosen: no GEMM v3";
  EXPECT_GT(cuda_emu::launches_named("conv_nhwc_"), convs) << "conv v2 chosen: the conv kernels";
#endif
}
#endif

#if HPDT_HAVE_CUDA
// kernels::ConvChoice::find: each NHWC convolution's first call times v2 and v3 on a scratch output, then runs the
// faster on the real one (v2 untimed where v3 does not take it). A 3x3 (conv v3) and a 1x1 (GEMM v3), all three
// directions, against the oracle: the
// backward-filter accumulates into dw and dbias (had a timing run touched the real dw, it would be off), the
// backward-data adds a residual. Then one report per convolution and direction, in order, both times and the faster
// taken; repeats are not timed again; inside a CUDA-graph capture an untimed convolution runs v2 (the same bits as
// v2) and stays untimed.
TEST_F(ConvCuda, NhwcFindTimesV2AndV3OnScratchOutputs) {
  if (!wgmma_runs_here())
    GTEST_SKIP() << "conv v3 does not run here (it needs a compute capability 9.0 device and an sm_90 build)";
  const kernels::ScopedConvChoice find(kernels::ConvChoice::find);
  kernels::cuda::conv_forget_found();
  const auto auto_v = kernels::cuda::ConvVariant::automatic;
  const DType dt = DType::bf16;
  const Case cases[] = {{"3x3 64->64 at 9x9", 2, 64, 9, 9, 64, 3, 1, 1}, {"1x1 64->72 at 6x5", 2, 64, 6, 5, 72, 1, 1, 0}};
  for (int pass = 0; pass < 2; ++pass)
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + (pass ? ", again" : ""));
      expect_nhwc_directions_right(c, dt, true);
    }
  const std::vector<kernels::cuda::ConvFound> found = kernels::cuda::conv_found();
  ASSERT_EQ(found.size(), 6u) << "one report per convolution and direction, not one per call";
  EXPECT_EQ(found[0].call, "fwd 3x3 64->64 2x9x9 pad 1 bf16 bias");
  EXPECT_EQ(found[1].call, "bwd_data 3x3 64->64 2x9x9 pad 1 bf16 residual");
  EXPECT_EQ(found[2].call, "bwd_filter 3x3 64->64 2x9x9 pad 1 bf16");
  EXPECT_EQ(found[3].call, "fwd 1x1 64->72 2x6x5 bf16 bias");
  EXPECT_EQ(found[4].call, "bwd_data 1x1 64->72 2x6x5 bf16 residual");
  for (const kernels::cuda::ConvFound& f : found) {
    SCOPED_TRACE(f.call);
    if (&f == &found[4]) {  // 72 output channels, a residual: neither GEMM v3 nor conv v3 takes it
      EXPECT_EQ(f.choice, "v2");
      EXPECT_TRUE(f.ms.empty());
      continue;
    }
    ASSERT_EQ(f.ms.size(), 2u);
    EXPECT_EQ(f.ms[0].first, "v2");
    EXPECT_EQ(f.ms[1].first, "v3");
    EXPECT_GT(f.ms[0].second, 0.0);
    EXPECT_GT(f.ms[1].second, 0.0);
    EXPECT_EQ(f.choice, f.ms[1].second < f.ms[0].second ? "v3" : "v2");
  }
  // inside a capture: a convolution not yet timed runs v2, bit for bit, and stays untimed
  const Conv2dShape s{2, 64, 7, 7, 64, 3, 3, 1, 1};
  const Tensor gx = to_gpu(random({s.n, s.h, s.w, s.c_in}), dt), gw = to_gpu(random({s.c_out, s.c_in, 3, 3}), dt);
  Tensor y = poisoned({s.n, s.h, s.w, s.c_out}, dt), y_v2 = poisoned({s.n, s.h, s.w, s.c_out}, dt);
  {
    const kernels::ScopedConvChoice v2(kernels::ConvChoice::v2);
    kernels::cuda::conv2d_forward_nhwc(s, gx, gw, Conv2dEpilogue{}, y_v2, stream, auto_v);
  }
  const CudaGraph graph = CudaGraph::capture(
      stream, [&] { kernels::cuda::conv2d_forward_nhwc(s, gx, gw, Conv2dEpilogue{}, y, stream, auto_v); });
  graph.launch(stream);
  EXPECT_EQ(kernels::cuda::conv_found().size(), 6u) << "timed inside a capture";
  const Tensor got = to_cpu_f32(y), ref = to_cpu_f32(y_v2);
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.nbytes()), 0) << "the captured convolution is not v2's";
  kernels::cuda::conv_forget_found();
  EXPECT_TRUE(kernels::cuda::conv_found().empty());
}
#endif

#if HPDT_HAVE_CUDA
// TMA's im2col mode as the GPU does it, one load at a time (cuda::tma_im2col_load_nhwc): the loads whose results
// triton-lang/triton's python/tutorials/gluon/13-conv-im2col.py lists and the CUDA emulator's self-test repeats
// (CudaEmu.TmaIm2colLoadsAsDocumented), on n images of hw x hw pixels whose 64 channels hold 1 + the pixel's index
// (bf16, exact): the plain box, padding corners, offsets, wrapping into the next image with and without padding, a
// stride-2 traversal; then corners that differ between x and y (a 5 x 7 image, lower (-1, 0), upper (1, -1)), which
// show the corners' order. On a GPU this checks the emulator's model of the mode (docs/cuda-emulator.md); on the
// emulator, that the product's load path is the self-test's.
TEST_F(ConvCuda, TmaIm2colLoadsAsTheEmulatorModels) {
  if (!wgmma_runs_here())
    GTEST_SKIP() << "conv v3 does not run here (it needs a compute capability 9.0 device and an sm_90 build)";
  struct Load {
    const char* name;
    int n, h, w, lower[2], upper[2], stride, x, y, ox, oy;
    std::vector<float> want;  // the 16 pixels' values
  };
  // One load a line, as the tutorial lists them.
  // clang-format off
  const Load loads[] = {
      {"plain", 1, 4, 4, {0, 0}, {0, 0}, 1, 0, 0, 0, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
      {"padded", 1, 4, 4, {-1, -1}, {-1, -1}, 1, -1, -1, 0, 0, {0, 0, 0, 0, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11}},
      {"offsets", 1, 4, 4, {-1, -1}, {-1, -1}, 1, -1, -1, 1, 1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
      {"two images", 2, 4, 4, {0, 0}, {0, 0}, 1, 3, 1, 0, 0, {8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}},
      {"two images padded", 2, 4, 4, {-1, -1}, {-1, -1}, 1, 2, 1, 0, 0, {7, 0, 9, 10, 11, 0, 0, 0, 0, 0, 17, 18, 19, 0, 21, 22}},
      {"stride 2", 1, 5, 5, {-1, -1}, {-1, -1}, 2, -1, -1, 1, 1, {1, 3, 5, 11, 13, 15, 21, 23, 25, 0, 0, 0, 0, 0, 0, 0}},
      // x in [-1, 7 - 1 + 1] = [-1, 7], y in [0, 5 - 1 - 1] = [0, 3]: rows of 9 pixels, 4 rows an image
      {"x and y corners differ", 1, 5, 7, {-1, 0}, {1, -1}, 1, -1, 0, 0, 0, {0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 8, 9, 10, 11, 12, 13}},
  };
  // clang-format on
  const DType dt = DType::bf16;
  for (const Load& l : loads) {
    SCOPED_TRACE(l.name);
    Tensor host = Tensor::empty({l.n, l.h, l.w, 64}, DType::f32, Device::cpu());
    for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = float(1 + i / 64);
    const Tensor src = to_gpu(host, dt);
    Tensor dst = poisoned({16, 64}, dt);
    kernels::cuda::tma_im2col_load_nhwc(src, l.lower, l.upper, l.stride, l.x, l.y, 0, l.ox, l.oy, 16, dst, stream);
    const Tensor got = to_cpu_f32(dst);
    for (int r = 0; r < 16; ++r)
      for (int e = 0; e < 64; ++e)
        ASSERT_EQ(got.data<float>()[r * 64 + e], l.want[size_t(r)]) << "pixel " << r << ", channel " << e;
  }
  // a source of other than 64 channels, or a dst of other than pixels x 64 values: an error saying what is needed
  const Tensor narrow = to_gpu(random({1, 4, 4, 32}), dt), src = to_gpu(random({1, 4, 4, 64}), dt);
  Tensor dst = poisoned({16, 64}, dt), small = poisoned({8, 64}, dt);
  const int zero[2] = {0, 0};
  HPDT_EXPECT_THROW_MSG(kernels::cuda::tma_im2col_load_nhwc(narrow, zero, zero, 1, 0, 0, 0, 0, 0, 16, dst, stream),
                        "src [n][h][w][64] and dst of 16 x 64 values");
  HPDT_EXPECT_THROW_MSG(kernels::cuda::tma_im2col_load_nhwc(src, zero, zero, 1, 0, 0, 0, 0, 0, 16, small, stream),
                        "src [n][h][w][64] and dst of 16 x 64 values");
}
#endif

#if HPDT_HAVE_CUDA
// conv v3 under kernels::GemmTuning::find (--conv v3 --gemm-tuning find): each call's first run times GEMM v3's
// candidate plans (pipeline x tile; the backward-filter's two pipelines) on a scratch output, then runs the fastest.
// A 3x3 with 64 and with 128 output channels (slim, and narrow / wide), all three directions against the oracle (dw
// accumulating: had a timing run touched the real dw, it would be off); the reports (after GEMM v3's, in
// cuda::gemm_v3_found), each candidate timed (each plan loading by boxes and by im2col, the forward's and
// backward-data's storing directly and by TMA), the fastest taken; a repeat not timed again; inside a capture an
// untimed call runs the rule's plan and stays untimed; HPDT_CONV_V3_LOAD=im2col leaves the im2col plans only.
TEST_F(ConvCuda, NhwcConvV3FindTimesItsPlans) {
  if (!wgmma_runs_here())
    GTEST_SKIP() << "conv v3 does not run here (it needs a compute capability 9.0 device and an sm_90 build)";
  const kernels::ScopedConvChoice v3(kernels::ConvChoice::v3);
  const kernels::ScopedGemmTuning find(kernels::GemmTuning::find);
  kernels::cuda::gemm_v3_forget_found();
  const auto auto_v = kernels::cuda::ConvVariant::automatic;
  const DType dt = DType::bf16;
  const Case cases[] = {{"3x3 64->64 at 9x9", 2, 64, 9, 9, 64, 3, 1, 1}, {"3x3 64->128 at 6x7", 1, 64, 6, 7, 128, 3, 1, 1}};
  for (int pass = 0; pass < 2; ++pass)
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + (pass ? ", again" : ""));
      expect_nhwc_directions_right(c, dt, false);
    }
  const std::vector<kernels::cuda::GemmV3Found> found = kernels::cuda::gemm_v3_found();
  ASSERT_EQ(found.size(), 6u) << "one report per call shape, not one per call";
  EXPECT_EQ(found[0].call, "conv v3 fwd 3x3 64->64 2x9x9 -> 9x9 bf16 bias");
  EXPECT_EQ(found[1].call, "conv v3 bwd_data phase 3x3 64->64 2x9x9 -> 9x9 bf16");
  EXPECT_EQ(found[2].call, "conv v3 bwd_filter 3x3 64->64 2x9x9 pad 1 bf16");
  EXPECT_EQ(found[3].call, "conv v3 fwd 3x3 64->128 1x6x7 -> 6x7 bf16 bias");
  for (size_t i = 0; i < found.size(); ++i) {
    const kernels::cuda::GemmV3Found& f = found[i];
    SCOPED_TRACE(f.call);
    std::vector<std::string> names;
    double best = 1e300;
    for (const auto& [plan, ms] : f.ms) {
      names.push_back(plan);
      EXPECT_GT(ms, 0.0);
      best = std::min(best, ms);
    }
    // the N of each: co (forward), ci (backward-data: 64, slim), co (backward-filter, whose tile follows it); the
    // forward's and backward-data's each storing directly, then by TMA (HPDT_CONV_V3_STORE unset: both apply here);
    // each plan loading by boxes, then by im2col (HPDT_CONV_V3_LOAD unset)
    const bool wgrad = i % 3 == 2, wide = i == 3;
    std::vector<std::string> want =
        wgrad  ? std::vector<std::string>{i < 3 ? "barrier/slim" : "barrier/narrow", i < 3 ? "ws/slim" : "ws/narrow"}
        : wide ? std::vector<std::string>{"barrier/narrow", "barrier/wide", "ws/narrow", "ws/wide", "pingpong/narrow"}
               : std::vector<std::string>{"barrier/slim", "ws/slim", "pingpong/slim"};
    if (!wgrad)
      for (size_t j = 0, n = want.size(); j < n; ++j) want.push_back(want[j] + "+tma store");
    for (size_t j = 0, n = want.size(); j < n; ++j) {
      const size_t store = want[j].find("+tma store");
      want.push_back(store == std::string::npos ? want[j] + "+im2col"
                                                : want[j].substr(0, store) + "+im2col" + want[j].substr(store));
    }
    EXPECT_EQ(names, want);
    const auto taken = std::find_if(f.ms.begin(), f.ms.end(), [&](const auto& r) { return r.first == f.plan; });
    ASSERT_NE(taken, f.ms.end()) << f.plan;
    EXPECT_EQ(taken->second, best);
  }
  // inside a capture: a call not yet timed runs the rule's plan and stays untimed
  const Conv2dShape s{1, 64, 5, 5, 64, 3, 3, 1, 1};
  const Tensor gx = to_gpu(random({s.n, s.h, s.w, s.c_in}), dt), gw = to_gpu(random({s.c_out, s.c_in, 3, 3}), dt);
  Tensor y = poisoned({s.n, s.h, s.w, s.c_out}, dt), y_rule = poisoned({s.n, s.h, s.w, s.c_out}, dt);
  {
    const kernels::ScopedGemmTuning rule(kernels::GemmTuning::heuristic);
    kernels::cuda::conv2d_forward_nhwc(s, gx, gw, Conv2dEpilogue{}, y_rule, stream, auto_v);
  }
  const CudaGraph graph = CudaGraph::capture(
      stream, [&] { kernels::cuda::conv2d_forward_nhwc(s, gx, gw, Conv2dEpilogue{}, y, stream, auto_v); });
  graph.launch(stream);
  EXPECT_EQ(kernels::cuda::gemm_v3_found().size(), 6u) << "timed inside a capture";
  const Tensor got = to_cpu_f32(y), ref = to_cpu_f32(y_rule);
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.nbytes()), 0) << "the captured convolution is not the rule's";
  kernels::cuda::gemm_v3_forget_found();
  EXPECT_TRUE(kernels::cuda::gemm_v3_found().empty());
  // HPDT_CONV_V3_LOAD pins the load: Find times that one only, in every direction
  {
    const ScopedEnv pin("HPDT_CONV_V3_LOAD", "im2col");
    expect_nhwc_directions_right(cases[0], dt, false);
    const std::vector<kernels::cuda::GemmV3Found> pinned = kernels::cuda::gemm_v3_found();
    ASSERT_EQ(pinned.size(), 3u);
    for (const kernels::cuda::GemmV3Found& f : pinned) {
      EXPECT_EQ(f.ms.size(), f.call.find("bwd_filter") != std::string::npos ? 2u : 6u) << f.call;
      for (const auto& [plan, ms] : f.ms) EXPECT_NE(plan.find("+im2col"), std::string::npos) << f.call << ": " << plan;
    }
  }
  kernels::cuda::gemm_v3_forget_found();
  // with batch norm's statistics in the epilogue (partials sized by the rule's tiles, conv_v3_row_groups): the
  // rule's load only
  {
    const test::EpilogueBnReductions epilogue_reductions;
    const Tensor x9 = to_gpu(random({2, 9, 9, 64}), dt), w9 = to_gpu(random({64, 64, 3, 3}), dt);
    Tensor y9 = poisoned({2, 9, 9, 64}, dt);
    kernels::ChannelStats st;
    Conv2dEpilogue e;
    e.stats = &st;
    kernels::cuda::conv2d_forward_nhwc({2, 64, 9, 9, 64, 3, 3, 1, 1}, x9, w9, e, y9, stream, auto_v);
    const std::vector<kernels::cuda::GemmV3Found> stats = kernels::cuda::gemm_v3_found();
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_EQ(stats[0].call, "conv v3 fwd 3x3 64->64 2x9x9 -> 9x9 bf16 bn-stats");
    EXPECT_EQ(stats[0].ms.size(), 3u);
    for (const auto& [plan, ms] : stats[0].ms) EXPECT_EQ(plan.find("+im2col"), std::string::npos) << plan;
    EXPECT_TRUE(st.partial.defined()) << "the epilogue's statistics";
  }
  kernels::cuda::gemm_v3_forget_found();
}
#endif

#if HPDT_HAVE_CUDA
// Under --conv v3, the NHWC forwards that run on conv v3 (3x3, strided) and on GEMM v3 (1x1) hand batch norm y's
// statistics too (sm90a/column_stats.cuh): they describe y, merge to its statistics (counts exactly: the box rows
// outside the pixel grid are not counted), and batch norm given them matches its own pass; in every pipeline (the
// persistent ones on 3 blocks, several tiles each), conv v3 loading by boxes and by im2col (HPDT_CONV_V3_LOAD). With a
// bias (not a batch norm's convolution) they are cleared.
TEST_F(ConvCuda, BatchNormStatisticsFromConvV3AndGemmV3) {
  const test::EpilogueBnReductions epilogue_reductions;

  if (!wgmma_runs_here())
    GTEST_SKIP() << "conv v3 does not run here (it needs a compute capability 9.0 device and an sm_90 build)";
  const kernels::ScopedConvChoice v3(kernels::ConvChoice::v3);
  const auto auto_v = kernels::cuda::ConvVariant::automatic;
  struct StatsCase {
    const char* name;
    Conv2dShape s;
    const char* kernel;  // the launch that must run it
  };
  const StatsCase cases[] = {{"3x3 64->64 at 9x9", {2, 64, 9, 9, 64, 3, 3, 1, 1}, "conv_v3"},
                             {"3x3 s2 64->128 at 11x9", {2, 64, 11, 9, 128, 3, 3, 2, 1}, "conv_v3"},
                             {"3x3 128->192 at 6x7", {3, 128, 6, 7, 192, 3, 3, 1, 1}, "conv_v3"},
                             {"1x1 64->256 at 10x13", {2, 64, 10, 13, 256, 1, 1, 1, 0}, "gemm_v3"}};
  for (const char* load : {"box", "im2col"})
    for (const char* pipeline : {"barrier", "ws", "pingpong"})
      for (const StatsCase& k : cases) {
        const Conv2dShape& s = k.s;
        SCOPED_TRACE(std::string(k.name) + " pipeline " + pipeline + " load " + load);
        const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", pipeline),
            blocks("HPDT_GEMM_V3_CTAS", std::strcmp(pipeline, "barrier") != 0 ? "3" : nullptr),
            loads("HPDT_CONV_V3_LOAD", load);
        const int64_t c = s.c_out, plane = s.out_h() * s.out_w(), count = s.n * plane;
        const Shape ys{s.n, s.out_h(), s.out_w(), c};
        const Tensor xh = round_through(random({s.n, s.h, s.w, s.c_in}), DType::bf16);
        const Tensor wh = round_through(random({c, s.c_in, s.kh, s.kw}), DType::bf16);
        const Tensor x = to_gpu(xh, DType::bf16), w = to_gpu(wh, DType::bf16);
        Tensor y = poisoned(ys, DType::bf16);
        kernels::ChannelStats st;
        Conv2dEpilogue e;
        e.stats = &st;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      const unsigned long long before = cuda_emu::launches_named(k.kernel), v2s = cuda_emu::launches_named("conv_nhwc_");
#endif
      kernels::cuda::conv2d_forward_nhwc(s, x, w, e, y, stream, auto_v);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      EXPECT_EQ(cuda_emu::launches_named(k.kernel) - before, 1u) << "not on " << k.kernel;
      EXPECT_EQ(cuda_emu::launches_named("conv_nhwc_"), v2s) << "ran on v2";
#endif
      ASSERT_TRUE(st.describe(y, c)) << "no statistics";
      const Tensor yc = to_cpu_f32(y), part = st.partial.to(Device::cpu(), stream);
      stream.synchronize();
      expect_statistics_of(st, yc, part, true, c, count, plane);
      // y itself: the oracle's
      Tensor want = Tensor::empty(ys, DType::f32);
      kernels::cpu::conv2d_forward_nhwc(s, xh.data<float>(), wh.data<float>(), nullptr, want.data<float>());
      EXPECT_TRUE(close(want, yc, conv_tolerance(DType::bf16, double(s.c_in * s.kh * s.kw), Impl::v2))) << "y";
      // batch norm given them: its own pass's statistics
      const Tensor g = to_gpu(random({c}, 0.5f, 1.5f), DType::bf16), b = to_gpu(random({c}, -0.5f, 0.5f), DType::bf16);
      kernels::BatchNormSaved own, fused;
      for (const kernels::ChannelStats* given : {static_cast<const kernels::ChannelStats*>(nullptr),
                                                 static_cast<const kernels::ChannelStats*>(&st)}) {
        Tensor rm = to_gpu(random({c}, -0.2f, 0.2f)), rv = to_gpu(random({c}, 0.5f, 2.0f)), out = poisoned(ys, DType::bf16);
        kernels::BatchNormFusion fusion;
        fusion.stats = given;
        kernels::batchnorm_forward_train(y, g, b, rm, rv, 1e-5f, 0.1f, given ? fused : own, out, {}, stream,
                                         Layout::nhwc, fusion);
      }
      const Tolerance stat{2e-5, 1e-6};
      EXPECT_TRUE(close(to_cpu_f32(own.mean), to_cpu_f32(fused.mean), stat)) << "saved mean";
      EXPECT_TRUE(close(to_cpu_f32(own.invstd), to_cpu_f32(fused.invstd), stat)) << "saved invstd";
      // with a bias: not asked of the epilogue, cleared
      const Tensor bias = to_gpu(random({c}), DType::bf16);
      e.bias = &bias;
      kernels::cuda::conv2d_forward_nhwc(s, x, w, e, y, stream, auto_v);
      EXPECT_FALSE(st.partial.defined()) << "with a bias";
    }
  // an odd channel count (the epilogue reduces pairs of channels): conv v3 runs, the batch norm computes them
  const Conv2dShape odd{2, 64, 9, 9, 63, 3, 3, 1, 1};
  const Tensor x = to_gpu(random({2, 9, 9, 64}), DType::bf16), w = to_gpu(random({63, 64, 3, 3}), DType::bf16);
  Tensor y = poisoned({2, 9, 9, 63}, DType::bf16);
  kernels::ChannelStats st;
  Conv2dEpilogue e;
  e.stats = &st;
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
  const unsigned long long before = cuda_emu::launches_named("conv_v3");
#endif
  kernels::cuda::conv2d_forward_nhwc(odd, x, w, e, y, stream, auto_v);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
  EXPECT_EQ(cuda_emu::launches_named("conv_v3") - before, 1u);
#endif
  EXPECT_FALSE(st.partial.defined()) << "63 channels";
}

// ... and their backward-data epilogues hand batch norm its backward sums (conv v3 in every stride phase, GEMM v3 for
// the 1x1 ones, column_stats.cuh's kBandGradSums): dx comes back as the plain gradient through the fused ReLU's mask,
// bit for bit, the partials add up to the sums of dz and dz (x - mean), and batch norm's backward given them matches
// its own reduce pass; in every pipeline, with and without the mask, with a residual (the 1x1 one then on conv v3).
TEST_F(ConvCuda, BatchNormBackwardSumsFromConvV3AndGemmV3) {
  const test::EpilogueBnReductions epilogue_reductions;

  if (!wgmma_runs_here())
    GTEST_SKIP() << "conv v3 does not run here (it needs a compute capability 9.0 device and an sm_90 build)";
  const kernels::ScopedConvChoice v3(kernels::ConvChoice::v3);
  const auto auto_v = kernels::cuda::ConvVariant::automatic;
  struct SumsCase {
    const char* name;
    Conv2dShape s;
    const char* kernel;  // the launch that must run it without a residual
  };
  const SumsCase cases[] = {{"3x3 64->64 at 9x9", {2, 64, 9, 9, 64, 3, 3, 1, 1}, "conv_v3"},
                            {"3x3 s2 128->64 at 11x9 (4 phases)", {2, 128, 11, 9, 64, 3, 3, 2, 1}, "conv_v3"},
                            {"1x1 64->128 at 10x13", {2, 64, 10, 13, 128, 1, 1, 1, 0}, "gemm_v3"}};
  int config = 0;
  for (const char* load : {"box", "im2col"})
    for (const char* pipeline : {"barrier", "ws", "pingpong"})
      for (const SumsCase& k : cases)
        for (const bool with_residual : {false, true}) {
          const bool relu = config++ % 2 == 0;
          const Conv2dShape& s = k.s;
          SCOPED_TRACE(std::string(k.name) + " pipeline " + pipeline + " load " + load + (relu ? " relu" : "") +
                       (with_residual ? " residual" : ""));
          const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", pipeline),
              blocks("HPDT_GEMM_V3_CTAS", std::strcmp(pipeline, "barrier") != 0 ? "3" : nullptr),
              loads("HPDT_CONV_V3_LOAD", load);
          const DType dt = DType::bf16;
          const int64_t c = s.c_in, count = s.n * s.h * s.w;
          const Shape xs{s.n, s.h, s.w, c}, ys{s.n, s.out_h(), s.out_w(), s.c_out};
          const Tensor dy = to_gpu(random(ys), dt), w = to_gpu(random({s.c_out, c, s.kh, s.kw}), dt);
          const Tensor res = to_gpu(random(xs), dt);
          const Tensor* r = with_residual ? &res : nullptr;
          kernels::ChannelGradSums sums;
          sums.x = to_gpu(random(xs, -1.0f, 3.0f), dt);
          if (relu) sums.y = to_gpu(random(xs), dt);
          sums.mean = to_gpu(random({c}, 0.5f, 1.5f));
          Tensor dz = poisoned(xs, dt), g = poisoned(xs, dt);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        const char* kernel = with_residual ? "conv_v3" : k.kernel;
        const unsigned long long before = cuda_emu::launches_named(kernel), v2s = cuda_emu::launches_named("conv_nhwc_");
        cuda_emu::clear_prefetched_lines();
#endif
        kernels::cuda::conv2d_backward_data_nhwc(s, dy, w, dz, stream, auto_v, r, &sums);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
        EXPECT_GT(cuda_emu::launches_named(kernel), before) << "not on " << kernel;
        EXPECT_EQ(cuda_emu::launches_named("conv_nhwc_"), v2s) << "a phase ran on v2";
        // the epilogue's inputs, prefetched into L2 tile by tile (band_epilogue.cuh): every line of x, y and the
        // residual (the phases' tiles cover every pixel and channel), none other
        stream.synchronize();
        EXPECT_EQ(cuda_emu::prefetched_lines(), lines_of({&sums.x, relu ? &sums.y : nullptr, r}))
            << "the L2 prefetches of the epilogue's inputs";
#endif
        kernels::cuda::conv2d_backward_data_nhwc(s, dy, w, g, stream, auto_v, r);
        ASSERT_TRUE(sums.describe(dz, c)) << "no sums";
        const Tensor gz = dz.to(Device::cpu(), stream), gg = g.to(Device::cpu(), stream);
        const Tensor part = sums.partial.to(Device::cpu(), stream), mc = sums.mean.to(Device::cpu(), stream);
        const Tensor xc = to_cpu_f32(sums.x), yc = relu ? to_cpu_f32(sums.y) : Tensor(), gc = to_cpu_f32(g);
        stream.synchronize();
        expect_grad_sums_of(sums, gz, gg, part, xc, yc, gc, mc, true, c, count, s.h * s.w);
        // batch norm's backward given them, against its own reduce pass over the plain gradient
        kernels::BatchNormSaved saved;
        saved.mean = sums.mean, saved.invstd = to_gpu(random({c}, 0.5f, 2.0f));
        const Tensor gamma = to_gpu(random({c}, 0.5f, 1.5f), dt);
        const auto bn_backward = [&](const Tensor& grad, const kernels::ChannelGradSums* given) {
          Tensor dx = poisoned(xs, dt), dgamma = to_gpu(Tensor::zeros({c}, DType::f32), dt);
          Tensor dbeta = to_gpu(Tensor::zeros({c}, DType::f32), dt), dz_out = poisoned(xs, dt);
          const kernels::BatchNormReluGrad rg{relu ? sums.y : Tensor(), dz_out};
          kernels::batchnorm_backward_train(grad, sums.x, gamma, saved, dx, dgamma, dbeta, {}, stream, Layout::nhwc,
                                            relu ? &rg : nullptr, given);
          return std::vector<Tensor>{to_cpu_f32(dx), to_cpu_f32(dgamma), to_cpu_f32(dbeta)};
        };
        const std::vector<Tensor> own = bn_backward(g, nullptr), fused = bn_backward(dz, &sums);
        const Tolerance tol = test::default_tolerance(dt);
        const char* what[3] = {"dx", "dgamma", "dbeta"};
        for (int q = 0; q < 3; ++q)
          EXPECT_TRUE(close(own[size_t(q)], fused[size_t(q)], {tol.rtol, tol.atol * 4})) << what[q];
      }
}

// With kernels::conv_choice() v3 and ConvVariant::automatic, the NHWC implicit GEMMs with 64k channels run on conv
// v3 (wgmma + TMA, conv_v3.cuh): the forward with ci % 64 == 0 (bias and residual in its epilogue), every stride
// phase of backward-data with co % 64 == 0 (with its residual) and the backward-filter with ci % 64 == 0 and
// co % 8 == 0 (split-K on the 32 x 32 case); the others on the conv kernels. Against the oracle; on the emulator,
// which kernels ran. Covers both N tiles above 64 channels (HPDT_GEMM_V3_TILE), 64 and fewer channels (the 64-wide
// tile), N tiles cut by the channel count, non-square kernels, padding beyond the taps' reach, stride 2 (TMA's
// element strides forward and backward-filter, backward-data's phases) and pixel grids that leave part of the last
// box empty. All three pipelines (wgmma.cuh): "barrier" in bf16 and f16, "ws" (HPDT_GEMM_V3_PIPELINE=ws) and
// "pingpong" in bf16, the latter two persistent on 3 blocks (HPDT_GEMM_V3_CTAS), so that a block runs several tiles
// (or split-K parts); pingpong has no wide tile (its cases pinned wide are left out) and runs the backward-filter
// on "ws". Then every direction loading by im2col (HPDT_CONV_V3_LOAD=im2col: runs of 128 output pixels across rows
// and images, the taps as im2col offsets, backward-data's backwards; the backward-filter's k tiles runs of 64) on
// each pipeline, pingpong's in f16, and on the emulator that each direction on conv v3 issued im2col loads.
TEST_F(ConvCuda, NhwcRunsOnConvV3WhenChosen) {
  if (!wgmma_runs_here())
    GTEST_SKIP() << "conv v3 does not run here (it needs a compute capability 9.0 device and an sm_90 build)";
  kernels::ScopedConvChoice v3(kernels::ConvChoice::v3);
  const auto auto_v = kernels::cuda::ConvVariant::automatic;
  struct V3Case {
    const char* name;
    Conv2dShape s;
    const char* tile;  // HPDT_GEMM_V3_TILE, or null
    int phases;        // backward-data's stride phases with taps
  };
  const V3Case cases[] = {
      {"3x3 64->64 at 9x9", {2, 64, 9, 9, 64, 3, 3, 1, 1}, nullptr, 1},
      {"3x3 128->136 at 7x5 narrow", {3, 128, 7, 5, 136, 3, 3, 1, 1}, "narrow", 1},
      {"3x3 136->128 at 6x7 narrow", {2, 136, 6, 7, 128, 3, 3, 1, 1}, "narrow", 1},
      {"3x3 64->192 at 6x6 wide", {1, 64, 6, 6, 192, 3, 3, 1, 1}, "wide", 1},
      {"3x3 192->64 at 5x6 wide", {2, 192, 5, 6, 64, 3, 3, 1, 1}, "wide", 1},
      {"3x1 p2 64->40 at 5x11", {2, 64, 5, 11, 40, 3, 1, 1, 2}, nullptr, 1},
      {"1x3 p1 40->128 at 4x13", {2, 40, 4, 13, 128, 1, 3, 1, 1}, nullptr, 1},
      {"3x3 s2 32->64 at 9x9", {2, 32, 9, 9, 64, 3, 3, 2, 1}, nullptr, 4},
      {"3x3 s2 64->128 at 11x9", {2, 64, 11, 9, 128, 3, 3, 2, 1}, nullptr, 4},
      {"1x1 s2 64->64 at 8x7", {3, 64, 8, 7, 64, 1, 1, 2, 0}, nullptr, 1},
      {"3x3 s2 64->64 at 4x260 (boxes of 128 x 1)", {2, 64, 4, 260, 64, 3, 3, 2, 1}, nullptr, 4},
      {"3x3 64->64 at 32x32 (split-K)", {2, 64, 32, 32, 64, 3, 3, 1, 1}, nullptr, 1},
  };
  struct Run {
    const char* pipeline;
    DType dt;
    const char* load;  // HPDT_CONV_V3_LOAD
  };
  const Run runs[] = {{"barrier", DType::bf16, "box"},    {"barrier", DType::f16, "box"},
                      {"ws", DType::bf16, "box"},         {"pingpong", DType::bf16, "box"},
                      {"barrier", DType::bf16, "im2col"}, {"ws", DType::f16, "im2col"},
                      {"pingpong", DType::f16, "im2col"}};
  for (const auto& [pipeline, dt, load] : runs)
    for (const V3Case& c : cases) {
      const bool pingpong = std::strcmp(pipeline, "pingpong") == 0;
      if (pingpong && c.tile && std::strcmp(c.tile, "wide") == 0) continue;
      const Conv2dShape& s = c.s;
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)) + " pipeline " + pipeline + " load " + load);
      if (c.tile) ::setenv("HPDT_GEMM_V3_TILE", c.tile, 1);
      ::setenv("HPDT_GEMM_V3_PIPELINE", pipeline, 1);
      const ScopedEnv blocks("HPDT_GEMM_V3_CTAS", std::strcmp(pipeline, "barrier") != 0 ? "3" : nullptr),
          loads("HPDT_CONV_V3_LOAD", load);
      const Shape xs{s.n, s.h, s.w, s.c_in}, ys{s.n, s.out_h(), s.out_w(), s.c_out}, ws{s.c_out, s.c_in, s.kh, s.kw};
      const Tensor x = random(xs), w = random(ws), b = random({s.c_out}), dy = random(ys), dw0 = random(ws),
                   db0 = random({s.c_out}), res_y = random(ys), res_x = random(xs);
      const Expected want = oracle(s, round_through(x, dt), round_through(w, dt), &b, round_through(dy, dt),
                                   round_through(dw0, dt), round_through(db0, dt), dt, Layout::nhwc);
      const Tensor gx = to_gpu(x, dt), gw = to_gpu(w, dt), gb = to_gpu(b, dt), gdy = to_gpu(dy, dt),
                   gres_y = to_gpu(res_y, dt), gres_x = to_gpu(res_x, dt);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      const unsigned long long v3s = cuda_emu::launches_named("conv_v3"),
                               convs = cuda_emu::launches_named("conv_nhwc_"),
                               reduces = cuda_emu::launches_named("wgrad_reduce"),
                               ws_v3s = cuda_emu::launches_named("bool WS = true"),
                               pingpong_v3s = cuda_emu::launches_named("conv_v3_pingpong");
      unsigned long long im2col_loads[4] = {cuda_emu::tma_im2col_loads()};  // before each direction, and after
#endif
      // forward with bias, then with bias and a residual; backward-data, then with a residual
      Tensor y = poisoned(ys, dt), yr = poisoned(ys, dt), dx = poisoned(xs, dt), dxr = poisoned(xs, dt);
      Conv2dEpilogue e;
      e.bias = &gb;
      kernels::cuda::conv2d_forward_nhwc(s, gx, gw, e, y, stream, auto_v);
      e.residual = &gres_y;
      kernels::cuda::conv2d_forward_nhwc(s, gx, gw, e, yr, stream, auto_v);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      im2col_loads[1] = cuda_emu::tma_im2col_loads();
#endif
      kernels::cuda::conv2d_backward_data_nhwc(s, gdy, gw, dx, stream, auto_v);
      kernels::cuda::conv2d_backward_data_nhwc(s, gdy, gw, dxr, stream, auto_v, &gres_x);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      im2col_loads[2] = cuda_emu::tma_im2col_loads();
#endif
      Tensor dw = to_gpu(dw0, dt), db = to_gpu(db0, dt);
      kernels::cuda::conv2d_backward_filter_nhwc(s, gx, gdy, dw, &db, stream, auto_v);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      im2col_loads[3] = cuda_emu::tma_im2col_loads();
#endif
      ::unsetenv("HPDT_GEMM_V3_TILE");
      ::unsetenv("HPDT_GEMM_V3_PIPELINE");
      const double l_fwd = double(s.c_in * s.kh * s.kw), l_data = double(s.c_out * s.kh * s.kw);
      EXPECT_TRUE(close(want.y, to_cpu_f32(y), conv_tolerance(dt, l_fwd, Impl::v2))) << "forward";
      Tensor want_yr = round_through(res_y, dt), want_dxr = round_through(res_x, dt);
      for (int64_t i = 0; i < want_yr.numel(); ++i) want_yr.data<float>()[i] += want.y.data<float>()[i];
      for (int64_t i = 0; i < want_dxr.numel(); ++i) want_dxr.data<float>()[i] += want.dx.data<float>()[i];
      Tolerance tol_res = conv_tolerance(dt, l_fwd, Impl::v2);
      tol_res.atol *= 2;  // the residual add widens the absolute error
      EXPECT_TRUE(close(want_yr, to_cpu_f32(yr), tol_res)) << "forward + residual";
      EXPECT_TRUE(close(want.dx, to_cpu_f32(dx), conv_tolerance(dt, l_data, Impl::v2))) << "backward-data";
      Tolerance tol_dres = conv_tolerance(dt, l_data, Impl::v2);
      tol_dres.atol *= 2;
      EXPECT_TRUE(close(want_dxr, to_cpu_f32(dxr), tol_dres)) << "backward-data + residual";
      const double l_filter = double(s.n * s.out_h() * s.out_w());
      EXPECT_TRUE(close(want.dw, to_cpu_f32(dw), conv_tolerance(dt, l_filter, Impl::v2))) << "backward-filter dw";
      EXPECT_TRUE(close(want.db, to_cpu_f32(db), conv_tolerance(dt, l_filter, Impl::v1))) << "backward-filter dbias";
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
      // one launch per forward, one per stride phase with taps of each backward-data, one per backward-filter: on
      // v3 where the reduced channels (ci forward and backward-filter, co backward-data) are whole k tiles of 64
      const auto phases = static_cast<unsigned long long>(c.phases);
      const bool fwd_v3 = s.c_in % 64 == 0, bwd_v3 = s.c_out % 64 == 0;
      const bool wgrad_v3 = s.c_in % 64 == 0 && s.c_out % 8 == 0;
      const unsigned long long v3_launches = (fwd_v3 ? 2 : 0) + (bwd_v3 ? 2 * phases : 0) + (wgrad_v3 ? 1 : 0);
      EXPECT_EQ(cuda_emu::launches_named("conv_v3") - v3s, v3_launches) << "conv v3 launches";
      const unsigned long long pingpong_launches = pingpong ? v3_launches - (wgrad_v3 ? 1 : 0) : 0;
      EXPECT_EQ(cuda_emu::launches_named("conv_v3_pingpong") - pingpong_v3s, pingpong_launches)
          << "conv v3 launches on the pingpong pipeline (forward, backward-data)";
      EXPECT_EQ(cuda_emu::launches_named("bool WS = true") - ws_v3s,
                std::strcmp(pipeline, "ws") == 0 ? v3_launches : pingpong && wgrad_v3 ? 1u : 0u)
          << "conv v3 launches on the ws pipeline (under pingpong: the backward-filter)";
      EXPECT_EQ(cuda_emu::launches_named("conv_nhwc_") - convs,
                (fwd_v3 ? 0 : 2) + (bwd_v3 ? 0 : 2 * phases) + (wgrad_v3 ? 0 : 1))
          << "conv kernel launches";
      if (s.h == 32) {
        EXPECT_EQ(cuda_emu::launches_named("wgrad_reduce") - reduces, 1u) << "split-K's reduction";
      }
      // im2col: each direction conv v3 runs loads by im2col (the forwards' and backward-data phases' A tiles, the
      // backward-filter's x); box: none
      const bool im2col = std::strcmp(load, "im2col") == 0, on_v3[3] = {fwd_v3, bwd_v3, wgrad_v3};
      for (int d = 0; d < 3; ++d)
        EXPECT_EQ(im2col_loads[d + 1] > im2col_loads[d], im2col && on_v3[d]) << "im2col loads, direction " << d;
#endif
    }
  expect_bad_conv_v3_variable("HPDT_CONV_V3_LOAD", "gather", "HPDT_CONV_V3_LOAD=gather: expected box or im2col");
}
#endif

#if HPDT_HAVE_CUDA
// conv v3's TMA-store epilogue (HPDT_CONV_V3_STORE=tma, sm90a/tma_store_epilogue.cuh): the forward (bias; bias and a
// residual) and the stride-1 backward-data (without and with a residual) give the direct stores' bits (alpha is 1:
// the same sums in the same order), every output poisoned first, on every pipeline (the persistent ones on 3 blocks:
// a block's next tile reuses the chunk images) and both loads. The pixel boxes' store boxes: 16 x 8 at 9 x 9 (a box
// partly outside the grid in x and y), 8 x 8 x 2 images at 7 x 7 (8 x 2 pixels a chunk; the second image of the
// last box past the batch), 128 x 1 at 3 x 130; the channels 72 (the last chunk 8 of its 32 columns inside: TMA clips
// the rest) and a wide tile. Where the stores cannot apply (36 channels, not a multiple of 8; the stride phases of a
// strided backward-data, whose rows are every other pixel of dx) the direct ones run, with the same bits. On the
// emulator: TMA stores issued exactly where they apply; a bad value is an error naming the variable.
TEST_F(ConvCuda, ConvV3TmaStoreEpilogue) {
  if (!wgmma_runs_here())
    GTEST_SKIP() << "conv v3 does not run here (it needs a compute capability 9.0 device and an sm_90 build)";
  const kernels::ScopedConvChoice v3(kernels::ConvChoice::v3);
  const auto auto_v = kernels::cuda::ConvVariant::automatic;
  struct StoreCase {
    const char* name;
    Conv2dShape s;
    const char* tile;       // HPDT_GEMM_V3_TILE, or null
    bool fwd_tma, bwd_tma;  // where the TMA stores apply (forward; backward-data)
  };
  const StoreCase cases[] = {
      {"3x3 64->64 at 9x9", {2, 64, 9, 9, 64, 3, 3, 1, 1}, nullptr, true, true},
      {"3x3 128->72 at 7x7 (8 x 8 x 2 boxes)", {3, 128, 7, 7, 72, 3, 3, 1, 1}, nullptr, true, false},
      {"3x3 64->128 at 7x7 wide", {3, 64, 7, 7, 128, 3, 3, 1, 1}, "wide", true, true},
      {"1x3 64->64 at 3x130 (boxes of 128 x 1)", {1, 64, 3, 130, 64, 1, 3, 1, 1}, nullptr, true, true},
      {"3x3 64->36 at 6x5", {2, 64, 6, 5, 36, 3, 3, 1, 1}, nullptr, false, false},
      {"3x3 s2 64->64 at 9x9 (4 phases)", {2, 64, 9, 9, 64, 3, 3, 2, 1}, nullptr, true, false},
  };
  for (const char* load : {"box", "im2col"})
    for (const char* pipeline : {"barrier", "ws", "pingpong"})
      for (const StoreCase& k : cases) {
        if (std::strcmp(pipeline, "pingpong") == 0 && k.tile && std::strcmp(k.tile, "wide") == 0) continue;
        const Conv2dShape& s = k.s;
        SCOPED_TRACE(std::string(k.name) + " pipeline " + pipeline + " load " + load);
        const ScopedEnv pipe("HPDT_GEMM_V3_PIPELINE", pipeline), tiles("HPDT_GEMM_V3_TILE", k.tile),
            blocks("HPDT_GEMM_V3_CTAS", std::strcmp(pipeline, "barrier") != 0 ? "3" : nullptr),
            loads("HPDT_CONV_V3_LOAD", load);
        const DType dt = DType::bf16;
        const Shape xs{s.n, s.h, s.w, s.c_in}, ys{s.n, s.out_h(), s.out_w(), s.c_out};
        const Tensor x = to_gpu(random(xs), dt), w = to_gpu(random({s.c_out, s.c_in, s.kh, s.kw}), dt);
        const Tensor b = to_gpu(random({s.c_out}), dt), dy = to_gpu(random(ys), dt);
        const Tensor res_y = to_gpu(random(ys), dt), res_x = to_gpu(random(xs), dt);
        const bool bwd_on_v3 = s.c_out % 64 == 0;
        // [store][forward, forward + residual, backward-data, backward-data + residual]
        Tensor out[2][4];
        for (int st = 0; st < 2; ++st) {
          const bool tma = st == 1;
          const ScopedEnv store("HPDT_CONV_V3_STORE", tma ? "tma" : "direct");
          for (int d = 0; d < 4; ++d) {
            const bool fwd = d < 2, with_res = d % 2 == 1;
            if (!fwd && !bwd_on_v3) continue;
            out[st][d] = poisoned(fwd ? ys : xs, dt);
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
            const unsigned long long before = cuda_emu::tma_stores();
#endif
            if (fwd) {
              Conv2dEpilogue e;
              e.bias = &b;
              if (with_res) e.residual = &res_y;
              kernels::cuda::conv2d_forward_nhwc(s, x, w, e, out[st][d], stream, auto_v);
            } else {
              kernels::cuda::conv2d_backward_data_nhwc(s, dy, w, out[st][d], stream, auto_v,
                                                       with_res ? &res_x : nullptr);
            }
#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU
            const bool applies = tma && (fwd ? k.fwd_tma : k.bwd_tma);
            EXPECT_EQ(cuda_emu::tma_stores() > before, applies)
                << (fwd ? "forward" : "backward-data") << (with_res ? " + residual" : "") << ": TMA stores";
#endif
          }
        }
        for (int d = 0; d < 4; ++d) {
          if (!out[0][d].defined()) continue;
          const Tensor direct = out[0][d].to(Device::cpu(), stream), by_tma = out[1][d].to(Device::cpu(), stream);
          stream.synchronize();
          EXPECT_EQ(0, std::memcmp(direct.data(), by_tma.data(), direct.nbytes()))
              << (d < 2 ? "forward" : "backward-data") << (d % 2 ? " + residual" : "")
              << ": TMA stores against direct ones";
        }
        // and the TMA stores' forward against the oracle (the direct stores' own tests cover the rest)
        if (std::strcmp(pipeline, "barrier") == 0 && k.fwd_tma) {
          Tensor want = Tensor::empty(ys, DType::f32);
          const Tensor xh = to_cpu_f32(x), wh = to_cpu_f32(w), bh = to_cpu_f32(b);
          kernels::cpu::conv2d_forward_nhwc(s, xh.data<float>(), wh.data<float>(), bh.data<float>(),
                                            want.data<float>());
          EXPECT_TRUE(close(want, to_cpu_f32(out[1][0]), conv_tolerance(dt, double(s.c_in * s.kh * s.kw), Impl::v2)))
              << "forward by TMA stores against the oracle";
        }
      }
  expect_bad_conv_v3_variable("HPDT_CONV_V3_STORE", "fast", "HPDT_CONV_V3_STORE=fast: expected direct or tma");
}
#endif

#if HPDT_HAVE_CUDA
// conv v3 (`--conv v3`) on ResNet-50's 3x3 convolutions at their real planes (batch 4): every box shape the
// planes choose (56: 16 x 8, 28: 32 x 4, 14: 16 x 8, 7: 8 x 8 x 2 images), every N tile, split-K backward-filter,
// and its stride-2 convolutions (3 x 3 and the 1 x 1 projection: element-strided TMA, backward-data phases), against v1
// in f32 on the same bf16 inputs (as OursVsCudnnLargeBf16), and within two bf16 roundings of v2; loading by im2col
// (HPDT_CONV_V3_LOAD=im2col) the same bits as by boxes in the forward and backward-data, within v2's margin in the
// backward-filter. Too large for the emulator, where NhwcRunsOnConvV3WhenChosen
// covers the same code on small planes.
TEST_F(ConvCuda, LargeConvV3AgainstV2Bf16) {
  if (kEmulated) GTEST_SKIP() << "too large for the CUDA emulator (NhwcRunsOnConvV3WhenChosen runs there)";
  if (!wgmma_runs_here())
    GTEST_SKIP() << "conv v3 does not run here (it needs a compute capability 9.0 device and an sm_90 build)";
  const Case cases[] = {{"3x3 64->64 at 56", 4, 64, 56, 56, 64, 3, 1, 1},
                        {"3x3 128->128 at 28", 4, 128, 28, 28, 128, 3, 1, 1},
                        {"3x3 256->256 at 14", 4, 256, 14, 14, 256, 3, 1, 1},
                        {"3x3 512->512 at 7", 4, 512, 7, 7, 512, 3, 1, 1},
                        {"3x3 s2 128->128 at 56", 4, 128, 56, 56, 128, 3, 2, 1},
                        {"1x1 s2 256->512 at 56", 4, 256, 56, 56, 512, 1, 2, 0}};
  const DType bf = DType::bf16;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Conv2dShape s = c.shape();
    const Shape xs{s.n, s.h, s.w, s.c_in}, ys{s.n, s.out_h(), s.out_w(), s.c_out}, ws{s.c_out, s.c_in, s.kh, s.kw};
    const Tensor x = round_through(random(xs), bf), w = round_through(random(ws), bf), dy = round_through(random(ys), bf);
    const Tensor x32 = to_gpu(x), w32 = to_gpu(w), dy32 = to_gpu(dy), xb = to_gpu(x, bf), wb = to_gpu(w, bf),
                 dyb = to_gpu(dy, bf);
    const double l[3] = {double(s.c_in * s.kh * s.kw), double(s.c_out * s.kh * s.kw),
                         double(s.n * s.out_h() * s.out_w())};
    Tensor y_ref = poisoned(ys), dx_ref = poisoned(xs),
           dw_ref = Tensor::zeros(ws, DType::f32, Device::cuda(0), AllocOptions{.stream = &stream});
    forward(Impl::v1, s, x32, w32, Conv2dEpilogue{}, y_ref, Layout::nhwc);
    backward_data(Impl::v1, s, dy32, w32, dx_ref, Layout::nhwc);
    backward_filter(Impl::v1, s, x32, dy32, dw_ref, nullptr, Layout::nhwc);
    const Tensor want[3] = {to_cpu_f32(y_ref), to_cpu_f32(dx_ref), to_cpu_f32(dw_ref)};
    Tensor got[3][3];  // v2, v3, v3 loading by im2col
    for (int v = 0; v < 3; ++v) {
      SCOPED_TRACE(v == 0 ? "v2" : v == 1 ? "v3 (--conv v3)" : "v3, HPDT_CONV_V3_LOAD=im2col");
      const kernels::ScopedConvChoice choice(v == 0 ? kernels::ConvChoice::v2 : kernels::ConvChoice::v3);
      const ScopedEnv load("HPDT_CONV_V3_LOAD", v == 2 ? "im2col" : nullptr);
      const auto variant = v == 0 ? kernels::cuda::ConvVariant::v2_tensor_core : kernels::cuda::ConvVariant::automatic;
      Tensor y = poisoned(ys, bf), dx = poisoned(xs, bf);
      Tensor dw = Tensor::zeros(ws, bf, Device::cuda(0), AllocOptions{.stream = &stream});
      kernels::cuda::conv2d_forward_nhwc(s, xb, wb, Conv2dEpilogue{}, y, stream, variant);
      kernels::cuda::conv2d_backward_data_nhwc(s, dyb, wb, dx, stream, variant);
      kernels::cuda::conv2d_backward_filter_nhwc(s, xb, dyb, dw, nullptr, stream, variant);
      got[v][0] = to_cpu_f32(y), got[v][1] = to_cpu_f32(dx), got[v][2] = to_cpu_f32(dw);
      const char* dir[3] = {"forward", "backward-data", "backward-filter"};
      for (int d = 0; d < 3; ++d) EXPECT_TRUE(close(want[d], got[v][d], conv_tolerance(bf, l[d], Impl::v2))) << dir[d];
    }
    for (int d = 0; d < 3; ++d) {
      Tolerance t = conv_tolerance(bf, l[d], Impl::v2);
      t.rtol *= 2, t.atol *= 2;
      EXPECT_TRUE(close(got[0][d], got[1][d], t)) << "v3 vs v2, direction " << d;
      // forward and backward-data: the same k order, so the same bits (loading by im2col changes which rows a tile
      // holds, not any row's sums); backward-filter: the pixels' k tiles and their split-K parts differ, so the sums'
      // order does
      EXPECT_TRUE(close(got[1][d], got[2][d], d < 2 ? Tolerance{0.0, 0.0} : t))
          << "v3 im2col vs v3 boxes, direction " << d;
    }
  }
}
#endif

TEST_F(ConvCuda, NhwcTransposesAreBitExact) {
  // kernels/cuda/layout.cu against the CPU transposes: the bits of every element move, whatever the dtype.
  for (DType dt : test::kCudaTestDtypes)
    // channel counts up to 8 take the pixel-per-thread kernel (both directions), more the 32 x 32 tiles
    for (const Shape& s : {Shape{1, 1, 1, 1}, Shape{2, 3, 7, 7}, Shape{3, 17, 9, 11}, Shape{2, 33, 33, 5},
                           Shape{1, 64, 1, 1}, Shape{2, 40, 35, 33}, Shape{3, 8, 5, 7}, Shape{2, 9, 4, 4}}) {
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
      const Tensor x = round_through(random(s), dt);
      const Shape hs{s[0], s[2], s[3], s[1]};
      Tensor want = Tensor::empty(hs, DType::f32), back = Tensor::empty(s, DType::f32);
      kernels::nchw_to_nhwc(x, want, cpu);
      Tensor y = poisoned(hs, dt), z = poisoned(s, dt);
      kernels::nchw_to_nhwc(to_gpu(x, dt), y, stream);
      kernels::nhwc_to_nchw(y, z, stream);
      EXPECT_TRUE(close(want, to_cpu_f32(y), Tolerance{0, 0})) << "nchw_to_nhwc";
      EXPECT_TRUE(close(x, to_cpu_f32(z), Tolerance{0, 0})) << "nhwc_to_nchw";
    }
  Tensor a = poisoned({2, 3, 4, 5}, DType::bf16), b32 = poisoned({2, 4, 5, 3}, DType::f32),
         bad = poisoned({2, 4, 3, 5}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::nchw_to_nhwc(a, b32, stream), "on CUDA all tensors of this op share");
  HPDT_EXPECT_THROW_MSG(kernels::nchw_to_nhwc(a, bad, stream), "y has shape [2, 4, 3, 5], expected [2, 4, 5, 3]");
  HPDT_EXPECT_THROW_MSG(kernels::nchw_to_nhwc(a, a, stream), "y must not alias x");
}

TEST_F(ConvCuda, NhwcPublicEntryPointsBothBackends) {
  const Case c{"k3 s2 p1", 4, 32, 15, 15, 48, 3, 2, 1};
  const Conv2dShape s = c.shape();
  const Shape xs{s.n, s.h, s.w, s.c_in}, ws{s.c_out, s.c_in, 3, 3}, ys{s.n, s.out_h(), s.out_w(), s.c_out};
  for (kernels::KernelBackend backend : {kernels::KernelBackend::ours, kernels::KernelBackend::vendor}) {
    if (backend == kernels::KernelBackend::vendor && !test::vendor_available()) continue;
    kernels::ScopedKernelBackend scope(backend);
    const Impl as = backend == kernels::KernelBackend::vendor ? Impl::cudnn : Impl::v2;
    for (DType dt : test::kCudaTestDtypes) {
      SCOPED_TRACE(std::string(kernels::kernel_backend_name(backend)) + " " + std::string(dtype_name(dt)));
      const Tensor x = random(xs), w = random(ws), b = random({s.c_out}), dy = random(ys), dw0 = random(ws),
                   db0 = random({s.c_out});
      const Expected want = oracle(s, round_through(x, dt), round_through(w, dt), &b, round_through(dy, dt),
                                   round_through(dw0, dt), round_through(db0, dt), dt, Layout::nhwc);
      const Tensor gx = to_gpu(x, dt), gw = to_gpu(w, dt), gb = to_gpu(b, dt), gdy = to_gpu(dy, dt);
      Tensor y = poisoned(ys, dt), dx = poisoned(xs, dt), dw = to_gpu(dw0, dt), db = to_gpu(db0, dt);
      kernels::conv2d_forward(gx, gw, &gb, y, s.stride, s.pad, stream, Layout::nhwc);
      kernels::conv2d_backward_data(gdy, gw, dx, s.stride, s.pad, stream, Layout::nhwc);
      kernels::conv2d_backward_filter(gx, gdy, dw, &db, s.stride, s.pad, stream, Layout::nhwc);
      EXPECT_TRUE(close(want.y, to_cpu_f32(y), conv_tolerance(dt, 32 * 9, as)));
      EXPECT_TRUE(close(want.dx, to_cpu_f32(dx), conv_tolerance(dt, 48 * 9, as)));
      EXPECT_TRUE(close(want.dw, to_cpu_f32(dw), conv_tolerance(dt, double(s.n * s.out_h() * s.out_w()), as)));
      EXPECT_TRUE(close(want.db, to_cpu_f32(db), conv_tolerance(dt, double(s.n * s.out_h() * s.out_w()), Impl::v1)));
    }
  }
  // NHWC shapes are checked as NHWC: an NCHW-shaped y is refused, naming the NHWC shape expected.
  Tensor x = poisoned({2, 8, 8, 3}, DType::bf16), w = poisoned({4, 3, 3, 3}, DType::bf16);
  Tensor y_nchw = poisoned({2, 4, 8, 8}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward(x, w, nullptr, y_nchw, 1, 1, stream, Layout::nhwc),
                        "y has shape [2, 4, 8, 8], expected [2, 8, 8, 4]");
  Tensor x_nchw = poisoned({2, 3, 8, 8}, DType::bf16);
  HPDT_EXPECT_THROW_MSG(kernels::conv2d_forward(x_nchw, w, nullptr, y_nchw, 1, 1, stream, Layout::nhwc),
                        "input channels of x [2, 3, 8, 8] (nhwc)");
}

}  // namespace
