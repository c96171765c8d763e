// The training run: setup (device, data, model, communicator, readers, optimizer, resume), the step loop
// with its timing breakdown, evaluation, checkpoints, preemption, and the final report.
//
// --device cuda: each rank takes GPU local rank % GPUs on its node; the model, its gradients and the
// optimizer state live there and every kernel is queued on one compute stream per rank. Batches are
// copied up from the reader's pinned host memory (a pool of it, reused) on a copy stream, into two slots in turn: the
// next step's first batch is read and its copy queued before the step's wait, so that both overlap the step (events
// order the copy after the last backward reading its slot, and the forward after the copy); the gradients are averaged
// by GradSync (a pinned host mirror for the host algorithms, device memory for nccl, nothing on one rank). A training
// step is queued whole and waited for once, at its end: the loss and the correct count stay in device memory until then
// (kernels::softmax_cross_entropy_queued), the fused optimizer step's skip flag too (queue_fused_step), and the
// phases are timed by events; the host waits inside a step only where the gradients' averaging needs it (its
// stager thread on several ranks) and for SyncBN's statistics. What else the host reads (checksums, checkpoints,
// broadcasts) is copied down; --device cpu runs as before, timed by the same (host-clock) events.
#include "trainer.h"

#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>

#include "grad_sync.h"
#include "hpdt/comm/allreduce.h"
#include "hpdt/comm/communicator.h"
#include "hpdt/comm/compression.h"
#include "hpdt/core/allocator.h"
#include "hpdt/core/build_info.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/cuda_graph.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/mpi_gpus.h"
#include "hpdt/core/results.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/timer.h"
#include "hpdt/io/checkpoint.h"
#include "hpdt/io/dataset.h"
#include "hpdt/io/prepare.h"
#include "hpdt/io/reader.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/cuda/gemm.h"
#include "hpdt/kernels/image.h"
#include "hpdt/kernels/loss.h"
#include "hpdt/nccl_log/capture.h"
#include "hpdt/nn/model.h"
#include "hpdt/nn/optim.h"
#include "metrics.h"
#include "preemption.h"
#include "progress.h"
#include "schedule.h"
#include "timeline.h"

namespace hpdt::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Runs `f`; an hpdt::Error from it becomes a UsageError (for checks every rank makes identically).
template <class F>
auto as_usage(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw UsageError(e.message() + (e.where().empty() ? "" : " (" + e.where() + ")"));
  }
}

