// Models: ResNet-20/56 (CIFAR stem), ResNet-18/34/50 (ImageNet stem; bottleneck for 50), ViT-Ti/S/B.
// A Model owns its ParameterArena and its layers; make_model(name, config, stream) builds one by name.
//
// Device: a model lives on the device of the stream it is built with and runs all its work on that
// stream (the CPU stream by default): parameters, gradients, buffers and activations are allocated
// there. The stream is fixed for the model's life (cached activations stay tied to it). Initial
// weights depend on the seed only, never on the device. The configuration (and so a checkpoint's
// model description) does not name the device: a checkpoint written on one device resumes on another.
//
// Precision: on the CPU the model computes in f32 (mixed precision rounds the weights and gradients
// through the model dtype). On CUDA it computes in config.dtype: f32 images are cast to it in
// forward(), logits come out in it and backward() takes dlogits in it (or f32, cast).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpdt/nn/arena.h"
#include "hpdt/nn/layer.h"

namespace hpdt::nn {

struct ModelConfig {
  int64_t in_channels = 3;
  int64_t image_size = 32;   // square images
  int64_t classes = 10;
  int64_t patch = 4;         // ViT only
  float dropout = 0.0f;      // ViT only (embedding, attention output, MLP); off by default
  DType dtype = DType::f32;  // model copy: f32, or f16/bf16 for mixed precision (f32 master weights)
  uint64_t seed = 0;         // initialisation and dropout
  // ViT overrides of the named size (0: take it from the name), for tiny test configurations.
  int64_t vit_dim = 0, vit_depth = 0, vit_heads = 0;
  // Activation layout of the ResNets (kernels/layout.h), on either device. Unset: NHWC on the CPU (direct
  // convolution, 2-3x the NCHW im2col path), NCHW on CUDA (the library's fallback, which its CUDA tests name; hpdt-train
  // and hpdt-bench-train-step ask for NHWC, ahead on the H200 of 2026-11-29: docs/nn.md). ViT is NCHW (its activations
  // are tokens after the patch convolution). Not part of str(): parameters, checkpoints and results up to
  // float rounding do not depend on it, so a run may resume in either layout.
  std::optional<kernels::Layout> layout;
  // ViT only: the MLP's GELU in fc1's forward GEMM epilogue and in fc2's dx GEMM (true), or a GELU layer of its own
  // between them ("mlp.1", as torchvision's MLPBlock): a plain GEMM, then a separate elementwise pass each way.
  // The same values up to the rounding of the GELU's input to the compute dtype (bit for bit in f32); the choice
  // is for speed (docs/nn.md), so like the layout it is not part of str().
  bool fuse_gelu = true;
  // "in_channels=1 image_size=28 classes=10 patch=4 dropout=0 dtype=f32 seed=0" (+ vit_* when set)
  std::string str() const;
};

class Model {
 public:
  Model(std::string name, const ModelConfig& config);
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // images [b, in_channels, image_size, image_size] f32 (or compute_dtype()) on device() -> logits
  // [b, classes] in compute_dtype() (owned by the model until the next forward). With input_layout() nhwc the images
  // are [b, image_size, image_size, in_channels].
  Tensor forward(const Tensor& images);
  // The layout of the images forward takes: NCHW by default. A ResNet takes NHWC too (its first layer, ImageInput,
  // transposes whichever differs from layout(); none where they agree: hpdt-train decodes its batches into the
  // model's layout). A ViT takes NCHW only; throws naming the model otherwise.
  void set_input_layout(kernels::Layout layout);
  kernels::Layout input_layout() const;  // (the first layer's, ImageInput; NCHW without one)
  // dlogits [b, classes] on device(), in compute_dtype() or f32; zeroes the gradients first unless
  // accumulate.
  void backward(const Tensor& dlogits, bool accumulate = false);
  void set_training(bool training) { body_.set_training(training); }
  bool training() const { return body_.training(); }

  Device device() const { return arena_.device(); }
  const Stream& stream() const { return arena_.stream(); }
  // f32 on the CPU; config().dtype on CUDA.
  DType compute_dtype() const { return arena_.compute_dtype(); }
  // The activation layout the model runs in (config().layout resolved for the device).
  kernels::Layout layout() const { return body_.layout(); }

  ParameterArena& arena() { return arena_; }
  const ParameterArena& arena() const { return arena_; }
  int64_t num_parameters() const { return arena_.parameter_count(); }
  const std::string& name() const { return name_; }
  const ModelConfig& config() const { return config_; }
  // "<name> <config.str()>": what a checkpoint records to rebuild the model.
  std::string describe() const { return name_ + " " + config_.str(); }
  // Every layer of the model, depth first, each before its children (the body, a Sequential, first).
  void for_each_layer(const std::function<void(Layer&)>& f);
  // SyncBN: every BatchNorm all-reduces its batch statistics through `sync` (null: local).
  void set_batchnorm_sync(const kernels::AllReduceSum& sync);
  // Data parallel: the index of this rank's first sample in the global batch, so that every sample
  // gets the dropout mask it gets on one rank (Dropout::set_first_sample).
  void set_first_sample(int64_t first);
  // Every Dropout layer with p > 0 by name: its generator position (training forwards so far), for
  // checkpoints; restore_dropout_state sets them back (throws naming a layer it does not have).
  std::map<std::string, uint64_t> dropout_state();
  void restore_dropout_state(const std::map<std::string, uint64_t>& calls);

 protected:
  friend std::unique_ptr<Model> build_model(const std::string&, const ModelConfig&, bool, const Stream&);
  std::string name_;
  ModelConfig config_;
  ParameterArena arena_;
  Sequential body_{"model"};
  ImageInput* image_input() const;  // the first layer where it is one (the ResNets), else null
  Tensor input_, dlogits_;  // CUDA mixed precision: the images and dlogits cast to the compute dtype
};

// Names: resnet20 resnet56 resnet18 resnet34 resnet50 vit_ti vit_s vit_b. Throws naming the name and
// the accepted ones, or the configuration that does not fit (e.g. image size not divisible by patch,
// layout nhwc for a ViT, fuse_gelu false for a ResNet).
// The model lives on stream.device() and queues its work on `stream` (e.g. Stream::create_cuda(0)).
std::unique_ptr<Model> make_model(const std::string& name, const ModelConfig& config, const Stream& stream = Stream());
std::vector<std::string> model_names();
// The parameter count of a model, without allocating or initialising its weights.
int64_t count_parameters(const std::string& name, const ModelConfig& config);

}  // namespace hpdt::nn
