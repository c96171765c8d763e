// hpdt's CPU layers and two full training steps against PyTorch 1.13 (fixtures from make_fixtures.py).
// Tolerances (f32 on both sides, different summation orders):
//   single layers: |got - want| <= 1e-5 + 1e-4 |want|
//   training step: loss 1e-4 relative; logits 1e-4 + 1e-3 |want|; per-parameter gradient summaries:
//   sampled entries within 2e-3 of the tensor's RMS, sum within 1e-3 sqrt(n * sumsq), sumsq 4e-3
//   relative; parameters after SGD likewise on the update; after AdamW (first step ~ lr * sign(g)):
//   sampled entries whose gradient is clearly non-zero within 1e-6 + 1e-4 |p|.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpdt/kernels/activation.h"
#include "hpdt/kernels/attention.h"
#include "hpdt/kernels/conv.h"
#include "hpdt/kernels/embed.h"
#include "hpdt/kernels/image.h"
#include "hpdt/kernels/linear.h"
#include "hpdt/kernels/loss.h"
#include "hpdt/kernels/norm.h"
#include "hpdt/kernels/optim.h"
#include "hpdt/kernels/pool.h"
#include "hpdt/nn/model.h"
#include "hpdt/nn/optim.h"

namespace hpdt::test {
const char* golden_dir();  // the fixtures' folder (golden_dir.cpp)
}  // namespace hpdt::test

namespace {

using namespace hpdt;
using namespace hpdt::kernels;
using json = nlohmann::json;
const Stream kCpu;

json load(const std::string& name) {
  std::ifstream f(std::string(test::golden_dir()) + "/" + name + ".json");
  EXPECT_TRUE(f.good()) << "missing fixture " << name << " (regenerate: /usr/bin/python3 tests/golden/make_fixtures.py)";
  return json::parse(f);
}

std::vector<float> vec(const json& j) { return j.get<std::vector<float>>(); }
Tensor tensor(const json& j, const Shape& s) { return Tensor::from_vector<float>(vec(j), s); }
Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), DType::f32); }

