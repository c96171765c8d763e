// The trainer's pieces that need no model: option parsing and validation (including the config file
// the command line overrides), the LR schedule, progress formatting, metrics files that refuse to
// overwrite an earlier run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hpdt/core/error.h"
#include "metrics.h"
#include "options.h"
#include "progress.h"
#include "schedule.h"

namespace fs = std::filesystem;
using namespace hpdt::train;

namespace {
TrainOptions parse(std::vector<const char*> args) {
  args.insert(args.begin(), "hpdt-train");
  auto o = parse_train_options(int(args.size()), args.data());
  EXPECT_TRUE(o.has_value());
  return *o;
}
std::string parse_error(std::vector<const char*> args) {
  args.insert(args.begin(), "hpdt-train");
  try {
    parse_train_options(int(args.size()), args.data());
  } catch (const hpdt::Error& e) {
    return e.what();
  }
  return "";
}
fs::path temp_dir() {
  auto d = fs::temp_directory_path() / ("hpdt-train-test-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(TrainOptions, DefaultsAndValues) {
  auto o = parse({"--model", "vit-ti", "--batch", "64", "--algo", "ring", "--compress", "topk:0.01", "--precision",
                  "bf16", "--sync-bn", "--overlap", "false"});
  EXPECT_EQ(o.model, "vit-ti");
  EXPECT_EQ(o.batch, 64);
  EXPECT_EQ(o.algo, "ring");
  EXPECT_EQ(o.compress, "topk:0.01");
  EXPECT_EQ(o.precision, "bf16");
  EXPECT_TRUE(o.sync_bn);
  EXPECT_FALSE(o.overlap);
  EXPECT_EQ(parse({}).model, "resnet20");
  EXPECT_EQ(parse({}).kernels, "ours");
  const auto g = parse({"--device", "cuda", "--kernels", "vendor", "--algo", "nccl"});
  EXPECT_EQ(g.device, "cuda");
  EXPECT_EQ(g.kernels, "vendor");
  EXPECT_EQ(g.algo, "nccl");
  EXPECT_EQ(parse({}).gemm, "v3");
  EXPECT_EQ(parse({}).conv, "v3");  // since the H200 run of 2026-11-29
  EXPECT_EQ(parse({}).layout, "auto");
  EXPECT_EQ(parse({}).gelu, "separate");
  EXPECT_EQ(parse({"--model", "vit-ti", "--gelu", "fused"}).gelu, "fused");
  EXPECT_EQ(parse({"--device", "cuda", "--gemm", "v2"}).gemm, "v2");
  EXPECT_EQ(parse({"--device", "cuda", "--conv", "v2"}).conv, "v2");
  EXPECT_EQ(parse({"--device", "cuda", "--conv", "find"}).conv, "find");
}

TEST(TrainOptions, BadValuesNameTheFlag) {
  EXPECT_NE(parse_error({"--model", "resnet21"}).find("--model 'resnet21' is not one of"), std::string::npos);
  EXPECT_NE(parse_error({"--algo", "butterfly"}).find("--algo"), std::string::npos);
  EXPECT_NE(parse_error({"--precision", "fp8"}).find("--precision"), std::string::npos);
  EXPECT_NE(parse_error({"--batch", "0"}).find("--batch: must be > 0, got 0 (see --help)"), std::string::npos);
  EXPECT_NE(parse_error({"--batch", "many"}).find("--batch: 'many' is not a number"), std::string::npos);
  EXPECT_NE(parse_error({"--momentum", "2"}).find("--momentum: must be in [0, 1], got 2"), std::string::npos);
  EXPECT_EQ(parse_error({"--model", "resnet21"}).find("hpdt-train"), std::string::npos);  // main names the program
  EXPECT_NE(parse_error({"--no-such-flag"}).find("no-such-flag"), std::string::npos);
  EXPECT_NE(parse_error({"--resume"}).find("--checkpoint-dir"), std::string::npos);
  EXPECT_NE(parse_error({"--algo", "nccl"}).find("--device cuda"), std::string::npos);
  EXPECT_NE(parse_error({"--kernels", "cudnn"}).find("--kernels 'cudnn' is not one of ours|vendor"), std::string::npos);
  EXPECT_NE(parse_error({"--kernels", "vendor"}).find("--kernels vendor needs --device cuda"), std::string::npos);
  EXPECT_NE(parse_error({"--gemm", "v4"}).find("--gemm 'v4' is not one of v2|v3"), std::string::npos);
  EXPECT_NE(parse_error({"--gemm", "v3"}).find("--gemm v3 needs --device cuda and --kernels ours"), std::string::npos);
  EXPECT_NE(parse_error({"--device", "cuda", "--kernels", "vendor", "--gemm", "v2"}).find("--gemm v2 needs"),
            std::string::npos);
  EXPECT_NE(parse_error({"--conv", "v4"}).find("--conv 'v4' is not one of v2|v3|find"), std::string::npos);
  EXPECT_NE(parse_error({"--conv", "v3"}).find("--conv v3 needs --device cuda and --kernels ours"), std::string::npos);
  EXPECT_NE(parse_error({"--conv", "find"}).find("--conv find needs --device cuda and --kernels ours"),
            std::string::npos);
  EXPECT_NE(parse_error({"--cudnn-algo", "fastest"}).find("--cudnn-algo 'fastest' is not one of heuristic|find"),
            std::string::npos);
  EXPECT_NE(parse_error({"--device", "cuda", "--cudnn-algo", "find"}).find("--cudnn-algo find needs --device cuda and "
                                                                          "--kernels vendor"),
            std::string::npos);
  EXPECT_EQ(parse({"--device", "cuda", "--kernels", "vendor", "--cudnn-algo", "find"}).cudnn_algo, "find");
  EXPECT_EQ(parse({}).cudnn_algo, "heuristic");
  EXPECT_NE(parse_error({"--gemm-tuning", "fast"}).find("--gemm-tuning 'fast' is not one of heuristic|find"),
            std::string::npos);
  EXPECT_NE(parse_error({"--gemm-tuning", "find"}).find("--gemm-tuning find needs --device cuda and --kernels ours"),
            std::string::npos);
  EXPECT_NE(parse_error({"--device", "cuda", "--kernels", "vendor", "--gemm-tuning", "find"})
                .find("--gemm-tuning find needs --device cuda and --kernels ours"),
            std::string::npos);
  EXPECT_NE(parse_error({"--device", "cuda", "--gemm", "v2", "--gemm-tuning", "find"})
                .find("--gemm-tuning find tunes GEMM v3, not --gemm v2"),
            std::string::npos);
  EXPECT_EQ(parse({"--device", "cuda", "--gemm-tuning", "find"}).gemm_tuning, "find");
  EXPECT_EQ(parse({}).gemm_tuning, "heuristic");
  EXPECT_NE(parse_error({"--device", "cuda", "--algo", "nccl", "--compress", "topk:0.01"}).find("--algo nccl"),
            std::string::npos);
}

// --cuda-graph: off by default; on the GPU only, and not where a step draws host state the graph would freeze (dropout)
TEST(TrainOptions, CudaGraphNeedsTheGpuAndNoHostStateInTheStep) {
  EXPECT_FALSE(parse({}).cuda_graph);
  EXPECT_TRUE(parse({"--device", "cuda", "--cuda-graph"}).cuda_graph);
  EXPECT_TRUE(parse({"--device", "cuda", "--cuda-graph", "--model", "vit-ti", "--precision", "fp16", "--accum-steps",
                     "3", "--algo", "ring", "--compress", "topk:0.1"})
                  .cuda_graph);
  EXPECT_NE(parse_error({"--cuda-graph"}).find("--cuda-graph needs --device cuda"), std::string::npos);
  EXPECT_NE(parse_error({"--device", "cuda", "--cuda-graph", "--model", "vit-ti", "--dropout", "0.1"})
                .find("--cuda-graph: not with --dropout 0.1"),
            std::string::npos);
  // (with --sync-bn: parsed; the run refuses it where ranks share a GPU, train.cuda-emu-graph)
  EXPECT_TRUE(parse({"--device", "cuda", "--cuda-graph", "--sync-bn"}).sync_bn);
  auto dir = temp_dir();
  auto cfg = (dir / "graph.toml").string();
  std::ofstream(cfg) << "device = \"cuda\"\ncuda-graph = true\n";
  EXPECT_TRUE(parse({"--config", cfg.c_str()}).cuda_graph);
  fs::remove_all(dir);
}

TEST(TrainOptions, ConfigFileIsOverriddenByCommandLine) {
  auto dir = temp_dir();
  auto cfg = (dir / "train.toml").string();
  std::ofstream(cfg) << "model = \"vit-ti\"\nbatch = 32\nlr = 0.5\nepochs = 3\n";
  auto o = parse({"--config", cfg.c_str(), "--batch", "16"});
  EXPECT_EQ(o.model, "vit-ti");
  EXPECT_EQ(o.batch, 16);  // the command line wins
  EXPECT_DOUBLE_EQ(o.lr, 0.5);
  EXPECT_EQ(o.epochs, 3);
  std::ofstream(cfg) << "model = \"lenet\"\n";
  EXPECT_NE(parse_error({"--config", cfg.c_str()}).find("--model 'lenet'"), std::string::npos);
  fs::remove_all(dir);
}

TEST(LrSchedule, LinearScalingWarmupCosine) {
  auto s = LrSchedule::make(0.1, 512, 256, 10, 110);
  EXPECT_DOUBLE_EQ(s.peak, 0.2);
  EXPECT_DOUBLE_EQ(s.at(0), 0.02);
  EXPECT_DOUBLE_EQ(s.at(9), 0.2);
  EXPECT_DOUBLE_EQ(s.at(10), 0.2);
  EXPECT_NEAR(s.at(60), 0.1, 1e-12);  // half-way through the cosine
  EXPECT_NEAR(s.at(110), 0.0, 1e-12);
  for (long i = 11; i < 110; ++i) EXPECT_LT(s.at(i), s.at(i - 1));
  auto no_warmup = LrSchedule::make(0.1, 256, 256, 0, 5);
  EXPECT_DOUBLE_EQ(no_warmup.at(0), 0.1);
}

TEST(Progress, DurationsAndPlainLines) {
  EXPECT_EQ(format_duration(5), "00:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(NAN), "--:--");
  auto dir = temp_dir();
  auto path = (dir / "progress.txt").string();
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(Progress::resolve("auto", f), Progress::Mode::lines);  // a file is not a terminal
  Progress p(Progress::Mode::lines, f, 2);
  p.start_epoch(0, 2, 4);
  for (long s = 1; s <= 4; ++s) p.update(s, 1.0 / double(s), 0.5, 100, 0.1);
  p.finish_epoch("epoch 1 done");
  std::fclose(f);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("epoch 1/2 step 2/4 loss 0.5000"), std::string::npos) << text;
  EXPECT_NE(text.find("step 4/4"), std::string::npos);
  EXPECT_EQ(text.find("step 1/4"), std::string::npos);  // every 2nd step only
  EXPECT_EQ(text.find('\r'), std::string::npos);        // no terminal control in a log file
  fs::remove_all(dir);
}

TEST(Metrics, RefusesToOverwriteUnlessForcedOrResumed) {
  auto dir = temp_dir();
  auto path = (dir / "m.jsonl").string();
  {
    MetricsWriter w;
    w.open(path, false, false);
    w.write({{"type", "step"}, {"step", 1}});
  }
  {
    MetricsWriter w;
    EXPECT_THROW(w.open(path, false, false), hpdt::Error);
  }
  {
    MetricsWriter w;
    w.open(path, true, false);  // --resume appends
    w.write({{"type", "step"}, {"step", 2}});
  }
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) EXPECT_EQ(nlohmann::json::parse(line)["step"], ++n);
  EXPECT_EQ(n, 2);
  fs::remove_all(dir);
}