std::string default_cache_dir() {
  if (const char* c = std::getenv("HPDT_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/hpdt";
  return "/tmp/hpdt-cache";
}

// The test split beside a training file: ".../x-train.h5" -> ".../x-test.h5" when it exists.
std::string sibling_test_split(const std::string& train) {
  const auto name = fs::path(train).filename().string();
  const auto pos = name.rfind("train");
  if (pos == std::string::npos) return {};
  auto test = fs::path(train).parent_path() / (name.substr(0, pos) + "test" + name.substr(pos + 5));
  return fs::exists(test) ? test.string() : std::string();
}

// The cores a rank may run on: its affinity mask's (a launcher may bind it), no more than its share of the node's.
int rank_cores(int local_size) {
  const int node = int(std::max(1u, std::thread::hardware_concurrency()));
  int cores = node;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = std::max(1, CPU_COUNT(&set));
  return std::max(1, std::min(cores, node / std::max(1, local_size)));
}

uint64_t fnv1a(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// A host tensor with t's values: t itself on the CPU, else a copy, complete when this returns.
Tensor host_copy(const Tensor& t, const Stream& s) {
  if (t.is_cpu()) return t;
  Tensor h = t.to(Device::cpu(), s, AllocOptions{.pinned = true});
  s.synchronize();
  return h;
}

// dst (any device) <- src (host), complete when this returns.
void copy_from_host(const Tensor& src, const Tensor& dst, const Stream& s) {
  Tensor d = dst;
  copy(src, d, s);
  s.synchronize();
}

// Rank 0's values of t everywhere; a device tensor goes through a host copy.
void bcast_tensor(const Tensor& t, MPI_Comm comm, const Stream& s) {
  Tensor h = host_copy(t, s);
  char* p = static_cast<char*>(h.data());
  for (size_t done = 0, n = h.nbytes(); done < n;) {
    const int chunk = int(std::min<size_t>(n - done, size_t(1) << 30));
    HPDT_MPI_CHECK(MPI_Bcast(p + done, chunk, MPI_BYTE, 0, comm));
    done += size_t(chunk);
  }
  if (!t.is_cpu()) copy_from_host(h, t, s);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct StepTimes {
  double data = 0, forward = 0, backward = 0, comm = 0, optimizer = 0, total = 0;
};

// Where a training step's phases begin and end on the compute stream. On the GPU these are the GPU's times,
// read after the step's one wait; on the CPU, whose stream runs each call before it returns, the host's.
struct StepMarks {
  struct Micro {
    Event forward, backward, backward_end;
  };
  std::vector<Micro> micro;
  Event start, optimizer, optimizer_end;
  double start_host_s = 0;  // the host clock at `start` (recorded on an idle stream)

  StepMarks(Device d, int micro_batches) : start(d), optimizer(d), optimizer_end(d) {
    for (int m = 0; m < micro_batches; ++m) micro.push_back({Event(d), Event(d), Event(d)});
  }
  double seconds(const Event& a, const Event& b) const { return double(a.elapsed_ms(b)) * 1e-3; }
  double host_s(const Event& e) const { return start_host_s + seconds(start, e); }  // for the timeline
};

class Run {
 public:
  explicit Run(const TrainOptions& o) : o_(o), timeline_(!o.timeline.empty()) {}
  ~Run() {
    try {
      drop_staged();  // (an exception left one: its pinned memory must outlive its copy)
    } catch (...) {
    }
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
  int execute();

 private:
  void setup_mpi();
  void setup_device();
  void setup_data();
  void setup_model();
  void setup_comm();
  kernels::AllReduceSum batchnorm_sync();  // --sync-bn's all-reduce (sets sync_bn_via_)
  void resume_if_asked();
  // One optimizer step. stage_next (GPU): the next step is in this epoch, so its first batch is read and its copy
  // up queued before this step's wait, overlapping this step's work.
  StepTimes train_step(double* loss_sum, int64_t* correct, int64_t* samples, bool stage_next);
  // A micro-batch from the reader; on the GPU its copy up is queued on copy_stream_ into a slot of its own.
  struct Staged {
    io::Batch batch;
    int slot = 0;
  };
  Staged stage(StepTimes& t);
  // --cuda-graph: the step's micro-batches copied from their slots into the graph's inputs, then forward, loss and
  // backward of all of them replayed as one graph (run eagerly until the capture; captured again when the loss scale
  // changes or evaluation has run the model); the gradients handed to the sync whole, after it.
  void graph_forward_backward(StepTimes& t, double scale, int64_t* samples, std::vector<io::Batch>& held);
  void drop_graph();
  // Inside a --cuda-graph capture, on several ranks: [offset, offset + count) is complete in the work captured so far
  // (the last micro-batch's backward); the capture is split where a bucket is complete.
  void captured_ready(size_t offset, size_t count);
  void drop_staged();  // a staged batch not trained on (the loop ended): its copy finished, the batch let go
  json evaluate();
  void sync_buffers();
  void save_checkpoint(const std::string& why);
  void final_report(const std::vector<StepTimes>& steps, const json& last_eval, double wall);
  void verify_identical_parameters();
  void finish_nccl_debug();
  // A batch's tensors on the model's device: its images (the reader decoded them) or, with --decode device, its pixels
  // and crops; and its labels. On the CPU the reader's tensors themselves (on_device(b)).
  struct DeviceBatch {
    Tensor images, labels, pixels, crops;
  };
  static DeviceBatch on_device(const io::Batch& b) { return {b.images, b.labels, b.pixels, b.crops}; }
  // b's tensors copied into d's on `stream` (asynchronously from the reader's pinned memory: the caller keeps b
  // until the stream has passed the copies): the training slots' (copy stream) and evaluation's (compute stream).
  void upload(const io::Batch& b, DeviceBatch& d, const Stream& stream);
  // The model's input from d: its images, or (--decode device) its pixels decoded into decoded_, on the GPU in the
  // model's compute dtype (the f32 images' cast folded into the decode); in the model's layout either way. decoded_ is
  // read by the first layer's backward (f32 models); the next decode into it is queued after that, on the one compute
  // stream.
  Tensor model_input(const DeviceBatch& d, const io::ShardedReader& reader);

  const TrainOptions& o_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  MPI_Comm world_ = MPI_COMM_NULL, bn_comm_ = MPI_COMM_NULL;
  std::string train_path_, test_path_;
  io::DatasetInfo info_;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<nn::Optimizer> optimizer_;
  nn::LossScaler scaler_ = nn::LossScaler::off();
  std::unique_ptr<comm::Communicator> comm_;
  std::unique_ptr<comm::Communicator> bn_;  // --sync-bn on GPUs with one per rank: NCCL on the compute stream
  std::string sync_bn_via_;                 // --sync-bn: "nccl" (on the compute stream) or "mpi" (on the host)
  comm::TuningTable tuning_;
  std::unique_ptr<GradSync> sync_;
  bool sync_f32_grads_ = false;  // mixed precision with lossy compression: the f32 gradients are synced
  std::unique_ptr<io::ShardedReader> train_reader_, eval_reader_;
  LrSchedule schedule_;
  MetricsWriter metrics_;
  Timeline timeline_;
  Device device_ = Device::cpu();
  Stream stream_;  // the compute stream: the CPU stream, or this rank's CUDA stream
  std::unique_ptr<nccl_log::NcclDebugCapture> nccl_debug_;
  Tensor dlogits_, decoded_;
  DeviceBatch eval_batch_;           // CUDA: evaluation's batch on the device
  bool decode_on_device_ = false;    // --decode: the readers hand over u8 pixels, decoded where the model runs
  std::vector<Tensor> loss_states_;  // CUDA: each micro-batch's loss and correct count, read at the step's end
  // CUDA: training batches go up on copy_stream_ into two slots in turn, so that the next one's copy overlaps the
  // step before it; copied_[k] (copy stream) says slot k is filled, released_[k] (compute stream) that the last
  // backward reading it has run. staged_: the next step's first batch, its copy queued.
  Stream copy_stream_;
  DeviceBatch slots_[2];
  Event copied_[2], released_[2];
  int next_slot_ = 0;
  std::optional<Staged> staged_;
  std::unique_ptr<StepMarks> marks_;
  bool armed_ = false;  // forward gradients of this micro-batch to the sync (the last micro-batch)
  // --cuda-graph: the graph, its inputs (one batch a micro-batch, filled from the slots), the loss scale it was
  // captured with; graph-mode steps run eagerly since it was last dropped, and whether the last one allocated device
  // memory (a capture must take all of its memory from the caching allocator's cache).
  // On several ranks the graph is captured in parts, split where a gradient bucket is complete: after part p's launch
  // the gradient slices it completes (graph_part_ready_[p]) go to the sync, which reduces them while the parts after
  // it run, as in an eager step. The queued sync (nccl, nccl-p2p) is captured with the backward instead: one part.
  CudaGraph graph_;
  std::vector<std::vector<std::pair<size_t, size_t>>> graph_part_ready_;
  const CudaGraph::Split* capture_split_ = nullptr;  // while a capture may split
  std::vector<size_t> capture_bucket_ends_;          // the element each bucket ends at, ascending
  size_t capture_ready_ = 0;                         // gradient elements complete in the capture so far
  std::vector<DeviceBatch> graph_in_;
  double graph_scale_ = 0;
  int eager_graph_steps_ = 0;
  bool graph_step_allocated_ = true;
  int64_t graph_captures_ = 0, graph_replays_ = 0, graph_eager_steps_ = 0;
  size_t graph_parts_ = 0;  // the last capture's
  int64_t global_batch_ = 0, micro_per_epoch_ = 0, steps_per_epoch_ = 0, total_steps_ = 0;
  int64_t step_ = 0, epoch_ = 0, step_in_epoch_ = 0;  // optimizer steps done; position
  int64_t skipped_steps_ = 0;
  int decode_threads_ = 1;  // the training reader's (--decode-threads, or its default)
  std::string resumed_note_;
  int64_t signal_at_step_ = [] {
    const char* v = std::getenv("HPDT_TRAIN_TEST_SIGNAL_AT_STEP");
    return v ? std::atoll(v) : 0LL;
  }();
};

void Run::setup_mpi() {
  HPDT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world_));
  HPDT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &bn_comm_));
  HPDT_MPI_CHECK(MPI_Comm_rank(world_, &rank_));
  HPDT_MPI_CHECK(MPI_Comm_size(world_, &size_));
  MPI_Comm local;
  HPDT_MPI_CHECK(MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  HPDT_MPI_CHECK(MPI_Comm_size(local, &local_size_));
  HPDT_MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  HPDT_MPI_CHECK(MPI_Comm_free(&local));
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  HPDT_MPI_CHECK(MPI_Get_processor_name(name, &len));
  host_ = name;
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(o_.threads > 0 ? o_.threads : std::max(1, cores / local_size_));
  if (o_.device == "cuda")
    setup_device();
  else if (!o_.nccl_debug.empty() && rank_ == 0)
    std::fprintf(stderr, "hpdt-train: note: --nccl-debug has no effect on the CPU path (no NCCL communicator)\n");
  const bool append = o_.resume;
  as_usage([&] {
    check_output_path("--metrics", o_.metrics, append, o_.force);
    check_output_path("--timeline", o_.timeline, append, o_.force);
    return 0;
  });
}

// One GPU per rank: local rank % GPUs on the node. Every rank checks; when any rank has no usable GPU,
// every rank stops with one message from rank 0 that names each such rank, its host and the reason.
void Run::setup_device() {
  const std::string missing = ranks_without_gpu(world_);
  if (!missing.empty())
    throw UsageError("--device cuda: no usable GPU on " + missing + "; run with --device cpu, or on GPU nodes");
  const int gpus = cuda_device_count();
  const int gpu = local_rank_ % gpus;
  cuda_set_device(gpu);
  device_ = Device::cuda(gpu);
  stream_ = Stream::create_cuda(gpu);
  copy_stream_ = Stream::create_cuda(gpu);
  for (int k = 0; k < 2; ++k) {
    copied_[k] = Event(device_, /*timing=*/false);
    released_[k] = Event(device_, /*timing=*/false);
    released_[k].record(stream_);  // free to fill
  }
  kernels::set_kernel_backend(kernels::parse_kernel_backend(o_.kernels));
#if HPDT_HAVE_CUDA
  if (o_.kernels == "vendor") kernels::cuda::open_cublas();  // (opened at its first GEMM otherwise: fail here instead)
#endif
  kernels::set_gemm_choice(kernels::parse_gemm_choice(o_.gemm));
  kernels::set_conv_choice(kernels::parse_conv_choice(o_.conv));
  kernels::set_cudnn_algo(kernels::parse_cudnn_algo(o_.cudnn_algo));
  kernels::set_gemm_tuning(kernels::parse_gemm_tuning(o_.gemm_tuning));
  if (rank_ == 0 && local_size_ > gpus)
    std::fprintf(stderr, "hpdt-train: note: %d ranks share %d GPU(s) on a node (local rank %% %d)\n", local_size_, gpus,
                 gpus);
  // NCCL reads its debug settings at its first call (the communicator is made in setup_comm).
  if (!o_.nccl_debug.empty()) nccl_debug_ = std::make_unique<nccl_log::NcclDebugCapture>(o_.nccl_debug);
}

void Run::upload(const io::Batch& b, DeviceBatch& d, const Stream& stream) {
  auto up = [&](const Tensor& host, Tensor& dev) {  // allocated as host's shape and dtype where it differs
    nn::ensure_on(dev, host.shape(), host.dtype(), stream);
    copy(host, dev, stream);
  };
  up(b.labels, d.labels);
  if (decode_on_device_) {
    up(b.pixels, d.pixels);
    up(b.crops, d.crops);
  } else {
    up(b.images, d.images);
  }
}

Tensor Run::model_input(const DeviceBatch& d, const io::ShardedReader& reader) {
  if (!decode_on_device_) return d.images;
  const Shape& p = d.pixels.shape();
  const kernels::Layout layout = model_->input_layout();
  nn::ensure_on(decoded_, layout == kernels::Layout::nhwc ? Shape{p[0], p[2], p[3], p[1]} : p,
                device_.is_cuda() ? model_->compute_dtype() : DType::f32, stream_);
  kernels::decode_images(d.pixels, d.crops, reader.normalization(), decoded_, stream_, layout);
  return decoded_;
}

Run::Staged Run::stage(StepTimes& t) {
  const double t0 = now_s();
  Staged st{train_reader_->next(), next_slot_};
  const double t1 = now_s();
  t.data += t1 - t0;
  timeline_.span(Timeline::data, "data wait", t0, t1);
  if (device_.is_cpu()) return st;
  next_slot_ ^= 1;
  const int k = st.slot;
  released_[k].wait(copy_stream_);  // the backward that last read slot k runs before the copy overwrites it
  upload(st.batch, slots_[k], copy_stream_);
  copied_[k].record(copy_stream_);
  return st;
}

void Run::drop_staged() {
  if (!staged_) return;
  copied_[staged_->slot].synchronize();
  staged_.reset();
}

void Run::setup_data() {
  if (o_.data.empty()) {
    const std::string cache = o_.cache_dir.empty() ? default_cache_dir() : o_.cache_dir;
    auto paths = as_usage([&] { return io::prepare_fashion_mnist(world_, cache); });
    train_path_ = paths.train;
    test_path_ = paths.test;
  } else {
    train_path_ = o_.data;
    test_path_ = o_.test_data.empty() ? sibling_test_split(o_.data) : o_.test_data;
  }
  info_ = as_usage([&] { return io::inspect_dataset(train_path_); });
  if (o_.train_samples > 0) info_.n = std::min<int64_t>(info_.n, o_.train_samples);  // what the run reads of it
  if (info_.h != info_.w)
    throw UsageError("--data " + train_path_ + ": images are " + std::to_string(info_.h) + "x" +
                     std::to_string(info_.w) + "; the models take square images");
  if (!test_path_.empty()) {
    auto test = as_usage([&] { return io::inspect_dataset(test_path_); });
    if (test.c != info_.c || test.h != info_.h || test.w != info_.w || test.num_classes != info_.num_classes)
      throw UsageError("--test-data " + test_path_ + " does not match --data " + train_path_ +
                       " (image shape or class count differ)");
  } else if (o_.eval && rank_ == 0) {
    std::fprintf(stderr, "hpdt-train: note: no test split found for %s; evaluation is off\n", train_path_.c_str());
  }
}

void Run::setup_model() {
  nn::ModelConfig cfg;
  cfg.in_channels = info_.c;
  cfg.image_size = info_.h;
  cfg.classes = info_.num_classes;
  cfg.patch = o_.patch > 0 ? o_.patch : info_.h >= 224 ? 16 : 4;
  cfg.dtype = o_.precision == "fp16" ? DType::f16 : o_.precision == "bf16" ? DType::bf16 : DType::f32;
  cfg.seed = o_.seed;
  cfg.dropout = float(o_.dropout);
  cfg.vit_depth = o_.vit_depth;
  // auto: NHWC for the ResNets on either device (the library's fallback is NCHW on CUDA, which its tests keep)
  if (o_.layout != "auto") cfg.layout = kernels::parse_layout(o_.layout, "--layout");
  else if (o_.model.rfind("resnet", 0) == 0)
    cfg.layout = kernels::Layout::nhwc;
  cfg.fuse_gelu = o_.gelu == "fused" || o_.model.rfind("vit", 0) != 0;  // (the ResNets have no GELU)
  std::string name = o_.model;
  std::replace(name.begin(), name.end(), '-', '_');
  model_ = as_usage([&] { return nn::make_model(name, cfg, stream_); });
  // The batches come in the model's layout (the readers' or the device's decode writes it): no transpose in the model.
  model_->set_input_layout(model_->layout());
  auto& arena = model_->arena();
  // All ranks initialise from the same seed; rank 0's weights are broadcast anyway so that nothing
  // (a different OpenMP reduction order, say) can make the replicas start apart.
  bcast_tensor(arena.master_params(), world_, stream_);
  for (auto& [bname, t] : arena.buffers()) bcast_tensor(t, world_, stream_);
  marks_ = std::make_unique<StepMarks>(device_, o_.accum_steps);
  if (device_.is_cuda())
    for (int m = 0; m < o_.accum_steps; ++m) loss_states_.push_back(kernels::make_loss_state(device_, stream_));
  arena.sync_model_copy();
  model_->set_first_sample(int64_t(rank_) * o_.batch);  // dropout masks by position in the global batch
  if (o_.sync_bn) model_->set_batchnorm_sync(batchnorm_sync());
  if (o_.optimizer == "sgd") {
    kernels::SgdOptions so;
    so.lr = float(o_.lr);
    so.momentum = float(o_.momentum);
    so.nesterov = o_.nesterov;
    so.weight_decay = float(o_.weight_decay);
    optimizer_ = std::make_unique<nn::Sgd>(arena, so);
  } else {
    kernels::AdamWOptions ao;
    ao.lr = float(o_.lr);
    ao.weight_decay = float(o_.weight_decay);
    optimizer_ = std::make_unique<nn::AdamW>(arena, ao);
  }
  scaler_ = nn::LossScaler::for_dtype(cfg.dtype);
}

// --sync-bn: the batch statistics summed over the ranks. On GPUs with one per rank, by NCCL on the compute stream
// (comm::allreduce_device_enqueue: no host round trip, and a --cuda-graph capture holds it), on its own communicator;
// otherwise by MPI on the host (ranks sharing a GPU: NCCL cannot hold them, and --cuda-graph is refused; the CPU).
kernels::AllReduceSum Run::batchnorm_sync() {
#if HPDT_HAVE_CUDA
  if (device_.is_cuda()) {
    auto bn = std::make_unique<comm::Communicator>(bn_comm_);  // (collective)
    if (!bn->gpu_per_rank() && o_.cuda_graph)
      throw UsageError("--cuda-graph with --sync-bn needs a GPU per rank: ranks share a GPU here (" + bn->describe() +
                       "), so the batch statistics are all-reduced on the host, which a graph cannot hold");
    if (bn->gpu_per_rank()) {
      bn_ = std::move(bn);
      (void)bn_->nccl();  // made now (collective), not in a capture
      sync_bn_via_ = "nccl";
      kernels::AllReduceSum sum;
      sum.device = [this](float* data, size_t n, const Stream& s) {
        comm::allreduce_device_enqueue(*bn_, data, n, DType::f32, comm::ReduceOp::sum, s.handle());
      };
      return sum;
    }
  }
#endif
  sync_bn_via_ = "mpi";
  return [this](float* data, size_t n) {
    HPDT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, int(n), MPI_FLOAT, MPI_SUM, bn_comm_));
  };
}

