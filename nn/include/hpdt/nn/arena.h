// ParameterArena: every parameter of a model in one flat f32 buffer, every gradient in another of the
// same layout, and, for mixed precision, an f16/bf16 model copy of both.
//
// Layout: parameters are registered in forward-execution order and laid out in REVERSE, so the first
// gradients backward finishes (the last layer's) sit at offset 0 and the ready region grows as one
// contiguous slice [0, k). A gradient bucket of the all-reduce is then a contiguous slice, and comm can
// start reducing it while backward still runs: each layer calls grads_ready() when its gradients are
// complete, which calls the callback set with set_grad_ready_callback(offset, count).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpdt/core/philox.h"
#include "hpdt/core/tensor.h"

namespace hpdt::nn {

struct ParamInfo {
  std::string name;  // PyTorch-style dotted name, e.g. "layer1.0.conv1.weight"
  Shape shape;
  int64_t offset = 0;  // element offset in the flat buffers (valid after finalize)
};

class ParameterArena {
 public:
  // Fills n values of a new parameter; called in registration order with one shared generator.
  using Init = std::function<void(float* p, int64_t n, Rng& rng)>;
  using GradReadyCallback = std::function<void(size_t offset, size_t count)>;

  // Registration (before finalize): returns the parameter's id (ids follow execution order).
  int add(std::string name, const Shape& shape, Init init);
  // A non-trainable state tensor (BN running statistics) that belongs in checkpoints.
  void add_buffer(std::string name, Tensor t);

  // Lays the parameters out in reverse order, allocates the buffers and runs the initialisers with
  // Rng(seed). model_dtype f16/bf16 also allocates the reduced-precision model copy.
  void finalize(uint64_t seed, DType model_dtype = DType::f32);
  bool finalized() const { return finalized_; }

  // The weights layers compute with: the f32 master, or (mixed precision) the master rounded through
  // the model dtype. f32 either way; the kernels compute in f32.
  Tensor param(int id) const;
  Tensor grad(int id) const;  // f32 gradient, written by backward
  Tensor master_params() const { return master_; }
  Tensor grads() const { return grads_; }
  // Mixed precision only (undefined in f32): the model copy of parameters and of gradients.
  Tensor model_params() const { return model_params_; }
  Tensor model_grads() const { return model_grads_; }
  // The flat gradient buffer an all-reduce works on: model_grads() in mixed precision, grads() in f32.
  Tensor comm_grads() const { return model_dtype_ == DType::f32 ? grads_ : model_grads_; }
  DType model_dtype() const { return model_dtype_; }

  int64_t numel() const { return total_; }
  int count() const { return int(infos_.size()); }
  const ParamInfo& info(int id) const;
  const std::vector<ParamInfo>& infos() const { return infos_; }
  const std::vector<std::pair<std::string, Tensor>>& buffers() const { return buffers_; }

  void zero_grad();
  void set_grad_ready_callback(GradReadyCallback cb) { on_ready_ = std::move(cb); }
  // Called by a layer when the gradients of its parameters [first_id, first_id + n) are complete.
  // In mixed precision this also rounds that slice into model_grads() (where f16 overflow shows as
  // inf) before announcing it.
  void grads_ready(int first_id, int n);
  // After the optimizer updated the master: refresh the model copy and the compute weights.
  void sync_model_copy();

 private:
  struct Pending {
    Init init;
  };
  std::vector<ParamInfo> infos_;
  std::vector<Pending> pending_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  Tensor master_, grads_, compute_, model_params_, model_grads_;
  DType model_dtype_ = DType::f32;
  int64_t total_ = 0;
  bool finalized_ = false;
  GradReadyCallback on_ready_;
};

// PyTorch's default initialisers, on our generator.
namespace init {
// U(-bound, bound)
ParameterArena::Init uniform(float bound);
// N(0, std)
ParameterArena::Init normal(float std);
// N(0, std) truncated to [-2 std, 2 std] by redrawing
ParameterArena::Init trunc_normal(float std);
ParameterArena::Init constant(float value);
// xavier_uniform for a [fan_out, fan_in] weight
ParameterArena::Init xavier_uniform(int64_t fan_in, int64_t fan_out);
}  // namespace init

}  // namespace hpdt::nn
