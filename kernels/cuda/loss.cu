// CUDA softmax cross-entropy with label smoothing; the CPU oracle is kernels/cpu/loss.cpp (which computes in
// double; here f32 per row, the batch sum in double).
//   ce_rows_kernel: one warp per row: max, sum exp(z - max) and sum q z (butterfly, so every lane holds the
//     row's values), loss_row = lse - sum q z; dlogits = (softmax - q) * grad_scale / b. An out-of-range
//     label records the smallest such row in a device word (atomicMin on an integer: order-free). A row whose
//     label is its first largest logit adds one to the correct count (top-1 accuracy; an integer atomicAdd:
//     order-free), so that the trainer needs no host copy of the logits.
//   ce_total_kernel: one block adds the row losses in a fixed order (double) and reads the bad label.
// The op returns the loss to the host, so it synchronises the stream (the only wait); the _queued form
// leaves the result in device memory for read_loss / read_loss_values (CUDA graph capture; hpdt-train's step).
#include <cstdint>
#include <limits>

#include "hpdt/kernels/cuda/loss.h"
#include "launch.cuh"
#include "warp.cuh"

namespace hpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Result {  // what comes back to the host
  double total;
  uint32_t bad_row;  // 0xffffffff: every label in range
  int32_t bad_label;
  int64_t batch, classes;  // of the call (for read_loss)
  uint32_t correct;        // rows whose label is their first largest logit
};

__device__ __forceinline__ float warp_allmax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ int warp_allmin(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    ce_rows_kernel(const T* logits, const int32_t* __restrict__ labels, int64_t b, int classes, float on, float off,
                   float k, T* dlogits, float* __restrict__ row_loss, Result* result) {  // dlogits may be logits
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= b) return;  // whole warps
  const int label = labels[row];
  if (label < 0 || label >= classes) {
    if (lane == 0) {
      atomicMin(&result->bad_row, uint32_t(row));
      row_loss[row] = 0.0f;
    }
    return;
  }
  const T* z = logits + row * classes;
  float m = -INFINITY;
  for (int c = lane; c < classes; c += 32) m = fmaxf(m, to_f32(z[c]));
  m = warp_allmax(m);
  float s = 0.0f, qz = 0.0f;
  int first = classes;  // the first class holding the maximum (NaNs, which fmaxf skips, never do)
  for (int c = lane; c < classes; c += 32) {
    const float v = to_f32(z[c]);
    s += expf(v - m);
    qz += (c == label ? on : off) * v;
    if (v == m && first == classes) first = c;  // a lane's classes ascend: its first hit is its lowest
  }
  s = warp_allsum(s);
  qz = warp_allsum(qz);
  first = warp_allmin(first);
  const float lse = m + logf(s);
  if (lane == 0) {
    row_loss[row] = lse - qz;
    if (first == label) atomicAdd(&result->correct, 1u);
  }
  if (dlogits) {
    T* g = dlogits + row * classes;
    for (int c = lane; c < classes; c += 32)
      g[c] = from_f32<T>((expf(to_f32(z[c]) - lse) - (c == label ? on : off)) * k);
  }
}

__global__ void __launch_bounds__(kThreads)
    ce_total_kernel(const float* __restrict__ row_loss, const int32_t* __restrict__ labels, int64_t b, int64_t classes,
                    Result* result) {
  __shared__ double sh[kWarps];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < b; i += kThreads) acc += double(row_loss[i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kWarps; ++w) total += sh[w];
    result->total = total;
    const uint32_t bad = result->bad_row;
    result->bad_label = bad != 0xffffffffu ? labels[bad] : 0;
    result->batch = b;
    result->classes = classes;
  }
}

}  // namespace

