// cuDNN 9 convolution (legacy cudnnConvolution* API, NCHW or NHWC descriptors): the `vendor` kernel backend and the
// peer hpdt's implicit-GEMM kernels (conv.cu, conv_nhwc.cu) are benchmarked against.
//   - one cudnnHandle_t per device, created on first use and kept for the process (destroying it at exit can
//     run after the driver has unloaded); cudnnSetStream before every call, under the handle's mutex so that two
//     threads never interleave a set-stream and a call;
//   - f32 compute type; f32 tensors run with CUDNN_FMA_MATH (true f32, no TF32, so they meet the f32 tolerance),
//     f16/bf16 with tensor ops;
//   - the algorithm, cached per (device, dtype, layout, direction, shape, kernels::cudnn_algo()):
//       heuristic (the default): the first deterministic one the v7 heuristics rank (if none is deterministic,
//         the first one, with a warning);
//       find (--cudnn-algo find, PyTorch's cudnn.benchmark): the fastest of cudnnFind*Algorithm, which at first
//         use times every algorithm on buffers it cudaMallocs itself (the non-Ex form: backward-filter
//         accumulates into dw, which the Ex form would overwrite) and synchronises the device, so it must not
//         run inside a CUDA-graph capture (hpdt-bench-train-step captures after its warm-up steps); if Find
//         fails or finds nothing acceptable, the heuristic's choice, with a warning;
//   - workspace from the caching allocator (Tensor::empty on the stream), freed back to it after the call;
//   - backward-filter accumulates with beta = 1; dbias and the forward epilogue run on hpdt's kernels
//     (cudnnConvolutionBackwardBias / cudnnAddTensor do not take bf16 everywhere);
//   - NHWC: NHWC tensor descriptors and an NHWC (KRSC) filter descriptor, the layout cuDNN's NHWC tensor-core
//     kernels take. hpdt keeps weights [co, ci, kh, kw], so kh x kw > 1 filters are permuted into a scratch KRSC
//     copy (conv_common.cuh: forward_weights) and backward-filter accumulates into a KRSC copy of dw that is
//     permuted back (conv2d_filter_from_krsc); a 1x1 filter is the same bytes in both layouts.
#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "conv_common.cuh"
#include "cudnn_check.cuh"
#include "hpdt/core/log.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/cuda/conv.h"
#include "launch.cuh"

namespace hpdt::kernels::cuda {

namespace {

struct Handle {
  cudnnHandle_t h = nullptr;
  std::mutex m;
};

Handle& handle_for(int device) {
  static std::mutex mu;
  static auto* handles = new std::map<int, std::unique_ptr<Handle>>();  // kept for the process (see above)
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<Handle>& slot = (*handles)[device];
  if (!slot) {
    auto made = std::make_unique<Handle>();
    int previous = 0;
    HPDT_CUDA_CHECK(cudaGetDevice(&previous));
    HPDT_CUDA_CHECK(cudaSetDevice(device));
    const cudnnStatus_t status = cudnnCreate(&made->h);
    HPDT_CUDA_CHECK(cudaSetDevice(previous));
    HPDT_CUDNN_CHECK(status);
    slot = std::move(made);
  }
  return *slot;
}

cudnnDataType_t cudnn_type(DType dt) {
  switch (dt) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  HPDT_FAIL("conv2d (cuDNN): dtype ", dtype_name(dt), " is not supported (expected f32, f16 or bf16)");
}

// The four descriptors of one convolution, destroyed with the object.
class Descriptors {
 public:
  Descriptors(const Conv2dShape& s, DType dt, Layout layout) {
    const cudnnDataType_t t = cudnn_type(dt);
    const cudnnTensorFormat_t f = layout == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    HPDT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    HPDT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    HPDT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    HPDT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    // Dimensions are always given as n, c, h, w; the format says the memory order.
    HPDT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, f, t, int(s.n), int(s.c_in), int(s.h), int(s.w)));
    HPDT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, f, t, int(s.n), int(s.c_out), int(s.out_h()), int(s.out_w())));
    HPDT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, t, f, int(s.c_out), int(s.c_in), int(s.kh), int(s.kw)));
    HPDT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, int(s.pad), int(s.pad), int(s.stride), int(s.stride), 1, 1,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    HPDT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, dt == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

enum class Direction { forward, backward_data, backward_filter };

struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

using Key = std::tuple<int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int>;

// A result we take: it ran, needs at most 2 GiB of workspace, is deterministic (when asked: the heuristic's first
// pass; its second pass takes any, with a warning), and keeps f32 in f32 (no tensor-op math).
template <class Perf>
bool acceptable(const Perf& perf, DType dt, bool deterministic) {
  if (perf.status != CUDNN_STATUS_SUCCESS) return false;
  if (perf.memory > (size_t(1) << 31)) return false;  // FFT variants can ask for gigabytes of workspace
  if (deterministic && perf.determinism != CUDNN_DETERMINISTIC) return false;
  if (dt == DType::f32 && perf.mathType != CUDNN_FMA_MATH && perf.mathType != CUDNN_DEFAULT_MATH) return false;
  return true;
}

