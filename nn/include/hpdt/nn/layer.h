// Layers with explicit forward and backward (no autograd). A layer registers its parameters with the
// model's ParameterArena when constructed (in forward-execution order), keeps what its backward needs
// from forward, and, at the end of backward, tells the arena its gradients are complete.
//
// Conventions: activations are [b, t, d] for tokens and, for convolutional layers, NCHW ([n, c, h, w])
// or NHWC ([n, h, w, c], the fast CPU path) as the layer's layout() says (set model-wide by make_model;
// kernels/layout.h).
// forward returns the layer's output (owned by the layer until the next forward); backward takes
// dL/d(output) and returns dL/d(input), accumulating parameter gradients (+=) into the arena.
//
// Device and precision: a layer runs on its stream (set_stream, before the first forward; the CPU
// stream by default) and allocates its outputs and gradients on that stream's device, through the
// caching allocator on that stream. Its input must live there (else an error naming the layer). On the
// CPU activations are f32; on CUDA they are in the arena's compute dtype (f32, f16 or bf16: the model
// dtype), weights come from the model copy, statistics (BN, LayerNorm, attention's log-sum-exp) are f32.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/activation.h"
#include "hpdt/kernels/attention.h"
#include "hpdt/kernels/layout.h"
#include "hpdt/kernels/norm.h"
#include "hpdt/nn/arena.h"

namespace hpdt::nn {

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  virtual Tensor backward(const Tensor& dy) = 0;
  // Sets train/eval mode here and in every sub-layer.
  virtual void set_training(bool training) {
    training_ = training;
    for_each_child([training](Layer& c) { c.set_training(training); });
  }
  // Visits the direct sub-layers (containers and blocks override this).
  virtual void for_each_child(const std::function<void(Layer&)>& f) { (void)f; }
  bool training() const { return training_; }
  const std::string& name() const { return name_; }
  // Sets the stream here and in every sub-layer. Call once, before the first forward: cached outputs
  // stay tied to the stream they were allocated on.
  virtual void set_stream(const Stream& stream) {
    stream_ = stream;
    for_each_child([&stream](Layer& c) { c.set_stream(stream); });
  }
  const Stream& stream() const { return stream_; }
  Device device() const { return stream_.device(); }
  // Sets the activation layout here and in every sub-layer (before the first forward). Layers that do
  // not look at image layout (ReLU, add, Linear, ...) ignore it.
  virtual void set_layout(kernels::Layout layout) {
    layout_ = layout;
    for_each_child([layout](Layer& c) { c.set_layout(layout); });
  }
  kernels::Layout layout() const { return layout_; }

 protected:
  // Throws hpdt::Error naming this layer: "<name>: <what> (got <shape> <dtype>)".
  [[noreturn]] void fail(const std::string& what, const Tensor& got) const;
  // Throws naming this layer unless x lives on the layer's device.
  void check_device(const Tensor& x) const;
  // Layers without weights take any dtype the kernels compute in on the layer's device: f32 on the
  // CPU, f32/f16/bf16 on CUDA; float_names() is the phrase for messages ("f32" on the CPU). Layers
  // with weights take exactly the arena's compute_dtype().
  bool float_ok(const Tensor& x) const;
  std::string float_names() const;
  // A cached output tensor of `shape` and `dtype` on the layer's device (reallocated only when one of
  // them changes).
  Tensor& ensure(Tensor& t, const Shape& shape, DType dtype);

  // "[n, <c>, h, w]" or "[n, h, w, <c>]" in this layer's layout, for messages.
  std::string image_shape(const std::string& c) const;
  // The channel count of a 4-D activation in this layer's layout.
  int64_t channels(const Tensor& x) const { return layout_ == kernels::Layout::nhwc ? x.size(3) : x.size(1); }

  std::string name_;
  bool training_ = true;
  Stream stream_;
  kernels::Layout layout_ = kernels::Layout::nchw;
};

// A cached tensor of `shape` and `dtype` on `stream`'s device, from the caching allocator on that stream
// (reallocated only when shape, dtype or device change). What Layer::ensure uses.
Tensor& ensure_on(Tensor& t, const Shape& shape, DType dtype, const Stream& stream);

// ---- layers ------------------------------------------------------------------------------------------

class BatchNorm;