void Run::setup_comm() {
  comm_ = std::make_unique<comm::Communicator>(world_);
  comm::GradientSyncOptions so;
  so.bucket_bytes = size_t(o_.bucket_mb * 1024 * 1024);
  so.algorithm = as_usage([&] { return comm::parse_algorithm(o_.algo); });
  so.op = comm::ReduceOp::avg;
  so.overlap = o_.overlap;
  so.seed = o_.seed;
  if (!o_.tuning_file.empty()) {
    tuning_ = as_usage([&] { return comm::TuningTable::load(o_.tuning_file); });
    so.allreduce.tuning = &tuning_;
  }
  try {
    so.compression = comm::parse_compression(o_.compress);
  } catch (const Error& e) {
    throw UsageError("--compress " + o_.compress + ": " + e.message());
  }
  auto& arena = model_->arena();
  // Every parameter tensor as a matrix (first dimension x the rest; vectors 1 x n): buckets end on
  // tensor boundaries and PowerSGD compresses the weight matrices.
  for (const nn::ParamInfo& p : arena.infos()) {
    const int64_t n = p.shape.numel();
    const int64_t rows = p.shape.ndim() >= 2 ? p.shape[0] : 1;
    so.tensors.push_back({size_t(p.offset), size_t(rows), size_t(n / rows)});
  }
  // Lossy compression works on f32; in mixed precision it takes the f32 gradients backward also writes.
  // (On CUDA grads_ready() widens each finished slice of the model-dtype gradients into the f32 ones.)
  sync_f32_grads_ = !so.compression.lossless() && arena.model_dtype() != DType::f32;
  // On the GPU the fused step reads what is reduced: the f32 gradients are kept only where lossy compression reduces
  // them (a cast launch a layer and a fill a step fewer otherwise).
  if (device_.is_cuda()) arena.set_f32_grads(sync_f32_grads_);
  Tensor grads = sync_f32_grads_ ? arena.grads() : arena.comm_grads();
  sync_ = std::make_unique<GradSync>(*comm_, grads, so, stream_);
  model_->arena().set_grad_ready_callback([this](size_t offset, size_t count) {
    if (armed_) sync_->notify_ready(offset, count);
    if (capture_split_) captured_ready(offset, count);
  });

  global_batch_ = int64_t(o_.batch) * size_;
  io::ReaderOptions tr;
  tr.prefetch = o_.prefetch;
  tr.augment = o_.augment;
  tr.shuffle_block = o_.shuffle_block;
  tr.window_batches = o_.window_batches;
  tr.tail = io::TailPolicy::drop;
  tr.max_samples = o_.train_samples;  // --train-samples: the first N (0: all)
  // On the GPU each batch's pinned memory comes back to a pool when the step lets it go: a fresh pinned
  // allocation a batch would cost a cudaHostAlloc, and its release a cudaFreeHost, which waits for the device.
  tr.reuse_batch_memory = device_.is_cuda();
  // On the GPU the host's cores are idle but for this thread: the reader decodes each batch on several, as many as
  // this rank may use (its affinity: a launcher that binds each rank to one core leaves it one) but one, at most 8.
  decode_threads_ = o_.decode_threads > 0 ? o_.decode_threads
                    : device_.is_cuda()   ? std::min(8, std::max(1, rank_cores(local_size_) - 1))
                                          : 1;
  tr.decode_threads = decode_threads_;
  // On the GPU the batches go up as u8 and are decoded there (4x fewer bytes to copy, the cast to the compute dtype in
  // the same pass); the same values as the reader's decode.
  decode_on_device_ = o_.decode == "device" || (o_.decode == "auto" && device_.is_cuda());
  if (decode_on_device_ && device_.is_cuda() && info_.c > kernels::kDecodeMaxChannelsCuda) {
    if (o_.decode == "device")
      throw UsageError("--decode device: --data " + train_path_ + " has " + std::to_string(info_.c) +
                       " channels; the GPU decode takes at most " + std::to_string(kernels::kDecodeMaxChannelsCuda) +
                       " (use --decode host)");
    decode_on_device_ = false;  // auto: the reader decodes these
    if (rank_ == 0)
      std::fprintf(stderr,
                   "hpdt-train: note: %lld channels are more than the GPU decode takes (%lld): the reader "
                   "decodes the batches (--decode host)\n",
                   (long long)info_.c, (long long)kernels::kDecodeMaxChannelsCuda);
  }
  tr.raw_pixels = decode_on_device_;
  tr.channels_last = model_->input_layout() == kernels::Layout::nhwc;
  train_reader_ = as_usage([&] {
    return std::make_unique<io::ShardedReader>(world_, train_path_, global_batch_, o_.seed, tr);
  });
  micro_per_epoch_ = train_reader_->steps_per_epoch();
  steps_per_epoch_ = micro_per_epoch_ / o_.accum_steps;
  if (steps_per_epoch_ == 0)
    throw UsageError("--data " + train_path_ + " has " + std::to_string(info_.n) + " samples, fewer than one step of " +
                     std::to_string(global_batch_ * o_.accum_steps) + " (--batch " + std::to_string(o_.batch) + " x " +
                     std::to_string(size_) + " ranks x --accum-steps " + std::to_string(o_.accum_steps) + ")");
  if (!test_path_.empty() && o_.eval) {
    io::ReaderOptions ev;
    ev.mode = io::ReaderMode::eval;
    ev.prefetch = 2;
    ev.reuse_batch_memory = device_.is_cuda();
    ev.raw_pixels = decode_on_device_;
    ev.channels_last = tr.channels_last;
    eval_reader_ = as_usage([&] {
      return std::make_unique<io::ShardedReader>(world_, test_path_, global_batch_, o_.seed, ev);
    });
  }
  total_steps_ = int64_t(o_.epochs) * steps_per_epoch_;
  if (o_.max_steps > 0) total_steps_ = std::min<int64_t>(total_steps_, o_.max_steps);
  schedule_ = LrSchedule::make(o_.lr, global_batch_ * o_.accum_steps, o_.lr_ref_batch,
                               long(std::lround(o_.warmup_epochs * double(steps_per_epoch_))), total_steps_);
}

