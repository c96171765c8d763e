// CUDA batch norm and layer norm, checked against hpdt::kernels::cpu (see hpdt/kernels/norm.h).
// Storage f32, f16 or bf16 (x, y, gamma, beta, dx, dgamma, dbeta share it); math in f32; saved
// statistics and running statistics f32. Batch norm takes x [n, c, h, w] or [n, c] (NCHW), or with
// layout nhwc [n, h, w, c] (or [n, c]): the column statistics of the [n*h*w, c] matrix. Shapes are checked
// by the caller (kernels/src/norm.cpp).
#pragma once

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/norm.h"

namespace hpdt::kernels::cuda {
// Deterministic: fixed partitions, fixed combination orders. With `sync` the stream is synchronised
// around the host-side all-reduce callback (the price of the host seam); without it nothing waits.
void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                             Tensor& running_var, float eps, float momentum, BatchNormSaved& saved, Tensor& y,
                             const AllReduceSum& sync, const Stream& stream, Layout layout = Layout::nchw,
                             const BatchNormFusion& fusion = {});
void batchnorm_statistics(const Tensor& x, Tensor& running_mean, Tensor& running_var, float eps, float momentum,
                          BatchNormSaved& saved, const AllReduceSum& sync, const Stream& stream,
                          Layout layout = Layout::nchw, const ChannelStats* stats = nullptr);
void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, float eps, Tensor& y, const Stream& stream,
                            Layout layout = Layout::nchw, const BatchNormFusion& fusion = {});
void batchnorm_backward_train(const Tensor& dy, const Tensor& x, const Tensor& gamma, const BatchNormSaved& saved,
                              Tensor& dx, Tensor& dgamma, Tensor& dbeta, const AllReduceSum& sync, const Stream& stream,
                              Layout layout = Layout::nchw, const BatchNormReluGrad* relu = nullptr,
                              const ChannelGradSums* sums = nullptr, ChannelGradSums* residual_sums = nullptr);
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, LayerNormSaved& saved,
                       Tensor& y, const Stream& stream);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const LayerNormSaved& saved, Tensor& dx,
                        Tensor& dgamma, Tensor& dbeta, const Stream& stream, const Tensor* residual = nullptr);
}  // namespace hpdt::kernels::cuda
