// hpdt-allreduce-perf: all-reduce algorithms (ring, tree, rhd, hier, mpi, nccl, auto) and gradient
// compressions measured over a range of message sizes, printed in the layout of nccl-tests'
// all_reduce_perf (one block per algorithm), plus JSON/CSV, an alpha-beta fit per algorithm with the
// model beside each measurement, the best algorithm per size, and a tuning file for --algo auto.
//
//   mpirun -np 4 hpdt-allreduce-perf -b 8 -e 64M -f 2 --algo ring,tree,rhd,hier,mpi,auto -J out.json
//
// Conventions (nccl-tests, doc/PERFORMANCE.md): algbw = bytes / time; busbw = algbw * 2(p-1)/p, the
// per-link bandwidth a bandwidth-optimal algorithm needs, comparable across rank counts and with the
// hardware's peak. Times are per operation, averaged over -n back-to-back iterations after -w warm-up
// ones, reduced over ranks by -a (0 rank 0, 1 mean, 2 min, 3 max), median over --repeat repetitions.
//
// --compress LIST times comm's Compressor::allreduce (fp16, bf16, topk:R, qsgd:B, powersgd:R, ",noef")
// for every (compression, algorithm, size), f32. With --device cuda each is timed twice, as hpdt-train's two
// paths run it: on the GPU (comm::DeviceCompressor, "on: device") and through a
// pinned host mirror ("on: host mirror": copied down, compressed on the host, copied back up); the device
// rows' #wrong counts elements that are not bitwise the host compressor's. algbw/busbw stay defined on the
// uncompressed message size; compressed blocks add the bytes a rank put on the wire per call and the
// compression ratio (ring's 2(p-1)/p * bytes over those). See docs/benchmarks.md for #wrong there.
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "hpdt/bench/cost_model.h"
#include "hpdt/comm/allreduce.h"
#include "hpdt/comm/communicator.h"
#include "hpdt/comm/compression.h"
#include "hpdt/comm/tuning.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/cli_checks.h"
#include "hpdt/core/error.h"
#include "hpdt/core/float16.h"
#include "hpdt/core/mpi_gpus.h"
#include "hpdt/core/results.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/core/timer.h"

using namespace hpdt;
namespace hc = hpdt::comm;

namespace {

struct Options {
  size_t min_bytes = 8, max_bytes = 32 << 20, step_bytes = 1 << 20;
  double step_factor = 2;
  bool factor_given = false;
  int iters = 20, warmup = 5, check = 1, average = 1, repeat = 3;
  std::string dtype = "float", op = "sum", device = "cpu";
  std::string algos = "ring,tree,rhd,hier,mpi,auto", compresses = "none";
  size_t segment = 0;
  std::string hier_intra = "shm";
  std::string device_transport = "auto";
  bool interleave = false;
  double loop_ms = 0;  // > 0: every timed loop of an uncompressed algorithm lasts at least this long
  std::string json, csv, tuning_out, tuning_in, label, nccl_debug;
  int root = -1;
};

size_t parse_size(const std::string& flag, const std::string& text) {
  // nccl-tests accepts 8, 1K, 32M, 1G (powers of 1024)
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    HPDT_FAIL(flag, ": '", text, "' is not a size (e.g. 8, 64K, 32M, 1G)");
  }
  std::string unit = text.substr(used);
  double mult = 1;
  if (unit == "K" || unit == "k" || unit == "KB" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "m" || unit == "MB" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g" || unit == "GB" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) HPDT_FAIL(flag, ": unknown unit '", unit, "' in '", text, "' (use K, M or G)");
  HPDT_CHECK(v >= 0, flag, ": size must be >= 0, got '", text, "'");
  return size_t(v * mult);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// --compress: the list is comma-separated and ",noef" belongs to the method before it
// ("none,topk:0.01,noef,qsgd:4" -> none, topk:0.01,noef, qsgd:4).
std::vector<std::string> split_compressions(const std::string& s) {
  std::vector<std::string> out;
  for (auto& item : split(s)) {
    if (item == "noef" && !out.empty()) out.back() += ",noef";
    else out.push_back(item);
  }
  return out;
}

DType parse_dtype(const std::string& s) {
  if (s == "float" || s == "f32" || s == "float32") return DType::f32;
  if (s == "half" || s == "f16" || s == "float16") return DType::f16;
  if (s == "bfloat16" || s == "bf16") return DType::bf16;
  HPDT_FAIL("-d: unsupported datatype '", s, "' (float, half, bfloat16)");
}
const char* nccl_type_name(DType t) { return t == DType::f32 ? "float" : t == DType::f16 ? "half" : "bfloat16"; }

std::string time_str(double us) {  // nccl-tests: %7.0f / %7.1f / %7.2f by magnitude
  char b[32];
  std::snprintf(b, sizeof b, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
  return b;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Exactly representable inputs: small integers whose sums over any rank count used here are exact in
// the dtype (f32: |v| <= 8, so |sum| <= 8p; f16/bf16: v in {-1,0,1,2}, |sum| <= 2p, exact to p = 128
// for bf16 and 1024 for f16). Each element's value depends on rank and index, so a misplaced chunk shows.
double input_value(DType t, int rank, size_t i) {
  if (t == DType::f32) return double(int((size_t(rank) * 7 + i) % 17) - 8);
  return double(int((size_t(rank) + i) % 4) - 1);
}

void fill_host(DType t, void* p, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) {
    const float v = float(input_value(t, rank, i));
    if (t == DType::f32) static_cast<float*>(p)[i] = v;
    else if (t == DType::f16) static_cast<f16_t*>(p)[i] = f16_t(v);
    else static_cast<bf16_t*>(p)[i] = bf16_t(v);
  }
}

double read_host(DType t, const void* p, size_t i) {
  if (t == DType::f32) return static_cast<const float*>(p)[i];
  if (t == DType::f16) return to_f32(static_cast<const f16_t*>(p)[i]);
  return to_f32(static_cast<const bf16_t*>(p)[i]);
}

// Elements that differ from the exact result (sum) or from it divided by p beyond one unit in the
// last place of the dtype (avg: the algorithms may scale before or after the final rounding).
size_t count_wrong(DType t, const void* p, size_t count, int ranks, bool avg) {
  const double ulp = t == DType::f32 ? 0x1p-23 : t == DType::f16 ? 0x1p-10 : 0x1p-7;
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < ranks; ++r) sum += input_value(t, r, i);
    const double want = avg ? sum / ranks : sum;
    const double got = read_host(t, p, i);
    const double tol = avg ? 2 * ulp * std::max(1.0, std::abs(want)) : 0.0;
    if (!(std::abs(got - want) <= tol)) ++wrong;
  }
  return wrong;
}

struct Row {
  std::string algo, compress;
  std::string compress_on = "none";  // compressed: "host" (--device cpu), "device" or "host mirror" (--device cuda)
  size_t bytes = 0, count = 0;
  bool in_place = false;
  double time_us = 0, algbw = 0, busbw = 0, model_us = 0;
  double mean_us = 0;  // mean over the timed loops (time_us is their median): what a run of these ops costs
  long wrong = 0;  // -1: not checked
  long long wire_bytes = -1;       // most bytes any rank sent in one call; -1: not measured (nccl)
  double compression_ratio = 0;  // 2(p-1)/p * bytes / wire_bytes (0 when either is 0 or unknown)
};

// How a compressed result is checked (docs/benchmarks.md, "Compression"). Every compressed result
// must also be finite and bitwise identical on all ranks.
enum class CompressedCheck {
  exact,        // lossless in effect (topk keeping every element, powersgd with nothing to compress)
  rounding,     // fp16/bf16: within the 16-bit rounding of the inputs and of the result
  transmitted,  // lossy (topk R < 1, qsgd, low-rank powersgd): the sum of what the ranks transmitted
};

CompressedCheck compressed_check(const hc::CompressionSpec& s, size_t count) {
  switch (s.kind) {
    case hc::CompressionKind::fp16:
    case hc::CompressionKind::bf16: return CompressedCheck::rounding;
    case hc::CompressionKind::topk: {  // comm's k = min(n, max(1, ceil(R n)))
      const size_t k = std::min(count, std::max<size_t>(1, size_t(std::ceil(s.ratio * double(count)))));
      return k == count ? CompressedCheck::exact : CompressedCheck::transmitted;
    }
    case hc::CompressionKind::powersgd: {  // a flat buffer is one near-square matrix, compressed only if it gains
      if (count == 0) return CompressedCheck::exact;
      const size_t cols = size_t(std::ceil(std::sqrt(double(count)))), rows = (count + cols - 1) / cols;
      const size_t R = size_t(s.rank);
      const bool gains = std::min(rows, cols) > R && (rows + cols) * R < rows * cols;
      return gains ? CompressedCheck::transmitted : CompressedCheck::exact;
    }
    default: return CompressedCheck::transmitted;
  }
}
const char* check_name(CompressedCheck c) {
  return c == CompressedCheck::exact ? "exact" : c == CompressedCheck::rounding ? "16-bit rounding" : "sum of transmitted";
}

// Bad options, or a machine that cannot run them, found alike on every rank (main: one message from rank 0, a clean
// exit with status 1 on every rank).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Bench {
  Options o;
  hc::Communicator& comm;
  DType dtype;
  hc::ReduceOp op;
  Device device = Device::cpu();
  Stream stream;
  hc::TuningTable tuning;
  bool have_tuning = false;
  int p, rank;