// Checkpoint contents: master parameters and buffers by name, optimizer state as flat tensors, the
// loss scaler, the position (optimizer steps; reader epoch and micro-batch), and what resuming on
// another rank count needs (global batch).
void Run::save_checkpoint(const std::string& why) {
  if (o_.checkpoint_dir.empty()) return;
  sync_buffers();
  // Gradient compression state (error-feedback residuals, PowerSGD's Q) differs per rank: gathered
  // into one (ranks x state) tensor.
  const std::vector<float> cstate = sync_->compression_state();
  std::vector<float> all_cstate(rank_ == 0 ? cstate.size() * size_t(size_) : 0);
  if (!cstate.empty()) {
    HPDT_CHECK(cstate.size() < size_t(INT_MAX), "compression state of ", cstate.size(), " values is too large to gather");
    HPDT_MPI_CHECK(MPI_Gather(cstate.data(), int(cstate.size()), MPI_FLOAT, all_cstate.data(), int(cstate.size()), MPI_FLOAT, 0, world_));
  }
  if (rank_ == 0) {
    auto& arena = model_->arena();
    io::Checkpoint c;
    c.model_name = model_->name();
    c.model_config = model_->describe();
    c.world_size = size_;
    c.epoch = epoch_;
    c.step = step_;
    c.data_epoch = epoch_;
    c.data_step = step_in_epoch_ * o_.accum_steps;
    // Device state is written from host copies (the tensors themselves on the CPU).
    Tensor master = host_copy(arena.master_params(), stream_);
    for (const auto& p : arena.infos()) c.params[p.name] = master.flat(p.offset, p.shape.numel()).view(p.shape);
    for (const auto& [name, t] : arena.buffers()) c.params["buffers/" + name] = host_copy(t, stream_);
    // flat optimizer state in the arena's packed layout (no alignment gaps: the same bytes as before the
    // gaps existed)
    if (auto* sgd = dynamic_cast<nn::Sgd*>(optimizer_.get()); sgd && sgd->momentum_buffer().defined())
      c.optimizer["sgd/momentum"] = arena.packed(host_copy(sgd->momentum_buffer(), stream_));
    if (auto* adam = dynamic_cast<nn::AdamW*>(optimizer_.get())) {
      c.optimizer["adamw/exp_avg"] = arena.packed(host_copy(adam->exp_avg(), stream_));
      c.optimizer["adamw/exp_avg_sq"] = arena.packed(host_copy(adam->exp_avg_sq(), stream_));
    }
    if (!cstate.empty())
      c.optimizer["compression/state"] = Tensor::from_vector(all_cstate, Shape{int64_t(size_), int64_t(cstate.size())});
    c.loss_scaler = {{"scale", scaler_.scale()}, {"growth_tracker", double(scaler_.growth_tracker())}};
    // Dropout generators (identical on every rank): (seed, stream, training forwards so far) per layer.
    for (const auto& [layer, calls] : model_->dropout_state()) c.rng["dropout/" + layer] = {o_.seed, 0, calls};
    c.metadata = {{"global_batch", global_batch_ * o_.accum_steps}, {"per_rank_batch", o_.batch},
                  {"accum_steps", o_.accum_steps},  {"optimizer", o_.optimizer},
                  {"optimizer_steps", optimizer_->steps()}, {"skipped_steps", skipped_steps_},
                  {"seed", o_.seed},                {"reason", why},
                  {"compress", o_.compress},       {"shuffle_block", o_.shuffle_block},
                  {"window_batches", o_.window_batches},
                  {"samples_seen", step_ * global_batch_ * o_.accum_steps}};
    io::CheckpointDirectory dir(o_.checkpoint_dir, o_.keep_checkpoints);
    const auto path = dir.save(c);
    std::fprintf(stderr, "hpdt-train: checkpoint %s (%s)\n", path.c_str(), why.c_str());
  }
  HPDT_MPI_CHECK(MPI_Barrier(world_));
}

