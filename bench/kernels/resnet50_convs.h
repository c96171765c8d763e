// The convolutions of one ResNet-50 training step (torchvision's v1.5, the stride in the bottleneck's 3x3: what
// nn::make_model("resnet50") builds) at 224 x 224: its 53 convolutions as 23 distinct shapes, each with how many
// times a step runs it. hpdt-bench-conv-cuda times every shape in every direction (the "spotlight" ones with every
// variant, the others with v2, v3 and cuDNN), and scripts/gpu/summarize.py adds the times up, weighted by
// per_step, into the convolutions' share of a step, ours against cuDNN's. The stem has no backward-data in a step
// (the images need no gradient: Conv2d::set_needs_input_grad(false)).
// test_resnet50_convs checks the table against the model: the same weight shapes the same number of times, and
// 4,087,136,256 multiply-adds an image (torchvision's 4,089,184,256 for resnet50 less the 2048 x 1000 classifier).
#pragma once

#include <cstdint>

#include "hpdt/kernels/cpu/conv.h"

namespace hpdt::bench {

struct ResNet50Conv {
  const char* name;  // <k>x<k>[s2]_<c_in>-<c_out>_<input size> (conv1_7x7s2_3-64_224: the stem)
  int64_t c_in, size, c_out, k, stride, pad;
  int per_step;    // convolutions of this shape in a step
  bool spotlight;  // timed with every variant (v1, v3's pipelines, f32 too), the others with v2, v3 and cuDNN
  bool stem() const { return c_in == 3; }
  kernels::Conv2dShape shape(int64_t batch) const { return {batch, c_in, size, size, c_out, k, k, stride, pad}; }
};

inline constexpr ResNet50Conv kResNet50Convs[] = {
    {"conv1_7x7s2_3-64_224", 3, 224, 64, 7, 2, 3, 1, true},
    // layer1 (56 x 56): block 0's conv1, every block's conv2, conv3 (and block 0's projection), blocks 1-2's conv1
    {"1x1_64-64_56", 64, 56, 64, 1, 1, 0, 1, false},
    {"3x3_64-64_56", 64, 56, 64, 3, 1, 1, 3, true},
    {"1x1_64-256_56", 64, 56, 256, 1, 1, 0, 4, false},
    {"1x1_256-64_56", 256, 56, 64, 1, 1, 0, 2, true},
    // layer2 (56 -> 28): block 0's conv1, its strided conv2 and projection; then at 28 x 28
    {"1x1_256-128_56", 256, 56, 128, 1, 1, 0, 1, false},
    {"3x3s2_128-128_56", 128, 56, 128, 3, 2, 1, 1, false},
    {"1x1s2_256-512_56", 256, 56, 512, 1, 2, 0, 1, false},
    {"1x1_128-512_28", 128, 28, 512, 1, 1, 0, 4, false},
    {"1x1_512-128_28", 512, 28, 128, 1, 1, 0, 3, false},
    {"3x3_128-128_28", 128, 28, 128, 3, 1, 1, 3, false},
    // layer3 (28 -> 14)
    {"1x1_512-256_28", 512, 28, 256, 1, 1, 0, 1, false},
    {"3x3s2_256-256_28", 256, 28, 256, 3, 2, 1, 1, false},
    {"1x1s2_512-1024_28", 512, 28, 1024, 1, 2, 0, 1, false},
    {"1x1_256-1024_14", 256, 14, 1024, 1, 1, 0, 6, false},
    {"1x1_1024-256_14", 1024, 14, 256, 1, 1, 0, 5, true},
    {"3x3_256-256_14", 256, 14, 256, 3, 1, 1, 5, true},
    // layer4 (14 -> 7)
    {"1x1_1024-512_14", 1024, 14, 512, 1, 1, 0, 1, false},
    {"3x3s2_512-512_14", 512, 14, 512, 3, 2, 1, 1, false},
    {"1x1s2_1024-2048_14", 1024, 14, 2048, 1, 2, 0, 1, true},
    {"1x1_512-2048_7", 512, 7, 2048, 1, 1, 0, 3, false},
    {"1x1_2048-512_7", 2048, 7, 512, 1, 1, 0, 2, false},
    {"3x3_512-512_7", 512, 7, 512, 3, 1, 1, 2, false},
};

}  // namespace hpdt::bench