// The first acceptable result, in cuDNN's order (the heuristics' rank, or Find's fastest first). The heuristic
// prefers a deterministic algorithm; Find takes the fastest, deterministic or not, as PyTorch's cudnn.benchmark.
template <class Perf>
bool pick(const Perf* perf, int returned, DType dt, CudnnAlgo how, Choice& c) {
  for (bool deterministic : {true, false}) {
    if (deterministic && how == CudnnAlgo::find) continue;
    for (int i = 0; i < returned; ++i)
      if (acceptable(perf[i], dt, deterministic)) {
        c = {int(perf[i].algo), perf[i].mathType};
        if (!deterministic && how == CudnnAlgo::heuristic)
          HPDT_LOG(warn) << "conv2d (cuDNN): no deterministic algorithm; using algorithm " << c.algo
                         << ", whose results may vary from run to run";
        return true;
      }
  }
  return false;
}

// One query, Find's or the v7 heuristics' (find / heuristic: cuDNN calls taking (count, &returned, perf)), and the
// first acceptable result: whether one came back. A failed Find returns false (the caller falls back to the
// heuristic); a failed heuristic query throws.
template <class Perf, int kCount, class Find, class Heuristic>
bool query(DType dt, CudnnAlgo how, Choice& c, Find find, Heuristic heuristic) {
  Perf perf[kCount];
  int returned = 0;
  const cudnnStatus_t st = how == CudnnAlgo::find ? find(kCount, &returned, perf) : heuristic(kCount, &returned, perf);
  if (how == CudnnAlgo::find && st != CUDNN_STATUS_SUCCESS) return false;
  HPDT_CUDNN_CHECK(st);
  return pick(perf, returned, dt, how, c);
}

// Find, or the v7 heuristics, for one direction: whether an acceptable algorithm came back.
bool search(cudnnHandle_t h, const Descriptors& d, DType dt, Direction dir, CudnnAlgo how, Choice& c) {
  if (dir == Direction::forward)
    return query<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        dt, how, c,
        [&](int n, int* r, auto* p) { return cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y, n, r, p); },
        [&](int n, int* r, auto* p) { return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, n, r, p); });
  if (dir == Direction::backward_data)
    return query<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
        dt, how, c,
        [&](int n, int* r, auto* p) {
          return cudnnFindConvolutionBackwardDataAlgorithm(h, d.w, d.y, d.conv, d.x, n, r, p);
        },
        [&](int n, int* r, auto* p) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, n, r, p);
        });
  return query<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
      dt, how, c,
      [&](int n, int* r, auto* p) {
        return cudnnFindConvolutionBackwardFilterAlgorithm(h, d.x, d.y, d.conv, d.w, n, r, p);
      },
      [&](int n, int* r, auto* p) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, n, r, p);
      });
}

const char* direction_name(Direction dir) {
  return dir == Direction::forward ? "forward" : dir == Direction::backward_data ? "backward-data" : "backward-filter";
}

// The algorithm of a call, chosen once per key. Find runs on `stream` (the handle's, set here) and synchronises.
Choice choose(cudnnHandle_t h, const Descriptors& d, const Conv2dShape& s, DType dt, Layout layout, Direction dir,
              int device, const Stream& stream) {
  static std::mutex mu;
  static auto* cache = new std::map<Key, Choice>();
  const CudnnAlgo how = cudnn_algo();
  const Key key{device, int(dt), int(layout), int(dir), s.n, s.c_in, s.h, s.w, s.c_out, s.kh, s.kw, s.stride, s.pad,
                int(how)};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  Choice c;
  bool found = false;
  if (how == CudnnAlgo::find) {
    HPDT_CUDNN_CHECK(cudnnSetStream(h, detail::native(stream)));
    found = search(h, d, dt, dir, CudnnAlgo::find, c);
    if (!found)
      HPDT_LOG(warn) << "conv2d (cuDNN): Find found no usable " << direction_name(dir) << " algorithm for " << s.str()
                     << " (" << dtype_name(dt) << ", " << layout_name(layout) << "); using the heuristic's choice";
  }
  if (!found) found = search(h, d, dt, dir, CudnnAlgo::heuristic, c);
  HPDT_CHECK(found, "conv2d (cuDNN): no algorithm for ", s.str(), " in ", dtype_name(dt), ", ", layout_name(layout));
  if (dt == DType::f32) c.math = CUDNN_FMA_MATH;  // DEFAULT_MATH would allow TF32 on Ampere and later
  std::lock_guard<std::mutex> lock(mu);
  cache->emplace(key, c);
  return c;
}

Tensor workspace(size_t bytes, Device dev, const Stream& stream) {
  return Tensor::empty({int64_t(std::max<size_t>(bytes, 1))}, DType::u8, dev, AllocOptions{.stream = &stream});
}