void Run::resume_if_asked() {
  if (!o_.resume) return;
  io::CheckpointDirectory dir(o_.checkpoint_dir, o_.keep_checkpoints);
  auto latest = dir.latest();
  if (!latest) {
    if (rank_ == 0)
      std::fprintf(stderr, "hpdt-train: --resume: no checkpoint in %s yet; starting from the beginning\n",
                   o_.checkpoint_dir.c_str());
    return;
  }
  auto& arena = model_->arena();
  io::CheckpointExpectation expect;
  expect.model_name = model_->name();
  expect.model_config = model_->describe();
  for (const auto& p : arena.infos()) expect.params[p.name] = {p.shape, DType::f32};
  for (const auto& [name, t] : arena.buffers()) expect.params["buffers/" + name] = {t.shape(), t.dtype()};
  auto c = as_usage([&] { return io::load_checkpoint(*latest, expect); });
  // Assembled on the host, then copied to the model's device (in place on the CPU, as before).
  Tensor master = device_.is_cpu() ? arena.master_params() : Tensor::empty(arena.master_params().shape(), DType::f32);
  for (const auto& p : arena.infos()) {
    const Tensor& src = c.params.at(p.name);
    std::memcpy(master.flat(p.offset, p.shape.numel()).data(), src.data(), src.nbytes());
  }
  if (!device_.is_cpu()) copy_from_host(master, arena.master_params(), stream_);
  // dst <- the checkpoint's bytes, on whatever device dst lives.
  auto load_into = [&](const Tensor& src, const Tensor& dst) {
    if (dst.is_cpu()) {
      std::memcpy(dst.data(), src.data(), dst.nbytes());
      return;
    }
    copy_from_host(src, dst, stream_);
  };
  for (auto& [name, t] : arena.buffers()) {
    auto it = c.params.find("buffers/" + name);
    if (it == c.params.end() || it->second.nbytes() != t.nbytes())
      throw UsageError("checkpoint " + *latest + ": buffer " + name + " missing or of another size");
    load_into(it->second, t);
  }
  auto restore = [&](const std::string& key, const Tensor& dst) {  // dst: flat, alignment gaps included
    auto it = c.optimizer.find(key);
    if (it == c.optimizer.end() || it->second.dtype() != DType::f32 || it->second.numel() != arena.parameter_count())
      throw UsageError("checkpoint " + *latest + ": optimizer state " + key + " missing or of another size (" +
                       std::to_string(arena.parameter_count()) + " f32 values expected)");
    Tensor flat = Tensor::empty({arena.numel()}, DType::f32);
    arena.unpack(it->second, flat);
    load_into(flat, dst);
  };
  const int64_t opt_steps = c.metadata.value("optimizer_steps", int64_t(0));
  if (c.metadata.value("optimizer", o_.optimizer) != o_.optimizer)
    throw UsageError("checkpoint " + *latest + " was written with --optimizer " +
                     c.metadata.value("optimizer", std::string("?")) + ", this run uses " + o_.optimizer);
  if (auto* sgd = dynamic_cast<nn::Sgd*>(optimizer_.get()); sgd && c.optimizer.count("sgd/momentum"))
    restore("sgd/momentum", sgd->momentum_buffer());
  if (auto* adam = dynamic_cast<nn::AdamW*>(optimizer_.get())) {
    restore("adamw/exp_avg", adam->exp_avg());
    restore("adamw/exp_avg_sq", adam->exp_avg_sq());
  }
  optimizer_->restore_steps(opt_steps);
  // Compression state: each rank its own row, when the run compresses the same way on as many ranks.
  if (auto it = c.optimizer.find("compression/state"); !sync_->compression_state().empty()) {
    const size_t n = sync_->compression_state().size();
    const bool same = it != c.optimizer.end() && c.metadata.value("compress", std::string()) == o_.compress &&
                      c.world_size == size_ && it->second.numel() == int64_t(n) * size_;
    if (same) {
      const float* row = static_cast<const float*>(it->second.data()) + size_t(rank_) * n;
      sync_->set_compression_state(std::vector<float>(row, row + n));
    } else {
      resumed_note_ += std::string(resumed_note_.empty() ? "" : "; ") +
                       "gradient compression state (error feedback) starts from zero: the checkpoint was written with --compress " +
                       c.metadata.value("compress", std::string("none")) + " on " + std::to_string(c.world_size) + " ranks";
    }
  }
  if (const long old_block = c.metadata.value("shuffle_block", 1L); old_block != o_.shuffle_block)
    resumed_note_ += std::string(resumed_note_.empty() ? "" : "; ") + "the sample order changes: the checkpoint was written with --shuffle-block " +
                     std::to_string(old_block) + ", this run uses " + std::to_string(o_.shuffle_block);
  if (const long old_window = c.metadata.value("window_batches", 1L); old_window != o_.window_batches)
    resumed_note_ += std::string(resumed_note_.empty() ? "" : "; ") + "the sample order changes: the checkpoint was written with --window-batches " +
                     std::to_string(old_window) + ", this run uses " + std::to_string(o_.window_batches);
  // Dropout: each layer's generator position (a checkpoint without it was written before dropout had
  // one, or with dropout off: the masks then start from the beginning, and the run says so).
  std::map<std::string, uint64_t> dropout_calls;
  for (const auto& [key, st] : c.rng)
    if (key.rfind("dropout/", 0) == 0) dropout_calls[key.substr(8)] = st.offset;
  if (!dropout_calls.empty())
    as_usage([&] { model_->restore_dropout_state(dropout_calls); });
  else if (!model_->dropout_state().empty())
    resumed_note_ += std::string(resumed_note_.empty() ? "" : "; ") +
                     "the dropout masks start from the beginning: the checkpoint holds no dropout generator state";
  scaler_.restore(float(c.loss_scaler.count("scale") ? c.loss_scaler.at("scale") : scaler_.scale()),
                  int64_t(c.loss_scaler.count("growth_tracker") ? c.loss_scaler.at("growth_tracker") : 0));
  arena.sync_model_copy();
  skipped_steps_ = c.metadata.value("skipped_steps", int64_t(0));
  // Position. The same global batch continues exactly; another one (the rank count changed with a
  // fixed per-rank batch) restarts the epoch at the sample position rounded down to a whole step.
  const int64_t old_gb = c.metadata.value("global_batch", global_batch_ * o_.accum_steps);
  const int64_t new_gb = global_batch_ * o_.accum_steps;
  epoch_ = c.data_epoch;
  if (old_gb == new_gb) {
    step_ = c.step;
    step_in_epoch_ = c.data_step / o_.accum_steps;
  } else {
    const int64_t samples_in_epoch = (c.data_step / std::max<int64_t>(1, c.metadata.value("accum_steps", 1))) * old_gb;
    step_in_epoch_ = samples_in_epoch / new_gb;
    step_ = epoch_ * steps_per_epoch_ + step_in_epoch_;
    resumed_note_ = "resumed on " + std::to_string(size_) + " ranks from a checkpoint of " +
                    std::to_string(c.world_size) + " ranks: global batch " + std::to_string(old_gb) + " -> " +
                    std::to_string(new_gb) + ", epoch " + std::to_string(epoch_) + " continues at sample " +
                    std::to_string(step_in_epoch_ * new_gb) + " (was " + std::to_string(samples_in_epoch) +
                    "), learning rate follows the linear scaling rule";
  }
  if (step_in_epoch_ >= steps_per_epoch_) {
    ++epoch_;
    step_in_epoch_ = 0;
  }
  if (rank_ == 0) {
    std::fprintf(stderr, "hpdt-train: resumed from %s at step %lld (epoch %lld, step %lld of the epoch)\n",
                 latest->c_str(), (long long)step_, (long long)epoch_, (long long)step_in_epoch_);
    if (!resumed_note_.empty()) std::fprintf(stderr, "hpdt-train: %s\n", resumed_note_.c_str());
  }
}

void Run::sync_buffers() {
  // Without SyncBN every rank's running statistics follow its own shard: use rank 0's everywhere
  // (what PyTorch DDP's broadcast_buffers does) before evaluating or saving.
  for (auto& [name, t] : model_->arena().buffers()) bcast_tensor(t, world_, stream_);
}

StepTimes Run::train_step(double* loss_sum, int64_t* correct, int64_t* samples, bool stage_next) {
  StepTimes t;
  const double t_step = now_s();
  const bool gpu = device_.is_cuda();
  StepMarks& mk = *marks_;
  sync_->begin_step();
  // The stream is idle here (the last step, evaluation and checkpoints end with a wait): the host's clock now is
  // the stream's at `start`, which places the GPU's phases on the timeline.
  mk.start.record(stream_);
  mk.start_host_s = now_s();
  const double scale = double(scaler_.scale()) / double(o_.accum_steps);
  std::vector<io::Batch> held;  // GPU: the batches' pinned memory, read by copies up to the step's one wait
  if (o_.cuda_graph) graph_forward_backward(t, scale, samples, held);
  for (int m = 0; !o_.cuda_graph && m < o_.accum_steps; ++m) {
    StepMarks::Micro& mm = mk.micro[size_t(m)];
    Staged st = staged_ ? std::move(*staged_) : stage(t);
    staged_.reset();
    const io::Batch& batch = st.batch;
    const int k = st.slot;
    const DeviceBatch d = gpu ? slots_[k] : on_device(batch);
    const Tensor& labels = d.labels;
    if (gpu) copied_[k].wait(stream_);
    mm.forward.record(stream_);
    const Tensor& logits = model_->forward(model_input(d, *train_reader_));
    // dlogits in the logits' dtype (the compute dtype) on the model's device
    nn::ensure_on(dlogits_, logits.shape(), logits.dtype(), stream_);
    const int64_t n = batch.labels.numel();
    if (gpu) {
      kernels::softmax_cross_entropy_queued(logits, labels, o_.label_smoothing, &dlogits_, scale,
                                            loss_states_[size_t(m)], stream_);
    } else {
      *loss_sum +=
          kernels::softmax_cross_entropy(logits, labels, o_.label_smoothing, &dlogits_, scale, stream_) * double(n);
      *correct += kernels::count_correct(logits, labels);
    }
    *samples += n;
    mm.backward.record(stream_);
    armed_ = m == o_.accum_steps - 1;
    model_->backward(dlogits_, m > 0);
    armed_ = false;
    mm.backward_end.record(stream_);
    if (gpu) {
      released_[k].record(stream_);
      held.push_back(std::move(st.batch));
      if (m + 1 < o_.accum_steps) staged_ = stage(t);  // the next micro-batch's copy beside this one's work
    }
  }
  const double tw = now_s();
  sync_->wait();
  t.comm = sync_->exposed_s();
  if (sync_->averages() && !sync_->queued()) timeline_.span(Timeline::compute, "wait for gradients", tw, tw + t.comm);
  auto& arena = model_->arena();
  bool ok = true;
  mk.optimizer.record(stream_);
  if (gpu) {
    // Two passes over the gradients as reduced (model dtype, or f32 with lossy compression): unscale,
    // inf/NaN check, clipping, the step on the f32 master and the model copy in one kernel.
    optimizer_->set_lr(float(schedule_.at(long(step_))));
    optimizer_->queue_fused_step(sync_f32_grads_ ? arena.grads() : arena.comm_grads(), scaler_.scale(), o_.clip_norm);
    mk.optimizer_end.record(stream_);
    if (stage_next) staged_ = stage(t);    // the next step's first batch: read and copied up while this one runs
    sync_->finish_step();                  // (queued all-reduces: the step's one wait, watched)
    ok = optimizer_->finish_fused_step();  // the step's one wait
    for (int m = 0; m < o_.accum_steps; ++m) {
      const kernels::LossValues v = kernels::read_loss_values(loss_states_[size_t(m)], stream_);  // (done: no wait)
      *loss_sum += v.mean_loss * double(v.batch);
      *correct += v.correct;
    }
    held.clear();
  } else {
    ok = scaler_.unscale(arena, /*cast_model_grads=*/!sync_f32_grads_);
    if (ok) {
      if (o_.clip_norm > 0) nn::clip_grad_norm(arena, o_.clip_norm);
      optimizer_->set_lr(float(schedule_.at(long(step_))));
      optimizer_->step();
    }
    mk.optimizer_end.record(stream_);
  }
  for (const auto& b : sync_->timings())  // (read after the step's wait: the queued path's come from its events)
    if (b.end_s > 0)                      // (a graph's replays: no times)
      timeline_.span(Timeline::comm, "allreduce bucket " + std::to_string(b.bucket), b.start_s, b.end_s,
                     {{"elements", b.count}, {"offset", b.offset}, {"wire_bytes", b.wire_bytes}});
  if (!ok) ++skipped_steps_;
  scaler_.update(!ok);
  t.total = now_s() - t_step;
  if (o_.cuda_graph) {  // one launch: forward and backward together (micro[0]'s marks bracket it)
    const StepMarks::Micro& mm = mk.micro[0];
    t.forward = mk.seconds(mm.forward, mm.backward_end);
    timeline_.span(Timeline::compute,
                   graph_.empty() ? "forward+backward (eager, before the capture)" : "forward+backward (CUDA graph)",
                   mk.host_s(mm.forward), mk.host_s(mm.backward_end));
  }
  for (const StepMarks::Micro& mm : mk.micro) {
    if (o_.cuda_graph) break;
    t.forward += mk.seconds(mm.forward, mm.backward);
    t.backward += mk.seconds(mm.backward, mm.backward_end);
    timeline_.span(Timeline::compute, "forward", mk.host_s(mm.forward), mk.host_s(mm.backward));
    timeline_.span(Timeline::compute, "backward", mk.host_s(mm.backward), mk.host_s(mm.backward_end));
  }
  t.optimizer = mk.seconds(mk.optimizer, mk.optimizer_end);
  timeline_.span(Timeline::compute, ok ? "optimizer" : "optimizer (skipped: inf/NaN)", mk.host_s(mk.optimizer),
                 mk.host_s(mk.optimizer_end));
  return t;
}