namespace {

// Queues the two kernels; the result lands in `res` (device). b > 0.
void queue_loss(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits, double grad_scale,
                Result* res, const Stream& stream) {
  HPDT_CHECK(smoothing >= 0.0 && smoothing <= 1.0, "softmax_cross_entropy: label smoothing ", smoothing,
             " is not in [0, 1]");
  const int64_t b = logits.size(0), classes = logits.size(1);
  HPDT_CHECK(b < 0xffffffffLL && classes < (int64_t(1) << 31), "softmax_cross_entropy: ", logits.shape().str(),
             " too large for CUDA");
  const double off = smoothing / double(classes), on = 1.0 - smoothing + off;
  const cudaStream_t s = detail::native(stream);
  const AllocOptions opts{.stream = &stream};
  Tensor row_loss = Tensor::empty({b}, DType::f32, logits.device(), opts);
  HPDT_CUDA_CHECK(cudaMemsetAsync(res, 0xff, sizeof(Result), s));  // bad_row = 0xffffffff: none yet
  HPDT_CUDA_CHECK(cudaMemsetAsync(&res->correct, 0, sizeof res->correct, s));
  dispatch_floating(logits.dtype(), "softmax_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    ce_rows_kernel<T><<<unsigned((b + kWarps - 1) / kWarps), kThreads, 0, s>>>(
        static_cast<const T*>(logits.data()), labels.data<int32_t>(), b, int(classes), float(on), float(off),
        float(grad_scale / double(b)), dlogits ? static_cast<T*>(dlogits->data()) : nullptr, row_loss.data<float>(),
        res);
    HPDT_CUDA_CHECK_LAUNCH();
  });
  ce_total_kernel<<<1, kThreads, 0, s>>>(row_loss.data<float>(), labels.data<int32_t>(), b, classes, res);
  HPDT_CUDA_CHECK_LAUNCH();
}

double mean_of(const Result& host, int64_t b, int64_t classes) {
  HPDT_CHECK(host.bad_row == 0xffffffffu, "softmax_cross_entropy: label ", host.bad_label, " of sample ", host.bad_row,
             " is outside [0, ", classes, ")");
  return host.total / double(b);
}

}  // namespace

double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                             double grad_scale, const Stream& stream) {
  const int64_t b = logits.size(0), classes = logits.size(1);
  if (b == 0) return 0.0 / double(b);  // the CPU's mean of nothing: NaN
  const AllocOptions opts{.stream = &stream};
  Tensor result_dev = Tensor::empty({int64_t(sizeof(Result))}, DType::u8, logits.device(), opts);
  auto* res = static_cast<Result*>(result_dev.data());
  queue_loss(logits, labels, smoothing, dlogits, grad_scale, res, stream);
  // The loss is a host value: copy it back and wait (pageable memory: the copy returns when done).
  Result host{};
  const cudaStream_t s = detail::native(stream);
  HPDT_CUDA_CHECK(cudaMemcpyAsync(&host, res, sizeof host, cudaMemcpyDeviceToHost, s));
  HPDT_CUDA_CHECK(cudaStreamSynchronize(s));
  return mean_of(host, b, classes);
}

Tensor make_loss_state(Device device, const Stream& stream) {
  const AllocOptions opts{.stream = &stream};
  Tensor state = Tensor::empty({int64_t(sizeof(Result))}, DType::u8, device, opts);
  Result none{};
  none.bad_row = 0xffffffffu;
  none.correct = 0;
  none.total = std::numeric_limits<double>::quiet_NaN();  // until a loss is queued (batch 0)
  HPDT_CUDA_CHECK(cudaMemcpyAsync(state.data(), &none, sizeof none, cudaMemcpyHostToDevice, detail::native(stream)));
  HPDT_CUDA_CHECK(cudaStreamSynchronize(detail::native(stream)));
  return state;
}

void softmax_cross_entropy_queued(const Tensor& logits, const Tensor& labels, double smoothing, Tensor* dlogits,
                                  double grad_scale, Tensor& state, const Stream& stream) {
  HPDT_CHECK(state.dtype() == DType::u8 && state.nbytes() == sizeof(Result),
             "softmax_cross_entropy_queued: state is not one of make_loss_state");
  HPDT_CHECK(logits.size(0) > 0, "softmax_cross_entropy_queued: an empty batch");
  queue_loss(logits, labels, smoothing, dlogits, grad_scale, static_cast<Result*>(state.data()), stream);
}

LossValues read_loss_values(const Tensor& state, const Stream& stream) {
  HPDT_CHECK(state.dtype() == DType::u8 && state.nbytes() == sizeof(Result), "read_loss: state is not one of make_loss_state");
  Result host{};
  const cudaStream_t s = detail::native(stream);
  HPDT_CUDA_CHECK(cudaMemcpyAsync(&host, state.data(), sizeof host, cudaMemcpyDeviceToHost, s));
  HPDT_CUDA_CHECK(cudaStreamSynchronize(s));
  if (host.batch <= 0) return {host.total, 0, 0};  // nothing queued yet: NaN
  return {mean_of(host, host.batch, host.classes), int64_t(host.correct), host.batch};
}

}  // namespace hpdt::kernels::cuda