// The filter cuDNN reads (and backward-filter writes): w itself for NCHW and for 1x1 kernels, else a KRSC copy
// in `packed` (NHWC filter descriptor).
const void* filter(const Conv2dShape& s, const Tensor& w, Layout layout, Tensor& packed, const Stream& stream) {
  if (layout == Layout::nchw) return w.data();
  int64_t lda = 0;
  return conv_detail::forward_weights(s, w, false, false, packed, &lda, stream);
}

void check_cudnn_range(const Conv2dShape& s) {
  const int64_t lim = int64_t(1) << 31;
  HPDT_CHECK(s.n * s.c_in * s.h * s.w < lim && s.n * s.c_out * s.out_h() * s.out_w() < lim, "conv2d (cuDNN): ",
             s.str(), " has tensors of 2^31 elements or more");
}

}  // namespace

void conv2d_forward_vendor(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& e, Tensor& y,
                           const Stream& stream, Layout layout) {
  if (e.stats) e.stats->clear_results();  // cuDNN leaves batch norm's statistics to batch norm
  if (y.numel() == 0) return;
  check_cudnn_range(s);
  Tensor packed;
  const void* wp = filter(s, w, layout, packed, stream);
  const int device = x.device().index;
  Handle& handle = handle_for(device);
  const Descriptors d(s, x.dtype(), layout);
  std::lock_guard<std::mutex> lock(handle.m);
  const Choice c = choose(handle.h, d, s, x.dtype(), layout, Direction::forward, device, stream);
  HPDT_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  size_t bytes = 0;
  const auto algo = cudnnConvolutionFwdAlgo_t(c.algo);
  HPDT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle.h, d.x, d.w, d.conv, d.y, algo, &bytes));
  Tensor ws = workspace(bytes, x.device(), stream);
  HPDT_CUDNN_CHECK(cudnnSetStream(handle.h, detail::native(stream)));
  const float alpha = 1.0f, beta = 0.0f;
  HPDT_CUDNN_CHECK(cudnnConvolutionForward(handle.h, &alpha, d.x, x.data(), d.w, wp, d.conv, algo, ws.data(), bytes,
                                           &beta, d.y, y.data()));
  conv2d_epilogue_inplace(e, y, stream, layout);
}

void conv2d_backward_data_vendor(const Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx,
                                 const Stream& stream, Layout layout, const Tensor* residual) {
  if (dx.numel() == 0) return;
  check_cudnn_range(s);
  Tensor packed;
  const void* wp = filter(s, w, layout, packed, stream);
  const int device = dy.device().index;
  Handle& handle = handle_for(device);
  const Descriptors d(s, dy.dtype(), layout);
  std::lock_guard<std::mutex> lock(handle.m);
  const Choice c = choose(handle.h, d, s, dy.dtype(), layout, Direction::backward_data, device, stream);
  HPDT_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  size_t bytes = 0;
  const auto algo = cudnnConvolutionBwdDataAlgo_t(c.algo);
  HPDT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle.h, d.w, d.y, d.conv, d.x, algo, &bytes));
  Tensor ws = workspace(bytes, dy.device(), stream);
  HPDT_CUDNN_CHECK(cudnnSetStream(handle.h, detail::native(stream)));
  const float alpha = 1.0f, beta = 0.0f;
  HPDT_CUDNN_CHECK(cudnnConvolutionBackwardData(handle.h, &alpha, d.w, wp, d.y, dy.data(), d.conv, algo, ws.data(),
                                                bytes, &beta, d.x, dx.data()));
  if (residual) {
    Conv2dEpilogue e;
    e.residual = residual;
    conv2d_epilogue_inplace(e, dx, stream, layout);
  }
}

void conv2d_backward_filter_vendor(const Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias,
                                   const Stream& stream, Layout layout) {
  if (dbias) conv2d_bias_grad(dy, *dbias, stream, layout);
  if (dw.numel() == 0 || dy.numel() == 0) return;
  check_cudnn_range(s);
  // NHWC with kh x kw > 1: accumulate into a KRSC copy of dw, permuted back after the call.
  Tensor packed;
  void* dwp = const_cast<void*>(filter(s, dw, layout, packed, stream));
  const int device = x.device().index;
  Handle& handle = handle_for(device);
  const Descriptors d(s, x.dtype(), layout);
  std::lock_guard<std::mutex> lock(handle.m);
  const Choice c = choose(handle.h, d, s, x.dtype(), layout, Direction::backward_filter, device, stream);
  HPDT_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  size_t bytes = 0;
  const auto algo = cudnnConvolutionBwdFilterAlgo_t(c.algo);
  HPDT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle.h, d.x, d.y, d.conv, d.w, algo, &bytes));
  Tensor ws = workspace(bytes, x.device(), stream);
  HPDT_CUDNN_CHECK(cudnnSetStream(handle.h, detail::native(stream)));
  const float alpha = 1.0f, beta = 1.0f;  // dw += (accumulate)
  HPDT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle.h, &alpha, d.x, x.data(), d.y, dy.data(), d.conv, algo,
                                                  ws.data(), bytes, &beta, d.w, dwp));
  if (packed.defined()) conv2d_filter_from_krsc(s, packed, dw, stream);
}

}  // namespace hpdt::kernels::cuda