void Run::graph_forward_backward(StepTimes& t, double scale, int64_t* samples, std::vector<io::Batch>& held) {
  graph_in_.resize(size_t(o_.accum_steps));
  for (int m = 0; m < o_.accum_steps; ++m) {
    Staged st = staged_ ? std::move(*staged_) : stage(t);
    staged_.reset();
    const int k = st.slot;
    copied_[k].wait(stream_);
    // Into the graph's input (the slot is refilled while the step runs): a copy on the device, of the batch's u8
    // pixels with --decode device.
    DeviceBatch& in = graph_in_[size_t(m)];
    const auto take = [&](const Tensor& from, Tensor& to) {
      if (!from.defined()) return;
      HPDT_CHECK(graph_.empty() || (to.shape() == from.shape() && to.dtype() == from.dtype()),
                 "--cuda-graph: a training batch of another shape (", from.str(), ") than the graph's (", to.str(),
                 ")");
      nn::ensure_on(to, from.shape(), from.dtype(), stream_);
      copy(from, to, stream_);
    };
    take(slots_[k].labels, in.labels);
    take(slots_[k].images, in.images);
    take(slots_[k].pixels, in.pixels);
    take(slots_[k].crops, in.crops);
    released_[k].record(stream_);
    *samples += st.batch.labels.numel();
    held.push_back(std::move(st.batch));
    if (m + 1 < o_.accum_steps) staged_ = stage(t);  // the next micro-batch's copy beside this one's
  }
  // What the graph holds: every micro-batch's forward, loss (into its loss state, read after the step's wait) and
  // backward, with the capture's loss scale. Run eagerly (no split), the last micro-batch's backward hands its
  // gradients to the sync as they complete, as in an eager step; captured on several ranks, it cuts the capture into
  // parts where a bucket is complete (captured_ready), but for the queued sync (nccl, nccl-p2p), whose all-reduces the
  // capture takes in as the eager step queues them (one part).
  const auto queue = [this, scale](const CudaGraph::Split* split) {
    for (int m = 0; m < o_.accum_steps; ++m) {
      const DeviceBatch& in = graph_in_[size_t(m)];
      const Tensor& logits = model_->forward(model_input(in, *train_reader_));
      nn::ensure_on(dlogits_, logits.shape(), logits.dtype(), stream_);
      kernels::softmax_cross_entropy_queued(logits, in.labels, o_.label_smoothing, &dlogits_, scale,
                                            loss_states_[size_t(m)], stream_);
      const bool last = m == o_.accum_steps - 1;
      struct Disarm {  // (also when backward throws: the callback must not keep a split that is gone)
        Run* run;
        ~Disarm() {
          run->armed_ = false;
          run->capture_split_ = nullptr;
        }
      } disarm{this};
      armed_ = last && !split;
      capture_split_ = last && sync_->averages() ? split : nullptr;
      model_->backward(dlogits_, m > 0);
    }
  };
  if (!graph_.empty() && graph_scale_ != scale) drop_graph();  // (fp16: the dynamic loss scale moved)
  StepMarks::Micro& mm = marks_->micro[0];
  mm.forward.record(stream_);
  // Captured once two eager steps have run and the last took all its memory from the cache.
  if (graph_.empty() && eager_graph_steps_ >= 2 && !graph_step_allocated_) {
    graph_part_ready_.assign(1, {});
    capture_ready_ = 0;
    capture_bucket_ends_.clear();
    const std::vector<size_t> starts = sync_->bucket_offsets();
    for (size_t b = 1; b < starts.size(); ++b) capture_bucket_ends_.push_back(starts[b]);
    // The queued sync (nccl, nccl-p2p): its all-reduces and wait() go into the graph too, which is then one part.
    const bool sync_inside = sync_->averages() && sync_->queued();
    graph_ = CudaGraph::capture_parts(stream_, [&](const CudaGraph::Split& split) {
      if (!sync_inside) return queue(&split);
      sync_->begin_capture();
      queue(nullptr);
      sync_->wait();
    });
    HPDT_CHECK(graph_.parts() == graph_part_ready_.size(), "--cuda-graph: ", graph_.parts(), " parts captured for ",
               graph_part_ready_.size(), " sets of gradients");
    graph_scale_ = scale;
    graph_parts_ = graph_.parts();
    if (rank_ == 0 && graph_captures_ == 0)
      std::fprintf(stderr,
                   "hpdt-train: step %lld: forward and backward captured into a CUDA graph of %zu part(s) (after %d "
                   "eager steps)\n",
                   (long long)step_ + 1, graph_.parts(), eager_graph_steps_);
    ++graph_captures_;
  }
  if (!graph_.empty()) {
    for (size_t p = 0; p < graph_.parts(); ++p) {  // each part's complete gradients to the sync after its launch
      graph_.launch_part(stream_, p);
      for (const auto& [offset, count] : graph_part_ready_[p]) sync_->notify_ready(offset, count);
    }
    if (sync_->averages() && sync_->queued()) sync_->launched_in_graph();
    ++graph_replays_;
  } else {
    CachingAllocator& alloc = cuda_caching_allocator(device_.index);
    const size_t before = alloc.stats().raw_allocations;
    queue(nullptr);
    graph_step_allocated_ = alloc.stats().raw_allocations != before;
    ++eager_graph_steps_;
    ++graph_eager_steps_;
  }
  mm.backward_end.record(stream_);
}

void Run::captured_ready(size_t offset, size_t count) {
  graph_part_ready_.back().emplace_back(offset, count);
  capture_ready_ += count;
  // A bucket is complete and gradients remain: the next part starts here.
  auto end = std::upper_bound(capture_bucket_ends_.begin(), capture_bucket_ends_.end(), capture_ready_);
  if (end == capture_bucket_ends_.begin()) return;
  capture_bucket_ends_.erase(capture_bucket_ends_.begin(), end);
  (*capture_split_)();
  graph_part_ready_.emplace_back();
}

// The next graph-mode steps run eagerly again, then capture anew. (Called where eager model code runs between steps:
// evaluation may replace the buffers the graph's kernels were captured with.)
void Run::drop_graph() {
  graph_ = CudaGraph();
  eager_graph_steps_ = 0;
  graph_step_allocated_ = true;
}

json Run::evaluate() {
  if (!eval_reader_) return nullptr;
  if (o_.cuda_graph) drop_graph();
  sync_buffers();
  model_->set_training(false);
  eval_reader_->set_epoch(0);
  int64_t steps = eval_reader_->steps_per_epoch();
  if (o_.eval_samples > 0) steps = std::min<int64_t>(steps, (o_.eval_samples + global_batch_ - 1) / global_batch_);
  double sums[3] = {0, 0, 0};  // loss * n, correct, n
  const double t0 = now_s();
  for (int64_t s = 0; s < steps; ++s) {
    io::Batch b = eval_reader_->next();
    if (b.valid == 0) continue;
    if (device_.is_cuda()) upload(b, eval_batch_, stream_);  // read by the end of the batch (its loss's read)
    const DeviceBatch d = device_.is_cuda() ? eval_batch_ : on_device(b);
    const Tensor& logits = model_->forward(model_input(d, *eval_reader_));
    Tensor l = logits.slice(0, b.valid), y = d.labels.slice(0, b.valid);
    if (device_.is_cuda()) {  // one wait a batch (the read), and no copy of the logits
      kernels::softmax_cross_entropy_queued(l, y, 0.0, nullptr, 1.0, loss_states_.at(0), stream_);
      const kernels::LossValues v = kernels::read_loss_values(loss_states_[0], stream_);
      sums[0] += v.mean_loss * double(b.valid);
      sums[1] += double(v.correct);
    } else {
      sums[0] += kernels::softmax_cross_entropy(l, y, 0.0, nullptr, 1.0, stream_) * double(b.valid);
      sums[1] += double(kernels::count_correct(l, y));
    }
    sums[2] += double(b.valid);
  }
  HPDT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, world_));
  model_->set_training(true);
  return {{"test_loss", sums[2] > 0 ? sums[0] / sums[2] : 0.0},
          {"test_accuracy", sums[2] > 0 ? sums[1] / sums[2] : 0.0},
          {"test_samples", int64_t(sums[2])},
          {"eval_seconds", now_s() - t0}};
}

