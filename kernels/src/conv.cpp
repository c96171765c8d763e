#include "hpdt/kernels/conv.h"

#include <utility>
#include <vector>

#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/cpu/activation.h"
#include "hpdt/kernels/cpu/norm.h"
#include "hpdt/kernels/dispatch.h"

#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/conv.h"
#endif

namespace hpdt::kernels {

#if HPDT_HAVE_CUDA
namespace {
// CUDA tensors go to cuDNN under the vendor backend (NCHW or NHWC descriptors), to hpdt's kernels otherwise
// (conv.cu for NCHW, conv_nhwc.cu for NHWC).
bool vendor() { return kernel_backend() == KernelBackend::vendor; }

void cuda_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Conv2dEpilogue& e, Tensor& y,
                  const Stream& st, Layout layout) {
  if (vendor()) return cuda::conv2d_forward_vendor(s, x, w, e, y, st, layout);
  if (layout == Layout::nhwc) return cuda::conv2d_forward_nhwc(s, x, w, e, y, st);
  cuda::conv2d_forward(s, x, w, e, y, st);
}
}  // namespace
#endif

Conv2dShape conv2d_shape(std::string_view op, const Tensor& x, const Tensor& w, int64_t stride, int64_t pad,
                         Layout layout) {
  const bool nhwc = layout == Layout::nhwc;
  HPDT_CHECK(x.ndim() == 4 && w.ndim() == 4, op, ": needs x ", nhwc ? "[n, h, w, c]" : "[n, c, h, w]",
             " and w [co, ci, kh, kw], got x ", x.shape().str(), ", w ", w.shape().str());
  const int64_t c = nhwc ? x.size(3) : x.size(1), h = nhwc ? x.size(1) : x.size(2), wd = nhwc ? x.size(2) : x.size(3);
  Conv2dShape s{x.size(0), c, h, wd, w.size(0), w.size(2), w.size(3), stride, pad};
  HPDT_CHECK(w.size(1) == c, op, ": input channels of x ", x.shape().str(), " (", layout_name(layout), ") and w ",
             w.shape().str(), " differ (groups = 1 only)");
  HPDT_CHECK(stride >= 1 && pad >= 0 && s.h + 2 * pad >= s.kh && s.w + 2 * pad >= s.kw, op,
             ": unsupported configuration ", s.str());
  return s;
}

Shape conv2d_output_shape(const Conv2dShape& s, Layout layout) {
  return layout == Layout::nhwc ? Shape{s.n, s.out_h(), s.out_w(), s.c_out} : Shape{s.n, s.c_out, s.out_h(), s.out_w()};
}

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, int64_t stride, int64_t pad,
                    const Stream& st, Layout layout) {
  const Device dev = detail::float_op_device("conv2d_forward", {&x, &w, &y}, st);
  const Conv2dShape s = conv2d_shape("conv2d_forward", x, w, stride, pad, layout);
  check_shape("conv2d_forward", "y", y, conv2d_output_shape(s, layout));
  if (bias) {
    detail::float_op_device("conv2d_forward", {&x, bias}, st);
    check_shape("conv2d_forward", "bias", *bias, Shape{s.c_out});
  }
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda_forward(s, x, w, Conv2dEpilogue{.bias = bias}, y, st, layout));
    return;
  }
  if (layout == Layout::nhwc)
    cpu::conv2d_forward_nhwc(s, x.data<float>(), w.data<float>(), bias ? bias->data<float>() : nullptr, y.data<float>());
  else
    cpu::conv2d_forward<float>(s, x.data<float>(), w.data<float>(), bias ? bias->data<float>() : nullptr,
                               y.data<float>());
}

