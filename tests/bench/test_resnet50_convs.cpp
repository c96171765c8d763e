// bench/kernels/resnet50_convs.h, the census of a ResNet-50 step's convolutions that hpdt-bench-conv-cuda times and
// scripts/gpu/summarize.py adds up, against the model it describes: nn::make_model("resnet50")'s convolution weights
// (every 4-D parameter), shape by shape and count by count, and the multiply-adds of an image's forward pass.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "hpdt/nn/model.h"
#include "resnet50_convs.h"

namespace {

using namespace hpdt;

TEST(ResNet50Convs, TheCensusHoldsTheModelsConvolutions) {
  nn::ModelConfig c;
  c.in_channels = 3;
  c.image_size = 224;
  c.classes = 1000;
  const auto model = nn::make_model("resnet50", c);
  using Weight = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // [c_out, c_in, kh, kw]
  std::map<Weight, int> in_model, in_census;
  for (const nn::ParamInfo& p : model->arena().infos())
    if (p.shape.ndim() == 4) ++in_model[{p.shape[0], p.shape[1], p.shape[2], p.shape[3]}];
  std::set<std::string> names;
  int convs = 0;
  for (const bench::ResNet50Conv& conv : bench::kResNet50Convs) {
    EXPECT_TRUE(names.insert(conv.name).second) << conv.name << " twice";
    in_census[{conv.c_out, conv.c_in, conv.k, conv.k}] += conv.per_step;
    convs += conv.per_step;
  }
  EXPECT_EQ(convs, 53);
  EXPECT_EQ(in_census, in_model);
}

// torchvision's resnet50 at 224 x 224: 4,089,184,256 multiply-adds an image, 2,048,000 of them the classifier's.
// Sizes and strides enter here (the weight shapes above do not show them).
TEST(ResNet50Convs, TheCensusHasResNet50sMultiplyAdds) {
  int64_t macs = 0;
  for (const bench::ResNet50Conv& conv : bench::kResNet50Convs) {
    const kernels::Conv2dShape s = conv.shape(1);
    EXPECT_EQ(s.out_h(), conv.stride == 2 || conv.stem() ? conv.size / 2 : conv.size) << conv.name;
    macs += conv.per_step * s.out_h() * s.out_w() * s.c_out * s.c_in * s.kh * s.kw;
  }
  EXPECT_EQ(macs, 4'089'184'256 - 2048 * 1000);
}

}  // namespace