void Run::verify_identical_parameters() {
  Tensor master = host_copy(model_->arena().master_params(), stream_);
  uint64_t h = fnv1a(master.data(), master.nbytes()), lo = h, hi = h;
  HPDT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, world_));
  HPDT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, world_));
  if (lo != hi)
    HPDT_FAIL("parameters differ across ranks after training (checksum ", h, " on rank ", rank_,
              "): the replicas diverged; this is a bug in gradient synchronisation");
}

void Run::final_report(const std::vector<StepTimes>& steps, const json& last_eval, double wall) {
  // Medians over the steps after the first (warm-up: allocation, page faults, first prefetch).
  std::vector<StepTimes> s(steps.size() > 2 ? steps.begin() + 1 : steps.begin(), steps.end());
  auto med = [&](double StepTimes::*f) {
    std::vector<double> v;
    for (const auto& x : s) v.push_back(x.*f);
    return median(v);
  };
  const double step_time = med(&StepTimes::total);
  // Straggler report: every rank's median compute time (forward + backward) gathered on rank 0.
  std::vector<double> compute_v;
  for (const auto& x : s) compute_v.push_back(x.forward + x.backward);
  double mine = median(compute_v);
  std::vector<double> all(static_cast<size_t>(size_));
  HPDT_MPI_CHECK(MPI_Gather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, world_));
  // Every rank's step time is the same (the all-reduce synchronises them); the img/s is global.
  const double img_s = step_time > 0 ? double(global_batch_ * o_.accum_steps) / step_time : 0;
  std::vector<std::string> hosts_v(1, host_);
  {
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    std::snprintf(name, sizeof name, "%s", host_.c_str());
    std::vector<char> names(size_t(size_) * MPI_MAX_PROCESSOR_NAME);
    HPDT_MPI_CHECK(MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, world_));
    hosts_v.clear();
    for (int r = 0; r < size_; ++r) hosts_v.emplace_back(&names[size_t(r) * MPI_MAX_PROCESSOR_NAME]);
    std::sort(hosts_v.begin(), hosts_v.end());
    hosts_v.erase(std::unique(hosts_v.begin(), hosts_v.end()), hosts_v.end());
  }
  if (rank_ != 0) return;
  const auto slowest = std::max_element(all.begin(), all.end()), fastest = std::min_element(all.begin(), all.end());
  json summary = {{"type", "summary"},
                  {"model", o_.model},
                  {"ranks", size_},
                  {"nodes", int(hosts_v.size())},
                  {"hosts", hosts_v},
                  {"per_rank_batch", o_.batch},
                  {"accum_steps", o_.accum_steps},
                  {"global_batch", global_batch_ * o_.accum_steps},
                  {"steps", int64_t(steps.size())},
                  {"skipped_steps", skipped_steps_},
                  {"step_time_s", step_time},
                  {"throughput_img_s", img_s},
                  {"throughput_img_s_per_rank", img_s / size_},
                  {"data_wait_s", med(&StepTimes::data)},
                  {"forward_s", med(&StepTimes::forward)},
                  {"backward_s", med(&StepTimes::backward)},
                  {"exposed_comm_s", med(&StepTimes::comm)},
                  {"optimizer_s", med(&StepTimes::optimizer)},
                  {"exposed_comm_share", step_time > 0 ? med(&StepTimes::comm) / step_time : 0.0},
                  {"bytes_sent_per_step", sync_->bytes_sent()},
                  {"uncompressed_bytes_per_step", sync_->raw_bytes()},
                  {"buckets", sync_->bucket_count()},
                  {"straggler",
                   {{"compute_s_min", *fastest},
                    {"compute_s_max", *slowest},
                    {"slowest_rank", int(slowest - all.begin())},
                    {"spread", *fastest > 0 ? *slowest / *fastest - 1 : 0.0}}},
                  {"algo", o_.algo},
                  {"compress", o_.compress},
                  {"overlap", o_.overlap},
                  {"precision", o_.precision},
                  {"device", device_.str()},
                  {"kernels", o_.device == "cuda" ? o_.kernels : "cpu"},
                  {"gemm", o_.device == "cuda" && o_.kernels == "ours" ? o_.gemm : "-"},
                  {"conv", o_.device == "cuda" && o_.kernels == "ours" ? o_.conv : "-"},
                  {"gemm_tuning", o_.device == "cuda" && o_.kernels == "ours" ? o_.gemm_tuning : "-"},
                  {"cudnn_algo", o_.device == "cuda" && o_.kernels == "vendor" ? o_.cudnn_algo : "-"},
                  {"layout", kernels::layout_name(model_->layout())},
                  {"gelu", o_.model.rfind("vit", 0) == 0 ? o_.gelu : "-"},
                  {"grad_sync", sync_->path()},
                  // --cuda-graph: forward_s is the graph's forward and backward together, backward_s 0
                  {"cuda_graph", o_.cuda_graph ? json{{"captures", graph_captures_},
                                                      {"parts", graph_parts_},
                                                      {"replays", graph_replays_},
                                                      {"eager_steps", graph_eager_steps_}}
                                               : json(false)},
                  {"parameters", model_->num_parameters()},
                  {"wall_s", wall},
                  {"git_commit", build_info_json().value("git_commit", "")}};
  if (last_eval.is_object())
    for (auto& [k, v] : last_eval.items()) summary[k] = v;
  metrics_.write(summary);
  std::printf("\n== hpdt-train summary: %s on %d rank(s), %d node(s) ==\n", o_.model.c_str(), size_, int(hosts_v.size()));
  if (last_eval.is_object())
    std::printf("test accuracy   %.2f%% (%lld samples), test loss %.4f\n", 100 * last_eval["test_accuracy"].get<double>(),
                (long long)last_eval["test_samples"].get<int64_t>(), last_eval["test_loss"].get<double>());
  std::printf("throughput      %.1f img/s total, %.1f img/s per rank (global batch %lld, %zu steps)\n", img_s,
              img_s / size_, (long long)(global_batch_ * o_.accum_steps), steps.size());
  char compute[96];
  if (o_.cuda_graph)
    std::snprintf(compute, sizeof compute, "forward+backward %.2f (CUDA graph)", 1e3 * med(&StepTimes::forward));
  else
    std::snprintf(compute, sizeof compute, "forward %.2f, backward %.2f", 1e3 * med(&StepTimes::forward),
                  1e3 * med(&StepTimes::backward));
  std::printf("step time       %.2f ms median: data wait %.2f, %s, exposed comm %.2f (%.1f%%), optimizer %.2f\n",
              1e3 * step_time, 1e3 * med(&StepTimes::data), compute, 1e3 * med(&StepTimes::comm),
              step_time > 0 ? 100 * med(&StepTimes::comm) / step_time : 0.0, 1e3 * med(&StepTimes::optimizer));
  if (o_.cuda_graph)
    std::printf(
        "cuda graph      %lld capture(s), %lld step(s) replayed, %lld run eagerly (before a capture); %zu "
        "part(s), %s\n",
        (long long)graph_captures_, (long long)graph_replays_, (long long)graph_eager_steps_, graph_parts_,
        !sync_->averages() ? "nothing to average"
        : sync_->queued()  ? "the gradients' all-reduces inside"
                           : "split where a gradient bucket is complete");
  std::printf("stragglers      compute per step %.2f..%.2f ms across ranks (slowest rank %d, spread %.1f%%)\n",
              1e3 * *fastest, 1e3 * *slowest, int(slowest - all.begin()), *fastest > 0 ? 100 * (*slowest / *fastest - 1) : 0.0);
  std::printf("communication   %.2f MiB sent per rank per step in %zu bucket(s), algo %s, compress %s (%.2fx fewer bytes), overlap %s\n",
              double(sync_->bytes_sent()) / (1 << 20), sync_->bucket_count(), o_.algo.c_str(), o_.compress.c_str(),
              sync_->bytes_sent() ? double(sync_->raw_bytes()) / double(sync_->bytes_sent()) : 1.0, o_.overlap ? "on" : "off");
  if (skipped_steps_) std::printf("loss scaler     %lld step(s) skipped on inf/NaN\n", (long long)skipped_steps_);
  std::fflush(stdout);
}

