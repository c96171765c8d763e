// ResNet and ViT built from nn layers. Parameter names follow torchvision so that checkpoints and the
// PyTorch fixtures line up by name and order.
#include <cmath>
#include <sstream>

#include "hpdt/kernels/activation.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/embed.h"
#include "hpdt/nn/model.h"

namespace hpdt::nn {

namespace {

// torchvision ResNet: kaiming_normal_(mode='fan_out', nonlinearity='relu') for every conv.
ParameterArena::Init kaiming_fan_out(int64_t c_out, int64_t k) {
  return init::normal(float(std::sqrt(2.0 / double(c_out * k * k))));
}

Tensor add_into(Tensor& out, const Tensor& a, const Tensor& b, const Stream& s) {
  ensure_on(out, a.shape(), a.dtype(), s);
  kernels::add(a, b, out, s);
  return out;
}

// ResNet basic block (two 3x3 convs) or bottleneck (1x1, 3x3 with the stride, 1x1 x4), with a
// 1x1 conv + BN projection shortcut when the shape changes. Every BN followed by a ReLU runs fused with it
// (BatchNorm's then_relu), and the last BN computes the block's output relu(bn(main) + shortcut) in one pass, the
// projection's BN included: it only computes its statistics, and the last BN applies it on the fly.
// Registration order is torchvision's (main path, its last BN, then the shortcut) and backward announces
// gradients in the exact reverse: the last BN's backward yields the shortcut's gradient, so its own
// announcement waits until the shortcut's backward has announced. The block's input gradient, the main
// path's plus the shortcut's, is summed in the main path's first backward-data (Conv2d::add_to_next_input_grad).
// Every BN takes its statistics from the epilogue of the convolution before it (BatchNorm::take_stats_from), and
// the main path's BNs their backward sums from the epilogue of the backward-data after them
// (Conv2d::feed_grad_sums_to); so does the block's last BN from the next block's first convolution, which the model
// builders wire (first_conv, out_bn). The projection's BN takes its backward sums from the last BN's backward pass,
// which reads the same gradient (BatchNorm::feed_residual_grad_sums_to).
class ResidualBlock : public Layer {
 public:
  ResidualBlock(ParameterArena& a, const std::string& name, int64_t c_in, int64_t width, int64_t stride, bool bottleneck)
      : Layer(name), main_(name) {
    const int64_t c_out = bottleneck ? 4 * width : width;
    constexpr float kEps = 1e-5f, kMomentum = 0.1f;
    constexpr bool kRelu = true;
    Conv2d* last = nullptr;  // the main path's last convolution, whose output out_bn_ normalises
    if (bottleneck) {
      first_conv_ = &main_.add<Conv2d>(a, name + ".conv1", c_in, width, 1, 1, 0, false, kaiming_fan_out(width, 1));
      auto& bn1 = main_.add<BatchNorm>(a, name + ".bn1", width, kEps, kMomentum, kRelu);
      bn1.take_stats_from(*first_conv_);
      auto& conv2 = main_.add<Conv2d>(a, name + ".conv2", width, width, 3, stride, 1, false, kaiming_fan_out(width, 3));
      conv2.feed_grad_sums_to(bn1);
      auto& bn2 = main_.add<BatchNorm>(a, name + ".bn2", width, kEps, kMomentum, kRelu);
      bn2.take_stats_from(conv2);
      last = &main_.add<Conv2d>(a, name + ".conv3", width, c_out, 1, 1, 0, false, kaiming_fan_out(c_out, 1));
      last->feed_grad_sums_to(bn2);
      out_bn_ = std::make_unique<BatchNorm>(a, name + ".bn3", c_out, kEps, kMomentum, kRelu);
    } else {
      first_conv_ = &main_.add<Conv2d>(a, name + ".conv1", c_in, width, 3, stride, 1, false, kaiming_fan_out(width, 3));
      auto& bn1 = main_.add<BatchNorm>(a, name + ".bn1", width, kEps, kMomentum, kRelu);
      bn1.take_stats_from(*first_conv_);
      last = &main_.add<Conv2d>(a, name + ".conv2", width, width, 3, 1, 1, false, kaiming_fan_out(width, 3));
      last->feed_grad_sums_to(bn1);
      out_bn_ = std::make_unique<BatchNorm>(a, name + ".bn2", c_out, kEps, kMomentum, kRelu);
    }
    out_bn_->take_stats_from(*last);
    out_bn_->set_defer_grads_ready(true);
    if (stride != 1 || c_in != c_out) {
      shortcut_conv_ = std::make_unique<Conv2d>(a, name + ".downsample.0", c_in, c_out, 1, stride, 0, false,
                                                kaiming_fan_out(c_out, 1));
      shortcut_bn_ = std::make_unique<BatchNorm>(a, name + ".downsample.1", c_out);
      shortcut_bn_->take_stats_from(*shortcut_conv_);
      out_bn_->feed_residual_grad_sums_to(*shortcut_bn_);  // its backward sums from out_bn_'s backward pass
    }
  }
  Tensor forward(const Tensor& x) override {
    const Tensor m = main_.forward(x);
    if (!shortcut_conv_) return out_bn_->forward(m, x);
    const Tensor r = shortcut_conv_->forward(x);
    shortcut_bn_->forward_statistics(r);
    return out_bn_->forward(m, r, *shortcut_bn_);
  }
  Tensor backward(const Tensor& dy) override {
    const Tensor dm = out_bn_->backward(dy);
    const Tensor g = out_bn_->residual_grad();
    const Tensor ds = shortcut_conv_ ? shortcut_conv_->backward(shortcut_bn_->backward(g)) : g;
    out_bn_->announce_grads();
    first_conv_->add_to_next_input_grad(ds);  // dx = the main path's + the shortcut's, in conv1's epilogue
    return main_.backward(dm);
  }
  void for_each_child(const std::function<void(Layer&)>& f) override {
    f(main_);
    f(*out_bn_);
    if (shortcut_conv_) {
      f(*shortcut_conv_);
      f(*shortcut_bn_);
    }
  }
  Conv2d& first_conv() { return *first_conv_; }
  BatchNorm& out_bn() { return *out_bn_; }

