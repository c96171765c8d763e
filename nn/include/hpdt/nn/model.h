// Models: ResNet-20/56 (CIFAR stem), ResNet-18/34/50 (ImageNet stem; bottleneck for 50), ViT-Ti/S/B.
// A Model owns its ParameterArena and its layers; make_model(name, config) builds one by name.
#pragma once

#include <memory>
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
  // "in_channels=1 image_size=28 classes=10 patch=4 dropout=0 dtype=f32 seed=0" (+ vit_* when set)
  std::string str() const;
};

class Model {
 public:
  Model(std::string name, const ModelConfig& config);
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // images [b, in_channels, image_size, image_size] f32 -> logits [b, classes] (owned by the model
  // until the next forward).
  Tensor forward(const Tensor& images);
  // dlogits [b, classes]; zeroes the gradients first unless accumulate.
  void backward(const Tensor& dlogits, bool accumulate = false);
  void set_training(bool training) { body_.set_training(training); }
  bool training() const { return body_.training(); }

  ParameterArena& arena() { return arena_; }
  const ParameterArena& arena() const { return arena_; }
  int64_t num_parameters() const { return arena_.numel(); }
  const std::string& name() const { return name_; }
  const ModelConfig& config() const { return config_; }
  // "<name> <config.str()>": what a checkpoint records to rebuild the model.
  std::string describe() const { return name_ + " " + config_.str(); }
  // SyncBN: every BatchNorm all-reduces its batch statistics through `sync` (null: local).
  void set_batchnorm_sync(const kernels::AllReduceSum& sync);

 protected:
  friend std::unique_ptr<Model> build_model(const std::string&, const ModelConfig&, bool);
  std::string name_;
  ModelConfig config_;
  ParameterArena arena_;
  Sequential body_{"model"};
};

// Names: resnet20 resnet56 resnet18 resnet34 resnet50 vit_ti vit_s vit_b. Throws naming the name and
// the accepted ones, or the configuration that does not fit (e.g. image size not divisible by patch).
std::unique_ptr<Model> make_model(const std::string& name, const ModelConfig& config);
std::vector<std::string> model_names();
// The parameter count of a model, without allocating or initialising its weights.
int64_t count_parameters(const std::string& name, const ModelConfig& config);

}  // namespace hpdt::nn
