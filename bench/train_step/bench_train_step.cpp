// One training step (forward, cross-entropy, backward, SGD with Nesterov momentum) of a model on
// random images, timed per step after warm-up; prints one JSON line:
//   {"impl":"hpdt","model":"resnet20","batch":128,"threads":2,"step_s":[...],"img_per_s_median":...}
// The PyTorch twin is bench/peers/torch_train_step.py; bench/peers/compare_train_step.py runs both
// interleaved and writes results/.
//   OMP_NUM_THREADS=2 hpdt-bench-train-step --model vit_ti --batch 128 --steps 10
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "hpdt/core/philox.h"
#include "hpdt/kernels/loss.h"
#include "hpdt/nn/model.h"
#include "hpdt/nn/optim.h"

int main(int argc, char** argv) {
  CLI::App app{"hpdt CPU training-step benchmark"};
  std::string model = "resnet20";
  int64_t batch = 128, steps = 10, warmup = 3, image = 28, channels = 1, patch = 4, classes = 10;
  app.add_option("--model", model, "resnet20 | resnet56 | resnet18 | resnet34 | resnet50 | vit_ti | vit_s | vit_b");
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--image", image)->check(CLI::PositiveNumber);
  app.add_option("--channels", channels)->check(CLI::PositiveNumber);
  app.add_option("--patch", patch)->check(CLI::PositiveNumber);
  app.add_option("--classes", classes)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    hpdt::nn::ModelConfig c;
    c.in_channels = channels;
    c.image_size = image;
    c.classes = classes;
    c.patch = patch;
    auto m = hpdt::nn::make_model(model, c);
    hpdt::nn::Sgd opt(m->arena(), {0.01f, 0.9f, 0.0f, 5e-4f, true});
    hpdt::Tensor x = hpdt::Tensor::empty({batch, channels, image, image}, hpdt::DType::f32);
    hpdt::Tensor y = hpdt::Tensor::empty({batch}, hpdt::DType::i32);
    hpdt::Tensor dl = hpdt::Tensor::empty({batch, classes}, hpdt::DType::f32);
    hpdt::Rng rng(7);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.normal();
    for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = int32_t(rng.below(uint32_t(classes)));
    std::vector<double> times;
    double loss = 0;
    for (int64_t s = 0; s < warmup + steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      const hpdt::Tensor logits = m->forward(x);
      loss = hpdt::kernels::softmax_cross_entropy(logits, y, 0.0, &dl, 1.0, hpdt::Stream());
      m->backward(dl);
      opt.step();
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= warmup) times.push_back(dt);
    }
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    std::printf("{\"impl\":\"hpdt\",\"model\":\"%s\",\"batch\":%lld,\"threads\":%d,\"params\":%lld,\"loss\":%.6f,"
                "\"img_per_s_median\":%.3f,\"step_s\":[",
                model.c_str(), (long long)batch, omp_get_max_threads(), (long long)m->num_parameters(), loss,
                double(batch) / median);
    for (size_t i = 0; i < times.size(); ++i) std::printf("%s%.6f", i ? "," : "", times[i]);
    std::printf("]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpdt-bench-train-step: %s\n", e.what());
    return 1;
  }
  return 0;
}
