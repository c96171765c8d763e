// Batch norm (NCHW, NHWC, or [n, c]) and layer norm (last dimension): f32 on the CPU; f32, f16 or bf16 storage
// on CUDA (statistics f32).
#pragma once

#include <functional>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/layout.h"

namespace hpdt::kernels {

// SyncBN seam: all-reduce-sum `n` floats in place across the ranks that share a batch. Null: local stats.
using AllReduceSum = std::function<void(float* data, size_t n)>;

struct BatchNormSaved {
  Tensor mean, invstd;  // [c] f32, written by the training forward, read by backward
};

// x is [n, c, h, w] (NCHW), [n, h, w, c] (layout nhwc: the [n*h*w, c] matrix) or [n, c] (either layout).
// Training: batch statistics (all-reduced through `sync` when set), running stats updated with
// `momentum` (unbiased variance), y = (x - mean) * invstd * gamma + beta.
void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                             Tensor& running_var, float eps, float momentum, BatchNormSaved& saved, Tensor& y,
                             const AllReduceSum& sync, const Stream& stream, Layout layout = Layout::nchw);
// Eval: running statistics.
void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, float eps, Tensor& y, const Stream& stream,
                            Layout layout = Layout::nchw);
// Training backward: dx overwritten; dgamma, dbeta accumulated (+=) from the local batch.
void batchnorm_backward_train(const Tensor& dy, const Tensor& x, const Tensor& gamma, const BatchNormSaved& saved,
                              Tensor& dx, Tensor& dgamma, Tensor& dbeta, const AllReduceSum& sync,
                              const Stream& stream, Layout layout = Layout::nchw);

struct LayerNormSaved {
  Tensor mean, rstd;  // [rows] f32
};
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, LayerNormSaved& saved,
                       Tensor& y, const Stream& stream);
// dx overwritten; dgamma, dbeta accumulated.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const LayerNormSaved& saved,
                        Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Stream& stream);

}  // namespace hpdt::kernels
