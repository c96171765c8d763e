// Batch norm (NCHW, NHWC, or [n, c]) and layer norm (last dimension): f32 on the CPU; f32, f16 or bf16 storage
// on CUDA (statistics f32).
#pragma once

#include <concepts>
#include <functional>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/channel_stats.h"
#include "hpdt/kernels/layout.h"

namespace hpdt::kernels {

// SyncBN seam: all-reduce-sum `n` floats in place across the ranks that share a batch. Empty: local statistics.
//   host    sums host memory, called once the values are ready: the CPU path, and on the GPU a round trip (the
//           values copied to the host after a stream wait, and back).
//   device  (GPU) queues the sum of device memory on `stream` and returns without waiting (NCCL on the compute
//           stream): no host round trip, and a CUDA graph can capture it. Taken on the GPU when set; the CPU path
//           needs `host`.
// A callable of (float*, size_t) converts to a host sum; nullptr to an empty one.
struct AllReduceSum {
  std::function<void(float* data, size_t n)> host;
  std::function<void(float* device_data, size_t n, const Stream& stream)> device;

  AllReduceSum() = default;
  AllReduceSum(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): as std::function, nullptr is empty
  template <std::invocable<float*, size_t> F>
  AllReduceSum(F f) : host(std::move(f)) {}  // NOLINT(google-explicit-constructor): a host sum is the common case
  explicit operator bool() const { return bool(host) || bool(device); }
};

struct BatchNormSaved {
  Tensor mean, invstd;  // [c] f32, written by the training forward, read by backward
};

// The residual's own batch norm, applied on the fly by the batch norm that adds the residual (BatchNormFusion): a
// ResNet block with a projection shortcut computes relu(bn(x) + bn_r(r)) in one pass, r the shortcut convolution's
// output, and bn_r's output is never written. Its statistics are of the op's kind: batchnorm_statistics' saved mean
// and invstd for batchnorm_forward_train, the running mean and variance (with eps) for batchnorm_forward_eval.
struct ResidualBatchNorm {
  Tensor gamma, beta;  // [c], x's dtype
  Tensor mean, scale;  // f32 [c]: the saved mean and invstd (training), or the running mean and variance (eval)
  float eps = 1e-5f;   // eval: invstd = 1 / sqrt(var + eps)
};

// What batch norm's output pass also does, so that a ResNet's "bn -> (+ shortcut) -> relu" is one pass over
// the activation instead of two or three: y = relu(bn(x) + residual). The residual (same shape and dtype as
// x; undefined: none) is added after the affine step, then the ReLU (max(v, 0); NaN gives 0, as relu_forward).
// residual_bn (optional, with a residual): the residual goes through that batch norm first, in f32 (CUDA: not
// rounded to the storage dtype in between; the CPU computes bn_r(r) as batchnorm_forward does, then adds it).
// stats (training forward, optional): x's statistics from the kernel that wrote x (channel_stats.h), used instead of
// the statistics pass where they describe x (CUDA; the CPU computes its own).
struct BatchNormFusion {
  Tensor residual;
  const ResidualBatchNorm* residual_bn = nullptr;
  bool relu = false;
  const ChannelStats* stats = nullptr;
};

// The backward of a fused ReLU: y is the fused forward's output (its sign is the ReLU's mask); dz is
// written with dL/d(bn(x) + residual) = (y > 0 ? dy : 0), which is also the residual's gradient. Batch
// norm's gradients then follow from dz. Same shape and dtype as x.
// Or, where the forward added no residual: beta (the forward's) with y and dz undefined. The mask is then
// recomputed from x as the forward computed its output, relu((x - mean) * invstd * gamma + beta) > 0 with the
// saved statistics, the same arithmetic on the same device, and no dz is written: the reduce pass reads dy and x
// (not y as well, nor writes dz) and the dx pass masks dy itself, two passes over the activation fewer.
struct BatchNormReluGrad {
  Tensor y, dz;
  Tensor beta = Tensor();  // defined: the mask from x (y and dz undefined)
  bool mask_from_input() const { return beta.defined(); }
};

// x is [n, c, h, w] (NCHW), [n, h, w, c] (layout nhwc: the [n*h*w, c] matrix) or [n, c] (either layout).
// Training: batch statistics (all-reduced through `sync` when set), running stats updated with
// `momentum` (unbiased variance), y = (x - mean) * invstd * gamma + beta.
void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                             Tensor& running_var, float eps, float momentum, BatchNormSaved& saved, Tensor& y,
                             const AllReduceSum& sync, const Stream& stream, Layout layout = Layout::nchw,
                             const BatchNormFusion& fusion = {});
// The first half of batchnorm_forward_train, for a batch norm that another one applies on the fly
// (BatchNormFusion::residual_bn): the batch statistics into `saved` and the running statistics updated, exactly as
// batchnorm_forward_train computes them, without the output pass. stats as BatchNormFusion::stats.
void batchnorm_statistics(const Tensor& x, Tensor& running_mean, Tensor& running_var, float eps, float momentum,
                          BatchNormSaved& saved, const AllReduceSum& sync, const Stream& stream,
                          Layout layout = Layout::nchw, const ChannelStats* stats = nullptr);
// Eval: running statistics.
void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, float eps, Tensor& y, const Stream& stream,
                            Layout layout = Layout::nchw, const BatchNormFusion& fusion = {});
// Training backward: dx overwritten; dgamma, dbeta accumulated (+=) from the local batch. With `relu`
// (the forward fused a ReLU), dy is the gradient of the ReLU's output and relu->dz is written as well (not with
// relu->mask_from_input()).
// sums (optional): dy's sums from the kernel that wrote dy (channel_stats.h: a convolution's backward-data), used
// (CUDA) where they describe dy and that kernel applied the ReLU's mask (sums->y given) exactly when `relu` is given:
// dy then already is dz, the reduce pass is skipped, and relu->dz is dy (a copy of it unless relu->dz is dy itself;
// none with the mask from x, which dy then passes unchanged).
// residual_sums (optional): a request for the backward sums of the residual's batch norm (BatchNormFusion::
// residual_bn in the forward), whose output gradient is this one's dz: x = the residual r (x's shape and dtype),
// mean = that batch norm's saved mean, y undefined (no ReLU). CUDA's apply pass reads r as well and writes them
// (ChannelGradSums describing dz), so that the residual's batch norm skips its reduce pass (the per-channel and NHWC
// kernels; not the flat ones, nor with HPDT_BN_RESIDUAL=separate); where not computed (there, and on the CPU) they
// are cleared.
void batchnorm_backward_train(const Tensor& dy, const Tensor& x, const Tensor& gamma, const BatchNormSaved& saved,
                              Tensor& dx, Tensor& dgamma, Tensor& dbeta, const AllReduceSum& sync, const Stream& stream,
                              Layout layout = Layout::nchw, const BatchNormReluGrad* relu = nullptr,
                              const ChannelGradSums* sums = nullptr, ChannelGradSums* residual_sums = nullptr);

struct LayerNormSaved {
  Tensor mean, rstd;  // [rows] f32
};
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, LayerNormSaved& saved,
                       Tensor& y, const Stream& stream);
// dx overwritten; dgamma, dbeta accumulated. With a residual (x's shape and dtype, a tensor other than dx),
// dx = layer norm's input gradient + residual: a pre-norm transformer block's gradient through the norm plus
// the skip connection's, in the dx store instead of a separate add (CPU: the same bits as kernels::add).
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const LayerNormSaved& saved,
                        Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Stream& stream,
                        const Tensor* residual = nullptr);

}  // namespace hpdt::kernels