  Bench(Options opts, hc::Communicator& c)
      : o(std::move(opts)), comm(c), dtype(parse_dtype(o.dtype)), op(hc::parse_reduce_op(o.op)), p(c.size()),
        rank(c.rank()) {
    if (o.device == "cuda") {
      const std::string missing = ranks_without_gpu(comm.comm());
      if (!missing.empty()) throw UsageError("--device cuda: no usable GPU on " + missing);
      const int dev = comm.local_rank() % cuda_device_count();
      cuda_set_device(dev);
      device = Device::cuda(dev);
      stream = Stream::create_cuda(dev);
    }
    if (!o.tuning_in.empty()) {
      tuning = hc::TuningTable::load(o.tuning_in);
      have_tuning = true;
    }
  }

  void sync() {
    stream.synchronize();
#if HPDT_HAVE_CUDA
    // (has_nccl: the NCCL communicator exists only once an nccl path ran; creating it here would fail
    // where ranks share a GPU and only the staged path can run.)
    if (device.is_cuda() && comm.has_nccl()) Stream::wrap_cuda(comm.nccl_stream(), device.index).synchronize();
#endif
  }

  void run_one(hc::Algorithm algo, const Tensor& send, Tensor& recv, size_t count, bool in_place) {
    const hc::AllreduceOptions ao = allreduce_options();
    void* out = recv.data();
    const void* in = in_place ? out : send.data();
#if HPDT_HAVE_CUDA
    if (device.is_cuda()) {  // device buffers: never through the host entry point, which reads them
      hc::allreduce_device(comm, in, out, count, dtype, op, algo, ao, stream.handle());
      return;
    }
#endif
    hc::allreduce(comm, in, out, count, dtype, op, algo, ao);
  }

  // The warm-up; returns the operations per timed loop: -n, or with --loop-ms as many more as make a
  // loop last that long by the warm-up's pace (rank 0's, broadcast: every rank must run the same count).
  int warm_up(hc::Algorithm algo, const Tensor& send, Tensor& recv, size_t count, bool in_place) {
    HPDT_MPI_CHECK(MPI_Barrier(comm.comm()));
    Stopwatch sw;
    for (int i = 0; i < o.warmup; ++i) run_one(algo, send, recv, count, in_place);
    sync();
    int iters = o.iters;
    if (o.loop_ms > 0) {
      const double per_op = sw.elapsed_s() / std::max(1, o.warmup);
      if (per_op > 0) iters = int(std::clamp(std::ceil(o.loop_ms * 1e-3 / per_op), double(o.iters), 1e6));
      HPDT_MPI_CHECK(MPI_Bcast(&iters, 1, MPI_INT, 0, comm.comm()));
    }
    return iters;
  }

  // One timed loop of `iters` operations: seconds per operation, reduced over ranks as -a asks.
  double time_loop(hc::Algorithm algo, const Tensor& send, Tensor& recv, size_t count, bool in_place, int iters) {
    HPDT_MPI_CHECK(MPI_Barrier(comm.comm()));
    Stopwatch sw;
    for (int i = 0; i < iters; ++i) run_one(algo, send, recv, count, in_place);
    sync();
    return reduce_time(sw.elapsed_s() / std::max(1, iters));
  }

  // seconds per operation over --repeat timed loops: their median (the table's column) and mean
  struct LoopTimes {
    double median_s = 0, mean_s = 0;
  };
  static LoopTimes loop_times(const std::vector<double>& reps) {
    const SampleStats st = sample_stats(reps);
    return {st.median, st.mean};
  }

  LoopTimes time_op(hc::Algorithm algo, const Tensor& send, Tensor& recv, size_t count, bool in_place) {
    const int iters = warm_up(algo, send, recv, count, in_place);
    std::vector<double> reps;
    for (int r = 0; r < std::max(1, o.repeat); ++r) reps.push_back(time_loop(algo, send, recv, count, in_place, iters));
    return loop_times(reps);
  }

  // --interleave: every algorithm of one size timed round by round (repetition r of each algorithm and
  // placement before repetition r+1 of any), so that conditions drifting during a run (a shaped link's
  // token bucket, other load) hit them alike; per (algorithm, in place) over --repeat.
  std::map<std::pair<std::string, bool>, LoopTimes> time_interleaved(const std::vector<std::string>& algos,
                                                                  const Tensor& send, Tensor& recv, size_t count) {
    std::map<std::pair<std::string, bool>, int> iters;
    for (const auto& a : algos)
      for (bool in_place : {false, true}) iters[{a, in_place}] = warm_up(hc::parse_algorithm(a), send, recv, count, in_place);
    std::map<std::pair<std::string, bool>, std::vector<double>> reps;
    for (int r = 0; r < std::max(1, o.repeat); ++r)
      for (const auto& a : algos)
        for (bool in_place : {false, true})
          reps[{a, in_place}].push_back(time_loop(hc::parse_algorithm(a), send, recv, count, in_place, iters.at({a, in_place})));
    std::map<std::pair<std::string, bool>, LoopTimes> out;
    for (const auto& [key, v] : reps) out[key] = loop_times(v);
    return out;
  }