class Conv2d : public Layer {
 public:
  Conv2d(ParameterArena& arena, std::string name, int64_t c_in, int64_t c_out, int64_t kernel, int64_t stride,
         int64_t pad, bool bias, ParameterArena::Init weight_init = nullptr);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // false: backward does not compute dL/dx (the first layer of a model).
  void set_needs_input_grad(bool v) { needs_dx_ = v; }
  // The next backward returns dL/dx + r (r of x's shape and dtype), added in the backward-data epilogue: a
  // ResNet block's input gradient is its first conv's plus the shortcut's. Applies to one backward.
  void add_to_next_input_grad(const Tensor& r) { dx_residual_ = r; }
  // Training forwards also compute batch norm's statistics of the output where the kernel can
  // (kernels::Conv2dEpilogue::stats), for the BatchNorm that reads it (BatchNorm::take_stats_from).
  void compute_output_stats(bool v) { output_stats_wanted_ = v; }
  // The last forward's output statistics (undefined partial: none).
  const kernels::ChannelStats& output_stats() const { return output_stats_; }
  // This layer's input gradient is the output gradient of `bn` (the BatchNorm whose output is this layer's input):
  // the backward-data epilogue also applies bn's fused ReLU mask and computes bn's backward sums where it can
  // (kernels::ChannelGradSums), and bn's backward takes them instead of its reduce pass. `bn` outlives this layer.
  void feed_grad_sums_to(BatchNorm& bn);
  // The last backward's sums for that BatchNorm (undefined partial: none).
  const kernels::ChannelGradSums& input_grad_sums() const { return input_grad_sums_; }

 private:
  ParameterArena* arena_;
  int64_t c_in_, c_out_, k_, stride_, pad_;
  int w_id_, b_id_ = -1;
  bool needs_dx_ = true, output_stats_wanted_ = false;
  kernels::ChannelStats output_stats_;
  BatchNorm* grad_sums_for_ = nullptr;
  kernels::ChannelGradSums input_grad_sums_;
  Tensor x_, y_, dx_, dx_residual_;
};

// BatchNorm2d (also [n, c] inputs), PyTorch defaults eps 1e-5, momentum 0.1.
// With `then_relu` the layer is BatchNorm2d followed by ReLU, computed in one pass over the activation
// (kernels::BatchNormFusion); forward(x, residual) is relu(bn(x) + residual), a ResNet block's output, in one
// pass instead of three (apply, add, ReLU), and forward(x, r, residual_bn) is relu(bn(x) + residual_bn(r)), a block
// with a projection shortcut, in one pass too: residual_bn's output is never written (forward_statistics).
// The parameters and buffers are BatchNorm2d's either way.
class BatchNorm : public Layer {
 public:
  BatchNorm(ParameterArena& arena, std::string name, int64_t channels, float eps = 1e-5f, float momentum = 0.1f,
            bool then_relu = false);
  Tensor forward(const Tensor& x) override;
  // relu(bn(x) + residual) (without then_relu: bn(x) + residual); residual has x's shape and dtype.
  Tensor forward(const Tensor& x, const Tensor& residual);
  // relu(bn(x) + residual_bn(r)): residual_bn (same mode, channels, no then_relu) ran forward_statistics(r) last.
  Tensor forward(const Tensor& x, const Tensor& r, const BatchNorm& residual_bn);
  // forward(x) without its output, for a BatchNorm that applies this one on the fly (forward(x, r, *this)):
  // training updates the running statistics and keeps the batch's for backward, which then works as after
  // forward(x); eval only checks x. Not with then_relu (its backward needs the output's signs).
  void forward_statistics(const Tensor& x);
  Tensor backward(const Tensor& dy) override;
  // After backward of forward(x, residual): dL/d(residual) (dy through the ReLU's mask).
  Tensor residual_grad() const;
  // For a block whose residual r goes through `residual_bn` (forward(x, r, residual_bn)) and whose caller then runs
  // residual_bn.backward(residual_grad()): this layer's backward pass over dy also reads r (residual_bn's input) and
  // computes residual_bn's backward sums, which residual_bn's backward then uses instead of its reduce pass (CUDA,
  // kernels::batchnorm_backward_train's residual_sums; residual_bn computes its own where none were).
  void feed_residual_grad_sums_to(BatchNorm& residual_bn);
  // Deferred: backward leaves the arena's grads_ready() call to announce_grads(), for a caller that must
  // announce other layers' gradients first (the ready slices grow in reverse registration order).
  void set_defer_grads_ready(bool defer) { defer_ready_ = defer; }
  void announce_grads() { arena_->grads_ready(g_id_, 2); }
  // SyncBN seam: all-reduce-sum of the batch statistics across ranks (null: local statistics).
  void set_sync(kernels::AllReduceSum sync) { sync_ = std::move(sync); }
  // f32 [c] on the arena's device (arena buffers, so they are in checkpoints).
  Tensor running_mean() const { return arena_->buffer(mean_id_); }
  Tensor running_var() const { return arena_->buffer(var_id_); }
  // The convolution whose output this layer normalises computes its statistics in its epilogue; the training forward
  // uses them where they describe its input (and computes its own otherwise). `producer` outlives this layer.
  void take_stats_from(Conv2d& producer) {
    producer.compute_output_stats(true);
    stats_from_ = &producer;
  }

