// One training step (forward, cross-entropy, backward, SGD with Nesterov momentum) of a model on
// random images, timed per step after warm-up; prints one JSON line.
//
// CPU (the default; the hpdt side of bench/peers/compare_train_step.py, whose PyTorch twin is
// bench/peers/torch_train_step.py):
//   OMP_NUM_THREADS=2 hpdt-bench-train-step --model vit_ti --batch 128 --steps 10
//   {"impl":"hpdt","model":"resnet20","batch":128,"threads":2,"step_s":[...],"img_per_s_median":...}
//
// GPU (--device cuda, CUDA builds): the model, its gradients and the optimizer on GPU 0, the batch
// copied up once (the step is timed without data loading; in the model's layout, as hpdt-train's batches and the
// PyTorch peer's channels_last input, since 2026-12-02: no transpose in an NHWC ResNet's step), mixed precision as hpdt-train runs it
// (--precision bf16: bf16 activations and model copy, f32 master weights; fp16 adds the dynamic loss
// scale; the optimizer is the fused step), GEMM/convolution by hpdt's kernels or cuBLAS/cuDNN (--kernels). Each step
// ends with a stream synchronisation, so its host time is the GPU's. It is the only wait of a step (since 2026-12-01):
// the loss goes to a device word and the fused step's skip flag is read after that wait, as the PyTorch peer reads
// nothing inside its step; --sync-loss reads the loss right after the forward and the flag right after the optimizer,
// as hpdt-train does (two more waits, the A/B: while the GPU drains at each, the host has nothing queued to overlap it
// with). The JSON line (and --out FILE, written atomically) also holds the GPU name, driver and CUDA runtime versions,
// the git commit, peak device memory, and the machine and build records:
//   hpdt-bench-train-step --device cuda --model resnet50 --channels 3 --image 224 --classes 1000
//       --batch 256 --precision bf16 --kernels ours --steps 20 --warmup 5 --out resnet50_ours.json
// --cuda-graph: after the warm-up steps (at least two: they fill the caching allocator the capture then
// draws from; run as the graph holds it, and repeated up to 5 more times until one allocates no new device
// memory: "extra_warmup" in the JSON), one step is captured into a CUDA graph (core/cuda_graph.h) and each
// timed step replays it: one launch instead of one per kernel. The loss and the skip flag are read once,
// after the last step.
// Not with fp16 (the dynamic loss scale would be baked into the graph).
// --cudnn-algo find (--kernels vendor): cuDNN's Find picks each convolution's algorithm in the first warm-up step
// (kernels::CudnnAlgo), as the PyTorch peer's cudnn.benchmark does; heuristic (the default) takes the first
// deterministic algorithm cuDNN's heuristics rank.
// --gemm-tuning find (--kernels ours, GEMM v3): GEMM v3's Find times each GEMM shape's candidate plans (pipeline x
// block tile) at its first call, in the first warm-up step, and runs the fastest from then on (kernels::GemmTuning);
// the JSON's "gemm_v3_found" lists each shape's plan and every candidate's time. --conv find: the NHWC
// convolutions' v2 or v3, per convolution, likewise (the JSON's "conv_found").
// --kernel-trace FILE (--device cuda): after the timed steps, --trace-steps more steps (2 by default; eager or
// replayed as the timed ones) run under a CUPTI trace (bench/kernel_trace), and FILE gets the per-kernel time
// of a step (JSON: the run's record plus "trace": kernel_trace.h's summary_json), the 12 largest also on
// stderr. The timed steps are not traced: the img/s stands as without the flag.
// scripts/gpu/kernel_breakdown.py groups such files, and the PyTorch peer's, into kernel families.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hpdt/bench/kernel_trace.h"
#include "hpdt/core/allocator.h"
#include "hpdt/core/build_info.h"
#include "hpdt/core/cli_checks.h"
#include "hpdt/core/cuda_graph.h"
#include "hpdt/core/philox.h"
#include "hpdt/core/results.h"
#include "hpdt/core/runtime.h"
#include "hpdt/kernels/backend.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/conv.h"
#include "hpdt/kernels/cuda/gemm.h"
#endif
#include "hpdt/kernels/loss.h"
#include "hpdt/nn/model.h"
#include "hpdt/nn/optim.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The upper median, as this benchmark has always reported it.
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpdt training-step benchmark (CPU, or one GPU with --device cuda)"};
  std::string model = "resnet20", device = "cpu", precision = "fp32", kernels_name = "ours", gemm_name = "v3",
              conv_name = "v3", layout_name = "auto", gelu = "separate", cudnn_algo = "heuristic",
              gemm_tuning = "heuristic", out;
  int64_t batch = 128, steps = 10, warmup = 3, image = 28, channels = 1, patch = 4, classes = 10;
  app.add_option("--model", model, "resnet20 | resnet56 | resnet18 | resnet34 | resnet50 | vit_ti | vit_s | vit_b");
  app.add_option("--batch", batch)->check(hpdt::cli::positive());
  app.add_option("--steps", steps, "timed steps")->check(hpdt::cli::positive());
  app.add_option("--warmup", warmup)->check(hpdt::cli::non_negative());
  app.add_option("--image", image)->check(hpdt::cli::positive());
  app.add_option("--channels", channels)->check(hpdt::cli::positive());
  app.add_option("--patch", patch)->check(hpdt::cli::positive());
  app.add_option("--classes", classes)->check(hpdt::cli::positive());
  app.add_option("--device", device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--precision", precision, "fp32 | fp16 | bf16 (reduced precision computes on the GPU only)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--kernels", kernels_name, "ours | vendor (cuBLAS/cuDNN for GEMM and convolution; --device cuda)")
      ->check(CLI::IsMember({"ours", "vendor"}));
  app.add_option("--gemm", gemm_name, "v3 | v2: our GEMM for 16-bit inputs (v3, the default: Hopper wgmma + TMA where it can run, v2 elsewhere; --device cuda, --kernels ours)")
      ->check(CLI::IsMember({"v2", "v3"}));
  app.add_option("--conv", conv_name,
                 "v2 | v3 | find: our NHWC convolutions for 16-bit inputs (find: per convolution the faster of v2 and "
                 "v3, timed at its first call, in the warm-up, listed in the JSON's conv_found; v3, the default: the "
                 "1x1 stride-1 ones on GEMM v3, the others with 64k input channels on conv v3, where they can run, v2 "
                 "elsewhere; v2: v2 for all; --device cuda, --kernels ours)")
      ->check(CLI::IsMember({"v2", "v3", "find"}));
  app.add_option("--gemm-tuning", gemm_tuning, "heuristic | find: how GEMM v3 picks its pipeline and block tile for each GEMM shape (heuristic, the default: by rule; find: the fastest of them, timed at the shape's first call, in the warm-up; the choices go to the JSON's gemm_v3_found; --device cuda, --kernels ours, --gemm v3)")
      ->check(CLI::IsMember({"heuristic", "find"}));
  app.add_option("--cudnn-algo", cudnn_algo, "heuristic | find: cuDNN's convolution algorithms under --kernels vendor (heuristic, the default: the first deterministic one its heuristics rank; find: the fastest its Find times at first use, as PyTorch's cudnn.benchmark, which bench/peers/torch_gpu_train_step.py sets)")
      ->check(CLI::IsMember({"heuristic", "find"}));
  app.add_option("--layout", layout_name,
                 "auto | nchw | nhwc: ResNet activation layout (auto: nhwc, on either device, as hpdt-train)")
      ->check(CLI::IsMember({"auto", "nchw", "nhwc"}));
  app.add_option("--gelu", gelu,
                 "fused | separate: the ViTs' MLP GELU in fc1's forward and fc2's backward-data GEMM epilogues (fused) "
                 "or a layer of its own (separate, the default: 8 % faster in ViT-B/16's step on the H200)")
      ->check(CLI::IsMember({"fused", "separate"}));
  app.add_option("--out", out, "also write the result as a JSON document (with machine and build records)");
  bool sync_loss = false;
  app.add_flag("--sync-loss", sync_loss,
               "--device cuda: read the loss after the forward and the skip flag after the optimizer, as hpdt-train "
               "does (two more waits a step; by default the step is queued whole and read back at its end)");
  bool cuda_graph = false;
  app.add_flag("--cuda-graph", cuda_graph, "--device cuda: capture one step into a CUDA graph and replay it (after the warm-up)");
  std::string kernel_trace;
  int64_t trace_steps = 2;
  app.add_option("--kernel-trace", kernel_trace, "--device cuda: after the timed steps, trace --trace-steps more kernel by kernel (CUPTI) and write the per-kernel time of a step to this JSON file");
  app.add_option("--trace-steps", trace_steps, "steps --kernel-trace covers (default 2)")->check(hpdt::cli::positive());
  CLI11_PARSE(app, argc, argv);
  try {
    const bool gpu = device == "cuda";
    HPDT_CHECK(gpu || kernels_name == "ours", "--kernels vendor needs --device cuda");
    // choices among our CUDA kernels: given on the command line, they need them
    for (const auto& [flag, value] : {std::pair<const char*, const std::string&>{"--gemm", gemm_name}, {"--conv", conv_name},
                                      {"--gemm-tuning", gemm_tuning}})
      HPDT_CHECK(app.count(flag) == 0 || (gpu && kernels_name == "ours"), flag, " ", value,
                 " needs --device cuda and --kernels ours");
    HPDT_CHECK(app.count("--cudnn-algo") == 0 || (gpu && kernels_name == "vendor"), "--cudnn-algo ", cudnn_algo,
               " needs --device cuda and --kernels vendor");
    HPDT_CHECK(cudnn_algo != "find" || warmup >= 1, "--cudnn-algo find needs --warmup 1 or more (cuDNN's Find times "
               "every algorithm of every convolution in the first step, which would then be timed)");
    HPDT_CHECK(gemm_tuning != "find" || gemm_name == "v3", "--gemm-tuning find tunes GEMM v3, not --gemm ", gemm_name);
    HPDT_CHECK(conv_name != "find" || warmup >= 1, "--conv find needs --warmup 1 or more (Find times v2 and v3 on "
               "every convolution in the first step, which would then be timed)");
    HPDT_CHECK(gemm_tuning != "find" || warmup >= 1, "--gemm-tuning find needs --warmup 1 or more (GEMM v3's Find "
               "times every plan of every GEMM shape in the first step, which would then be timed)");
    HPDT_CHECK(!cuda_graph || gpu, "--cuda-graph needs --device cuda");
    HPDT_CHECK(!sync_loss || gpu, "--sync-loss needs --device cuda");
    HPDT_CHECK(!sync_loss || !cuda_graph,
               "--sync-loss: not with --cuda-graph (a graph reads nothing back inside a step)");
    HPDT_CHECK(app.count("--gelu") == 0 || model.starts_with("vit"), "--gelu ", gelu, " is for the ViTs (", model,
               " has no GELU)");
    HPDT_CHECK(kernel_trace.empty() || gpu, "--kernel-trace needs --device cuda (it traces GPU kernels)");
    HPDT_CHECK(app.count("--trace-steps") == 0 || !kernel_trace.empty(), "--trace-steps needs --kernel-trace");
    HPDT_CHECK(!cuda_graph || precision != "fp16", "--cuda-graph: not with --precision fp16 (its dynamic loss scale changes between steps; a graph replays the scale of the capture)");
    HPDT_CHECK(!cuda_graph || warmup >= 2, "--cuda-graph needs --warmup 2 or more (the capture takes its memory from what the warm-up left cached: a step allocates while the model still holds the previous one's activations)");
    if (gpu) {
      HPDT_CHECK(hpdt::cuda_available(), "--device cuda: no usable GPU: ", hpdt::cuda_unavailable_reason());
      hpdt::cuda_set_device(0);
      hpdt::kernels::set_kernel_backend(hpdt::kernels::parse_kernel_backend(kernels_name));
      hpdt::kernels::set_gemm_choice(hpdt::kernels::parse_gemm_choice(gemm_name));
      hpdt::kernels::set_conv_choice(hpdt::kernels::parse_conv_choice(conv_name));
      hpdt::kernels::set_cudnn_algo(hpdt::kernels::parse_cudnn_algo(cudnn_algo));
      hpdt::kernels::set_gemm_tuning(hpdt::kernels::parse_gemm_tuning(gemm_tuning));
    }
    const hpdt::Stream stream = gpu ? hpdt::Stream::create_cuda(0) : hpdt::Stream();
    hpdt::nn::ModelConfig c;
    c.in_channels = channels;
    c.image_size = image;
    c.classes = classes;
    c.patch = patch;
    c.dtype = precision == "bf16" ? hpdt::DType::bf16 : precision == "fp16" ? hpdt::DType::f16 : hpdt::DType::f32;
    if (layout_name != "auto") c.layout = hpdt::kernels::parse_layout(layout_name, "--layout");
    else if (model.starts_with("resnet"))
      c.layout = hpdt::kernels::Layout::nhwc;
    c.fuse_gelu = gelu == "fused" || !model.starts_with("vit");  // (the ResNets have no GELU)
    auto m = hpdt::nn::make_model(model, c, stream);
    hpdt::nn::Sgd opt(m->arena(), {0.01f, 0.9f, 0.0f, 5e-4f, true});
    hpdt::nn::LossScaler scaler = hpdt::nn::LossScaler::for_dtype(c.dtype);
    hpdt::Tensor x = hpdt::Tensor::empty({batch, channels, image, image}, hpdt::DType::f32);
    hpdt::Tensor y = hpdt::Tensor::empty({batch}, hpdt::DType::i32);
    hpdt::Rng rng(7);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.normal();
    for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = int32_t(rng.below(uint32_t(classes)));
    // The images in the model's layout, as hpdt-train's decode writes them (and as the PyTorch peer's channels_last
    // input): an NHWC ResNet takes them without its first layer's transpose.
    m->set_input_layout(m->layout());
    // On the GPU every step is the fused one, on comm_grads(): as hpdt-train, no f32 copy of the gradients.
    if (gpu) m->arena().set_f32_grads(false);
    if (m->layout() == hpdt::kernels::Layout::nhwc) {
      hpdt::Tensor nhwc = hpdt::Tensor::empty({batch, image, image, channels}, hpdt::DType::f32);
      hpdt::kernels::nchw_to_nhwc(x, nhwc, hpdt::Stream());
      x = nhwc;
    }
    if (gpu) {
      x = x.to(m->device(), stream);
      y = y.to(m->device(), stream);
    }
    hpdt::AllocOptions ao;
    if (gpu) ao.stream = &stream;
    hpdt::Tensor dl = hpdt::Tensor::empty({batch, classes}, m->compute_dtype(), m->device(), ao);
    std::vector<double> times;
    double loss = 0;
    int64_t skipped = 0;
    int64_t extra_warmup = 0;
    // --kernel-trace: trace_steps more steps under CUPTI, after the timed ones
    struct Traced {
      hpdt::bench::KernelSummary summary;
      std::vector<double> step_s;
      std::string library;
    };
    std::optional<Traced> traced;
    std::string trace_error;  // a trace that failed: said, and the exit code 1, after the timing is written
    const auto trace_steps_of = [&](const auto& step) -> std::optional<Traced> {
      stream.synchronize();
      const double timed_loss = loss;  // the record keeps the timed steps' loss and skip count
      const int64_t timed_skipped = skipped;
      Traced t;
      try {
        hpdt::bench::KernelTrace trace;
        t.library = trace.library();
        for (int64_t s = 0; s < trace_steps; ++s) {
          const auto t0 = std::chrono::steady_clock::now();
          step();
          t.step_s.push_back(seconds_since(t0));
        }
        t.summary = hpdt::bench::summarize(trace.stop());
      } catch (const hpdt::Error& e) {
        trace_error = e.what();
        return std::nullopt;
      }
      loss = timed_loss;
      skipped = timed_skipped;
      return t;
    };
    // The step queued whole, nothing read back inside: the graph's step, and the eager GPU step's but with
    // --sync-loss (the loss into a device word, the fused step's skip flag left for after the wait).
    hpdt::Tensor loss_state;
    if (gpu && !sync_loss) loss_state = hpdt::kernels::make_loss_state(m->device(), stream);
    const auto queued = [&] {
      const hpdt::Tensor logits = m->forward(x);
      hpdt::kernels::softmax_cross_entropy_queued(logits, y, 0.0, &dl, scaler.scale(), loss_state, stream);
      m->backward(dl);
      opt.queue_fused_step(m->arena().comm_grads(), scaler.scale(), 0.0);
    };
    if (cuda_graph) {
      // Warm-up: that step run eagerly, waited for; then more (at most 5) until one allocates no new device
      // memory, so that the capture takes all of it from the caching allocator's cache.
      hpdt::CachingAllocator& alloc = hpdt::cuda_caching_allocator(0);
      for (int64_t s = 0;; ++s) {
        const size_t before = alloc.stats().raw_allocations;
        queued();
        loss = hpdt::kernels::read_loss(loss_state, stream);
        skipped += !opt.last_fused_step_ok();
        if (s + 1 < warmup) continue;
        if (alloc.stats().raw_allocations == before) break;
        HPDT_CHECK(++extra_warmup <= 5, "--cuda-graph: every warm-up step still allocated new device memory");
      }
      const hpdt::CudaGraph graph = hpdt::CudaGraph::capture(stream, queued);
      const auto replay = [&] {
        graph.launch(stream);
        stream.synchronize();
      };
      for (int64_t s = 0; s < steps; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        replay();
        times.push_back(seconds_since(t0));
      }
      loss = hpdt::kernels::read_loss(loss_state, stream);
      skipped += !opt.last_fused_step_ok();
      if (!kernel_trace.empty()) traced = trace_steps_of(replay);
    }
    // one eager step, waited for: on the GPU queued whole and read back after its one wait, or with --sync-loss as
    // hpdt-train runs it, the loss and the skip flag each read where it is computed
    const auto eager_step = [&] {
      bool ok = true;
      if (loss_state.defined()) {
        queued();
        loss = hpdt::kernels::read_loss(loss_state, stream);  // the step's one wait
        ok = opt.finish_fused_step();
      } else {
        const hpdt::Tensor logits = m->forward(x);
        loss = hpdt::kernels::softmax_cross_entropy(logits, y, 0.0, &dl, scaler.scale(), stream);
        m->backward(dl);
        if (gpu) {  // as hpdt-train on the GPU: unscale, inf/NaN skip, SGD and the model copy in one kernel
          ok = opt.fused_step(m->arena().comm_grads(), scaler.scale(), 0.0);
        } else {
          ok = scaler.unscale(m->arena());
          if (ok) opt.step();
        }
      }
      skipped += !ok;
      scaler.update(!ok);
      stream.synchronize();
    };
    for (int64_t s = 0; !cuda_graph && s < warmup + steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      eager_step();
      const double dt = seconds_since(t0);
      if (s >= warmup) times.push_back(dt);
    }
    if (!cuda_graph && !kernel_trace.empty()) traced = trace_steps_of(eager_step);
    const double median = median_of(times);
    if (!gpu) {  // the CPU line, as compare_train_step.py reads it
      std::printf("{\"impl\":\"hpdt\",\"model\":\"%s\",\"layout\":\"%s\",\"batch\":%lld,\"threads\":%d,"
                  "\"params\":%lld,\"loss\":%.6f,\"img_per_s_median\":%.3f,\"step_s\":[",
                  model.c_str(), hpdt::kernels::layout_name(m->layout()), (long long)batch, omp_get_max_threads(),
                  (long long)m->num_parameters(), loss, double(batch) / median);
      for (size_t i = 0; i < times.size(); ++i) std::printf("%s%.6f", i ? "," : "", times[i]);
      std::printf("]}\n");
    }
    nlohmann::json r = {{"impl", "hpdt"},
                        {"device", m->device().str()},
                        {"model", model},
                        {"batch", batch},
                        {"image", {channels, image, image}},
                        {"classes", classes},
                        {"precision", precision},
                        {"kernels", gpu ? kernels_name : "cpu"},
                        {"gemm", gpu && kernels_name == "ours" ? gemm_name : "-"},
                        {"conv", gpu && kernels_name == "ours" ? conv_name : "-"},
                        {"gemm_tuning", gpu && kernels_name == "ours" ? gemm_tuning : "-"},
                        {"cudnn_algo", gpu && kernels_name == "vendor" ? cudnn_algo : "-"},
                        {"layout", hpdt::kernels::layout_name(m->layout())},
                        {"gelu", model.starts_with("vit") ? gelu : "-"},
                        {"threads", omp_get_max_threads()},
                        {"params", m->num_parameters()},
                        {"loss", loss},
                        {"skipped_steps", skipped},
                        {"warmup", warmup},
                        {"img_per_s_median", double(batch) / median},
                        {"cuda_graph", cuda_graph},
                        {"sync_loss", sync_loss},
                        {"extra_warmup", extra_warmup},
                        {"step_s_median", median},
                        {"step_s", times},
                        {"git_commit", hpdt::build_info().git_commit}};
    if (gpu) {
      r["gpu"] = hpdt::cuda_device_name(0);
      r["cuda_driver"] = hpdt::cuda_driver_version();
      r["cuda_runtime"] = hpdt::cuda_runtime_version();
      r["peak_device_bytes"] = hpdt::cuda_caching_allocator(0).stats().peak_bytes_in_use;
#if HPDT_HAVE_CUDA
      // what the Finds chose: per call, the choice and every candidate's time
      const auto found_json = [](const auto& found, const char* choice_key, auto choice_of) {
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& f : found) {
          nlohmann::json ms = nlohmann::json::object();
          for (const auto& [name, t] : f.ms) ms[name] = t;
          rows.push_back({{"call", f.call}, {choice_key, choice_of(f)}, {"ms", ms}});
        }
        return rows;
      };
      if (gemm_tuning == "find")
        r["gemm_v3_found"] = found_json(hpdt::kernels::cuda::gemm_v3_found(), "plan", [](const auto& f) { return f.plan; });
      if (conv_name == "find")
        r["conv_found"] = found_json(hpdt::kernels::cuda::conv_found(), "choice", [](const auto& f) { return f.choice; });
#endif
      std::printf("%s\n", r.dump().c_str());
    }
    if (traced) {
      nlohmann::json doc = r;
      doc["trace"] = hpdt::bench::summary_json(traced->summary, trace_steps);
      doc["trace"]["step_s"] = traced->step_s;
      doc["trace"]["cupti"] = traced->library;
      doc["machine"] = hpdt::machine_info();
      doc["build"] = hpdt::build_info_json();
      hpdt::write_file_atomic(kernel_trace, doc.dump(1) + "\n");
      const double n = double(trace_steps);
      std::fprintf(stderr, "kernel trace (%s): %lld steps, per step: GPU busy %.3f ms, kernels added up %.3f ms, first to last %.3f ms\n",
                   kernel_trace.c_str(), (long long)trace_steps, traced->summary.busy_ms / n,
                   traced->summary.sum_ms / n, traced->summary.span_ms / n);
      for (size_t i = 0; i < traced->summary.kernels.size() && i < 12; ++i) {
        const auto& k = traced->summary.kernels[i];
        std::fprintf(stderr, "  %9.3f ms %6.1f x  %.150s\n", k.total_ms / n, double(k.count) / n, k.name.c_str());
      }
    }
    if (!out.empty()) {
      nlohmann::json doc = r;
      doc["machine"] = hpdt::machine_info();
      doc["build"] = hpdt::build_info_json();
      hpdt::write_file_atomic(out, doc.dump(2) + "\n");
    }
    HPDT_CHECK(trace_error.empty(), "--kernel-trace ", kernel_trace, ": no trace written (the timing was): ", trace_error);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpdt-bench-train-step: %s\n", e.what());
    return 1;
  }
  return 0;
}