void expect_close(const std::string& what, const Tensor& got, const json& want, double atol = 1e-5, double rtol = 1e-4) {
  const std::vector<float> w = vec(want);
  ASSERT_EQ(size_t(got.numel()), w.size()) << what;
  const float* g = got.data<float>();
  int bad = 0;
  for (size_t i = 0; i < w.size(); ++i)
    if (!(std::abs(double(g[i]) - w[i]) <= atol + rtol * std::abs(w[i])) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: got " << g[i] << ", PyTorch " << w[i];
  EXPECT_EQ(bad, 0) << what;
}

TEST(Golden, Conv2d) {
  const json fixture = load("conv2d");  // kept alive: a range-for over load(...)["cases"] dangles (C++20)
  for (const json& c : fixture["cases"]) {
    const auto s = c["shape"].get<std::vector<int64_t>>();  // n ci h w co k stride pad
    const Tensor x = tensor(c["x"], {s[0], s[1], s[2], s[3]}), w = tensor(c["w"], {s[4], s[1], s[5], s[5]});
    const bool bias = c.contains("b");
    Tensor b = bias ? tensor(c["b"], {s[4]}) : Tensor();
    const int64_t oh = (s[2] + 2 * s[7] - s[5]) / s[6] + 1, ow = (s[3] + 2 * s[7] - s[5]) / s[6] + 1;
    Tensor y = Tensor::empty({s[0], s[4], oh, ow}, DType::f32);
    conv2d_forward(x, w, bias ? &b : nullptr, y, s[6], s[7], kCpu);
    const std::string name = "conv k" + std::to_string(s[5]) + " s" + std::to_string(s[6]);
    expect_close(name + " y", y, c["y"]);
    const Tensor dy = tensor(c["dy"], y.shape());
    Tensor dx = zeros_like(x), dw = zeros_like(w), db = bias ? zeros_like(b) : Tensor();
    conv2d_backward_data(dy, w, dx, s[6], s[7], kCpu);
    conv2d_backward_filter(x, dy, dw, bias ? &db : nullptr, s[6], s[7], kCpu);
    expect_close(name + " dx", dx, c["dx"]);
    expect_close(name + " dw", dw, c["dw"]);
    if (bias) expect_close(name + " db", db, c["db"]);
  }
}

TEST(Golden, BatchNormTrainEvalAndRunningStats) {
  const json c = load("batchnorm");
  const Shape s{3, 4, 5, 5};
  const Tensor x = tensor(c["x"], s), g = tensor(c["gamma"], {4}), b = tensor(c["beta"], {4});
  Tensor rm = tensor(c["running_mean0"], {4}), rv = tensor(c["running_var0"], {4});
  Tensor y = Tensor::empty(s, DType::f32);
  batchnorm_forward_eval(x, g, b, rm, rv, 1e-5f, y, kCpu);
  expect_close("bn eval y", y, c["y_eval"]);
  BatchNormSaved saved;
  batchnorm_forward_train(x, g, b, rm, rv, 1e-5f, 0.1f, saved, y, nullptr, kCpu);
  expect_close("bn train y", y, c["y"]);
  expect_close("bn running_mean", rm, c["running_mean"]);
  expect_close("bn running_var", rv, c["running_var"]);
  Tensor dx = zeros_like(x), dg = zeros_like(g), db = zeros_like(b);
  batchnorm_backward_train(tensor(c["dy"], s), x, g, saved, dx, dg, db, nullptr, kCpu);
  expect_close("bn dx", dx, c["dx"]);
  expect_close("bn dgamma", dg, c["dgamma"]);
  expect_close("bn dbeta", db, c["dbeta"]);
}

TEST(Golden, ReluGeluSoftmax) {
  const json c = load("pointwise");
  const Tensor x = tensor(c["x"], {4, 10}), dy = tensor(c["dy"], {4, 10});
  Tensor y = zeros_like(x), dx = zeros_like(x);
  relu_forward(x, y, kCpu);
  relu_backward(y, dy, dx, kCpu);
  expect_close("relu y", y, c["relu"]["y"]);
  expect_close("relu dx", dx, c["relu"]["dx"]);
  for (auto [key, form] : {std::pair{"gelu_erf", GeluForm::erf}, std::pair{"gelu_tanh", GeluForm::tanh}}) {
    gelu_forward(x, form, y, kCpu);
    gelu_backward(x, dy, form, dx, kCpu);
    expect_close(std::string(key) + " y", y, c[key]["y"]);
    expect_close(std::string(key) + " dx", dx, c[key]["dx"]);
  }
  softmax_forward(x, y, kCpu);
  softmax_backward(y, dy, dx, kCpu);
  expect_close("softmax y", y, c["softmax"]["y"]);
  expect_close("softmax dx", dx, c["softmax"]["dx"]);
}

TEST(Golden, MaxPoolAndGlobalAvgPool) {
  const json c = load("pool");
  const Tensor x = tensor(c["x"], {2, 3, 7, 6});
  const auto ys = c["maxpool"]["shape"].get<std::vector<int64_t>>();
  Tensor y = Tensor::empty(Shape(std::span<const int64_t>(ys)), DType::f32), am, dx = zeros_like(x);
  maxpool2d_forward(x, 3, 2, 1, y, am, kCpu);
  maxpool2d_backward(tensor(c["maxpool"]["dy"], y.shape()), am, dx, kCpu);
  expect_close("maxpool y", y, c["maxpool"]["y"]);
  expect_close("maxpool dx", dx, c["maxpool"]["dx"]);
  Tensor ya = Tensor::empty({2, 3}, DType::f32);
  global_avgpool_forward(x, ya, kCpu);
  global_avgpool_backward(tensor(c["avgpool"]["dy"], {2, 3}), dx, kCpu);
  expect_close("avgpool y", ya, c["avgpool"]["y"]);
  expect_close("avgpool dx", dx, c["avgpool"]["dx"]);
}

TEST(Golden, LinearAndLayerNorm) {
  const json c = load("linear_layernorm");
  const Tensor x = tensor(c["x"], {5, 7});
  const json& l = c["linear"];
  const Tensor w = tensor(l["w"], {4, 7}), b = tensor(l["b"], {4});
  Tensor y = Tensor::empty({5, 4}, DType::f32), dx = zeros_like(x), dw = zeros_like(w), db = zeros_like(b);
  linear_forward(x, w, &b, y, kCpu);
  linear_backward(tensor(l["dy"], {5, 4}), x, w, &dx, dw, &db, kCpu);
  expect_close("linear y", y, l["y"]);
  expect_close("linear dx", dx, l["dx"]);
  expect_close("linear dw", dw, l["dw"]);
  expect_close("linear db", db, l["db"]);
  const json& n = c["layernorm"];
  const Tensor g = tensor(n["gamma"], {7}), be = tensor(n["beta"], {7});
  Tensor z = zeros_like(x), dg = zeros_like(g), dbe = zeros_like(be);
  LayerNormSaved saved;
  layernorm_forward(x, g, be, 1e-6f, saved, z, kCpu);
  layernorm_backward(tensor(n["dy"], {5, 7}), x, g, saved, dx, dg, dbe, kCpu);
  expect_close("layernorm y", z, n["y"]);
  expect_close("layernorm dx", dx, n["dx"]);
  expect_close("layernorm dgamma", dg, n["dgamma"]);
  expect_close("layernorm dbeta", dbe, n["dbeta"]);
}

TEST(Golden, MultiHeadSelfAttention) {
  const json c = load("attention");
  const auto s = c["shape"].get<std::vector<int64_t>>();  // b t d heads
  const int64_t b = s[0], t = s[1], d = s[2], heads = s[3];
  const Tensor x = tensor(c["x"], {b, t, d}), iw = tensor(c["in_w"], {3 * d, d}), ib = tensor(c["in_b"], {3 * d});
  const Tensor ow = tensor(c["out_w"], {d, d}), ob = tensor(c["out_b"], {d});
  Tensor qkv = Tensor::empty({b, t, 3 * d}, DType::f32), attn = Tensor::empty({b, t, d}, DType::f32);
  Tensor y = Tensor::empty({b, t, d}, DType::f32);
  linear_forward(x, iw, &ib, qkv, kCpu);
  AttentionSaved saved;
  attention_forward(qkv, heads, saved, attn, kCpu);
  linear_forward(attn, ow, &ob, y, kCpu);
  expect_close("mha y", y, c["y"]);
  Tensor dattn = zeros_like(attn), dqkv = zeros_like(qkv), dx = zeros_like(x);
  Tensor diw = zeros_like(iw), dib = zeros_like(ib), dow = zeros_like(ow), dob = zeros_like(ob);
  linear_backward(tensor(c["dy"], {b, t, d}), attn, ow, &dattn, dow, &dob, kCpu);
  attention_backward(qkv, saved, attn, dattn, heads, dqkv, kCpu);
  linear_backward(dqkv, x, iw, &dx, diw, &dib, kCpu);
  expect_close("mha dx", dx, c["dx"]);
  expect_close("mha d in_proj_weight", diw, c["din_w"]);
  expect_close("mha d in_proj_bias", dib, c["din_b"]);
  expect_close("mha d out_proj.weight", dow, c["dout_w"]);
  expect_close("mha d out_proj.bias", dob, c["dout_b"]);
}

TEST(Golden, TokensAndCrossEntropy) {
  const json c = load("embed_loss");
  const json& t = c["tokens"];
  const auto s = t["shape"].get<std::vector<int64_t>>();  // b d gh gw
  const int64_t p = s[2] * s[3];
  const Tensor patches = tensor(t["patches"], {s[0], s[1], s[2], s[3]}), cls = tensor(t["cls"], {s[1]});
  const Tensor pos = tensor(t["pos"], {p + 1, s[1]});
  Tensor y = Tensor::empty({s[0], p + 1, s[1]}, DType::f32);
  tokens_forward(patches, cls, pos, y, kCpu);
  expect_close("tokens y", y, t["y"]);
  Tensor dp = zeros_like(patches), dc = zeros_like(cls), dpos = zeros_like(pos);
  tokens_backward(tensor(t["dy"], y.shape()), dp, dc, dpos, kCpu);
  expect_close("tokens dpatches", dp, t["dpatches"]);
  expect_close("tokens dcls", dc, t["dcls"]);
  expect_close("tokens dpos", dpos, t["dpos"]);
  const json& ce = c["cross_entropy"];
  const Tensor logits = tensor(ce["logits"], {4, 5});
  const Tensor labels = Tensor::from_vector<int32_t>(ce["labels"].get<std::vector<int32_t>>(), {4});
  for (const json& k : ce["cases"]) {
    Tensor dl = zeros_like(logits);
    const double loss = softmax_cross_entropy(logits, labels, k["smoothing"].get<double>(), &dl, 1.0, kCpu);
    EXPECT_NEAR(loss, k["loss"].get<double>(), 1e-5 * std::abs(k["loss"].get<double>()));
    expect_close("cross entropy dlogits", dl, k["dlogits"]);
  }
}

// The reader's crop, flip and normalisation (kernels::decode_images, also its host decode) against torchvision's
// composition written out in PyTorch: pad, crop, flip, v / 255, (v - mean) / std. Ours is one fma(v, 1 / (255 std),
// -mean / std), PyTorch's three roundings: within 1e-6 + 1e-6 |want|.
TEST(Golden, ImageDecodeIsTorchvisionsCropFlipNormalize) {
  const json c = load("image_decode");
  const auto s = c["shape"].get<std::vector<int64_t>>();
  const Shape shape{s[0], s[1], s[2], s[3]};
  Tensor pixels = Tensor::empty(shape, DType::u8);
  const auto px = c["pixels"].get<std::vector<int>>();
  ASSERT_EQ(int64_t(px.size()), pixels.numel());
  for (size_t i = 0; i < px.size(); ++i) pixels.data<uint8_t>()[i] = uint8_t(px[i]);
  const auto cr = c["crops"].get<std::vector<int32_t>>();
  ASSERT_EQ(int64_t(cr.size()), 3 * s[0]);
  Tensor crops = Tensor::from_vector<int32_t>(cr, {s[0], 3});
  const auto norm = PixelNormalization::from_mean_std(s[1], vec(c["mean"]), vec(c["std"]));
  Tensor y = Tensor::empty(shape, DType::f32);
  decode_images(pixels, crops, norm, y, kCpu);
  expect_close("decoded images", y, c["y"], 1e-6, 1e-6);
}

TEST(Golden, SgdAdamWAndClipping) {
  const json c = load("optim");
  const int64_t n = int64_t(c["p0"].size());
  for (const json& run : c["runs"]) {
    const json& o = run["options"];
    Tensor p = tensor(c["p0"], {n}), b1 = Tensor::zeros({n}, DType::f32), b2 = Tensor::zeros({n}, DType::f32);
    for (size_t step = 0; step < c["grads"].size(); ++step) {
      const Tensor g = tensor(c["grads"][step], {n});
      if (run["kind"] == "sgd") {
        SgdOptions so{o["lr"].get<float>(), o.value("momentum", 0.0f), 0.0f, o.value("weight_decay", 0.0f),
                      o.value("nesterov", false)};
        sgd_step(p, g, b1, so, step == 0, kCpu);
      } else {
        AdamWOptions ao{o["lr"].get<float>(), o["betas"][0].get<float>(), o["betas"][1].get<float>(),
                        o["eps"].get<float>(), o["weight_decay"].get<float>()};
        adamw_step(p, g, b1, b2, ao, int64_t(step + 1), kCpu);
      }
      expect_close(run["kind"].get<std::string>() + " " + o.dump() + " step " + std::to_string(step), p,
                   run["after"][step], 1e-6, 1e-5);
    }
  }
  std::vector<Tensor> gs = {tensor(c["clip"]["grads"][0], {3}), tensor(c["clip"]["grads"][1], {2})};
  const double norm = c["clip"]["norm"].get<double>();
  ASSERT_GT(norm, 1.0) << "the fixture must exercise clipping";
  EXPECT_NEAR(clip_grad_norm(gs, 1.0, kCpu), norm, 1e-5 * norm);
  for (size_t i = 0; i < 2; ++i) expect_close("clipped", gs[i], c["clip"]["clipped"][i], 1e-6, 1e-5);
}

// ---- full training steps ---------------------------------------------------------------------------

// Mirrors hash_uniform() and det_init() of make_fixtures.py.
double hash_uniform(int k, int64_t i) {
  uint64_t z = (uint64_t(k) << 32) + uint64_t(i) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1p-52 - 1.0;
}
void det_init(int k, const std::string& name, float* p, int64_t n, int64_t shape0) {
  const auto ends_with = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
  for (int64_t i = 0; i < n; ++i) {
    const double s = hash_uniform(k, i);
    double v;
    if (ends_with("bias")) v = 0.1 * s;
    else if (name.find("token") != std::string::npos || name.find("pos_embedding") != std::string::npos) v = 0.02 * s;
    else if (n == shape0) v = 1.0 + 0.1 * s;
    else v = s * std::sqrt(3.0 / double(n / shape0));
    p[i] = float(v);
  }
}

struct Summary {
  double sum = 0, sumsq = 0;
  std::vector<double> at;
};
Summary summarize(const float* p, int64_t n, const json& want) {
  Summary s;
  for (int64_t i = 0; i < n; ++i) {
    s.sum += p[i];
    s.sumsq += double(p[i]) * p[i];
  }
  for (const json& i : want["idx"]) s.at.push_back(p[i.get<int64_t>()]);
  return s;
}

void expect_summary(const std::string& what, const Summary& got, const json& want, double scale_tol) {
  const double n = want["numel"].get<double>(), sumsq = want["sumsq"].get<double>(), sum = want["sum"].get<double>();
  const double rms = std::sqrt(sumsq / n);
  EXPECT_NEAR(got.sum, sum, 1e-3 * std::sqrt(n * sumsq) * scale_tol + 1e-9) << what << " sum";
  EXPECT_NEAR(got.sumsq, sumsq, 4e-3 * sumsq * scale_tol + 1e-12) << what << " sumsq";
  for (size_t i = 0; i < got.at.size(); ++i)
    EXPECT_NEAR(got.at[i], want["at"][i].get<double>(), 2e-3 * rms * scale_tol + 1e-9) << what << " entry " << want["idx"][i];
}

// layout: the ResNet's activation layout (unset: the model's default, NHWC on the CPU).
void run_step(const std::string& file, std::optional<kernels::Layout> layout = std::nullopt) {
  const json c = load(file);
  const json& cfg = c["config"];
  nn::ModelConfig mc;
  mc.in_channels = cfg["in_channels"];
  mc.image_size = cfg["image_size"];
  mc.classes = cfg["classes"];
  mc.patch = cfg.value("patch", 4);
  mc.layout = layout;
  auto model = nn::make_model(cfg["model"], mc);
  nn::ParameterArena& a = model->arena();
  ASSERT_EQ(size_t(a.count()), c["params"].size()) << file << ": parameter lists differ";
  float* master = a.master_params().data<float>();
  for (int k = 0; k < a.count(); ++k) {
    const nn::ParamInfo& pi = a.info(k);
    ASSERT_EQ(pi.shape.numel(), c["params"][size_t(k)]["numel"].get<int64_t>())
        << pi.name << " vs PyTorch " << c["params"][size_t(k)]["name"];
    det_init(k, pi.name, master + pi.offset, pi.shape.numel(), pi.shape[0]);
  }
  const std::vector<float> init = a.master_params().to_vector<float>();
  const int64_t b = int64_t(c["labels"].size());
  const Tensor x = tensor(c["x"], {b, mc.in_channels, mc.image_size, mc.image_size});
  const Tensor labels = Tensor::from_vector<int32_t>(c["labels"].get<std::vector<int32_t>>(), {b});
  const Tensor logits = model->forward(x);
  if (layout) {
    ASSERT_EQ(model->layout(), *layout);
  }
  expect_close(file + " logits", logits, c["logits"], 1e-4, 1e-3);
  Tensor dl = zeros_like(logits);
  const double loss = softmax_cross_entropy(logits, labels, 0.1, &dl, 1.0, kCpu);
  EXPECT_NEAR(loss, c["loss"].get<double>(), 1e-4 * c["loss"].get<double>()) << file;
  model->backward(dl);
  const float* g = a.grads().data<float>();
  for (int k = 0; k < a.count(); ++k) {
    const nn::ParamInfo& pi = a.info(k);
    expect_summary(file + " grad " + pi.name, summarize(g + pi.offset, pi.shape.numel(), c["grads"][size_t(k)]),
                   c["grads"][size_t(k)], 1.0);
  }
  const json& so = c["sgd"]["options"];
  nn::Sgd sgd(a, {so["lr"].get<float>(), so["momentum"].get<float>(), 0.0f, so["weight_decay"].get<float>(),
                  so["nesterov"].get<bool>()});
  sgd.step();
  for (int k = 0; k < a.count(); ++k) {
    const nn::ParamInfo& pi = a.info(k);
    // the update is lr * 1.9 * grad: its error is the gradient's, scaled
    const json& gw = c["grads"][size_t(k)];
    const json& pw = c["sgd"]["params"][size_t(k)];
    const double grms = std::sqrt(gw["sumsq"].get<double>() / gw["numel"].get<double>());
    const double prms = std::sqrt(pw["sumsq"].get<double>() / pw["numel"].get<double>());
    const Summary got = summarize(master + pi.offset, pi.shape.numel(), pw);
    for (size_t i = 0; i < got.at.size(); ++i)
      EXPECT_NEAR(got.at[i], pw["at"][i].get<double>(), 1e-6 + 1e-5 * prms + 0.19 * 2e-3 * grms)
          << file << " sgd " << pi.name;
  }
  // AdamW from the same initial weights and gradients
  std::copy(init.begin(), init.end(), master);
  const json& ao = c["adamw"]["options"];
  nn::AdamW adamw(a, {ao["lr"].get<float>(), ao["betas"][0].get<float>(), ao["betas"][1].get<float>(),
                      ao["eps"].get<float>(), ao["weight_decay"].get<float>()});
  adamw.step();
  int checked = 0;
  for (int k = 0; k < a.count(); ++k) {
    const nn::ParamInfo& pi = a.info(k);
    const json& gw = c["grads"][size_t(k)];
    const json& pw = c["adamw"]["params"][size_t(k)];
    const double grms = std::sqrt(gw["sumsq"].get<double>() / gw["numel"].get<double>());
    const Summary got = summarize(master + pi.offset, pi.shape.numel(), pw);
    for (size_t i = 0; i < got.at.size(); ++i) {
      if (std::abs(gw["at"][i].get<double>()) < 1e-2 * grms) continue;  // sign of a ~0 gradient: noise
      ++checked;
      EXPECT_NEAR(got.at[i], pw["at"][i].get<double>(), 1e-6 + 1e-4 * std::abs(pw["at"][i].get<double>()))
          << file << " adamw " << pi.name;
    }
  }
  EXPECT_GT(checked, a.count()) << "most sampled AdamW entries are checked";
}

TEST(Golden, ResNet20TrainingStep) { run_step("step_resnet20", kernels::Layout::nhwc); }
TEST(Golden, ResNet20TrainingStepNchw) { run_step("step_resnet20", kernels::Layout::nchw); }
TEST(Golden, VitTiTrainingStep) { run_step("step_vit_ti"); }

}  // namespace