void conv2d_forward_fused(const Tensor& x, const Tensor& w, const Conv2dEpilogue& e, Tensor& y, int64_t stride,
                          int64_t pad, const Stream& st, Layout layout) {
  const char* op = "conv2d_forward_fused";
  const Device dev = detail::float_op_device(op, {&x, &w, &y}, st);
  const Conv2dShape s = conv2d_shape(op, x, w, stride, pad, layout);
  const Shape out = conv2d_output_shape(s, layout);
  check_shape(op, "y", y, out);
  const std::pair<const Tensor*, const char*> per_channel[] = {{e.bias, "bias"}, {e.scale, "scale"}, {e.shift, "shift"}};
  for (const auto& [t, name] : per_channel) {
    if (!t) continue;
    detail::float_op_device(op, {&x, t}, st);
    check_shape(op, name, *t, Shape{s.c_out});
  }
  if (e.residual) detail::check_residual(op, *e.residual, y, "y", st);
  if (e.stats) e.stats->clear_results();  // the kernel that can sets them
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda_forward(s, x, w, e, y, st, layout));
    return;
  }
  // CPU: the composition of the CPU ops (a reference, not a fused kernel).
  conv2d_forward(x, w, e.bias, y, stride, pad, st, layout);
  const int64_t plane = s.out_h() * s.out_w();
  float* yp = y.data<float>();
  if (e.scale || e.shift) {
    std::vector<float> zero(size_t(s.c_out), 0.0f), one(size_t(s.c_out), 1.0f);
    // NHWC: batch norm's per-channel apply on the [n*oh*ow, c] matrix
    const bool nhwc = layout == Layout::nhwc;
    cpu::batchnorm_apply<float>(nhwc ? s.n * plane : s.n, s.c_out, nhwc ? 1 : plane, yp, zero.data(), one.data(),
                                e.scale ? e.scale->data<float>() : one.data(),
                                e.shift ? e.shift->data<float>() : zero.data(), yp);
  }
  if (e.residual) cpu::add_forward<float>(y.numel(), yp, e.residual->data<float>(), yp);
  if (e.relu) cpu::relu_forward<float>(y.numel(), yp, yp);
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, int64_t stride, int64_t pad,
                          const Stream& st, Layout layout, const Tensor* residual, ChannelGradSums* bn_grad) {
  const char* op = "conv2d_backward_data";
  const Device dev = detail::float_op_device(op, {&dy, &w, &dx}, st);
  const Conv2dShape s = conv2d_shape(op, dx, w, stride, pad, layout);
  check_shape(op, "dy", dy, conv2d_output_shape(s, layout));
  if (residual) detail::check_residual(op, *residual, dx, "dx", st);
  if (bn_grad) detail::check_grad_sums(op, *bn_grad, dx, dx.size(layout == Layout::nhwc ? 3 : 1), st);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(vendor()                 ? cuda::conv2d_backward_data_vendor(s, dy, w, dx, st, layout, residual)
                 : layout == Layout::nhwc ? cuda::conv2d_backward_data_nhwc(s, dy, w, dx, st, {}, residual, bn_grad)
                                          : cuda::conv2d_backward_data(s, dy, w, dx, st, {}, residual, bn_grad));
    return;
  }
  if (layout == Layout::nhwc)
    cpu::conv2d_backward_data_nhwc(s, dy.data<float>(), w.data<float>(), dx.data<float>());
  else
    cpu::conv2d_backward_data<float>(s, dy.data<float>(), w.data<float>(), dx.data<float>());
  if (residual) cpu::add_forward<float>(dx.numel(), dx.data<float>(), residual->data<float>(), dx.data<float>());
}

void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* dbias, int64_t stride,
                            int64_t pad, const Stream& st, Layout layout) {
  const Device dev = detail::float_op_device("conv2d_backward_filter", {&x, &dy, &dw}, st);
  const Conv2dShape s = conv2d_shape("conv2d_backward_filter", x, dw, stride, pad, layout);
  check_shape("conv2d_backward_filter", "dy", dy, conv2d_output_shape(s, layout));
  if (dbias) {
    detail::float_op_device("conv2d_backward_filter", {&x, dbias}, st);
    check_shape("conv2d_backward_filter", "dbias", *dbias, Shape{s.c_out});
  }
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(vendor()                 ? cuda::conv2d_backward_filter_vendor(s, x, dy, dw, dbias, st, layout)
                 : layout == Layout::nhwc ? cuda::conv2d_backward_filter_nhwc(s, x, dy, dw, dbias, st)
                                          : cuda::conv2d_backward_filter(s, x, dy, dw, dbias, st));
    return;
  }
  if (layout == Layout::nhwc)
    cpu::conv2d_backward_filter_nhwc(s, x.data<float>(), dy.data<float>(), dw.data<float>(),
                                     dbias ? dbias->data<float>() : nullptr, true);
  else
    cpu::conv2d_backward_filter<float>(s, x.data<float>(), dy.data<float>(), dw.data<float>(),
                                       dbias ? dbias->data<float>() : nullptr, true);
}

}  // namespace hpdt::kernels
