#include "grad_sync.h"

#include <algorithm>

#include "hpdt/comm/allreduce.h"
#include "hpdt/core/env.h"
#include "hpdt/core/error.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/timer.h"

namespace hpdt::train {

// HPDT_DEVICE_COMPRESSION=off keeps the compression on the host mirror (the A/B, and the oracle of the
// tests).
bool GradSync::device_compression_wanted(const comm::CompressionSpec& spec, comm::Algorithm algo) {
  return comm::device_compression_supported(spec) && algo != comm::Algorithm::nccl &&
         env_switch("HPDT_DEVICE_COMPRESSION", "on", "off");
}

// The buckets GradientSync cuts (comm::gradient_buckets): whole tensors, bucket_bytes each.
void GradSync::cut_buckets(size_t n) {
  for (const auto& [off, count] :
       comm::gradient_buckets(n, dtype_size(grads_.dtype()), options_.bucket_bytes, options_.tensors)) {
    buckets_.push_back({off, count});
    bucket_offsets_.push_back(off);
  }
}

// The options of bucket b's device all-reduce: ring/tree/rhd/hier over NCCL (decided in the constructor).
comm::AllreduceOptions GradSync::bucket_options(int b) const {
  comm::AllreduceOptions o = options_.allreduce;
  o.bucket = b;
  o.device_transport = comm::DeviceTransport::nccl;
  return o;
}

GradSync::GradSync(comm::Communicator& comm, const Tensor& grads, comm::GradientSyncOptions options,
                   const Stream& compute)
    : grads_(grads), compute_(compute), options_(std::move(options)) {
  const size_t n = size_t(grads.numel());
  if (grads.is_cpu()) {
    path_ = "host";
    host_ = std::make_unique<comm::GradientSync>(comm, grads.data(), n, grads.dtype(), options_);
    return;
  }
  HPDT_CHECK(compute.is_cuda() && compute.device() == grads.device(), "GradSync: gradients on ", grads.device().str(),
             " need a compute stream of that device, got one on ", compute.device().str());
  if (comm.size() == 1 && options_.algorithm == comm::Algorithm::automatic && options_.compression.lossless()) {
    path_ = "none (one rank)";  // the average of one rank's gradients is those gradients
    one_rank_ = true;
    return;
  }
  const int dev = grads.device().index;
  copy_stream_ = Stream::create_cuda(dev);
  // ring/tree/rhd/hier uncompressed run on the GPU over NCCL when every rank has a GPU of its own (comm's
  // nccl-p2p path; agreed by all ranks), and so does auto (comm::resolve_auto_device: the tuning file's choice per
  // bucket, else ncclAllReduce); elsewhere the host mirror, as every other algorithm.
  const comm::Algorithm algo = options_.algorithm;
#if HPDT_HAVE_CUDA
  const bool on_gpu = options_.compression.lossless() && comm.gpu_per_rank() &&
                      (algo == comm::Algorithm::ring || algo == comm::Algorithm::tree || algo == comm::Algorithm::rhd ||
                       algo == comm::Algorithm::hier || algo == comm::Algorithm::automatic);
#else
  const bool on_gpu = false;
#endif
  if (device_compression_wanted(options_.compression, algo)) {
    // compressed on the device: each bucket's message crosses to the host, not the bucket
    path_ = "device compression";
    HPDT_CHECK(grads.dtype() == DType::f32, "GradSync: compression ", comm::compression_name(options_.compression),
               " needs an f32 gradient buffer, not ", dtype_name(grads.dtype()));
    reduce_comm_ = std::make_unique<comm::Communicator>(comm.comm(), comm.options());
    cut_buckets(n);
    for (size_t b = 0; b < buckets_.size(); ++b)  // seed and id as GradientSync's compressors: the same bits
      compressors_.push_back(comm::make_device_compressor(
          options_.compression, buckets_[b].count, grads.device(), copy_stream_, options_.seed, b,
          comm::bucket_matrices(options_.tensors, buckets_[b].offset, buckets_[b].count)));
  } else if (algo != comm::Algorithm::nccl && !on_gpu) {
    path_ = "host mirror";
    mirror_ = Tensor::empty({int64_t(std::max<size_t>(n, 1))}, grads.dtype(), Device::cpu(), AllocOptions{.pinned = true})
                  .flat(0, int64_t(n));
    host_ = std::make_unique<comm::GradientSync>(comm, mirror_.data(), n, grads.dtype(), options_);
  } else {
#if HPDT_HAVE_CUDA
    HPDT_CHECK(options_.compression.lossless(), "GradSync: --algo nccl reduces device memory uncompressed; gradient compression needs a host algorithm");
    reduce_comm_ = std::make_unique<comm::Communicator>(comm.comm(), comm.options());
    cut_buckets(n);
    // Each bucket's algorithm (auto resolved by its size, the same on every rank) and the path it takes; the path
    // name lists the distinct ones in bucket order ("nccl", "nccl-p2p", or e.g. "nccl-p2p + nccl" from a tuning file).
    bool nccl_used = false;
    std::vector<std::string> paths;
    for (Bucket& k : buckets_) {
      const size_t bytes = k.count * dtype_size(grads.dtype());
      k.algo = algo == comm::Algorithm::automatic
                   ? comm::resolve_auto_device(*reduce_comm_, bytes, options_.allreduce).algorithm
                   : algo;
      k.path = comm::device_allreduce_path(*reduce_comm_, k.count, grads.dtype(), k.algo, bucket_options(0));
      nccl_used = nccl_used || k.path == comm::DevicePath::nccl || k.path == comm::DevicePath::nccl_p2p;
      const std::string name(comm::device_path_name(k.path));
      if (std::find(paths.begin(), paths.end(), name) == paths.end()) paths.push_back(name);
    }
    if (paths.empty())
      paths.push_back(algo == comm::Algorithm::nccl || algo == comm::Algorithm::automatic ? "nccl" : "nccl-p2p");
    for (const std::string& name : paths) path_ += (path_.empty() ? "" : " + ") + name;
    if (nccl_used) {
      (void)reduce_comm_->nccl();  // created here, on the training thread, collectively
      HPDT_CHECK(reduce_comm_->nccl_device() == dev, "GradSync: the NCCL communicator uses GPU ",
                 reduce_comm_->nccl_device(), " but the model is on GPU ", dev,
                 " (both should be local rank % device count)");
    }
    // Every bucket by NCCL (ncclAllReduce, or our algorithms over its send/recv): queued by the training thread
    // itself (agreed: the paths and gpu_per_rank are the same on every rank, and so is HPDT_GRAD_SYNC_QUEUED in a
    // sane launch).
    queued_ = reduce_comm_->gpu_per_rank() && !buckets_.empty() &&
              std::all_of(buckets_.begin(), buckets_.end(),
                          [](const Bucket& k) {
                            return k.path == comm::DevicePath::nccl || k.path == comm::DevicePath::nccl_p2p;
                          }) &&
              env_switch("HPDT_GRAD_SYNC_QUEUED", "on", "off");
    if (queued_) {
      marks_.reserve(buckets_.size());
      for (size_t b = 0; b < buckets_.size(); ++b)
        marks_.push_back({Event(grads.device()), Event(grads.device()), Event(grads.device())});
      origin_ = Event(grads.device());
      fork_ = Event(grads.device(), /*timing=*/false);
      join_ = Event(grads.device(), /*timing=*/false);
      return;  // no stager thread
    }
#else
    HPDT_FAIL("GradSync: --algo nccl needs a CUDA build");
#endif
  }
  stager_ = std::thread([this] { stager_loop(); });
}

GradSync::~GradSync() {
  if (!stager_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  stager_.join();
}

void GradSync::begin_step() {
  if (host_) host_->begin_step();
  if (queued_) {  // (the compute stream is idle here: the last step ended with a wait)
    origin_.record(compute_);
    origin_host_s_ = now_s();
    capturing_ = in_graph_ = timed_ = false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& b : buckets_) b.ready = 0;
  next_bucket_ = 0;
  pending_.assign(buckets_.size(), comm::BucketTiming{});
  for (size_t i = 0; i < buckets_.size(); ++i) {
    pending_[i].bucket = int(i);
    pending_[i].offset = buckets_[i].offset;
    pending_[i].count = buckets_[i].count;
  }
  error_ = nullptr;
}

void GradSync::notify_ready(size_t offset, size_t count) {
  if (path_ == "host") {
    host_->notify_ready(offset, count);
    return;
  }
  if (one_rank_) return;
  HPDT_CHECK(offset <= size_t(grads_.numel()) && count <= size_t(grads_.numel()) - offset, "GradSync::notify_ready: [",
             offset, ", ", offset + count, ") is outside the gradient buffer of ", grads_.numel(), " elements");
  if (count == 0) return;
  if (queued_) {  // the training thread: count the bucket's ready elements, queue the complete buckets in order
    size_t b =
        size_t(std::upper_bound(bucket_offsets_.begin(), bucket_offsets_.end(), offset) - bucket_offsets_.begin()) - 1;
    for (; b < buckets_.size() && buckets_[b].offset < offset + count; ++b) {
      Bucket& k = buckets_[b];
      k.ready += std::min(offset + count, k.offset + k.count) - std::max(offset, k.offset);
      HPDT_CHECK(k.ready <= k.count, "GradSync: bucket ", b, " notified for more elements than it holds");
    }
    if (options_.overlap) queue_due_buckets(false);
    return;
  }
  const Device dev = grads_.device();
  Event done(dev, /*timing=*/false);
  if (mirror_.defined()) {
    Event computed(dev, false);
    computed.record(compute_);
    computed.wait(copy_stream_);
    Tensor src = grads_.flat(int64_t(offset), int64_t(count)), dst = mirror_.flat(int64_t(offset), int64_t(count));
    copy(src, dst, copy_stream_);
    done.record(copy_stream_);
  } else {
    done.record(compute_);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(done), offset, count});
  }
  cv_.notify_all();
}