 private:
  Sequential main_;
  Conv2d* first_conv_ = nullptr;  // main_'s first layer
  std::unique_ptr<BatchNorm> out_bn_;
  std::unique_ptr<Conv2d> shortcut_conv_;  // the projection shortcut (null: identity)
  std::unique_ptr<BatchNorm> shortcut_bn_;
};

// ViT patch embedding: patch conv, class token in front, position embedding added, dropout.
class PatchEmbedding : public Layer {
 public:
  PatchEmbedding(ParameterArena& a, int64_t c_in, int64_t d, int64_t patch, int64_t grid, float dropout, uint64_t seed)
      : Layer("embedding"),
        arena_(&a),
        conv_(a, "conv_proj", c_in, d, patch, patch, 0, true,
              init::trunc_normal(float(std::sqrt(1.0 / double(c_in * patch * patch))))),
        dropout_("embedding.dropout", dropout, seed, 0) {
    cls_id_ = a.add("class_token", {d}, init::constant(0.0f));
    pos_id_ = a.add("encoder.pos_embedding", {grid * grid + 1, d}, init::normal(0.02f));
    conv_.set_needs_input_grad(false);
  }
  Tensor forward(const Tensor& x) override {
    patches_ = conv_.forward(x);
    const int64_t b = patches_.size(0), d = patches_.size(1), p = patches_.size(2) * patches_.size(3);
    ensure(tokens_, {b, p + 1, d}, patches_.dtype());
    kernels::tokens_forward(patches_, arena_->param(cls_id_), arena_->param(pos_id_), tokens_, stream_);
    return dropout_.forward(tokens_);
  }
  Tensor backward(const Tensor& dy) override {
    const Tensor g = dropout_.backward(dy);
    ensure(dpatches_, patches_.shape(), g.dtype());
    Tensor dcls = arena_->compute_grad(cls_id_), dpos = arena_->compute_grad(pos_id_);
    kernels::tokens_backward(g, dpatches_, dcls, dpos, stream_);
    arena_->grads_ready(cls_id_, 2);
    return conv_.backward(dpatches_);
  }
  void for_each_child(const std::function<void(Layer&)>& f) override {
    f(conv_);
    f(dropout_);
  }