  // this rank's time reduced over ranks as -a asks
  double reduce_time(double t) {
    double red = t;
    if (o.average == 0) {
      HPDT_MPI_CHECK(MPI_Bcast(&red, 1, MPI_DOUBLE, 0, comm.comm()));
    } else {
      const MPI_Op mop = o.average == 1 ? MPI_SUM : o.average == 2 ? MPI_MIN : MPI_MAX;
      HPDT_MPI_CHECK(MPI_Allreduce(&t, &red, 1, MPI_DOUBLE, mop, comm.comm()));
      if (o.average == 1) red /= p;
    }
    return red;
  }

  hc::AllreduceOptions allreduce_options() const {
    hc::AllreduceOptions ao;
    ao.segment_bytes = o.segment;
    ao.intra_node = hc::parse_intra_node(o.hier_intra);
    ao.device_transport = hc::parse_device_transport(o.device_transport);
    if (have_tuning) ao.tuning = &tuning;
    return ao;
  }

  // Compressed: every call starts from the same input (send[0, count), like a new gradient each
  // step); the compressor, with its error-feedback state, carries on from call to call. `restore` copies
  // send into recv, `call` runs one compressed all-reduce on recv and returns when its result is there (the
  // compressors work in place). Out of place: the copy is inside the timed loop. In place: the input is
  // restored outside the timed region and only the compressor's calls are timed.
  LoopTimes time_compressed(const std::function<void()>& restore, const std::function<void()>& call, bool in_place) {
    for (int i = 0; i < o.warmup; ++i) {
      restore();
      call();
    }
    std::vector<double> reps;
    for (int r = 0; r < std::max(1, o.repeat); ++r) {
      HPDT_MPI_CHECK(MPI_Barrier(comm.comm()));
      double t = 0;
      if (!in_place) {
        Stopwatch sw;
        for (int i = 0; i < o.iters; ++i) {
          restore();
          call();
        }
        t = sw.elapsed_s();
      } else {
        for (int i = 0; i < o.iters; ++i) {
          restore();
          Stopwatch sw;
          call();
          t += sw.elapsed_s();
        }
      }
      reps.push_back(reduce_time(t / std::max(1, o.iters)));
    }
    return loop_times(reps);
  }

  // #wrong of one call of a device compressor (summed over ranks): elements that are not finite or not bitwise what
  // the host Compressor of the same spec, seed and id, given the device compressor's state, computes from the same
  // input (compression.h: the two interoperate bit for bit). Bitwise the host's also means identical on every rank.
  long check_device_compressed(hc::DeviceCompressor& dev, hc::Algorithm algo, Tensor& recv, size_t count, uint64_t id) {
    if (!o.check) return -1;
    std::vector<float> x(std::max<size_t>(count, 1)), got(x.size());
    fill_host(DType::f32, x.data(), count, rank);
    Tensor view = recv.flat(0, int64_t(count));
    const Tensor host_x = Tensor::wrap(x.data(), {int64_t(count)}, DType::f32);
    Tensor host_got = Tensor::wrap(got.data(), {int64_t(count)}, DType::f32);
    copy(host_x, view, stream);
    auto twin = hc::make_compressor(dev.spec(), count, {}, 0x5eed, id);
    twin->set_state(dev.state(stream));
    dev.allreduce(comm, view, op, algo, allreduce_options(), stream);
    twin->allreduce(comm, x.data(), op, algo, allreduce_options());
    copy(view, host_got, stream);
    stream.synchronize();
    long wrong = 0;
    for (size_t i = 0; i < count; ++i)
      wrong += !std::isfinite(got[i]) || std::memcmp(&got[i], &x[i], sizeof(float)) != 0;
    long total = 0;
    HPDT_MPI_CHECK(MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, comm.comm()));
    return total;
  }

  // Bytes a rank put on the wire for one uncompressed all-reduce (one extra, untimed call; MPI_Allreduce
  // and shm counted as ring would send, as comm's compressors count them), the most over ranks; -1 on a GPU.
  long long wire_uncompressed(hc::Algorithm algo, Tensor& recv, size_t count) {
    if (device.is_cuda()) return -1;
    const hc::AllreduceOptions ao = allreduce_options();
    const uint64_t b0 = comm.bytes_sent();
    run_one(algo, recv, recv, count, true);
    uint64_t wire = comm.bytes_sent() - b0;
    const size_t bytes = count * dtype_size(dtype);
    const hc::Algorithm used = algo == hc::Algorithm::automatic ? hc::resolve_auto(comm, bytes, ao).algorithm : algo;
    if (used == hc::Algorithm::mpi || used == hc::Algorithm::shm) wire += hc::ring_allreduce_bytes(p, bytes);
    return max_over_ranks(wire);
  }

  // What auto resolves to for a message of `bytes` in this run's memory (comm: resolve_auto on the host,
  // resolve_auto_device on a GPU, where without a tuning file a GPU per rank means nccl).
  hc::Algorithm auto_resolves_to(size_t bytes) {
#if HPDT_HAVE_CUDA
    if (device.is_cuda()) return hc::resolve_auto_device(comm, bytes, allreduce_options()).algorithm;
#endif
    return hc::resolve_auto(comm, bytes, allreduce_options()).algorithm;
  }

  long long max_over_ranks(uint64_t v) {
    unsigned long long mine = v, most = 0;
    HPDT_MPI_CHECK(MPI_Allreduce(&mine, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm.comm()));
    return (long long)most;
  }

  // #wrong of one compressed call (summed over ranks), see docs/benchmarks.md: elements that are not
  // finite or off the method's reference on some rank, plus elements not bitwise identical on all ranks.
  long check_compressed(hc::Compressor& comp, hc::Algorithm algo, float* send, float* recv, size_t count, bool in_place) {
    if (!o.check) return -1;
    float* in = in_place ? recv : send;
    fill_host(DType::f32, in, count, rank);
    if (!in_place) std::memcpy(recv, send, count * sizeof(float));
    const CompressedCheck kind = compressed_check(comp.spec(), count);
    comp.record_transmitted(kind == CompressedCheck::transmitted);
    comp.allreduce(comm, recv, op, algo, allreduce_options());
    comp.record_transmitted(false);
    const bool avg = op == hc::ReduceOp::avg;
    const double u32 = 0x1p-24;
    // reference sum and sum of magnitudes per element
    std::vector<double> ref;
    if (kind == CompressedCheck::transmitted) {
      const std::vector<float>& t = comp.transmitted();
      HPDT_CHECK(t.size() == count, "compressor recorded ", t.size(), " transmitted values, expected ", count);
      std::vector<double> mine(2 * count);
      for (size_t i = 0; i < count; ++i) {
        mine[2 * i] = t[i];
        mine[2 * i + 1] = std::abs(double(t[i]));
      }
      ref.resize(2 * count);
      HPDT_MPI_CHECK(MPI_Allreduce(mine.data(), ref.data(), int(2 * count), MPI_DOUBLE, MPI_SUM, comm.comm()));
    }
    const bool bf = comp.spec().kind == hc::CompressionKind::bf16;
    const double u16 = bf ? 0x1p-8 : 0x1p-11;  // unit roundoff of bf16 / fp16
    long wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      const double got = recv[i];
      bool ok = std::isfinite(got);
      double want = 0, mag = 0, narrowing = 0;  // narrowing: what 16-bit inputs lose
      if (kind == CompressedCheck::transmitted) {
        want = ref[2 * i];
        mag = ref[2 * i + 1];
      } else {
        for (int r = 0; r < p; ++r) {
          const double v = input_value(DType::f32, r, i);
          want += v;
          mag += std::abs(v);
          if (kind == CompressedCheck::rounding)
            narrowing += std::abs(v - (bf ? to_f32(bf16_t(float(v))) : to_f32(f16_t(float(v)))));
        }
      }
      if (avg) {
        want /= p;
        mag /= p;
        narrowing /= p;
      }
      double tol = 0;
      switch (kind) {
        case CompressedCheck::exact: tol = 4 * u32 * std::abs(want); break;  // sum/p*p, /p: a few roundings
        case CompressedCheck::rounding:  // the inputs' narrowing, the result's, f32 sums
          tol = narrowing + u16 * (std::abs(want) + narrowing) + (p + 2) * u32 * mag;
          break;
        case CompressedCheck::transmitted: tol = (p + 3) * u32 * mag; break;  // f32 sum in another order
      }
      if (!(ok && std::abs(got - want) <= tol)) ++wrong;
    }
    // bitwise identical on every rank: compare each element's bits with their min and max over ranks
    std::vector<uint32_t> bits(count), lo(count), hi(count);
    if (count) std::memcpy(bits.data(), recv, count * sizeof(float));
    HPDT_MPI_CHECK(MPI_Allreduce(bits.data(), lo.data(), int(count), MPI_UINT32_T, MPI_MIN, comm.comm()));
    HPDT_MPI_CHECK(MPI_Allreduce(bits.data(), hi.data(), int(count), MPI_UINT32_T, MPI_MAX, comm.comm()));
    if (rank == 0)
      for (size_t i = 0; i < count; ++i) wrong += lo[i] != hi[i];
    long total = 0;
    HPDT_MPI_CHECK(MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, comm.comm()));
    return total;
  }

  // #wrong summed over ranks (each rank checks its own result: all must hold the full sum)
  long check(hc::Algorithm algo, Tensor& send, Tensor& recv, size_t count, bool in_place) {
    if (!o.check) return -1;
    Tensor host = Tensor::empty({int64_t(std::max<size_t>(count, 1))}, dtype);
    fill_host(dtype, host.data(), count, rank);
    Tensor target = in_place ? recv : send;
    if (count) {
      Tensor src = host.flat(0, int64_t(count)), dst = target.flat(0, int64_t(count));
      copy(src, dst, stream);
    }
    stream.synchronize();
    run_one(algo, send, recv, count, in_place);
    sync();
    if (count) {
      Tensor src = recv.flat(0, int64_t(count)), dst = host.flat(0, int64_t(count));
      copy(src, dst, stream);
    }
    stream.synchronize();
    long wrong = long(count_wrong(dtype, host.data(), count, p, op == hc::ReduceOp::avg));
    long total = 0;
    HPDT_MPI_CHECK(MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, comm.comm()));
    return total;
  }
};