void GradSync::stager_loop() {
  try {
    cuda_set_device(grads_.device().index);  // a new thread starts on device 0
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto bucket_due = [&] {
      return !buckets_.empty() && next_bucket_ < buckets_.size() && (options_.overlap || waiting_) &&
             buckets_[next_bucket_].ready == buckets_[next_bucket_].count;
    };
    cv_.wait(lock, [&] { return stop_ || (!error_ && (!queue_.empty() || bucket_due())); });
    if (stop_) return;
    try {
      if (!queue_.empty()) {
        Slice s = std::move(queue_.front());
        queue_.pop_front();
        ++in_flight_;
        lock.unlock();
        s.done.synchronize();
        if (host_) {
          host_->notify_ready(s.offset, s.count);
          lock.lock();
        } else {
          lock.lock();
          const double t = now_s();
          size_t b = size_t(std::upper_bound(bucket_offsets_.begin(), bucket_offsets_.end(), s.offset) -
                            bucket_offsets_.begin()) - 1;
          for (; b < buckets_.size() && buckets_[b].offset < s.offset + s.count; ++b) {
            Bucket& k = buckets_[b];
            const size_t lo = std::max(s.offset, k.offset), hi = std::min(s.offset + s.count, k.offset + k.count);
            k.ready += hi - lo;
            HPDT_CHECK(k.ready <= k.count, "GradSync: bucket ", b, " notified for more elements than it holds");
            if (k.ready == k.count) pending_[b].ready_s = t;
          }
        }
        --in_flight_;
      }
      while (bucket_due()) {
        const size_t b = next_bucket_;
        lock.unlock();
        reduce_device_bucket(b);
        lock.lock();
        ++next_bucket_;
      }
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      in_flight_ = 0;
      error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

// The queued path: the complete buckets from next_bucket_ on, in bucket order (the same on every rank); `all`: every
// bucket must be complete (wait()).
void GradSync::queue_due_buckets(bool all) {
  for (; next_bucket_ < buckets_.size(); ++next_bucket_) {
    const Bucket& k = buckets_[next_bucket_];
    if (k.ready < k.count) {
      HPDT_CHECK(!all, "GradSync: bucket ", next_bucket_, " has ", k.ready, " of its ", k.count,
                 " gradients complete at wait() (backward notified too few)");
      return;
    }
    queue_bucket(next_bucket_);
  }
}

// Bucket b's gradients are complete in the work queued on the compute stream so far: its all-reduce (average, in
// place) on copy_stream_ after them, and the host goes on. Timing events only outside a capture (a graph's launch
// does not record the events its capture recorded).
void GradSync::queue_bucket(size_t b) {
#if HPDT_HAVE_CUDA
  Bucket& k = buckets_[b];
  Marks& m = marks_[b];
  fork_.record(compute_);
  fork_.wait(copy_stream_);
  if (!capturing_) {
    m.ready.record(compute_);
    m.start.record(copy_stream_);
  }
  const size_t es = dtype_size(grads_.dtype());
  char* p = static_cast<char*>(grads_.data()) + k.offset * es;
  const bool ours = k.path == comm::DevicePath::nccl_p2p;
  const uint64_t sent0 = ours ? p2p_bytes_sent(k) : 0;
  comm::allreduce_device_enqueue(*reduce_comm_, p, k.count, grads_.dtype(), options_.op, k.algo, bucket_options(int(b)),
                                 copy_stream_.handle());
  if (!capturing_) m.end.record(copy_stream_);
  timed_ = !capturing_;
  k.raw_bytes = comm::ring_allreduce_bytes(reduce_comm_->size(), k.count * es);
  k.wire_bytes = ours ? p2p_bytes_sent(k) - sent0 : k.raw_bytes;  // (NCCL's own traffic: what its ring moves)
#else
  (void)b;
#endif
}

void GradSync::begin_capture() {
  HPDT_CHECK(queued_, "GradSync::begin_capture: only the queued path (nccl, nccl-p2p) is captured into a graph, not ",
             path_);
  capturing_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& b : buckets_) b.ready = 0;
  next_bucket_ = 0;
}

void GradSync::launched_in_graph() {
  HPDT_CHECK(queued_,
             "GradSync::launched_in_graph: only the queued path (nccl, nccl-p2p) is captured into a graph, not ",
             path_);
  in_graph_ = true;
  timed_ = false;
}

void GradSync::finish_step() {
  if (!queued_) return;
#if HPDT_HAVE_CUDA  // (queued_ is only set in GPU builds)
  comm::wait_enqueued(
      *reduce_comm_, compute_.handle(),
      "gradient all-reduce (" + std::to_string(buckets_.size()) + " bucket(s) by " + path_ + ", queued)");
  timings_ = pending_;
  bytes_sent_ = raw_bytes_ = 0;
  for (size_t b = 0; b < timings_.size(); ++b) {
    comm::BucketTiming& t = timings_[b];
    t.wire_bytes = buckets_[b].wire_bytes;  // (a graph's replay posts nothing on the host: the capture's counts)
    t.raw_bytes = buckets_[b].raw_bytes;
    bytes_sent_ += t.wire_bytes;
    raw_bytes_ += t.raw_bytes;
    if (!timed_) continue;  // (in a graph)
    const auto at = [&](const Event& e) { return origin_host_s_ + double(origin_.elapsed_ms(e)) * 1e-3; };
    t.ready_s = at(marks_[b].ready);
    t.start_s = at(marks_[b].start);
    t.end_s = at(marks_[b].end);
  }
#endif
}

#if HPDT_HAVE_CUDA
// What our algorithms have posted on the NCCL transports (hier's per-node and cross-node ones are split on its first
// call, at the same bucket on every rank).
uint64_t GradSync::p2p_bytes_sent(const Bucket& k) const {
  uint64_t s = reduce_comm_->nccl_transport().bytes_sent();
  if (k.algo == comm::Algorithm::hier) {
    s += reduce_comm_->nccl_local_transport().bytes_sent();
    if (const comm::NcclTransport* c = reduce_comm_->nccl_cross_transport()) s += c->bytes_sent();
  }
  return s;
}
#endif

void GradSync::reduce_device_bucket(size_t b) {
  if (!compressors_.empty()) {  // device compression
    const Bucket& k = buckets_[b];
    comm::BucketTiming& t = pending_[b];
    comm::DeviceCompressor& c = *compressors_[b];
    Tensor part = grads_.flat(int64_t(k.offset), int64_t(k.count));
    t.start_s = now_s();
    // the slices are complete on the device (their events were waited for); returns when the result is there
    comm::AllreduceOptions o = options_.allreduce;
    o.bucket = int(b);
    c.allreduce(*reduce_comm_, part, options_.op, options_.algorithm, o, copy_stream_);
    t.end_s = now_s();
    t.raw_bytes = comm::ring_allreduce_bytes(reduce_comm_->size(), k.count * sizeof(float));
    t.wire_bytes = c.wire_bytes();
    return;
  }
#if HPDT_HAVE_CUDA
  const Bucket& k = buckets_[b];
  comm::BucketTiming& t = pending_[b];  // only this thread touches slot b until next_bucket_ passes it
  const size_t es = dtype_size(grads_.dtype());
  const comm::AllreduceOptions o = bucket_options(int(b));
  char* p = static_cast<char*>(grads_.data()) + k.offset * es;
  const bool ours = k.path == comm::DevicePath::nccl_p2p;
  const uint64_t sent0 = ours ? p2p_bytes_sent(k) : 0;
  t.start_s = now_s();
  // The slices are complete on the device (their events were waited for): the idle copy stream is
  // the caller's stream, and the call returns when the reduction is done.
  comm::allreduce_device(*reduce_comm_, p, p, k.count, grads_.dtype(), options_.op, k.algo, o, copy_stream_.handle());
  t.end_s = now_s();
  t.raw_bytes = comm::ring_allreduce_bytes(reduce_comm_->size(), k.count * es);
  // NCCL's own traffic (and MPI's, staged) is invisible here: count what its ring moves.
  t.wire_bytes = ours ? p2p_bytes_sent(k) - sent0 : t.raw_bytes;
#else
  (void)b;
#endif
}

void GradSync::wait() {
  if (path_ == "host") {
    host_->wait();
    return;
  }
  if (one_rank_) return;  // exposed_s_ stays 0, timings_ empty
  if (queued_) {          // the compute stream waits for the all-reduces; the host does not (finish_step does)
    exposed_s_ = 0;
    if (in_graph_) return;  // the launched graph holds them
    queue_due_buckets(true);
    join_.record(copy_stream_);
    join_.wait(compute_);
    capturing_ = false;
    return;
  }
  const double t0 = now_s();
  {
    std::unique_lock<std::mutex> lock(mu_);
    waiting_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] {
      return error_ || (queue_.empty() && in_flight_ == 0 && next_bucket_ == buckets_.size());
    });
    waiting_ = false;
    if (error_) {
      auto e = error_;
      error_ = nullptr;
      queue_.clear();
      std::rethrow_exception(e);
    }
  }
  if (host_) {
    host_->wait();
    copy(mirror_, grads_, compute_);  // the averaged gradients back up, before the optimizer's kernels
  } else {
    timings_ = pending_;
    bytes_sent_ = raw_bytes_ = 0;
    for (const auto& t : timings_) {
      bytes_sent_ += t.wire_bytes;
      raw_bytes_ += t.raw_bytes;
    }
  }
  exposed_s_ = now_s() - t0;
}

