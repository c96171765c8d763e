#include "options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <sstream>

#include "hpdt/core/cli_checks.h"
#include "hpdt/core/error.h"

namespace hpdt::train {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"resnet20", "resnet56", "resnet18", "resnet34",
                                                 "resnet50", "vit-ti",   "vit-s",    "vit-b"};
  return names;
}
const std::vector<std::string>& algo_names() {
  static const std::vector<std::string> names = {"ring", "tree", "rhd", "hier", "mpi", "nccl", "shm", "auto"};
  return names;
}

namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "|") + x;
  return s;
}
void require_one_of(const std::string& flag, const std::string& value, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end())
    HPDT_FAIL(flag, " '", value, "' is not one of ", join(allowed));
}
}  // namespace

std::optional<TrainOptions> parse_train_options(int argc, const char* const* argv, std::string* help_text) {
  TrainOptions o;
  CLI::App app{"hpdt-train: data-parallel training of ResNet and ViT across MPI ranks"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
  app.set_config("--config", "", "read options from an INI/TOML file (long option names); the command line wins");
  app.add_option("--model", o.model, join(model_names()));
  app.add_option("--patch", o.patch, "ViT patch size; must divide the image size (0: 16 from 224 px, else 4)")
      ->check(hpdt::cli::non_negative());
  app.add_option("--data", o.data, "training split (HDF5, hpdt format); default: Fashion-MNIST prepared in --cache-dir");
  app.add_option("--test-data", o.test_data, "test split; default: the file beside --data with 'train' -> 'test'");
  app.add_option("--cache-dir", o.cache_dir, "where Fashion-MNIST is prepared on first use (default $HPDT_CACHE or ~/.cache/hpdt)");
  app.add_option("--epochs", o.epochs)->check(hpdt::cli::positive());
  app.add_option("--max-steps", o.max_steps, "stop after this many optimizer steps (0: all epochs)")
      ->check(hpdt::cli::non_negative());
  app.add_option("--train-samples", o.train_samples, "use the first N training samples (0: all)")
      ->check(hpdt::cli::non_negative());
  app.add_option("--eval-samples", o.eval_samples, "evaluate on the first N test samples (0: all)")
      ->check(hpdt::cli::non_negative());
  app.add_option("--batch", o.batch, "per-rank micro-batch size")->check(hpdt::cli::positive());
  app.add_option("--accum-steps", o.accum_steps, "micro-batches per optimizer step")->check(hpdt::cli::positive());
  app.add_option("--lr", o.lr, "base learning rate at --lr-ref-batch (linear scaling rule)")
      ->check(hpdt::cli::positive());
  app.add_option("--lr-ref-batch", o.lr_ref_batch)->check(hpdt::cli::positive());
  app.add_option("--warmup-epochs", o.warmup_epochs, "linear warmup, then cosine decay")
      ->check(hpdt::cli::non_negative());
  app.add_option("--optimizer", o.optimizer, "sgd|adamw");
  app.add_option("--momentum", o.momentum)->check(hpdt::cli::in_range(0.0, 1.0));
  app.add_flag("--nesterov", o.nesterov);
  app.add_option("--weight-decay", o.weight_decay)->check(hpdt::cli::non_negative());
  app.add_option("--clip-norm", o.clip_norm, "clip gradients to this global norm (0: off)")
      ->check(hpdt::cli::non_negative());
  app.add_option("--label-smoothing", o.label_smoothing)->check(hpdt::cli::in_range(0.0, 1.0));
  app.add_option("--vit-depth", o.vit_depth,
                 "ViT transformer blocks (0: the model's own, 12): a shallower model of the same width for smoke "
                 "runs; recorded in checkpoints, so a resume needs the same")
      ->check(hpdt::cli::non_negative());
  app.add_option("--dropout", o.dropout,
                 "ViT dropout probability (embedding, attention output, MLP; 0: off). The masks depend on each "
                 "sample's position in the global batch, not on the rank count; checkpoints keep their position");
  app.add_option("--precision", o.precision, "fp32|fp16|bf16 (fp16 uses dynamic loss scaling)");
  app.add_option("--algo", o.algo, join(algo_names()));
  app.add_option("--tuning-file", o.tuning_file, "tuning file written by hpdt-allreduce-perf, for --algo auto");
  app.add_option("--compress", o.compress, "none|fp16|bf16|topk:R|qsgd:B|powersgd:R");
  app.add_option("--bucket-mb", o.bucket_mb, "gradient bucket size in MiB")->check(hpdt::cli::positive());
  app.add_option("--overlap", o.overlap, "all-reduce buckets during backward (true) or after it (false)");
  app.add_flag("--sync-bn", o.sync_bn,
               "batch-norm statistics over all ranks (--device cuda with a GPU per rank: by NCCL on the compute "
               "stream; otherwise by MPI on the host)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir);
  app.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (0: end and preemption only)")
      ->check(hpdt::cli::non_negative());
  app.add_option("--keep-checkpoints", o.keep_checkpoints)->check(hpdt::cli::positive());
  app.add_flag("--resume", o.resume, "continue from the newest checkpoint in --checkpoint-dir");
  app.add_option("--device", o.device, "cpu|cuda (cuda: one GPU per rank, local rank % GPUs on the node)");
  app.add_flag("--cuda-graph", o.cuda_graph,
               "--device cuda: each step's forward and backward (all its micro-batches) captured into a CUDA graph "
               "once the eager steps before it allocate no new device memory, and replayed: one launch a step; "
               "captured again after each evaluation and when the fp16 loss scale moves. On several ranks in parts, "
               "one a gradient bucket, each bucket averaged while the parts after it run; the optimizer runs as "
               "before (not with --dropout; with --sync-bn only with a GPU per rank)");
  app.add_option("--kernels", o.kernels, "ours|vendor: GEMM and convolution on the GPU by hpdt's kernels or cuBLAS/cuDNN (--device cuda)");
  app.add_option("--gemm", o.gemm, "v3|v2: our GEMM for 16-bit inputs on the GPU (v3, the default: Hopper wgmma + TMA where it can run, v2 elsewhere; --device cuda, --kernels ours)");
  app.add_option("--gemm-tuning", o.gemm_tuning, "heuristic|find: how GEMM v3 picks its pipeline and block tile for each GEMM shape (heuristic, the default: by rule; find: the fastest of them, timed at the shape's first call; --device cuda, --kernels ours, --gemm v3)");
  app.add_option("--cudnn-algo", o.cudnn_algo, "heuristic|find: how --kernels vendor picks cuDNN's convolution algorithms (heuristic, the default: the first deterministic one cuDNN's heuristics rank; find: the fastest cuDNN's Find times at first use, deterministic or not, as PyTorch's cudnn.benchmark)");
  app.add_option("--conv", o.conv,
                 "v2|v3|find: our NHWC convolutions for 16-bit inputs on the GPU (find: per convolution the faster of "
                 "v2 and v3, timed at its first call; v3, the default: the 1x1 stride-1 ones on GEMM v3, the others "
                 "with 64k input channels on conv v3, Hopper wgmma + TMA, where they can run, v2 elsewhere; v2: v2 for "
                 "all; --device cuda, --kernels ours)");
  app.add_option("--layout", o.layout,
                 "auto|nchw|nhwc: activation layout of the ResNets, on either device (auto: nhwc, on the CPU the "
                 "fast direct convolution, on CUDA with conv v3 the fastest ResNet-50 step on the H200)");
  app.add_option("--gelu", o.gelu,
                 "fused|separate: the ViTs' MLP GELU in the epilogues of fc1's forward and fc2's backward-data GEMMs "
                 "(fused) or a layer of its own (separate, the default: a plain GEMM and an elementwise pass each way, "
                 "8 % faster than fused in ViT-B/16's step on the H200)");
  app.add_option("--seed", o.seed);
  app.add_option("--timeline", o.timeline, "write a Chrome/Perfetto trace (one track per rank)");
  app.add_option("--metrics", o.metrics, "write JSON-lines metrics");
  app.add_option("--nccl-debug", o.nccl_debug, "capture NCCL_DEBUG=INFO per rank in DIR and report at the end");
  app.add_option("--threads", o.threads, "OpenMP threads per rank (0: cores / ranks on the node)")
      ->check(hpdt::cli::non_negative());
  app.add_option("--prefetch", o.prefetch, "batches the reader keeps ready")->check(hpdt::cli::positive());
  app.add_option("--decode-threads", o.decode_threads,
                 "threads that decode a training batch (0, the default: on the GPU min(8, the rank's cores - 1), on "
                 "the CPU 1, beside the step's own threads)")
      ->check(hpdt::cli::non_negative());
  app.add_option("--decode", o.decode,
                 "auto|host|device: where batches are decoded (crop, flip, normalisation): on the reader's threads "
                 "(host), or where the model runs from the u8 pixels (device: on the GPU a quarter of the bytes to "
                 "copy and no cast; the same values). auto: device on the GPU, host on the CPU");
  app.add_option("--shuffle-block", o.shuffle_block,
                 "shuffle blocks of this many consecutive samples, mixed within each global batch (1: per-sample "
                 "shuffle); larger blocks turn random reads into sequential ones on slow disks")
      ->check(hpdt::cli::positive());
  app.add_option("--window-batches", o.window_batches,
                 "with --shuffle-block K > 1: interleave windows of this many global batches so that every rank "
                 "reads one contiguous stretch per window (1: off; docs/io.md)")
      ->check(hpdt::cli::positive());
  app.add_option("--augment", o.augment, "random crop + flip on training batches");
  app.add_option("--eval", o.eval, "evaluate on the test split after every epoch");
  app.add_flag("--force", o.force, "overwrite --metrics/--timeline files left by an earlier run");
  app.add_option("--progress", o.progress, "auto|bar|lines|off");
  app.add_option("--log-every", o.log_every, "steps between progress lines when not a terminal")
      ->check(hpdt::cli::positive());
  if (help_text) *help_text = app.help();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    HPDT_FAIL(e.what(), " (see --help)");
  }
  require_one_of("--model", o.model, model_names());
  require_one_of("--algo", o.algo, algo_names());
  require_one_of("--optimizer", o.optimizer, {"sgd", "adamw"});
  require_one_of("--precision", o.precision, {"fp32", "fp16", "bf16"});
  require_one_of("--device", o.device, {"cpu", "cuda"});
  require_one_of("--kernels", o.kernels, {"ours", "vendor"});
  require_one_of("--gemm", o.gemm, {"v2", "v3"});
  require_one_of("--conv", o.conv, {"v2", "v3", "find"});
  require_one_of("--cudnn-algo", o.cudnn_algo, {"heuristic", "find"});
  require_one_of("--gemm-tuning", o.gemm_tuning, {"heuristic", "find"});
  require_one_of("--layout", o.layout, {"auto", "nchw", "nhwc"});
  require_one_of("--gelu", o.gelu, {"fused", "separate"});
  require_one_of("--decode", o.decode, {"auto", "host", "device"});
  if (o.dropout != 0 && o.model.rfind("vit", 0) != 0)
    HPDT_FAIL("--dropout is for the ViTs (", o.model, " has no dropout layers)");
  if (o.vit_depth != 0 && o.model.rfind("vit", 0) != 0)
    HPDT_FAIL("--vit-depth is for the ViTs (", o.model, " is a ResNet: its depth is in its name)");
  if (!(o.dropout >= 0 && o.dropout < 1)) HPDT_FAIL("--dropout ", o.dropout, " is not in [0, 1)");
  if (o.layout == "nhwc" && o.model.rfind("resnet", 0) != 0)
    HPDT_FAIL("--layout nhwc is for the ResNets (", o.model, " runs on tokens after its patch convolution)");
  if (app.count("--gelu") > 0 && o.model.rfind("vit", 0) != 0)
    HPDT_FAIL("--gelu ", o.gelu, " is for the ViTs (", o.model, " has no GELU)");
  require_one_of("--progress", o.progress, {"auto", "bar", "lines", "off"});
  if (o.resume && o.checkpoint_dir.empty()) HPDT_FAIL("--resume needs --checkpoint-dir");
  if (o.algo == "nccl" && o.device != "cuda") HPDT_FAIL("--algo nccl needs --device cuda");
  if (o.kernels == "vendor" && o.device != "cuda")
    HPDT_FAIL("--kernels vendor needs --device cuda (the CPU has one implementation of each op)");
  // choices among our CUDA kernels: given on the command line, they need them
  const auto needs_our_cuda_kernels = [&](const char* flag, const std::string& value) {
    if (app.count(flag) > 0 && (o.device != "cuda" || o.kernels != "ours"))
      HPDT_FAIL(flag, " ", value, " needs --device cuda and --kernels ours");
  };
  needs_our_cuda_kernels("--gemm", o.gemm);
  needs_our_cuda_kernels("--conv", o.conv);
  needs_our_cuda_kernels("--gemm-tuning", o.gemm_tuning);
  if (o.gemm_tuning == "find" && o.gemm != "v3") HPDT_FAIL("--gemm-tuning find tunes GEMM v3, not --gemm ", o.gemm);
  if (app.count("--cudnn-algo") > 0 && (o.device != "cuda" || o.kernels != "vendor"))
    HPDT_FAIL("--cudnn-algo ", o.cudnn_algo, " needs --device cuda and --kernels vendor");
  if (o.cuda_graph) {
    if (o.device != "cuda") HPDT_FAIL("--cuda-graph needs --device cuda");
    if (o.dropout != 0)
      HPDT_FAIL("--cuda-graph: not with --dropout ", o.dropout,
                " (each step draws new masks from a counter on the host; a graph would replay the capture's masks)");
  }
  if (o.algo == "nccl" && o.compress != "none")
    HPDT_FAIL("--compress ", o.compress,
              " needs a host all-reduce algorithm; --algo nccl reduces the "
              "gradients uncompressed in device memory");
  return o;
}

}  // namespace hpdt::train
