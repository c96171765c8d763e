// hpdt-train's options: one struct, filled from the command line (CLI11) and an optional config file
// (`--config FILE`, INI/TOML `key = value` lines with the long option names) whose values the command
// line overrides. Validation of names (model, algo, precision, ...) happens here so that a bad value
// stops every rank before MPI work starts, with a message naming the flag.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hpdt::train {

struct TrainOptions {
  std::string model = "resnet20";   // resnet20|resnet56|resnet18|resnet34|resnet50|vit-ti|vit-s|vit-b
  int patch = 0;                    // ViT patch size (0: 16 for images >= 224, else 4)
  int vit_depth = 0;                // ViT transformer blocks (0: the model's own, 12)
  std::string data;                 // dataset file (train split); empty: Fashion-MNIST in the cache dir
  std::string test_data;            // test split; empty: derived from `data` (train -> test) or the cache
  std::string cache_dir;            // where Fashion-MNIST is prepared on first use
  int epochs = 1;
  long max_steps = 0;               // stop after this many optimizer steps in total (0: run all epochs)
  long train_samples = 0;           // use only the first N training samples (0: all) — short runs
  long eval_samples = 0;            // evaluate on the first N test samples (0: all)
  int batch = 128;                  // per rank, per micro-batch
  int accum_steps = 1;              // micro-batches per optimizer step
  double lr = 0.1;                  // base learning rate at the reference batch
  int lr_ref_batch = 256;           // linear scaling rule: lr * global_batch / lr_ref_batch
  double warmup_epochs = 1;         // linear warmup, then cosine decay to 0
  std::string optimizer = "sgd";    // sgd|adamw
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 5e-4;
  double clip_norm = 0;             // 0: no clipping
  double label_smoothing = 0;
  double dropout = 0;               // ViT: embedding, attention output and MLP dropout
  std::string precision = "fp32";   // fp32|fp16|bf16
  std::string algo = "auto";        // ring|tree|rhd|hier|mpi|nccl|auto
  std::string tuning_file;          // for --algo auto
  std::string compress = "none";    // none|fp16|bf16|topk:R|qsgd:B|powersgd:R
  double bucket_mb = 25;
  bool overlap = true;              // all-reduce buckets during backward (false: after backward)
  bool sync_bn = false;
  std::string checkpoint_dir;
  long checkpoint_every = 0;        // steps; 0: only at the end and on preemption
  int keep_checkpoints = 3;
  bool resume = false;
  std::string device = "cpu";       // cpu|cuda
  std::string kernels = "ours";     // ours|vendor: GEMM/conv on CUDA by hpdt's kernels or cuBLAS/cuDNN
  std::string gemm = "v3";          // v2|v3: our 16-bit GEMM on CUDA (kernels::GemmChoice)
  std::string conv = "v3";          // v2|v3|find: our NHWC 16-bit convolutions on CUDA (kernels::ConvChoice)
  std::string gemm_tuning = "heuristic";  // heuristic|find: GEMM v3's plan per shape (kernels::GemmTuning)
  std::string cudnn_algo = "heuristic";  // heuristic|find: cuDNN's algorithm under --kernels vendor (kernels::CudnnAlgo)
  std::string layout = "auto";           // auto|nchw|nhwc: ResNet activations (auto: NHWC, on either device)
  bool cuda_graph = false;               // --device cuda: each step's forward and backward replayed as one CUDA graph
  std::string gelu = "separate";  // fused|separate: ViT's MLP GELU in fc1's/fc2's GEMM epilogues or a layer of its own
  unsigned long long seed = 42;
  std::string timeline;             // Chrome/Perfetto trace
  std::string metrics;              // JSON lines
  std::string nccl_debug;           // directory for per-rank NCCL_DEBUG files
  int threads = 0;                  // OpenMP threads per rank (0: cores / local ranks)
  int prefetch = 4;
  int decode_threads = 0;  // the reader's decode threads (0: on the GPU min(8, the rank's cores - 1), on the CPU 1)
  std::string decode = "auto";      // auto|host|device: batches decoded by the reader, or from u8 where the model runs
  long shuffle_block = 1;           // shuffle blocks of this many consecutive samples (1: per-sample)
  long window_batches = 1;          // interleaved windows of this many global batches (1: off)
  bool augment = true;
  bool eval = true;
  bool force = false;               // allow overwriting --metrics/--timeline files of an earlier run
  std::string progress = "auto";    // auto|bar|lines|off
  int log_every = 20;               // plain-line progress every N steps
};

// Parses argv; on --help prints usage and returns std::nullopt (exit 0); on a bad value throws
// hpdt::Error naming the flag. `argv` may contain `--config FILE`.
std::optional<TrainOptions> parse_train_options(int argc, const char* const* argv, std::string* help_text = nullptr);

// The canonical lists, for messages and tests.
const std::vector<std::string>& model_names();
const std::vector<std::string>& algo_names();

}  // namespace hpdt::train