 private:
  Tensor run_forward(const Tensor& x, const Tensor* residual, const BatchNorm* residual_bn = nullptr);
  // Throws unless x is this layer's input: `dt` [n, c_, h, w] in the layout, or [n, c_].
  void check_input(const Tensor& x, DType dt) const;
  // Before a training forward of x: more than one value a channel (or SyncBN), the saved statistics allocated.
  void prepare_training(const Tensor& x);

  ParameterArena* arena_;
  int64_t c_;
  float eps_, momentum_;
  bool then_relu_, defer_ready_ = false;
  bool forward_added_residual_ = false;  // the last forward's: without one, backward takes the ReLU's mask from x
  int g_id_, b_id_, mean_id_, var_id_;
  kernels::BatchNormSaved saved_;
  kernels::AllReduceSum sync_;
  const Conv2d* stats_from_ = nullptr;
  // Conv2d::feed_grad_sums_to, MaxPool2d::feed_grad_sums_to, feed_residual_grad_sums_to: the sums of the layer
  // whose input gradient (or residual gradient) is dy
  const kernels::ChannelGradSums* grad_sums_from_ = nullptr;
  // feed_residual_grad_sums_to: the residual's batch norm, and the sums this layer's backward computes for it
  BatchNorm* residual_grad_sums_for_ = nullptr;
  kernels::ChannelGradSums residual_grad_sums_;
  Tensor masked_grad_;  // with then_relu: dz_, or dy where the layer that wrote it wrote dz; none (mask from x)
  friend class Conv2d;
  friend class MaxPool2d;
  // For the layer that writes dy, the gradient of `bn`'s output (Conv2d, MaxPool2d): `request` with bn's inputs
  // (its input, fused output, saved mean), or, where there is no bn or it cannot take sums for dy (no training
  // forward of dy's shape), null with `request` cleared.
  static kernels::ChannelGradSums* ask_grad_sums(const BatchNorm* bn, kernels::ChannelGradSums& request,
                                                 const Tensor& dy);
  Tensor x_, y_, dx_, dz_, dy_;
};

class ReLU : public Layer {
 public:
  explicit ReLU(std::string name) : Layer(std::move(name)) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Tensor y_, dx_;
};

// The model's first layer: takes images in the input layout (NCHW unless set_input_layout) and hands them on in
// the model's layout: nothing where the two agree, else a transpose (a no-copy view for one channel). Backward
// transposes back.
class ImageInput : public Layer {
 public:
  ImageInput() : Layer("image_input") {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void set_input_layout(kernels::Layout layout) { input_layout_ = layout; }
  kernels::Layout input_layout() const { return input_layout_; }

 private:
  kernels::Layout input_layout_ = kernels::Layout::nchw;
  Tensor y_, dx_;
};

class MaxPool2d : public Layer {
 public:
  MaxPool2d(std::string name, int64_t k, int64_t stride, int64_t pad)
      : Layer(std::move(name)), k_(k), stride_(stride), pad_(pad) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // As Conv2d::feed_grad_sums_to: this layer's input is `bn`'s output (ResNet's stem), and its backward applies bn's
  // fused ReLU mask and computes bn's backward sums where it can (kernels::maxpool2d_backward's bn_grad).
  void feed_grad_sums_to(BatchNorm& bn);
  // The last backward's sums for that BatchNorm (undefined partial: none).
  const kernels::ChannelGradSums& input_grad_sums() const { return input_grad_sums_; }

 private:
  int64_t k_, stride_, pad_;
  Shape in_shape_;
  BatchNorm* grad_sums_for_ = nullptr;
  kernels::ChannelGradSums input_grad_sums_;
  Tensor y_, argmax_, dx_;
};

class GlobalAvgPool : public Layer {
 public:
  explicit GlobalAvgPool(std::string name) : Layer(std::move(name)) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Shape in_shape_;
  Tensor y_, dx_;
};

// y = x W^T + b over the last dimension (any leading dimensions).
class Linear : public Layer {
 public:
  Linear(ParameterArena& arena, std::string name, int64_t in, int64_t out, bool bias = true,
         ParameterArena::Init weight_init = nullptr, ParameterArena::Init bias_init = nullptr);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

  // Fuses the GELU that follows this layer (kernels::linear_gelu_forward): forward returns gelu(x w^T + b) and
  // keeps x w^T + b; backward takes the gradient of the GELU's output, unless a later layer declared
  // input_is_gelu_of(*this) and so hands it the gradient of the GELU's input.
  void then_gelu(kernels::GeluForm form);
  // This layer's input is `prev`'s fused GELU output, directly or through layers that only scale elementwise
  // (dropout): its backward returns the gradient of the GELU's input ((dy w) * gelu'(h) in one pass,
  // kernels::linear_backward_through_gelu), and prev's backward takes that as it is.
  void input_is_gelu_of(Linear& prev);
  // The next forward returns x w^T + b + r (r of the output's shape and dtype), a skip connection added in the
  // GEMM's epilogue (kernels::linear_forward's residual) instead of by a separate add. Applies to one forward.
  void add_to_next_output(const Tensor& r) { y_residual_ = r; }