size_t GradSync::bucket_count() const { return host_ ? host_->bucket_count() : buckets_.size(); }
std::vector<size_t> GradSync::bucket_offsets() const { return host_ ? host_->bucket_offsets() : bucket_offsets_; }
const std::vector<comm::BucketTiming>& GradSync::timings() const { return host_ ? host_->timings() : timings_; }
double GradSync::exposed_s() const { return path_ == "host" ? host_->exposed_s() : exposed_s_; }
uint64_t GradSync::bytes_sent() const { return host_ ? host_->bytes_sent() : bytes_sent_; }
uint64_t GradSync::raw_bytes() const { return host_ ? host_->raw_bytes() : raw_bytes_; }
// Device compression: GradientSync's layout (each bucket's compressor state in bucket order), so that a checkpoint
// carries over between the paths.
std::vector<float> GradSync::compression_state() const {
  if (host_) return host_->compression_state();
  std::vector<float> all;
  for (const auto& c : compressors_) {
    const std::vector<float> s = c->state(copy_stream_);
    all.insert(all.end(), s.begin(), s.end());
  }
  return all;
}
void GradSync::set_compression_state(const std::vector<float>& state) {
  if (host_) {
    host_->set_compression_state(state);
    return;
  }
  std::vector<size_t> sizes;
  for (const auto& c : compressors_) sizes.push_back(c->state_size());
  const auto parts = comm::split_compression_state(state, sizes,
                                                   "GradSync (" + comm::compression_name(options_.compression) +
                                                       " over " + std::to_string(grads_.numel()) + " gradients in " +
                                                       std::to_string(compressors_.size()) + " buckets)");
  for (size_t b = 0; b < compressors_.size(); ++b) compressors_[b]->set_state(parts[b], copy_stream_);
}

}  // namespace hpdt::train