 private:
  ParameterArena* arena_;
  Conv2d conv_;
  Dropout dropout_;
  int cls_id_, pos_id_;
  Tensor patches_, tokens_, dpatches_;
};

// Pre-norm transformer encoder block (torchvision EncoderBlock): x + attn(ln_1(x)), then + mlp(ln_2(.)). Forward
// adds each skip connection in the epilogue of its path's last GEMM while the dropout after it is off; backward
// sums each skip connection's gradient into the layer norm's input gradient (LayerNorm::add_to_next_input_grad).
// Neither runs a separate add.
class EncoderBlock : public Layer {
 public:
  EncoderBlock(ParameterArena& a, const std::string& name, int64_t d, int64_t heads, float dropout, uint64_t seed,
               uint64_t stream_base, bool fuse_gelu)
      : Layer(name), attn_path_(name + ".attn_path"), mlp_path_(name + ".mlp_path") {
    ln_1_ = &attn_path_.add<LayerNorm>(a, name + ".ln_1", d, 1e-6f);
    attention_ = &attn_path_.add<MultiHeadSelfAttention>(a, name + ".self_attention", d, heads);
    attn_dropout_ = &attn_path_.add<Dropout>(name + ".dropout", dropout, seed, stream_base);
    ln_2_ = &mlp_path_.add<LayerNorm>(a, name + ".ln_2", d, 1e-6f);
    // torchvision MLPBlock: xavier_uniform weights, N(0, 1e-6) biases
    // mlp.1, the GELU, is fused into fc1's forward GEMM and fc2's dx GEMM (Linear::then_gelu, input_is_gelu_of),
    // or a layer of its own (ModelConfig::fuse_gelu false)
    auto& fc1 = mlp_path_.add<Linear>(a, name + ".mlp.0", d, 4 * d, true, init::xavier_uniform(d, 4 * d),
                                      init::normal(1e-6f));
    if (fuse_gelu)
      fc1.then_gelu(kernels::GeluForm::erf);
    else
      mlp_path_.add<GELU>(name + ".mlp.1", kernels::GeluForm::erf);
    mlp_path_.add<Dropout>(name + ".mlp.2", dropout, seed, stream_base + 1);
    auto& fc2 = mlp_path_.add<Linear>(a, name + ".mlp.3", 4 * d, d, true, init::xavier_uniform(4 * d, d),
                                      init::normal(1e-6f));
    if (fuse_gelu) fc2.input_is_gelu_of(fc1);
    fc2_ = &fc2;
    mlp_dropout_ = &mlp_path_.add<Dropout>(name + ".mlp.4", dropout, seed, stream_base + 2);
  }
  Tensor forward(const Tensor& x) override {
    if (attn_dropout_->identity_now() && mlp_dropout_->identity_now()) {
      // No dropout between the paths' last GEMMs and the skip adds: each add runs in its GEMM's epilogue
      // (the output projection's and fc2's), not as a pass of its own.
      attention_->add_to_next_output(x);
      const Tensor mid = attn_path_.forward(x);  // x + attention(ln_1(x))
      fc2_->add_to_next_output(mid);
      return mlp_path_.forward(mid);  // mid + mlp(ln_2(mid))
    }
    add_into(mid_, attn_path_.forward(x), x, stream_);
    return add_into(out_, mlp_path_.forward(mid_), mid_, stream_);
  }
  Tensor backward(const Tensor& dy) override {
    ln_2_->add_to_next_input_grad(dy);
    const Tensor dmid = mlp_path_.backward(dy);  // ln_2's dx + dy
    ln_1_->add_to_next_input_grad(dmid);
    return attn_path_.backward(dmid);  // ln_1's dx + dmid
  }
  void for_each_child(const std::function<void(Layer&)>& f) override {
    f(attn_path_);
    f(mlp_path_);
  }

 private:
  Sequential attn_path_, mlp_path_;
  LayerNorm* ln_1_ = nullptr;  // the paths' first layers
  LayerNorm* ln_2_ = nullptr;
  MultiHeadSelfAttention* attention_ = nullptr;  // the paths' last GEMMs and the dropouts after them
  Linear* fc2_ = nullptr;
  Dropout* attn_dropout_ = nullptr;
  Dropout* mlp_dropout_ = nullptr;
  Tensor mid_, out_;  // the skip adds' outputs while dropout is active
};

class ClassToken : public Layer {
 public:
  ClassToken() : Layer("select_class_token") {}
  Tensor forward(const Tensor& x) override {
    check_device(x);
    in_shape_ = x.shape();
    ensure(y_, {x.size(0), x.size(2)}, x.dtype());
    kernels::cls_select_forward(x, y_, stream_);
    return y_;
  }
  Tensor backward(const Tensor& dy) override {
    ensure(dx_, in_shape_, dy.dtype());
    kernels::cls_select_backward(dy, dx_, stream_);
    return dx_;
  }

