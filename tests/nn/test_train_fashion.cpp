// End to end on real data: ResNet-20 trained from scratch on a Fashion-MNIST subset (the
// dataset-fashion-mnist package) with SGD + momentum; the loss must fall and held-out accuracy must
// be far above chance. CI size: 40 steps of 32 images (1280 images). Longer run:
//   HPDT_FASHION_STEPS=400 build/cpu/tests/nn/test_nn_train_fashion
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpdt/kernels/loss.h"
#include "hpdt/nn/model.h"
#include "hpdt/nn/optim.h"

namespace {

using namespace hpdt;
using namespace hpdt::nn;

const std::string kDir = "/usr/share/datasets/fashion-mnist/";

// A minimal IDX reader (until io/ has one): big-endian header, then u8 data.
std::vector<uint8_t> read_idx(const std::string& path, std::vector<int32_t>& dims) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return {};
  auto u32 = [&] {
    unsigned char b[4] = {};
    if (gzread(f, b, 4) != 4) return uint32_t(0);
    return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
  };
  const uint32_t magic = u32();
  const int nd = int(magic & 0xff);
  dims.clear();
  size_t total = 1;
  for (int i = 0; i < nd; ++i) {
    dims.push_back(int32_t(u32()));
    total *= size_t(dims.back());
  }
  std::vector<uint8_t> data(total);
  const int got = gzread(f, data.data(), unsigned(total));
  gzclose(f);
  if (got != int(total)) return {};
  return data;
}

struct Split {
  std::vector<uint8_t> images, labels;
  int64_t n = 0;
};

Split load(const std::string& prefix) {
  Split s;
  std::vector<int32_t> di, dl;
  s.images = read_idx(kDir + prefix + "-images-idx3-ubyte.gz", di);
  s.labels = read_idx(kDir + prefix + "-labels-idx1-ubyte.gz", dl);
  if (!s.images.empty() && di.size() == 3 && di[1] == 28 && di[2] == 28 && dl.size() == 1 && dl[0] == di[0]) s.n = di[0];
  return s;
}

void make_batch(const Split& s, int64_t first, int64_t b, Tensor& x, Tensor& y) {
  float* px = x.data<float>();
  int32_t* py = y.data<int32_t>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t idx = (first + i) % s.n;
    for (int64_t j = 0; j < 784; ++j) px[i * 784 + j] = (float(s.images[size_t(idx * 784 + j)]) / 255.0f - 0.2860f) / 0.3530f;
    py[i] = s.labels[size_t(idx)];
  }
}

TEST(TrainFashionMnist, ResNet20LossFallsAndAccuracyBeatsChance) {
  const Split train = load("train"), test = load("t10k");
  ASSERT_GT(train.n, 0) << "Fashion-MNIST not found under " << kDir << " (Debian package dataset-fashion-mnist)";
  ASSERT_GT(test.n, 0);
  const int64_t steps = std::getenv("HPDT_FASHION_STEPS") ? std::atoll(std::getenv("HPDT_FASHION_STEPS")) : 40;
  const int64_t b = 32;
  ModelConfig c;
  c.in_channels = 1;
  c.image_size = 28;
  c.classes = 10;
  c.seed = 1;
  auto m = make_model("resnet20", c);
  Sgd opt(m->arena(), {0.05f, 0.9f, 0.0f, 5e-4f, true});
  Tensor x = Tensor::empty({b, 1, 28, 28}, DType::f32), y = Tensor::empty({b}, DType::i32);
  Tensor dl = Tensor::empty({b, 10}, DType::f32);
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    make_batch(train, step * b, b, x, y);
    Tensor logits = m->forward(x);
    losses.push_back(kernels::softmax_cross_entropy(logits, y, 0.0, &dl, 1.0, Stream()));
    m->backward(dl);
    opt.step();
  }
  const int64_t k = std::min<int64_t>(10, steps / 3);
  double head = 0, tail = 0;
  for (int64_t i = 0; i < k; ++i) {
    head += losses[size_t(i)] / double(k);
    tail += losses[losses.size() - 1 - size_t(i)] / double(k);
  }
  std::printf("loss first %lld steps %.4f, last %lld steps %.4f\n", (long long)k, head, (long long)k, tail);
  EXPECT_LT(tail, 0.7 * head);
  m->set_training(false);
  int64_t correct = 0;
  const int64_t eval_batches = 8;
  for (int64_t e = 0; e < eval_batches; ++e) {
    make_batch(test, e * b, b, x, y);
    const Tensor logits = m->forward(x);
    for (int64_t i = 0; i < b; ++i) {
      int best = 0;
      for (int j = 1; j < 10; ++j)
        if (logits.data<float>()[i * 10 + j] > logits.data<float>()[i * 10 + best]) best = j;
      correct += best == y.data<int32_t>()[i];
    }
  }
  const double acc = double(correct) / double(eval_batches * b);
  std::printf("held-out accuracy %.3f on %lld images\n", acc, (long long)(eval_batches * b));
  EXPECT_GT(acc, 0.3);  // chance is 0.1; measured 0.42 after 40 steps, 0.69 after 60
}

}  // namespace