std::vector<size_t> sizes(const Options& o, size_t elem) {
  std::vector<size_t> out;
  for (size_t b = o.min_bytes; b <= o.max_bytes;) {
    out.push_back(b / elem * elem);
    size_t next = o.factor_given ? size_t(double(b) * o.step_factor) : b + o.step_bytes;
    if (next <= b) break;
    b = next;
  }
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bench::Coefficients fit_coefficients(const std::string& algo, int p) {
  // hier and auto are fitted with the ring's form: at one rank count only the effective alpha and beta
  // matter; the two-level prediction at other scales is hpdt-scaling's job.
  return bench::flat_coefficients(bench::is_known_algorithm(algo) ? algo : "ring", p);
}

// Tuning entries for this world size and node count from the best algorithm per size: a range
// boundary sits at the geometric mean of the two measured sizes where the winner changes.
std::vector<hc::TuningEntry> tuning_entries(const std::vector<std::pair<size_t, std::string>>& best, int p,
                                            int nodes, size_t segment) {
  std::vector<hc::TuningEntry> out;
  for (size_t i = 0; i < best.size(); ++i) {
    if (!out.empty() && hc::algorithm_name(out.back().algorithm) == best[i].second) continue;
    hc::TuningEntry e;
    e.world_size = p;
    e.nodes = nodes;
    e.algorithm = hc::parse_algorithm(best[i].second);
    e.segment_bytes = segment;
    e.min_bytes = i == 0 ? 0 : size_t(std::sqrt(double(best[i - 1].first) * double(best[i].first))) + 1;
    if (!out.empty()) out.back().max_bytes = e.min_bytes;
    out.push_back(e);
  }
  return out;
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{"hpdt-allreduce-perf: all-reduce algorithms in the nccl-tests layout"};
  std::string b = "8", e = "32M", i = "1M";
  app.add_option("-b,--minbytes", b, "minimum size (bytes; K/M/G suffixes)")->capture_default_str();
  app.add_option("-e,--maxbytes", e, "maximum size")->capture_default_str();
  app.add_option("-i,--stepbytes", i, "increment between sizes (when -f is not given)")->capture_default_str();
  auto* f = app.add_option("-f,--stepfactor", o.step_factor, "multiplication factor between sizes");
  app.add_option("-n,--iters", o.iters, "timed iterations per repetition")
      ->capture_default_str()
      ->check(hpdt::cli::positive());
  app.add_option("-w,--warmup_iters", o.warmup, "warm-up iterations")
      ->capture_default_str()
      ->check(hpdt::cli::non_negative());
  app.add_option("-c,--check", o.check, "check results (1) or not (0)")
      ->capture_default_str()
      ->check(hpdt::cli::in_range(0, 1));
  app.add_option("-d,--datatype", o.dtype, "float | half | bfloat16")->capture_default_str();
  app.add_option("-o,--op", o.op, "sum | avg")->capture_default_str();
  app.add_option("-a,--average", o.average, "time over ranks: 0 rank 0, 1 mean, 2 min, 3 max")
      ->capture_default_str()
      ->check(hpdt::cli::in_range(0, 3));
  app.add_option("-J,--json", o.json, "write results, fits and the best-per-size summary as JSON");
  app.add_option("--csv", o.csv, "write the result rows as CSV");
  app.add_option("--algo", o.algos, "algorithms: ring,tree,rhd,hier,mpi,nccl,auto")->capture_default_str();
  app.add_option("--compress", o.compresses,
                 "compressions, one block per (compression, algorithm): none, fp16, bf16, topk:R (0<R<=1), qsgd:B "
                 "(2..8 bits), powersgd:R (rank; a flat message is one near-square matrix), each lossy one "
                 "optionally with ',noef' (no error feedback). Needs -d float. With --device cuda each is timed on "
                 "the GPU ('on: device', comm::DeviceCompressor) and through a pinned "
                 "host mirror ('on: host mirror'). Adds wire bytes "
                 "per rank and the ratio to ring's uncompressed bytes; algbw/busbw stay on the uncompressed size "
                 "(docs/benchmarks.md)")
      ->capture_default_str();
  app.add_option("--device", o.device, "cpu | cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--segment", o.segment, "pipelining segment in bytes (0: each algorithm's default)");
  app.add_flag("--interleave", o.interleave,
               "time the uncompressed algorithms of each size round by round (repetition r of every algorithm "
               "before repetition r+1 of any) instead of block by block; the blocks are printed afterwards");
  app.add_option("--hier-intra", o.hier_intra, "hier's phases inside a node: shm (shared window) or p2p (messages)")
      ->capture_default_str()->check(CLI::IsMember({"shm", "p2p"}));
  app.add_option("--device-transport", o.device_transport,
                 "--device cuda: where ring/tree/rhd/hier run: nccl (on the GPU over NCCL send/recv), staged (on the "
                 "host through pinned buffers) or auto (nccl when every rank has its own GPU)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "staged", "nccl"}));
  app.add_option("--loop-ms", o.loop_ms,
                 "each timed loop of an uncompressed algorithm runs at least this many milliseconds: more operations "
                 "than -n where one is short (the count from the warm-up's pace on rank 0); 0: exactly -n")
      ->capture_default_str()
      ->check(hpdt::cli::non_negative());
  app.add_option("--repeat", o.repeat, "repetitions of the timed loop; the median is reported")
      ->capture_default_str()
      ->check(hpdt::cli::positive());
  app.add_option("--tuning", o.tuning_in, "tuning file that --algo auto reads (else HPDT_TUNING_FILE or built-in)");
  app.add_option("--tuning-out", o.tuning_out,
                 "write the best algorithm per size as a tuning file (entries for this rank and node count "
                 "replace older ones; others are kept)");
  app.add_option("--label", o.label, "free text recorded in the JSON (e.g. 'emulated 2x2, 1 Gbit/s')");
  app.add_option("--nccl-debug", o.nccl_debug, "capture NCCL_DEBUG=INFO per rank into DIR/nccl.rank<R>.log");
  int world_rank = 0;
  HPDT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  if (const auto status = hpdt::cli::parse_on_rank(app, argc, argv, world_rank)) return *status;
  // The options' checks: they read only the command line, the same on every rank, so a bad one is a usage error
  // every rank sees; rank 0 says so and all end cleanly (main), instead of an MPI_Abort banner after the message.
  std::vector<std::string> algos, compresses;
  std::map<std::string, hc::CompressionSpec> specs;
  try {
    o.factor_given = f->count() > 0;
    o.min_bytes = parse_size("-b", b);
    o.max_bytes = parse_size("-e", e);
    o.step_bytes = parse_size("-i", i);
    HPDT_CHECK(o.min_bytes <= o.max_bytes, "-b ", b, " is larger than -e ", e);
    HPDT_CHECK(!o.factor_given || o.step_factor > 1, "-f must be > 1, got ", o.step_factor);
    HPDT_CHECK(o.factor_given || o.step_bytes > 0, "-i must be > 0");

    algos = split(o.algos);
    compresses = split_compressions(o.compresses);
    HPDT_CHECK(!algos.empty(), "--algo: empty list");
    for (const auto& a : algos) {
      (void)hc::parse_algorithm(a);  // throws naming the known ones
      HPDT_CHECK(a != "nccl" || o.device == "cuda", "--algo nccl needs --device cuda (NCCL reduces GPU memory)");
    }
    HPDT_CHECK(!compresses.empty(), "--compress: empty list");
    for (const auto& c : compresses) {
      specs[c] = hc::parse_compression(c);  // throws naming the text and the accepted forms
      if (specs[c].lossless()) continue;
      HPDT_CHECK(parse_dtype(o.dtype) == DType::f32, "--compress ", c,
                 " needs -d float: the compressors reduce f32 buffers (got -d ", o.dtype, ")");
    }
    (void)parse_dtype(o.dtype);  // throws naming the accepted ones
  } catch (const hpdt::Error& bad) {
    throw UsageError(bad.message());
  }

  if (!o.nccl_debug.empty()) {
    // NCCL reads these when the communicator is created (first nccl use), after this point.
    std::string dir = o.nccl_debug;
    if (world_rank == 0) std::system(("mkdir -p '" + dir + "'").c_str());
    HPDT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (!std::getenv("NCCL_DEBUG")) setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_FILE", (dir + "/nccl.rank" + std::to_string(world_rank) + ".log").c_str(), 1);
  }

  hc::Communicator comm(MPI_COMM_WORLD);
  Bench bench(o, comm);
  const int p = comm.size(), rank = comm.rank();
  const size_t elem = dtype_size(bench.dtype);
  const auto size_list = sizes(o, elem);
  const std::string load_start = load_average();

  // header: who runs where (nccl-tests prints one line per rank)
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string me = host;
  std::string dev_desc = bench.device.is_cuda() ? cuda_device_name(bench.device.index) : "cpu";
  char line[512];
  std::snprintf(line, sizeof line, "#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s", rank, int(getpid()), host,
                bench.device.is_cuda() ? bench.device.index : -1, bench.device.str().c_str(), dev_desc.c_str());
  std::vector<char> all(size_t(p) * 512, 0);
  std::vector<char> mine(512, 0);
  std::snprintf(mine.data(), 512, "%s", line);
  HPDT_MPI_CHECK(MPI_Gather(mine.data(), 512, MPI_CHAR, all.data(), 512, MPI_CHAR, 0, comm.comm()));
  std::vector<char> hostbuf(256, 0), hosts_all(size_t(p) * 256, 0);
  std::snprintf(hostbuf.data(), 256, "%s", host);
  HPDT_MPI_CHECK(MPI_Allgather(hostbuf.data(), 256, MPI_CHAR, hosts_all.data(), 256, MPI_CHAR, comm.comm()));
  std::vector<std::string> hosts;
  for (int r = 0; r < p; ++r) hosts.emplace_back(&hosts_all[size_t(r) * 256]);

  const bool root = rank == 0;
  auto out = [&](const std::string& s) {
    if (root) std::fputs(s.c_str(), stdout);
  };
  {
    std::ostringstream h;
    h << "# nThread 1 nGpus 1 minBytes " << o.min_bytes << " maxBytes " << o.max_bytes << " step: "
      << (o.factor_given ? std::to_string(int(o.step_factor)) + "(factor)" : std::to_string(o.step_bytes) + "(bytes)")
      << " warmup iters: " << o.warmup << " iters: " << o.iters << " agg iters: 1 validation: " << o.check
      << " graph: 0\n#\n# hpdt-allreduce-perf: " << comm.describe() << ", device " << o.device << ", repeat "
      << o.repeat << " (median" << (o.interleave ? ", algorithms interleaved" : "") << "), -a " << o.average
      << (o.loop_ms > 0 ? ", timed loops >= " + std::to_string(int(std::lround(o.loop_ms))) + " ms" : "")
      << ", hier intra-node " << o.hier_intra << (o.device == "cuda" ? ", device transport " + o.device_transport : "")
      << "\n";
    const char* na = std::getenv("NCCL_ALGO");
    const char* np = std::getenv("NCCL_PROTO");
    if (na || np) h << "# NCCL_ALGO=" << (na ? na : "") << " NCCL_PROTO=" << (np ? np : "") << " (passed to nccl)\n";
    h << "# load average at start: " << load_start << "\n#\n# Using devices\n";
    if (root)
      for (int r = 0; r < p; ++r) h << &all[size_t(r) * 512] << "\n";
    out(h.str());
  }

  std::vector<Row> rows;
  std::map<std::string, bench::AlphaBeta> fits;
  const Tensor dummy;
  const size_t max_count = size_list.empty() ? 1 : std::max<size_t>(size_list.back() / elem, 1);
  Tensor send = Tensor::zeros({int64_t(max_count)}, bench.dtype, bench.device);
  Tensor recv = Tensor::zeros({int64_t(max_count)}, bench.dtype, bench.device);
  long oob_total = 0;
  double busbw_sum = 0;
  size_t busbw_n = 0;
  const bool have_none = std::find(compresses.begin(), compresses.end(), "none") != compresses.end();
  const bool have_compressed =
      std::any_of(compresses.begin(), compresses.end(), [&](const std::string& c) { return !specs[c].lossless(); });
  // compressed blocks: every call starts from the check's inputs (send is never written by them). On a GPU the
  // host mirror's pinned buffers hold them too.
  Tensor host_send, host_recv;
  if (have_compressed && bench.device.is_cuda()) {
    host_send = Tensor::empty({int64_t(max_count)}, DType::f32, Device::cpu(), AllocOptions{.pinned = true});
    host_recv = Tensor::empty({int64_t(max_count)}, DType::f32, Device::cpu(), AllocOptions{.pinned = true});
    fill_host(DType::f32, host_send.data(), max_count, rank);
    copy(host_send, send, bench.stream);
    bench.stream.synchronize();
  } else if (have_compressed) {
    fill_host(DType::f32, send.data(), max_count, rank);
  }
  // where a compression runs: the host (--device cpu); on a GPU, the device and the
  // host mirror
  auto places = [&](const hc::CompressionSpec& spec) -> std::vector<std::string> {
    if (spec.lossless()) return {"none"};
    if (!bench.device.is_cuda()) return {"host"};
    return {"device", "host mirror"};
  };

  // --interleave: the uncompressed timings of all algorithms, size by size, before any block is printed
  std::map<size_t, std::map<std::pair<std::string, bool>, Bench::LoopTimes>> interleaved;
  if (o.interleave && have_none)
    for (const size_t bytes : size_list) interleaved[bytes] = bench.time_interleaved(algos, send, recv, bytes / elem);

  for (size_t ci = 0; ci < compresses.size(); ++ci)
    for (const auto& a : algos)
      for (const std::string& on : places(specs[compresses[ci]])) {
        const std::string& c = compresses[ci];
        const hc::CompressionSpec& spec = specs[c];
        const bool compressed = !spec.lossless();
        const hc::Algorithm algo = hc::parse_algorithm(a);
        std::ostringstream h;
        // Uncompressed blocks keep nccl-tests' table byte for byte; compressed ones append the bytes a rank
        // sends per call and the compression ratio against ring's uncompressed 2(p-1)/p * size.
        h << "#\n# Algorithm: " << a << (compressed ? "  compress: " + c : "")
          << (on == "device" || on == "host mirror" ? "  on: " + on : "") << "\n"
          << "#                                                              out-of-place                       "
             "in-place          \n"
          << "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
             "busbw #wrong"
          << (compressed ? "          wire   ratio" : "") << "\n"
          << "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
             "(GB/s)       "
          << (compressed ? "      (B/rank)        " : "") << "\n";
        if (compressed && o.check && on == "device") {
          h << "# #wrong: not finite, or not bitwise the host compressor's result\n";
        } else if (compressed && o.check && !size_list.empty()) {
          h << "# #wrong: not finite, not bitwise identical on every rank, or off the reference ("
            << check_name(compressed_check(spec, size_list.front() / elem)) << " at " << size_list.front() << " B";
          if (compressed_check(spec, size_list.back() / elem) != compressed_check(spec, size_list.front() / elem))
            h << ", " << check_name(compressed_check(spec, size_list.back() / elem)) << " at " << size_list.back()
              << " B";
          h << ")\n";
        }
        out(h.str());
        std::vector<Row> block;
        for (size_t si = 0; si < size_list.size(); ++si) {
          const size_t bytes = size_list[si];
          const size_t count = bytes / elem;
          std::snprintf(line, sizeof line, "%12zu  %12zu  %8s  %6s  %6i", bytes, count, nccl_type_name(bench.dtype),
                        o.op.c_str(), o.root);
          std::string text = line;
          // one compressor per (compression, algorithm, place, size): its error-feedback state runs through the
          // checks and both timed columns, never reset
          const uint64_t id = ci * 1000 + si;
          std::unique_ptr<hc::Compressor> comp;
          std::unique_ptr<hc::DeviceCompressor> dcomp;
          if (on == "device")
            dcomp = hc::make_device_compressor(spec, count, bench.device, bench.stream, 0x5eed, id);
          else if (compressed)
            comp = hc::make_compressor(spec, count, {}, 0x5eed, id);
          // host buffers of the host compressor: the benchmark's own (--device cpu) or the host mirror's
          Tensor& host_in = on == "host mirror" ? host_send : send;
          Tensor& host_out = on == "host mirror" ? host_recv : recv;
          float* sendf = comp ? static_cast<float*>(host_in.data()) : nullptr;
          float* recvf = comp ? static_cast<float*>(host_out.data()) : nullptr;
          const hc::AllreduceOptions ao = bench.allreduce_options();
          Tensor send_view = send.flat(0, int64_t(count)), recv_view = recv.flat(0, int64_t(count));
          std::function<void()> restore, call;
          if (on == "host") {
            restore = [&] { std::memcpy(recvf, sendf, count * sizeof(float)); };
            call = [&] { comp->allreduce(comm, recvf, bench.op, algo, ao); };
          } else if (on == "device" || on == "host mirror") {
            restore = [&] { copy(send_view, recv_view, bench.stream); };
            if (on == "device") {
              call = [&] { dcomp->allreduce(comm, recv_view, bench.op, algo, ao, bench.stream); };
            } else {  // as hpdt-train's host mirror: down, compressed on the host, back up
              call = [&] {
                Tensor mirror = host_recv.flat(0, int64_t(count));
                copy(recv_view, mirror, bench.stream);
                bench.stream.synchronize();
                comp->allreduce(comm, recvf, bench.op, algo, ao);
                copy(mirror, recv_view, bench.stream);
                bench.stream.synchronize();
              };
            }
          }
          const size_t first = block.size();
          for (bool in_place : {false, true}) {
            Row r;
            r.algo = a;
            r.compress = c;
            r.compress_on = on;
            r.bytes = bytes;
            r.count = count;
            r.in_place = in_place;
            double t = 0;
            if (compressed) {
              r.wrong = dcomp ? bench.check_device_compressed(*dcomp, algo, recv, count, id)
                              : bench.check_compressed(*comp, algo, sendf, recvf, count, in_place);
              const Bench::LoopTimes lt = bench.time_compressed(restore, call, in_place);
              t = lt.median_s;
              r.mean_us = lt.mean_s * 1e6;
            } else {
              r.wrong = bench.check(algo, send, recv, count, in_place);
              const Bench::LoopTimes lt = o.interleave ? interleaved.at(bytes).at({a, in_place})
                                                       : bench.time_op(algo, send, recv, count, in_place);
              t = lt.median_s;
              r.mean_us = lt.mean_s * 1e6;
            }
            r.time_us = t * 1e6;
            r.algbw = t > 0 ? double(bytes) / t / 1e9 : 0;
            r.busbw = r.algbw * 2.0 * (p - 1) / p;  // nccl-tests: 0 on one rank (nothing crosses a link)
            if (r.wrong > 0) oob_total += r.wrong;
            if (!compressed || !have_none) {
              busbw_sum += r.busbw;  // the average is over uncompressed rows when there are any
              ++busbw_n;
            }
            std::snprintf(line, sizeof line, "  %7s  %6.2f  %6.2f  %5s", time_str(r.time_us).c_str(), r.algbw, r.busbw,
                          r.wrong < 0 ? "N/A" : std::to_string(r.wrong).c_str());
            text += line;
            block.push_back(r);
          }
          // wire bytes: the compressor's last call (identical for every call of a compressor), or one extra
          // uncompressed call measured by the transports' counters
          const long long wire = compressed ? bench.max_over_ranks(dcomp ? dcomp->wire_bytes() : comp->wire_bytes())
                                            : bench.wire_uncompressed(algo, recv, count);
          const double ring_bytes = 2.0 * (p - 1) / p * double(bytes);  // unrounded, for the ratio
          const double ratio = wire > 0 ? ring_bytes / double(wire) : 0.0;
          for (size_t k = first; k < block.size(); ++k) {
            block[k].wire_bytes = wire;
            block[k].compression_ratio = ratio;
          }
          if (compressed) {
            std::snprintf(line, sizeof line, "  %12lld  %6.2f", wire, ratio);
            text += line;
          }
          out(text + "\n");
          std::fflush(stdout);
        }
        // alpha-beta fit of this block (out-of-place times), the model beside each measurement
        const auto coef = fit_coefficients(a, p);
        std::vector<bench::TimeSample> samples;
        for (const auto& r : block)
          if (!r.in_place && r.bytes > 0) samples.push_back({double(r.bytes), r.time_us * 1e-6});
        const bench::AlphaBeta fit = bench::fit_alpha_beta(coef, samples);
        const std::string key =
            c == "none" ? a : a + "+" + c + (on == "device" || on == "host mirror" ? " on " + on : "");
        fits[key] = fit;
        for (auto& r : block) r.model_us = fit.predict_s(coef, double(r.bytes)) * 1e6;
        std::ostringstream m;
        char fl[256];
        std::snprintf(
            fl, sizeof fl,
            "# alpha-beta fit (%s, p=%d: t = %g a + %g n b): alpha %.2f us, 1/beta %.3f GB/s, rms error %.1f%%\n",
            key.c_str(), p, coef.a, coef.b, fit.alpha_s * 1e6,
            fit.beta_s_per_byte > 0 ? 1e-9 / fit.beta_s_per_byte : 0.0, 100 * fit.rms_rel_error);
        m << fl << "#       size   measured(us)   model(us)  measured/model\n";
        for (const auto& r : block) {
          if (r.in_place) continue;
          std::snprintf(fl, sizeof fl, "# %10zu  %13.2f  %10.2f  %8.2f\n", r.bytes, r.time_us, r.model_us,
                        r.model_us > 0 ? r.time_us / r.model_us : 0.0);
          m << fl;
        }
        out(m.str());
        rows.insert(rows.end(), block.begin(), block.end());
      }

  // footer (nccl-tests)
  std::ostringstream ft;
  ft << "# Out of bounds values : " << oob_total << (oob_total == 0 ? " OK" : " FAILED") << "\n";
  std::snprintf(line, sizeof line, "# Avg bus bandwidth    : %g \n#\n", busbw_n ? busbw_sum / double(busbw_n) : 0.0);
  ft << line;

  // best algorithm per size (uncompressed; auto is compared against it, not a candidate); `best` holds
  // the tuned choice per size, which the tuning file is written from. The comparison is on the mean time
  // per operation over every timed loop of both placements, not on the table's out-of-place median:
  // on the shaped emulated links one algorithm's loops fall into two speeds (hier at 512 KiB: loops of
  // 4.3 and 8-19 ms per operation in one run), and a median then lands on either mode from run to run,
  // while the mean over twice the loops is what a caller of that algorithm pays, and moves less.
  std::vector<std::pair<size_t, std::string>> best;
  nlohmann::json best_json = nlohmann::json::array();
  auto busbw_of = [&](const std::string& a, size_t bytes) -> double {
    double sum_us = 0;
    int n = 0;
    for (const auto& r : rows)
      if (r.algo == a && r.compress == "none" && r.bytes == bytes) {
        sum_us += r.mean_us;
        ++n;
      }
    if (n == 0 || sum_us <= 0) return -1;
    return double(bytes) / (sum_us / n * 1e-6) / 1e9 * 2.0 * (p - 1) / p;
  };
  const bool have_mpi = std::find(algos.begin(), algos.end(), "mpi") != algos.end();
  const bool have_auto = std::find(algos.begin(), algos.end(), "auto") != algos.end();
  // What the tuning file gets per size: among the algorithms within 10 % of the best busbw at that
  // size (near-ties, which flip from run to run), the one its alpha-beta fit predicts fastest there. The
  // fit draws on every size of the algorithm, so one loop that fell into a slow mode does not decide a
  // near-tie. A clear winner keeps its size, however narrow its band (tree at 8 KiB on the emulated
  // 1 Gbit/s cluster, 1.45x the next). Replayed on the four recorded measure/check pairs of that cluster
  // (results/README.md), this rule put auto within 10 % of the check run's best at 40 of 44 sizes, the
  // raw best of the measure run also at 40, and the rule before it (best sum of log busbw over the size
  // and its two neighbours) at 38.
  auto model_us_of = [&](const std::string& a, size_t bytes) -> double {
    for (const auto& r : rows)
      if (r.algo == a && r.compress == "none" && r.bytes == bytes && !r.in_place) return r.model_us;
    return std::numeric_limits<double>::infinity();
  };
  std::map<size_t, std::string> tuned;
  if (have_none) {
    for (size_t bytes : size_list) {
      if (bytes == 0) continue;
      double top = 0;
      for (const auto& a : algos)
        if (a != "auto") top = std::max(top, busbw_of(a, bytes));
      double fastest = std::numeric_limits<double>::infinity();
      for (const auto& a : algos) {
        if (a == "auto" || top <= 0 || busbw_of(a, bytes) < 0.9 * top) continue;
        const double t = model_us_of(a, bytes);
        if (!tuned.count(bytes) || t < fastest) {
          fastest = t;
          tuned[bytes] = a;
        }
      }
    }
  }
  if (have_none) {
    ft << "# Best algorithm per size (busbw from the mean time per operation over the timed loops of both placements, GB/s); tuned: what --tuning-out writes for the size\n"
       << "#       size  best     busbw  tuned " << (have_mpi ? "    mpi  best/mpi" : "")
       << (have_auto ? "   auto  auto/best  auto_is  its/best" : "") << "\n";
    for (size_t bytes : size_list) {
      if (bytes == 0) continue;
      std::string who;
      double bb = -1;
      for (const auto& a : algos) {
        if (a == "auto") continue;
        const double v = busbw_of(a, bytes);
        if (v > bb) {
          bb = v;
          who = a;
        }
      }
      if (who.empty()) continue;
      best.emplace_back(bytes, tuned.count(bytes) ? tuned[bytes] : who);
      nlohmann::json bj = {{"bytes", bytes}, {"algo", who}, {"busbw_GBps", bb}, {"tuned_algo", best.back().second}};
      std::snprintf(line, sizeof line, "# %10zu  %-6s %8.3f  %-6s", bytes, who.c_str(), bb, best.back().second.c_str());
      std::string t = line;
      if (have_mpi) {
        const double m = busbw_of("mpi", bytes);
        std::snprintf(line, sizeof line, " %7.3f  %7.2f", m, m > 0 ? bb / m : 0.0);
        t += line;
        bj["mpi_busbw_GBps"] = m;
        bj["best_over_mpi"] = m > 0 ? bb / m : 0.0;
      }
      if (have_auto) {
        const double au = busbw_of("auto", bytes);
        std::snprintf(line, sizeof line, " %7.3f  %7.2f", au, bb > 0 ? au / bb : 0.0);
        t += line;
        bj["auto_busbw_GBps"] = au;
        bj["auto_over_best"] = bb > 0 ? au / bb : 0.0;
        // What auto resolves to here, and that algorithm's own rows of this run over the best: the
        // quality of the choice, apart from the noise between auto's loops and its algorithm's loops.
        const std::string is(hc::algorithm_name(bench.auto_resolves_to(bytes)));
        const double its = busbw_of(is, bytes);
        char ratio[32] = "n/a";
        if (its > 0 && bb > 0) std::snprintf(ratio, sizeof ratio, "%.2f", its / bb);
        std::snprintf(line, sizeof line, "  %-7s  %7s", is.c_str(), ratio);
        t += line;
        bj["auto_algo"] = is;
        bj["auto_algo_over_best"] = its > 0 && bb > 0 ? nlohmann::json(its / bb) : nlohmann::json(nullptr);
      }
      ft << t << "\n";
      best_json.push_back(bj);
    }
    ft << "#\n";
  }
  const std::string load_end = load_average();
  ft << "# load average at end: " << load_end << "\n";
  out(ft.str());

  if (root) {
    if (!o.tuning_out.empty() && !best.empty()) {
      std::vector<hc::TuningEntry> entries;
      std::ifstream existing(o.tuning_out);
      if (existing.good()) {
        const hc::TuningTable old = hc::TuningTable::load(o.tuning_out);
        for (const auto& en : old.entries())
          if (!(en.world_size == p && en.nodes == comm.node_count())) entries.push_back(en);
      }
      for (const auto& en : tuning_entries(best, p, comm.node_count(), o.segment)) entries.push_back(en);
      hc::TuningTable(entries).save(o.tuning_out);
      std::printf("# tuning file for --algo auto: %s (%d ranks, %d nodes)\n", o.tuning_out.c_str(), p,
                  comm.node_count());
    }
    nlohmann::json doc;
    doc["tool"] = "hpdt-allreduce-perf";
    doc["label"] = o.label;
    doc["ranks"] = p;
    doc["nodes"] = comm.node_count();
    doc["hosts"] = hosts;
    doc["topology"] = comm.describe();
    doc["device"] = o.device;
    doc["dtype"] = nccl_type_name(bench.dtype);
    doc["op"] = o.op;
    doc["config"] = {{"minbytes", o.min_bytes}, {"maxbytes", o.max_bytes}, {"stepfactor", o.step_factor},
                     {"iters", o.iters}, {"warmup", o.warmup}, {"repeat", o.repeat}, {"average", o.average},
                     {"segment", o.segment}, {"hier_intra", o.hier_intra}, {"device_transport", o.device_transport}, {"interleave", o.interleave}, {"loop_ms", o.loop_ms}, {"algos", algos}, {"compress", compresses}};
    if (const char* na = std::getenv("NCCL_ALGO")) doc["config"]["NCCL_ALGO"] = na;
    if (const char* np = std::getenv("NCCL_PROTO")) doc["config"]["NCCL_PROTO"] = np;
    doc["load_average"] = {{"start", load_start}, {"end", load_end}};
    doc["machine"] = machine_info();
    doc["build"] = build_info_json();
    doc["results"] = nlohmann::json::array();
    for (const auto& r : rows)
      doc["results"].push_back({{"algo", r.algo},
                                {"compress", r.compress},
                                {"compress_on", r.compress_on},
                                {"bytes", r.bytes},
                                {"count", r.count},
                                {"in_place", r.in_place},
                                {"time_us", r.time_us},
                                {"mean_us", r.mean_us},
                                {"algbw_GBps", r.algbw},
                                {"busbw_GBps", r.busbw},
                                {"wrong", r.wrong},
                                {"model_us", r.model_us},
                                {"wire_bytes", r.wire_bytes},
                                {"compression_ratio", r.compression_ratio}});
    doc["fits"] = nlohmann::json::object();
    for (const auto& [k, v] : fits) doc["fits"][k] = bench::to_json(v);
    doc["best"] = best_json;
    doc["best_basis"] = "busbw from the mean time per operation over the timed loops, out of place and in place";
    doc["out_of_bounds"] = oob_total;
    if (!o.json.empty()) write_file_atomic(o.json, doc.dump(1) + "\n");
    if (!o.csv.empty()) {
      CsvWriter csv({"algo", "compress", "compress_on", "ranks", "nodes", "bytes", "count", "in_place", "time_us",
                     "mean_us", "algbw_GBps", "busbw_GBps", "wrong", "model_us", "wire_bytes", "compression_ratio"});
      for (const auto& r : rows)
        csv.add_row({r.algo, r.compress, r.compress_on, std::to_string(p), std::to_string(comm.node_count()),
                     std::to_string(r.bytes), std::to_string(r.count), r.in_place ? "1" : "0",
                     std::to_string(r.time_us), std::to_string(r.mean_us), std::to_string(r.algbw),
                     std::to_string(r.busbw), std::to_string(r.wrong), std::to_string(r.model_us),
                     std::to_string(r.wire_bytes), std::to_string(r.compression_ratio)});
      csv.write(o.csv);
    }
  }
  return oob_total == 0 ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  set_errors_return(MPI_COMM_WORLD);
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const UsageError& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::fprintf(stderr, "hpdt-allreduce-perf: error: %s\n", e.what());
    rc = 1;
  } catch (const hpdt::Error& e) {
    std::fprintf(stderr, "hpdt-allreduce-perf: error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpdt-allreduce-perf: error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
