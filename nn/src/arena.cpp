#include "hpdt/nn/arena.h"

#include <cmath>
#include <cstring>

#include "hpdt/kernels/elementwise.h"

namespace hpdt::nn {

int ParameterArena::add(std::string name, const Shape& shape, Init init) {
  HPDT_CHECK(!finalized_, "ParameterArena: parameter '", name, "' added after finalize()");
  HPDT_CHECK(shape.numel() > 0, "ParameterArena: parameter '", name, "' has empty shape ", shape.str());
  infos_.push_back({std::move(name), shape, 0});
  pending_.push_back({std::move(init)});
  return int(infos_.size()) - 1;
}

int ParameterArena::add_buffer(std::string name, Tensor init) {
  HPDT_CHECK(!finalized_, "ParameterArena: buffer '", name, "' added after finalize()");
  HPDT_CHECK(init.defined() && init.is_cpu(), "ParameterArena: buffer '", name, "' must be given as a CPU tensor");
  buffers_.emplace_back(std::move(name), std::move(init));
  return int(buffers_.size()) - 1;
}

AllocOptions ParameterArena::alloc() const {
  AllocOptions o;
  if (stream_.is_cuda()) o.stream = &stream_;
  return o;
}

void ParameterArena::finalize(uint64_t seed, DType model_dtype, const Stream& stream) {
  HPDT_CHECK(!finalized_, "ParameterArena::finalize called twice");
  HPDT_CHECK(model_dtype == DType::f32 || model_dtype == DType::f16 || model_dtype == DType::bf16,
             "ParameterArena: model dtype ", dtype_name(model_dtype), " is not f32, f16 or bf16");
  // reverse execution order: the last registered parameter at offset 0, each on a multiple of
  // kAlignElements (header)
  int64_t off = 0;
  for (int i = int(infos_.size()) - 1; i >= 0; --i) {
    off = (off + kAlignElements - 1) / kAlignElements * kAlignElements;
    infos_[size_t(i)].offset = off;
    off += infos_[size_t(i)].shape.numel();
  }
  total_ = off;
  stream_ = stream;
  const Device dev = stream.device();
  const int64_t n1 = std::max<int64_t>(total_, 1);
  // The initialisers run on the CPU whatever the device: one generator, one order, the same bits.
  Tensor host = Tensor::zeros({n1}, DType::f32).flat(0, total_);
  Rng rng(seed);
  for (size_t i = 0; i < infos_.size(); ++i)  // initialisers run in registration order
    if (pending_[i].init) pending_[i].init(host.data<float>() + infos_[i].offset, infos_[i].shape.numel(), rng);
  pending_.clear();
  model_dtype_ = model_dtype;
  if (dev.is_cpu()) {
    master_ = host;
    grads_ = Tensor::zeros({n1}, DType::f32).flat(0, total_);
    if (model_dtype != DType::f32) {
      model_params_ = Tensor::zeros({n1}, model_dtype).flat(0, total_);
      model_grads_ = Tensor::zeros({n1}, model_dtype).flat(0, total_);
      compute_ = Tensor::zeros({n1}, DType::f32).flat(0, total_);
    }
  } else {
    master_ = Tensor::empty({n1}, DType::f32, dev, alloc()).flat(0, total_);
    copy(host, master_, stream_);
    grads_ = Tensor::zeros({n1}, DType::f32, dev, alloc()).flat(0, total_);
    if (model_dtype != DType::f32) {
      model_params_ = Tensor::zeros({n1}, model_dtype, dev, alloc()).flat(0, total_);
      model_grads_ = Tensor::zeros({n1}, model_dtype, dev, alloc()).flat(0, total_);
    }
    for (auto& [name, t] : buffers_) t = t.to(dev, stream_, alloc());
  }
  finalized_ = true;
  sync_model_copy();
  stream_.synchronize();  // the host initial values may go now
}

int64_t ParameterArena::parameter_count() const {
  int64_t n = 0;
  for (const ParamInfo& p : infos_) n += p.shape.numel();
  return n;
}

// Packed order: by offset (the reverse registration order of the flat layout), no gaps.
Tensor ParameterArena::packed(const Tensor& flat) const {
  HPDT_CHECK(finalized_, "ParameterArena::packed before finalize()");
  HPDT_CHECK(flat.is_cpu() && flat.dtype() == DType::f32 && flat.numel() == total_,
             "ParameterArena::packed: needs a CPU f32 tensor of ", total_, " elements, got ",
             dtype_name(flat.dtype()), " ", flat.shape().str(), " on ", flat.device().str());
  Tensor out = Tensor::empty({parameter_count()}, DType::f32);
  int64_t at = 0;
  for (int i = int(infos_.size()) - 1; i >= 0; --i) {
    const ParamInfo& p = infos_[size_t(i)];
    std::memcpy(out.data<float>() + at, flat.data<float>() + p.offset, size_t(p.shape.numel()) * sizeof(float));
    at += p.shape.numel();
  }
  return out;
}

void ParameterArena::unpack(const Tensor& packed, Tensor& flat) const {
  HPDT_CHECK(finalized_, "ParameterArena::unpack before finalize()");
  HPDT_CHECK(packed.is_cpu() && packed.dtype() == DType::f32 && packed.numel() == parameter_count(),
             "ParameterArena::unpack: needs a CPU f32 tensor of ", parameter_count(), " elements, got ",
             dtype_name(packed.dtype()), " ", packed.shape().str());
  HPDT_CHECK(flat.is_cpu() && flat.dtype() == DType::f32 && flat.numel() == total_,
             "ParameterArena::unpack: the destination must be a CPU f32 tensor of ", total_, " elements");
  std::memset(flat.data(), 0, size_t(total_) * sizeof(float));
  int64_t at = 0;
  for (int i = int(infos_.size()) - 1; i >= 0; --i) {
    const ParamInfo& p = infos_[size_t(i)];
    std::memcpy(flat.data<float>() + p.offset, packed.data<float>() + at, size_t(p.shape.numel()) * sizeof(float));
    at += p.shape.numel();
  }
}

Tensor ParameterArena::param(int id) const {
  const ParamInfo& p = info(id);
  const Tensor& base = model_dtype_ == DType::f32 ? master_ : device().is_cuda() ? model_params_ : compute_;
  return base.flat(p.offset, p.shape.numel()).view(p.shape);
}

Tensor ParameterArena::grad(int id) const {
  const ParamInfo& p = info(id);
  return grads_.flat(p.offset, p.shape.numel()).view(p.shape);
}

Tensor ParameterArena::compute_grad(int id) const {
  const ParamInfo& p = info(id);
  const Tensor& base = model_dtype_ != DType::f32 && device().is_cuda() ? model_grads_ : grads_;
  return base.flat(p.offset, p.shape.numel()).view(p.shape);
}

Tensor ParameterArena::buffer(int id) const {
  HPDT_CHECK(id >= 0 && id < int(buffers_.size()), "ParameterArena: no buffer with id ", id);
  return buffers_[size_t(id)].second;
}

const ParamInfo& ParameterArena::info(int id) const {
  HPDT_CHECK(finalized_, "ParameterArena: parameter ", id, " used before finalize()");
  HPDT_CHECK(id >= 0 && id < int(infos_.size()), "ParameterArena: no parameter with id ", id);
  return infos_[size_t(id)];
}

void ParameterArena::zero_grad() {
  if (total_ == 0) return;
  if (device().is_cpu()) {
    std::memset(grads_.data(), 0, grads_.nbytes());
    return;
  }
  if (f32_grads()) kernels::fill(grads_, 0.0f, stream_);
  if (model_dtype_ != DType::f32) kernels::fill(model_grads_, 0.0f, stream_);
}

void ParameterArena::grads_ready(int first_id, int n) {
  const ParamInfo& first = info(first_id);
  HPDT_CHECK(n >= 1 && first_id + n <= count(), "ParameterArena::grads_ready: parameters [", first_id, ", ",
             first_id + n, ") out of range");
  // From the end of the parameter below the lowest of these (the next registered one, reverse layout), so
  // that the alignment gap in between belongs to this slice and the ready slices tile [0, numel())
  const int below = first_id + n;
  const int64_t offset = below < count() ? info(below).offset + info(below).shape.numel() : 0;
  const int64_t elements = first.offset + first.shape.numel() - offset;
  if (model_dtype_ != DType::f32 && f32_grads()) {
    Tensor f32 = grads_.flat(offset, elements), model = model_grads_.flat(offset, elements);
    if (device().is_cpu())
      kernels::cast(f32, model, stream_);
    else
      kernels::cast(model, f32, stream_);
  }
  if (on_ready_) on_ready_(size_t(offset), size_t(elements));
}

void ParameterArena::sync_model_copy() {
  if (model_dtype_ == DType::f32 || total_ == 0) return;
  kernels::cast(master_, model_params_, stream_);
  if (device().is_cpu()) kernels::cast(model_params_, compute_, stream_);
}

namespace init {

ParameterArena::Init uniform(float bound) {
  return [bound](float* p, int64_t n, Rng& rng) {
    for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(-bound, bound);
  };
}
ParameterArena::Init normal(float std) {
  return [std](float* p, int64_t n, Rng& rng) {
    for (int64_t i = 0; i < n; ++i) p[i] = std * rng.normal();
  };
}
ParameterArena::Init trunc_normal(float std) {
  return [std](float* p, int64_t n, Rng& rng) {
    for (int64_t i = 0; i < n; ++i) {
      float z = rng.normal();
      while (std::abs(z) > 2.0f) z = rng.normal();
      p[i] = std * z;
    }
  };
}
ParameterArena::Init constant(float value) {
  return [value](float* p, int64_t n, Rng&) {
    for (int64_t i = 0; i < n; ++i) p[i] = value;
  };
}
ParameterArena::Init xavier_uniform(int64_t fan_in, int64_t fan_out) {
  return uniform(float(std::sqrt(6.0 / double(fan_in + fan_out))));
}

}  // namespace init

}  // namespace hpdt::nn