int Run::execute() {
  setup_mpi();
  setup_data();
  setup_model();
  setup_comm();
  resume_if_asked();
  if (rank_ == 0) {
    metrics_.open(o_.metrics, o_.resume, o_.force);
    metrics_.write({{"type", "config"},
                    {"model", o_.model},
                    {"parameters", model_->num_parameters()},
                    {"model_config", model_->describe()},
                    {"ranks", size_},
                    {"data", train_path_},
                    {"test_data", test_path_},
                    {"samples", info_.n},
                    {"per_rank_batch", o_.batch},
                    {"global_batch", global_batch_ * o_.accum_steps},
                    {"steps_per_epoch", steps_per_epoch_},
                    {"total_steps", total_steps_},
                    {"peak_lr", schedule_.peak},
                    {"optimizer", o_.optimizer},
                    {"precision", o_.precision},
                    {"device", o_.device},
                    {"gpu", device_.is_cuda() ? cuda_device_name(device_.index) : std::string()},
                    {"kernels", o_.device == "cuda" ? o_.kernels : "cpu"},
                    {"gemm", o_.device == "cuda" && o_.kernels == "ours" ? o_.gemm : "-"},
                    {"conv", o_.device == "cuda" && o_.kernels == "ours" ? o_.conv : "-"},
                    {"gemm_tuning", o_.device == "cuda" && o_.kernels == "ours" ? o_.gemm_tuning : "-"},
                    {"cudnn_algo", o_.device == "cuda" && o_.kernels == "vendor" ? o_.cudnn_algo : "-"},
                    {"layout", kernels::layout_name(model_->layout())},
                    {"gelu", o_.model.rfind("vit", 0) == 0 ? o_.gelu : "-"},
                    {"grad_sync", sync_->path()},
                    {"algo", o_.algo},
                    {"compress", o_.compress},
                    {"bucket_mb", o_.bucket_mb},
                    {"buckets", sync_->bucket_count()},
                    {"overlap", o_.overlap},
                    {"sync_bn", o_.sync_bn},
                    {"sync_bn_via", sync_bn_via_},
                    {"cuda_graph", o_.cuda_graph},
                    {"seed", o_.seed},
                    {"shuffle_block", o_.shuffle_block},
                    {"window_batches", o_.window_batches},
                    {"augment", o_.augment},
                    {"decode_threads", decode_threads_},
                    {"decode", decode_on_device_ ? "device" : "host"},
                    {"resumed_from_step", step_},
                    {"note", resumed_note_},
                    {"build", build_info_json()}});
    const std::string model = o_.model + (o_.vit_depth ? " of depth " + std::to_string(o_.vit_depth) : "");
    std::printf(
        "hpdt-train: %s (%lld parameters) on %d rank(s) [%s], %lld steps of global batch %lld "
        "(%lld per epoch), peak lr %.4g, algo %s\n",
        model.c_str(), (long long)model_->num_parameters(), size_, comm_->describe().c_str(), (long long)total_steps_,
        (long long)(global_batch_ * o_.accum_steps), (long long)steps_per_epoch_, schedule_.peak, o_.algo.c_str());
    if (device_.is_cuda()) {
      std::string kernels = o_.kernels == "vendor" ? "vendor (cuDNN algorithms by " + o_.cudnn_algo + ")" : o_.kernels;
      if (o_.kernels == "ours" && (o_.gemm_tuning == "find" || o_.conv == "find"))
        kernels += o_.gemm_tuning != "find" ? " (NHWC convolutions by find)"
                   : o_.conv != "find"      ? " (GEMM v3 plans by find)"
                                            : " (GEMM v3 plans and NHWC convolutions by find)";
      std::string grads =
          sync_->averages() ? "gradients averaged via " + sync_->path() : "gradients not averaged (one rank)";
      if (o_.sync_bn)
        grads += sync_bn_via_ == "nccl" ? "; batch-norm statistics via nccl on the compute stream"
                                        : "; batch-norm statistics via MPI on the host";
      std::printf("hpdt-train: GPU %s (one per rank), %s kernels, %s compute, %s\n",
                  cuda_device_name(device_.index).c_str(), kernels.c_str(),
                  std::string(dtype_name(model_->compute_dtype())).c_str(), grads.c_str());
    }
    std::fflush(stdout);
  }
  Progress progress(rank_ == 0 ? Progress::resolve(o_.progress, stdout) : Progress::Mode::off, stdout, o_.log_every);
  HPDT_MPI_CHECK(MPI_Barrier(world_));
  const double t_start = now_s();
  timeline_.set_origin(t_start);
  std::vector<StepTimes> times;
  json last_eval;
  model_->set_training(true);
  bool preempted = false;
  while (step_ < total_steps_ && !preempted) {
    train_reader_->resume(epoch_, step_in_epoch_ * o_.accum_steps);
    const int64_t epoch_end = std::min(steps_per_epoch_, step_in_epoch_ + (total_steps_ - step_));
    progress.start_epoch(int(epoch_), o_.epochs, epoch_end);
    double loss_sum = 0, epoch_time = 0;
    int64_t correct = 0, samples = 0;
    while (step_in_epoch_ < epoch_end) {
      double local_loss = 0;
      int64_t local_correct = 0, local_samples = 0;
      StepTimes t = train_step(&local_loss, &local_correct, &local_samples,
                               /*stage_next=*/step_in_epoch_ + 1 < epoch_end);
      // Test hook: rank 0 sends itself SIGTERM after this step, exercising the real preemption path.
      if (rank_ == 0 && signal_at_step_ > 0 && step_ + 1 == signal_at_step_) std::raise(SIGTERM);
      // One small all-reduce per step: loss, accuracy and the preemption flag, so that every rank
      // stops after the same step.
      double red[4] = {local_loss, double(local_correct), double(local_samples), preemption_requested() ? 1.0 : 0.0};
      HPDT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, red, 4, MPI_DOUBLE, MPI_SUM, world_));
      ++step_;
      ++step_in_epoch_;
      times.push_back(t);
      loss_sum += red[0];
      correct += int64_t(red[1]);
      samples += int64_t(red[2]);
      epoch_time += t.total;
      const double img_s = double(red[2]) / t.total;
      progress.update(step_in_epoch_, loss_sum / double(samples), double(correct) / double(samples),
                      double(samples) / epoch_time, epoch_time / double(step_in_epoch_));
      if (rank_ == 0)
        metrics_.write({{"type", "step"}, {"step", step_}, {"epoch", epoch_}, {"loss", red[0] / red[2]},
                        {"accuracy", red[1] / red[2]}, {"lr", schedule_.at(long(step_ - 1))},
                        {"loss_scale", scaler_.scale()}, {"img_s", img_s}, {"step_time_s", t.total},
                        {"data_wait_s", t.data}, {"forward_s", t.forward}, {"backward_s", t.backward},
                        {"exposed_comm_s", t.comm}, {"optimizer_s", t.optimizer}});
      if (red[3] > 0) {
        preempted = true;
        break;
      }
      if (o_.checkpoint_every > 0 && step_ % o_.checkpoint_every == 0 && step_ < total_steps_)
        save_checkpoint("every " + std::to_string(o_.checkpoint_every) + " steps");
    }
    if (preempted) break;
    const bool epoch_done = step_in_epoch_ == steps_per_epoch_;
    if (epoch_done || step_ == total_steps_) {
      last_eval = evaluate();
      std::string line = "epoch " + std::to_string(epoch_ + 1) + ": train loss " +
                         std::to_string(samples ? loss_sum / double(samples) : 0.0) + ", train acc " +
                         std::to_string(samples ? 100.0 * double(correct) / double(samples) : 0.0) + "%";
      if (last_eval.is_object())
        line += ", test acc " + std::to_string(100 * last_eval["test_accuracy"].get<double>()) + "%";
      progress.finish_epoch(line);
      if (rank_ == 0) {
        json e = {{"type", "epoch"}, {"epoch", epoch_}, {"step", step_}, {"train_loss", samples ? loss_sum / double(samples) : 0.0},
                  {"train_accuracy", samples ? double(correct) / double(samples) : 0.0}, {"seconds", epoch_time}};
        if (last_eval.is_object())
          for (auto& [k, v] : last_eval.items()) e[k] = v;
        metrics_.write(e);
      }
    }
    if (epoch_done) {
      ++epoch_;
      step_in_epoch_ = 0;
    }
  }
  drop_staged();  // (a preempted run's next batch)
  const double wall = now_s() - t_start;
  if (preempted) {
    if (rank_ == 0)
      std::fprintf(stderr, "hpdt-train: preempted (signal %d on some rank) after step %lld\n", preemption_signal(),
                   (long long)step_);
    save_checkpoint("preempted");
    if (rank_ == 0) metrics_.write({{"type", "preempted"}, {"step", step_}, {"exit_code", kRequeueExitCode}});
    timeline_.write(world_, o_.timeline, host_);
    finish_nccl_debug();
    return kRequeueExitCode;
  }
  verify_identical_parameters();
  save_checkpoint("end of training");
  final_report(times, last_eval, wall);
  timeline_.write(world_, o_.timeline, host_);
  finish_nccl_debug();
  return 0;
}

// --nccl-debug on CUDA: the NCCL communicators go first (that flushes NCCL's files), then rank 0
// prints the report.
void Run::finish_nccl_debug() {
  if (!nccl_debug_) return;
  sync_.reset();
  comm_.reset();
  bn_.reset();
  HPDT_MPI_CHECK(MPI_Barrier(world_));
  if (rank_ == 0) {
    std::printf("%s", nccl_debug_->report().c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int run_training(const TrainOptions& options) {
  Run run(options);
  return run.execute();
}

}  // namespace hpdt::train