 private:
  Shape in_shape_;
  Tensor y_, dx_;
};

void build_resnet_cifar(Model& m, Sequential& body, ParameterArena& a, const ModelConfig& c, int blocks_per_stage) {
  (void)m;
  body.add<ImageInput>();
  auto& stem = body.add<Conv2d>(a, "conv1", c.in_channels, 16, 3, 1, 1, false, kaiming_fan_out(16, 3));
  stem.set_needs_input_grad(false);
  BatchNorm* before = &body.add<BatchNorm>(a, "bn1", 16, 1e-5f, 0.1f, /*then_relu=*/true);
  before->take_stats_from(stem);
  int64_t c_in = 16;
  const int64_t widths[3] = {16, 32, 64};
  for (int s = 0; s < 3; ++s)
    for (int b = 0; b < blocks_per_stage; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      auto& block = body.add<ResidualBlock>(a, "layer" + std::to_string(s + 1) + "." + std::to_string(b), c_in,
                                            widths[s], stride, false);
      block.first_conv().feed_grad_sums_to(*before);  // the block's input is the BN's output
      before = &block.out_bn();
      c_in = widths[s];
    }
  body.add<GlobalAvgPool>("avgpool");
  body.add<Linear>(a, "fc", 64, c.classes);
}

void build_resnet_imagenet(Sequential& body, ParameterArena& a, const ModelConfig& c, const int (&blocks)[4], bool bottleneck) {
  body.add<ImageInput>();
  auto& stem = body.add<Conv2d>(a, "conv1", c.in_channels, 64, 7, 2, 3, false, kaiming_fan_out(64, 7));
  stem.set_needs_input_grad(false);
  auto& bn1 = body.add<BatchNorm>(a, "bn1", 64, 1e-5f, 0.1f, /*then_relu=*/true);
  bn1.take_stats_from(stem);
  body.add<MaxPool2d>("maxpool", 3, 2, 1).feed_grad_sums_to(bn1);  // bn1's backward sums from the pool's backward
  int64_t c_in = 64;
  BatchNorm* before = nullptr;  // the previous block's last BN (the first block's input is the max pool's output)
  for (int s = 0; s < 4; ++s) {
    const int64_t width = 64 << s;
    for (int b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      auto& block = body.add<ResidualBlock>(a, "layer" + std::to_string(s + 1) + "." + std::to_string(b), c_in, width,
                                            stride, bottleneck);
      if (before) block.first_conv().feed_grad_sums_to(*before);
      before = &block.out_bn();
      c_in = bottleneck ? 4 * width : width;
    }
  }
  body.add<GlobalAvgPool>("avgpool");
  body.add<Linear>(a, "fc", c_in, c.classes);
}

void build_vit(Sequential& body, ParameterArena& a, const ModelConfig& c, int64_t d, int64_t depth, int64_t heads) {
  const int64_t grid = c.image_size / c.patch;
  body.add<PatchEmbedding>(a, c.in_channels, d, c.patch, grid, c.dropout, c.seed);
  for (int64_t i = 0; i < depth; ++i)
    body.add<EncoderBlock>(a, "encoder.layers.encoder_layer_" + std::to_string(i), d, heads, c.dropout, c.seed,
                           uint64_t(1 + 3 * i), c.fuse_gelu);
  body.add<LayerNorm>(a, "encoder.ln", d, 1e-6f);
  body.add<ClassToken>();
  body.add<Linear>(a, "heads.head", d, c.classes);
}

}  // namespace

std::string ModelConfig::str() const {
  std::ostringstream os;
  os << "in_channels=" << in_channels << " image_size=" << image_size << " classes=" << classes << " patch=" << patch
     << " dropout=" << dropout << " dtype=" << dtype_name(dtype) << " seed=" << seed;
  if (vit_dim) os << " vit_dim=" << vit_dim;
  if (vit_depth) os << " vit_depth=" << vit_depth;
  if (vit_heads) os << " vit_heads=" << vit_heads;
  return os.str();
}

Model::Model(std::string name, const ModelConfig& config) : name_(std::move(name)), config_(config) {}

Tensor Model::forward(const Tensor& images) {
  const ModelConfig& c = config_;
  const DType dt = compute_dtype();
  const kernels::Layout layout = input_layout();
  const bool nhwc = layout == kernels::Layout::nhwc;
  const int64_t channel_dim = nhwc ? 3 : 1, row_dim = nhwc ? 1 : 2;
  if (images.ndim() != 4 || images.size(channel_dim) != c.in_channels || images.size(row_dim) != c.image_size ||
      images.size(row_dim + 1) != c.image_size || (images.dtype() != DType::f32 && images.dtype() != dt)) {
    const std::string size = std::to_string(c.image_size), channels = std::to_string(c.in_channels);
    HPDT_FAIL(name_, ": expects ", dt == DType::f32 ? "f32" : "f32 or " + std::string(dtype_name(dt)), " images [b, ",
              nhwc ? size + ", " + size + ", " + channels : channels + ", " + size + ", " + size, "] (",
              kernels::layout_name(layout), "), got ", images.shape().str(), " ", dtype_name(images.dtype()));
  }
  if (images.device() != device())
    HPDT_FAIL(name_, ": images on ", images.device().str(), ", but the model (first layer ",
              body_.layers().empty() ? std::string("?") : body_.layers().front()->name(), ") runs on ", device().str(),
              "; copy the batch to ", device().str(), " first");
  if (images.dtype() == dt) return body_.forward(images);
  ensure_on(input_, images.shape(), dt, stream());
  kernels::cast(images, input_, stream());
  return body_.forward(input_);
}

ImageInput* Model::image_input() const {
  return body_.layers().empty() ? nullptr : dynamic_cast<ImageInput*>(body_.layers().front().get());
}

kernels::Layout Model::input_layout() const {
  const ImageInput* input = image_input();
  return input ? input->input_layout() : kernels::Layout::nchw;
}

void Model::set_input_layout(kernels::Layout layout) {
  if (ImageInput* input = image_input()) {
    input->set_input_layout(layout);
    return;
  }
  if (layout != kernels::Layout::nchw)
    HPDT_FAIL(name_, ": takes NCHW images only (its first layer, ",
              body_.layers().empty() ? std::string("none") : body_.layers().front()->name(),
              ", reads them as they are), not ", kernels::layout_name(layout));
}

void Model::backward(const Tensor& dlogits, bool accumulate) {
  if (dlogits.device() != device())
    HPDT_FAIL(name_, ": dlogits on ", dlogits.device().str(), ", but the model runs on ", device().str());
  if (!accumulate) arena_.zero_grad();
  if (dlogits.dtype() == compute_dtype() || device().is_cpu()) {
    body_.backward(dlogits);
    return;
  }
  ensure_on(dlogits_, dlogits.shape(), compute_dtype(), stream());
  kernels::cast(dlogits, dlogits_, stream());
  body_.backward(dlogits_);
}

namespace {
void visit(Layer& l, const std::function<void(Layer&)>& f) {
  f(l);
  l.for_each_child([&](Layer& child) { visit(child, f); });
}
}  // namespace

void Model::for_each_layer(const std::function<void(Layer&)>& f) { visit(body_, f); }

void Model::set_batchnorm_sync(const kernels::AllReduceSum& sync) {
  for_each_layer([&](Layer& l) {
    if (auto* bn = dynamic_cast<BatchNorm*>(&l)) bn->set_sync(sync);
  });
}

namespace {
void for_each_dropout(Model& m, const std::function<void(Dropout&)>& f) {
  m.for_each_layer([&](Layer& l) {
    if (auto* d = dynamic_cast<Dropout*>(&l)) f(*d);
  });
}
}  // namespace

void Model::set_first_sample(int64_t first) {
  HPDT_CHECK(first >= 0, name_, ": first sample ", first, " is negative");
  for_each_dropout(*this, [first](Dropout& d) { d.set_first_sample(first); });
}

std::map<std::string, uint64_t> Model::dropout_state() {
  std::map<std::string, uint64_t> out;
  for_each_dropout(*this, [&](Dropout& d) {
    if (d.probability() > 0.0f) out[d.name()] = d.calls();
  });
  return out;
}

void Model::restore_dropout_state(const std::map<std::string, uint64_t>& calls) {
  std::map<std::string, Dropout*> mine;
  for_each_dropout(*this, [&](Dropout& d) { mine[d.name()] = &d; });
  for (const auto& [layer, n] : calls) {
    auto it = mine.find(layer);
    HPDT_CHECK(it != mine.end(), name_, ": no dropout layer '", layer, "' to restore");
    it->second->set_calls(n);
  }
}

std::unique_ptr<Model> build_model(const std::string& name, const ModelConfig& c, bool allocate, const Stream& stream);

std::vector<std::string> model_names() {
  return {"resnet20", "resnet56", "resnet18", "resnet34", "resnet50", "vit_ti", "vit_s", "vit_b"};
}

std::unique_ptr<Model> build_model(const std::string& name, const ModelConfig& c, bool allocate, const Stream& stream) {
  HPDT_CHECK(c.in_channels >= 1 && c.image_size >= 1 && c.classes >= 1, "make_model ", name,
             ": in_channels, image_size and classes must be positive (", c.str(), ")");
  auto m = std::make_unique<Model>(name, c);
  Sequential& body = m->body_;
  ParameterArena& a = m->arena_;
  const bool resnet = name.starts_with("resnet");
  if (c.layout == kernels::Layout::nhwc)
    HPDT_CHECK(resnet, "make_model ", name, ": layout nhwc is for the ResNets (a ViT's activations are tokens)");
  HPDT_CHECK(c.fuse_gelu || name.starts_with("vit"), "make_model ", name,
             ": fuse_gelu false is for the ViTs (the ResNets have no GELU)");
  if (name == "resnet20" || name == "resnet56") {
    build_resnet_cifar(*m, body, a, c, name == "resnet20" ? 3 : 9);
  } else if (name == "resnet18" || name == "resnet34" || name == "resnet50") {
    static const int b18[4] = {2, 2, 2, 2}, b34[4] = {3, 4, 6, 3};
    build_resnet_imagenet(body, a, c, name == "resnet18" ? b18 : b34, name == "resnet50");
  } else if (name == "vit_ti" || name == "vit_s" || name == "vit_b") {
    HPDT_CHECK(c.patch >= 1 && c.image_size % c.patch == 0, "make_model ", name, ": image size ", c.image_size,
               " is not divisible by patch ", c.patch);
    int64_t d = name == "vit_ti" ? 192 : name == "vit_s" ? 384 : 768;
    int64_t heads = name == "vit_ti" ? 3 : name == "vit_s" ? 6 : 12;
    int64_t depth = 12;
    if (c.vit_dim) d = c.vit_dim;
    if (c.vit_heads) heads = c.vit_heads;
    if (c.vit_depth) depth = c.vit_depth;
    HPDT_CHECK(d % heads == 0, "make_model ", name, ": width ", d, " is not divisible by ", heads, " heads");
    build_vit(body, a, c, d, depth, heads);
  } else {
    std::string names;
    for (const auto& n : model_names()) names += " " + n;
    HPDT_FAIL("make_model: unknown model '", name, "' (known:", names, ")");
  }
  // Unset: NHWC on the CPU (measured 2x), NCHW on CUDA until the NHWC kernels are measured on a GPU (docs/nn.md).
  const kernels::Layout fallback = stream.is_cuda() ? kernels::Layout::nchw : kernels::Layout::nhwc;
  body.set_layout(resnet ? c.layout.value_or(fallback) : kernels::Layout::nchw);
  if (allocate) {
    body.set_stream(stream);
    a.finalize(c.seed, c.dtype, stream);
  }
  return m;
}

std::unique_ptr<Model> make_model(const std::string& name, const ModelConfig& config, const Stream& stream) {
  return build_model(name, config, true, stream);
}

int64_t count_parameters(const std::string& name, const ModelConfig& config) {
  const auto m = build_model(name, config, false, Stream());
  int64_t n = 0;
  for (const ParamInfo& p : m->arena().infos()) n += p.shape.numel();
  return n;
}

}  // namespace hpdt::nn