 private:
  ParameterArena* arena_;
  int64_t in_, out_;
  int w_id_, b_id_ = -1;
  Tensor x_, y_, dx_, y_residual_;
  bool gelu_ = false;                  // then_gelu
  bool gelu_grad_by_next_ = false;     // a later layer applies our GELU's gradient
  kernels::GeluForm gelu_form_ = kernels::GeluForm::erf;
  Tensor pre_, dpre_;                  // the GELU's input; its gradient when we apply gelu' ourselves
  const Linear* gelu_source_ = nullptr;  // input_is_gelu_of
};

class LayerNorm : public Layer {
 public:
  LayerNorm(ParameterArena& arena, std::string name, int64_t d, float eps);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // The next backward returns dL/dx + r (r of x's shape and dtype), added in the dx store: a pre-norm block's
  // input gradient is the norm's plus the skip connection's. Applies to one backward.
  void add_to_next_input_grad(const Tensor& r) { dx_residual_ = r; }

 private:
  ParameterArena* arena_;
  int64_t d_;
  float eps_;
  int g_id_, b_id_;
  kernels::LayerNormSaved saved_;
  Tensor x_, y_, dx_, dx_residual_;
};

class GELU : public Layer {
 public:
  GELU(std::string name, kernels::GeluForm form) : Layer(std::move(name)), form_(form) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  kernels::GeluForm form_;
  Tensor x_, y_, dx_;
};

// Inverted dropout; off (identity) in eval mode or with p = 0. The mask comes from Philox keyed by
// (seed, stream = layer id, call counter), so backward regenerates it instead of storing it.
// Dropout with a fresh mask per training forward: element j of sample s of call k is dropped by a
// function of (seed, stream_id, k, (first_sample + s) * per-sample elements + j). So the mask of a
// sample depends on its position in the global batch, not on how the batch is split over ranks
// (set_first_sample), and a run resumed with calls() restored draws the masks it would have drawn.
class Dropout : public Layer {
 public:
  Dropout(std::string name, float p, uint64_t seed, uint64_t stream_id)
      : Layer(std::move(name)), p_(p), seed_(seed), stream_id_(stream_id) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // Whether the next forward is the identity (eval mode, or p = 0).
  bool identity_now() const { return !(training_ && p_ > 0.0f); }
  // The index of this rank's first sample in the global batch (0 on one rank).
  void set_first_sample(int64_t s) { first_sample_ = s; }
  // Training forwards so far: the generator's position.
  uint64_t calls() const { return calls_; }
  void set_calls(uint64_t calls) { calls_ = calls; }
  float probability() const { return p_; }
  uint64_t seed() const { return seed_; }
  uint64_t stream_id() const { return stream_id_; }

 private:
  float p_;
  uint64_t seed_, stream_id_, calls_ = 0, mask_seed_ = 0, first_ = 0;
  int64_t first_sample_ = 0;
  bool active_ = false;
  Tensor y_, dx_;
};

// Multi-head self-attention on [b, t, d]: QKV projection (one [3d, d] linear, PyTorch in_proj
// layout), scaled dot-product attention with a max-subtracted softmax, output projection.
class MultiHeadSelfAttention : public Layer {
 public:
  MultiHeadSelfAttention(ParameterArena& arena, std::string name, int64_t d, int64_t heads);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // The next forward returns attention(x) + r, r added in the output projection's epilogue
  // (Linear::add_to_next_output).
  void add_to_next_output(const Tensor& r) { proj_.add_to_next_output(r); }
  void for_each_child(const std::function<void(Layer&)>& f) override {
    f(qkv_);
    f(proj_);
  }

 private:
  int64_t d_, heads_;
  Linear qkv_, proj_;
  Tensor qkv_out_, attn_, dattn_;
  kernels::AttentionSaved saved_;
};

// A chain of layers run in order (backward in reverse).
class Sequential : public Layer {
 public:
  explicit Sequential(std::string name) : Layer(std::move(name)) {}
  template <class L, class... Args>
  L& add(Args&&... args) {
    auto p = std::make_unique<L>(std::forward<Args>(args)...);
    L& ref = *p;
    layers_.push_back(std::move(p));
    return ref;
  }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void for_each_child(const std::function<void(Layer&)>& f) override {
    for (auto& l : layers_) f(*l);
  }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace hpdt::nn
