// ParameterArena: every parameter of a model in one flat f32 buffer, every gradient in another of the
// same layout, and, for mixed precision, an f16/bf16 model copy of both.
//
// Layout: parameters are registered in forward-execution order and laid out in REVERSE, so the first
// gradients backward finishes (the last layer's) sit at offset 0 and the ready region grows as one
// contiguous slice [0, k). A gradient bucket of the all-reduce is then a contiguous slice, and comm can
// start reducing it while backward still runs: each layer calls grads_ready() when its gradients are
// complete, which calls the callback set with set_grad_ready_callback(offset, count).
// Every parameter starts on a multiple of kAlignElements (16 bytes of a 16-bit copy, 32 of f32): the GPU's
// tensor-core GEMMs and convolutions read weights with 16-byte copies (cp.async, TMA) and take slower
// paths for a misaligned one, and without the gaps a 10-class head (10 biases) would misalign every
// weight laid out after it. The gaps are zero in every flat buffer and stay zero (zero gradient, zero
// update); checkpoints store the packed layout (packed()/unpack()), which has no gaps.
//
// Device: finalize() takes the stream the arena's own work runs on; every buffer (master weights,
// gradients, the model copy, the registered buffers such as BN running statistics) lives on that
// stream's device. Initialisers always run on the CPU from one Rng and the result is copied, so a CPU
// and a GPU arena finalized with the same seed start bit-identical.
//
// Precision (what layers compute with, compute_dtype()):
//   CPU:  f32 always. Mixed precision rounds the master through the model dtype into an f32 copy
//         (param()), backward writes f32 gradients (grads()), grads_ready() rounds them into
//         model_grads() (where f16 overflow shows as inf).
//   CUDA: the model dtype. param() is a slice of model_params() (f32: of the master), backward
//         accumulates into compute_grad() = model_grads() (f32: grads()), grads_ready() widens the
//         finished slice into grads() so that grads() holds the f32 gradients on both devices.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpdt/core/philox.h"
#include "hpdt/core/stream.h"
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
  // A non-trainable state tensor (BN running statistics) that belongs in checkpoints, given by its
  // initial value (a CPU tensor). Returns its id for buffer(); finalize() moves it to the arena's device.
  int add_buffer(std::string name, Tensor init);

  // Lays the parameters out in reverse order, allocates the buffers on stream.device() and runs the
  // initialisers with Rng(seed) (on the CPU, then copied). model_dtype f16/bf16 also allocates the
  // reduced-precision model copy. Returns after the copies are complete.
  void finalize(uint64_t seed, DType model_dtype = DType::f32, const Stream& stream = Stream());
  bool finalized() const { return finalized_; }

  // Where the buffers live and the stream the arena's own work (zero_grad, casts, optimizer steps) is
  // queued on: the stream given to finalize() (the CPU stream before).
  Device device() const { return stream_.device(); }
  const Stream& stream() const { return stream_; }
  // The dtype layers compute in: f32 on the CPU, the model dtype on CUDA.
  DType compute_dtype() const { return device().is_cuda() ? model_dtype_ : DType::f32; }

  // The weights layers compute with, in compute_dtype(): the f32 master, the master rounded through
  // the model dtype (CPU mixed precision, stored as f32), or the model copy itself (CUDA).
  Tensor param(int id) const;
  Tensor grad(int id) const;          // f32 gradient (written by backward, or widened by grads_ready)
  Tensor compute_grad(int id) const;  // the gradient backward accumulates into, in compute_dtype()
  Tensor master_params() const { return master_; }
  Tensor grads() const { return grads_; }
  // Mixed precision only (undefined in f32): the model copy of parameters and of gradients.
  Tensor model_params() const { return model_params_; }
  Tensor model_grads() const { return model_grads_; }
  // The flat gradient buffer an all-reduce works on: model_grads() in mixed precision, grads() in f32.
  Tensor comm_grads() const { return model_dtype_ == DType::f32 ? grads_ : model_grads_; }
  DType model_dtype() const { return model_dtype_; }

  static constexpr int64_t kAlignElements = 8;
  // Elements of the flat buffers, alignment gaps included; parameter_count() is the parameters alone.
  int64_t numel() const { return total_; }
  int64_t parameter_count() const;
  // A CPU f32 tensor of numel() elements without the gaps (the parameters back to back, same order;
  // parameter_count() elements): the layout checkpoints store flat optimizer state in. unpack() is the
  // inverse, into a CPU f32 tensor of numel() elements whose gaps it zeroes.
  Tensor packed(const Tensor& flat) const;
  void unpack(const Tensor& packed, Tensor& flat) const;
  int count() const { return int(infos_.size()); }
  const ParamInfo& info(int id) const;
  const std::vector<ParamInfo>& infos() const { return infos_; }
  // (name, tensor) of every buffer, on the arena's device after finalize().
  const std::vector<std::pair<std::string, Tensor>>& buffers() const { return buffers_; }
  Tensor buffer(int id) const;

  // Zeroes the gradients backward accumulates into (and the f32 ones, where kept).
  void zero_grad();
  // CUDA mixed precision: whether grads() holds the f32 gradients (grads_ready() widens each finished slice of
  // model_grads() into it, zero_grad() zeroes it). On by default. A caller whose optimizer reads comm_grads() alone
  // (the fused step: hpdt-train without lossy compression, the train-step benchmark) turns it off: a cast launch a
  // layer and a fill of the f32 gradients a step fewer, and grads() is then not written at all (LossScaler::unscale
  // with cast_model_grads still fills it from model_grads()). Elsewhere grads() is what backward writes or rounds from
  // (the CPU, f32 models), and this changes nothing.
  void set_f32_grads(bool keep) { keep_f32_grads_ = keep; }
  bool f32_grads() const { return keep_f32_grads_ || device().is_cpu() || model_dtype_ == DType::f32; }
  void set_grad_ready_callback(GradReadyCallback cb) { on_ready_ = std::move(cb); }
  // Called by a layer when the gradients of its parameters [first_id, first_id + n) are complete.
  // In mixed precision this also converts that slice between grads() and model_grads() (CPU: rounds
  // into model_grads(), where f16 overflow shows as inf; CUDA: widens into grads()) before announcing
  // it. On CUDA the callback runs when the work is queued on stream(), not when it is done: a consumer
  // on another stream or on the host must wait for stream() (record an Event in the callback).
  void grads_ready(int first_id, int n);
  // After the optimizer updated the master: refresh the model copy and the compute weights.
  void sync_model_copy();

 private:
  struct Pending {
    Init init;
  };
  AllocOptions alloc() const;
  std::vector<ParamInfo> infos_;
  std::vector<Pending> pending_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  Tensor master_, grads_, compute_, model_params_, model_grads_;
  DType model_dtype_ = DType::f32;
  Stream stream_;
  int64_t total_ = 0;
  bool finalized_ = false;
  bool keep_f32_grads_ = true;
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
