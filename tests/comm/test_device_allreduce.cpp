// Device-memory all-reduce and the NCCL transport (label gpu; every case skips, visibly, where no GPU
// is usable, and in builds without CUDA). Run under mpiexec at np 1 and 2: the ranks share GPU
// local_rank % device count, which the staged MPI path allows; NCCL cases use a 1-rank NCCL
// communicator per process (over MPI_COMM_SELF), since one GPU holds one rank of an NCCL communicator.
//
//   staged path (ring, rhd, mpi; f32, f16; counts 0, 1, 7, 65537; sum/avg; in/out of place; one chunk
//     and many small pipelined chunks; on a non-default stream with the input queued on it) == the
//     host all-reduce of the same data == the exact sum;
//   mpi directly on device pointers where the MPI is CUDA-aware (skips otherwise);
//   nccl at 1 rank: sum returns the input exactly, avg too (divided by 1), f32/f16/bf16;
//   allreduce_device_enqueue (NCCL on the caller's stream, a GPU per rank): exact sums, and in a CUDA graph; our
//     algorithms queued (nccl-p2p): the host all-reduce's bits, also in a graph; debug mode's check of the call;
//   NcclTransport: send/recv to self, several transfers in one group, zero bytes, wait vs wait_all.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device_compression_check.h"
#include "hpdt/comm/allreduce.h"
#include "hpdt/core/dtype.h"
#include "hpdt/core/env.h"
#include "hpdt/core/runtime.h"
#include "hpdt_test.h"

#if HPDT_HAVE_CUDA
#include <cuda_runtime.h>

#include "hpdt/core/check_cuda.h"
#include "hpdt/core/cuda_graph.h"
#include "hpdt/core/float16.h"
#include "hpdt/core/stream.h"
#endif

using namespace hpdt;
using namespace hpdt::comm;

#if !HPDT_HAVE_CUDA

TEST(DeviceAllreduce, NeedsCuda) {
  GTEST_SKIP() << "no GPU: built without CUDA (HPDT_HAVE_CUDA=0); allreduce_device is GPU-only";
}

#else

namespace {

Communicator& world() {
  static Communicator c(MPI_COMM_WORLD);
  return c;
}

// Every rank drives GPU local_rank % device count (several ranks may share one GPU).
void use_my_gpu() { cuda_set_device(world().local_rank() % cuda_device_count()); }

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_) HPDT_CUDA_CHECK(cudaMalloc(&p_, bytes_));
  }
  ~DeviceBuffer() {
    if (p_) (void)cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  // upload and fill are complete when they return. Alone they are not: cudaMemcpy from pageable memory
  // may return before its DMA lands, cudaMemset of device memory is asynchronous, and neither is ordered
  // with the non-blocking streams the collectives run on (seen on an H100: poison or stale values in
  // the output of an otherwise right all-reduce).
  void upload(const void* host) {
    if (bytes_) HPDT_CUDA_CHECK(cudaMemcpy(p_, host, bytes_, cudaMemcpyHostToDevice));
    HPDT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void download(void* host) const {
    if (bytes_) HPDT_CUDA_CHECK(cudaMemcpy(host, p_, bytes_, cudaMemcpyDeviceToHost));
  }
  void fill(unsigned char byte) {
    if (bytes_) HPDT_CUDA_CHECK(cudaMemset(p_, byte, bytes_));
    HPDT_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

const std::vector<size_t> kCounts = {0, 1, 7, 65537};

// Small integers: every partial sum is exact in f32 and f16 (|sum| <= 2 * 5).
float int_input(int rank, size_t i) { return float(int((size_t(rank) * 7 + i * 3) % 11) - 5); }

template <class T>
std::vector<T> to_type(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = from_f32<T>(x[i]);
  return out;
}

template <class T>
size_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  return a.size();
}

// allreduce_device of device data on `stream` against allreduce() of the same host data and the exact
// result, bitwise.
// With `inexact`, inputs whose sums round (exactness not checked; the bits must still equal the host's).
template <class T>
void check_device_vs_host(Communicator& c, Algorithm a, size_t n, ReduceOp op, bool in_place, const AllreduceOptions& o,
                          cudaStream_t stream, bool inexact = false) {
  const int p = c.size(), r = c.rank();
  std::vector<float> in(n), exact(n);
  for (size_t i = 0; i < n; ++i) {
    in[i] = inexact ? 1.0f / float(3 + (size_t(r) * 131 + i * 17) % 97) - 0.01f * float(r) : int_input(r, i);
    float s = 0;
    for (int q = 0; q < p; ++q) s += int_input(q, i);
    exact[i] = op == ReduceOp::avg ? s / float(p) : s;
  }
  const std::vector<T> host_in = to_type<T>(in), want = to_type<T>(exact);
  std::vector<T> oracle(n, from_f32<T>(-999.0f));
  allreduce(c, host_in.data(), oracle.data(), n, dtype_of_v<T>, op, a, o);

  DeviceBuffer send(n * sizeof(T)), recv(n * sizeof(T));
  recv.fill(0xff);
  // The input is queued on `stream` (not synchronised): allreduce_device must order itself after it.
  if (n) HPDT_CUDA_CHECK(cudaMemcpyAsync(send.get(), host_in.data(), n * sizeof(T), cudaMemcpyHostToDevice, stream));
  void* out = in_place ? send.get() : recv.get();
  allreduce_device(c, send.get(), out, n, dtype_of_v<T>, op, a, o, stream);
  std::vector<T> got(n, from_f32<T>(-999.0f)), sent_after(n);
  HPDT_CUDA_CHECK(cudaStreamSynchronize(stream));
  (in_place ? send : recv).download(got.data());
  const std::string what = std::string(algorithm_name(a)) + " " + std::string(dtype_name(dtype_of_v<T>)) +
                           " n=" + std::to_string(n) + " " + std::string(reduce_op_name(op)) +
                           (in_place ? " in place" : " out of place") +
                           " staging_bytes=" + std::to_string(o.staging_bytes) + " path " +
                           std::string(device_path_name(device_allreduce_path(c, n, dtype_of_v<T>, a, o)));
  size_t i = inexact ? n : first_difference(got, want);
  EXPECT_EQ(i, n) << what << ": element " << i << " got " << (i < n ? to_f32(got[i]) : 0.0f) << " want exact "
                  << (i < n ? to_f32(want[i]) : 0.0f);
  i = first_difference(got, oracle);
  EXPECT_EQ(i, n) << what << ": element " << i << " differs from the host all-reduce";
  if (!in_place) {
    send.download(sent_after.data());
    EXPECT_EQ(first_difference(sent_after, host_in), n) << what << ": the send buffer was modified";
  }
}

class DeviceStaged : public ::testing::TestWithParam<Algorithm> {};

TEST_P(DeviceStaged, MatchesHostOracle) {
  HPDT_REQUIRE_GPU();
  use_my_gpu();
  ScopedEnv not_aware("HPDT_MPI_CUDA_AWARE", "0");  // mpi stages too, whatever the MPI
  Communicator& c = world();
  cudaStream_t stream = nullptr;
  HPDT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (size_t staging :
       {size_t(0), size_t(4096)}) {  // one chunk (default 4 MiB); 4 KiB chunks (pipelined: 33-65 of them)
    AllreduceOptions o;
    o.staging_bytes = staging;
    o.device_transport = DeviceTransport::staged;  // ring and rhd would run on the GPU with a GPU per rank
    for (size_t n : kCounts) {
      EXPECT_EQ(device_allreduce_path(c, n, DType::f32, GetParam(), o), DevicePath::staged);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
        for (bool in_place : {false, true}) {
          check_device_vs_host<float>(c, GetParam(), n, op, in_place, o, stream);
          check_device_vs_host<f16_t>(c, GetParam(), n, op, in_place, o, stream);
        }
    }
  }
  // The legacy default stream too.
  check_device_vs_host<float>(c, GetParam(), 65537, ReduceOp::sum, false, AllreduceOptions{}, nullptr);
  HPDT_CUDA_CHECK(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(Algorithms, DeviceStaged, ::testing::Values(Algorithm::ring, Algorithm::rhd, Algorithm::mpi),
                         [](const ::testing::TestParamInfo<Algorithm>& param_info) {
                           return std::string(algorithm_name(param_info.param));
                         });

// ---- ring, tree, rhd, hier on the GPU over NCCL ----------------------------------------------------

// An NCCL communicator of several ranks needs a GPU per rank (NCCL refuses two ranks of one GPU). Under
// the CUDA emulator (tests/cuda_emu) every process is a GPU of its own, and NCCL runs over MPI.
bool gpu_per_rank_or_emulated() {
#if HPDT_CUDA_EMU
  return true;
#else
  return world().gpu_per_rank();
#endif
}

struct OursCase {
  Algorithm algorithm;
  size_t segment_bytes;       // 64: 16-float segments, many per chunk
  Algorithm inter = Algorithm::rhd;  // hier
  friend void PrintTo(const OursCase& c, std::ostream* os) {
    *os << algorithm_name(c.algorithm) << ", segment " << c.segment_bytes << " B, inter " << algorithm_name(c.inter);
  }
};

class DeviceOursOverNccl : public ::testing::TestWithParam<OursCase> {};

// allreduce_device with device_transport nccl: the host's algorithm classes over NcclTransport with the
// reduction on the GPU; bitwise equal to allreduce() on the host with the same algorithm and options, and
// exact on integer inputs. Counts include 0, 1, fewer than ranks, a prime, several segments per chunk.
TEST_P(DeviceOursOverNccl, MatchesHostAlgorithmBitwise) {
  HPDT_REQUIRE_GPU();
  if (!gpu_per_rank_or_emulated())
    GTEST_SKIP() << "needs a GPU per rank (" << world().local_size() << " ranks per node, " << cuda_device_count()
                 << " GPU(s)): an NCCL communicator cannot hold two ranks of one GPU";
  use_my_gpu();
  Communicator& c = world();
  AllreduceOptions o;
  o.device_transport = DeviceTransport::nccl;
  o.segment_bytes = GetParam().segment_bytes;
  o.inter_node = GetParam().inter;
  o.intra_node = IntraNode::p2p;  // what hier does on the GPU; the host oracle must sum in the same order
  const Algorithm a = GetParam().algorithm;
  cudaStream_t stream = nullptr;
  HPDT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<size_t> counts = kCounts;
  counts.push_back(size_t(c.size() > 1 ? c.size() - 1 : 2));
  counts.push_back(1009);
  for (size_t n : counts) {
    EXPECT_EQ(device_allreduce_path(c, n, DType::f32, a, o), DevicePath::nccl_p2p);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      for (bool in_place : {false, true}) {
        check_device_vs_host<float>(c, a, n, op, in_place, o, stream);
        check_device_vs_host<f16_t>(c, a, n, op, in_place, o, stream);
        check_device_vs_host<bf16_t>(c, a, n, op, in_place, o, nullptr);
        check_device_vs_host<float>(c, a, n, op, in_place, o, stream, /*inexact=*/true);
      }
  }
  // Twice the same inexact call: the same bits (determinism), checked against the host each time.
  check_device_vs_host<float>(c, a, 4099, ReduceOp::sum, false, o, stream, true);
  check_device_vs_host<float>(c, a, 4099, ReduceOp::sum, false, o, stream, true);
  HPDT_CUDA_CHECK(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(Ours, DeviceOursOverNccl,
                         ::testing::Values(OursCase{Algorithm::ring, 0}, OursCase{Algorithm::ring, 64},
                                           OursCase{Algorithm::tree, 64}, OursCase{Algorithm::rhd, 0},
                                           OursCase{Algorithm::hier, 64}, OursCase{Algorithm::hier, 0, Algorithm::ring}),
                         [](const ::testing::TestParamInfo<OursCase>& param_info) {
                           std::string name = std::string(algorithm_name(param_info.param.algorithm)) + "_seg" +
                                              std::to_string(param_info.param.segment_bytes);
                           if (param_info.param.algorithm == Algorithm::hier)
                             name += "_inter_" + std::string(algorithm_name(param_info.param.inter));
                           return name;
                         });

TEST(DeviceOursOverNcclOptions, PathChoiceAndBadInterNode) {
  HPDT_REQUIRE_GPU();
  use_my_gpu();
  Communicator& c = world();
  AllreduceOptions o;
  o.device_transport = DeviceTransport::staged;
  EXPECT_EQ(device_allreduce_path(c, 7, DType::f32, Algorithm::ring, o), DevicePath::staged);
  o.device_transport = DeviceTransport::automatic;
  EXPECT_EQ(device_allreduce_path(c, 7, DType::f32, Algorithm::tree, o),
            c.gpu_per_rank() ? DevicePath::nccl_p2p : DevicePath::staged);
  EXPECT_EQ(device_allreduce_path(c, 7, DType::f32, Algorithm::shm, o), DevicePath::staged);
  EXPECT_EQ(parse_device_transport("nccl"), DeviceTransport::nccl);
  HPDT_EXPECT_THROW_MSG(parse_device_transport("gpu"), "expected auto, staged or nccl");
  if (!gpu_per_rank_or_emulated()) GTEST_SKIP() << "the NCCL case needs a GPU per rank";
  o.device_transport = DeviceTransport::nccl;
  o.inter_node = Algorithm::mpi;
  DeviceBuffer b(16);
  HPDT_EXPECT_THROW_MSG(allreduce_device(c, b.get(), b.get(), 4, DType::f32, ReduceOp::sum, Algorithm::hier, o),
                        "hier over NCCL needs a ring, tree or rhd inter-node algorithm");
}

TEST(DeviceAllreduce, MpiDirectWhenCudaAware) {
  HPDT_REQUIRE_GPU();
  if (!mpi_cuda_aware())
    GTEST_SKIP() << "MPI is not CUDA-aware here (mpi_cuda_aware() is false): the direct path is not taken";
  use_my_gpu();
  Communicator& c = world();
  ASSERT_EQ(device_allreduce_path(c, 7, DType::f32, Algorithm::mpi), DevicePath::mpi_direct);
  for (size_t n : kCounts)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      check_device_vs_host<float>(c, Algorithm::mpi, n, op, false, AllreduceOptions{}, nullptr);
      check_device_vs_host<float>(c, Algorithm::mpi, n, op, true, AllreduceOptions{}, nullptr);
    }
}

// auto on device memory (comm::resolve_auto_device): without a tuning table, ncclAllReduce where every rank has a GPU
// of its own, else the built-in choice, staged through the host; with one, its entries as they name them, nccl given
// up where ranks share a GPU. Sums of integers: exact in any order (NCCL's average may round differently from the
// host's division, so no avg where the path is nccl).
TEST(DeviceAllreduce, AutoOnDeviceMemory) {
  HPDT_REQUIRE_GPU();
  use_my_gpu();
  Communicator& c = world();
  const bool own = c.gpu_per_rank();
  if (const char* e = std::getenv("HPDT_TEST_GPU_PER_RANK"); e && *e) {  // set where the launch gives each rank its own
    ASSERT_EQ(own, std::string(e) == "1") << "gpu_per_rank() against HPDT_TEST_GPU_PER_RANK=" << e;
  }
  const DevicePath big = own ? DevicePath::nccl : DevicePath::staged;
  EXPECT_EQ(device_allreduce_path(c, 65537, DType::f32, Algorithm::automatic), big);
  EXPECT_EQ(resolve_auto_device(c, 1 << 20).algorithm,
            own ? Algorithm::nccl : TuningTable::fallback(1 << 20, c.size(), c.node_count()).algorithm);
  check_device_vs_host<float>(c, Algorithm::automatic, 65537, own ? ReduceOp::sum : ReduceOp::avg, false,
                              AllreduceOptions{}, nullptr);

  const TuningTable t = TuningTable::parse(R"({"format": "hpdt-allreduce-tuning", "version": 1, "entries": [
      {"min_bytes": 0, "max_bytes": 4096, "algorithm": "ring"},
      {"min_bytes": 4096, "max_bytes": 0, "algorithm": "nccl"}]})",
                                           "device-tuning.json");
  AllreduceOptions o;
  o.tuning = &t;
  EXPECT_EQ(resolve_auto_device(c, 100, o).algorithm, Algorithm::ring);
  EXPECT_EQ(device_allreduce_path(c, 25, DType::f32, Algorithm::automatic, o),
            own ? DevicePath::nccl_p2p : DevicePath::staged);
  EXPECT_EQ(device_allreduce_path(c, 65537, DType::f32, Algorithm::automatic, o), big);
  // (the host oracle with the same table: ring for 100 bytes, the built-in choice in place of nccl for 256 KiB)
  check_device_vs_host<float>(c, Algorithm::automatic, 25, ReduceOp::avg, false, o, nullptr);
  check_device_vs_host<float>(c, Algorithm::automatic, 65537, ReduceOp::sum, true, o, nullptr);
}

// Top-k and QSGD compressed on the GPU (comm::DeviceCompressor): the host compressors' results and state, bit for bit.
TEST(DeviceCompression, MatchesTheHostCompressor) {
  HPDT_REQUIRE_GPU();
  use_my_gpu();
  const int dev = world().local_rank() % cuda_device_count();
  const Stream stream = Stream::create_cuda(dev);
  test::expect_device_compressors_match_host(world(), Device::cuda(dev), stream);
}

TEST(DeviceAllreduce, BadArguments) {
  HPDT_REQUIRE_GPU();
  use_my_gpu();
  DeviceBuffer b(16);
  HPDT_EXPECT_THROW_MSG(allreduce_device(world(), b.get(), b.get(), 4, DType::i32, ReduceOp::sum, Algorithm::ring),
                        "not supported");
  HPDT_EXPECT_THROW_MSG(allreduce_device(world(), nullptr, nullptr, 4, DType::f32, ReduceOp::sum, Algorithm::ring),
                        "null buffer");
}

// ---- allreduce_device_enqueue: NCCL on the caller's stream ------------------------------------------

// SyncBN's all-reduce (hpdt-train --sync-bn with a GPU per rank): in place on the caller's stream, behind the input
// queued there, the exact sum (f32, bf16) of small integers, and their average within an ulp; count 0 does nothing.
// Captured into a CUDA graph it runs at each launch, not at the capture: the data unchanged after the capture, the sum
// after the first launch, p times the sum after the second. Ranks sharing a GPU: refused, naming the rank. The
// emulator's ranks are GPUs of their own (one virtual node each); on a real machine the case needs a GPU per rank.
TEST(DeviceAllreduceEnqueue, SumsOnTheCallersStreamAndAGraphHoldsIt) {
  HPDT_REQUIRE_GPU();
  use_my_gpu();
#if HPDT_CUDA_EMU
  CommunicatorOptions co;
  co.ranks_per_node = "1";
  Communicator c(MPI_COMM_WORLD, co);
#else
  Communicator& c = world();
#endif
  if (!c.gpu_per_rank()) {
    DeviceBuffer b(16);
    HPDT_EXPECT_THROW_MSG(allreduce_device_enqueue(c, b.get(), 4, DType::f32, ReduceOp::sum, nullptr),
                          "rank " + std::to_string(c.rank()) + " shares its GPU");
    GTEST_SKIP() << "needs a GPU per rank (" << c.local_size() << " ranks per node, " << cuda_device_count()
                 << " GPU(s)); the refusal was checked";
  }
  const int p = c.size(), r = c.rank();
  const int dev = c.local_rank() % cuda_device_count();
  const Stream stream = Stream::create_cuda(dev);
  const auto s = static_cast<cudaStream_t>(stream.handle());
  (void)c.nccl();  // (made before the capture below, as its contract asks)
  auto check = [&](DType dt, ReduceOp op, size_t n, int launches) {
    const std::string what = std::string(dtype_name(dt)) + " " + std::string(reduce_op_name(op)) +
                             " n=" + std::to_string(n) + (launches ? " in a graph" : "");
    std::vector<float> in(n), want(n);
    for (size_t i = 0; i < n; ++i) {
      in[i] = int_input(r, i);
      float sum = 0;
      for (int q = 0; q < p; ++q) sum += int_input(q, i);
      want[i] = op == ReduceOp::avg ? sum / float(p) : sum;
    }
    const size_t es = dtype_size(dt);
    std::vector<uint16_t> in16(n), got16(n);
    for (size_t i = 0; i < n; ++i) in16[i] = f32_to_bf16_bits(in[i]);
    const void* host_in = dt == DType::f32 ? static_cast<const void*>(in.data()) : in16.data();
    DeviceBuffer d(n * es);
    d.fill(0xff);
    // The input queued on the stream (not waited for): the all-reduce must come after it.
    if (n) HPDT_CUDA_CHECK(cudaMemcpyAsync(d.get(), host_in, n * es, cudaMemcpyHostToDevice, s));
    auto read = [&] {
      std::vector<float> out(n);
      if (launches)
        HPDT_CUDA_CHECK(cudaStreamSynchronize(s));
      else
        wait_enqueued(c, stream.handle(), "the test's all-reduce");  // (the watched wait)
      if (dt == DType::f32) {
        d.download(out.data());
      } else {
        d.download(got16.data());
        for (size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_f32(got16[i]);
      }
      return out;
    };
    if (!launches) {
      allreduce_device_enqueue(c, d.get(), n, dt, op, stream.handle());
      const std::vector<float> got = read();
      for (size_t i = 0; i < n; ++i)  // (NCCL's average is its own rounding: within an ulp)
        if (op == ReduceOp::sum)
          ASSERT_EQ(got[i], want[i]) << what << ": element " << i;
        else
          ASSERT_NEAR(got[i], want[i], 1e-6f * std::abs(want[i])) << what << ": element " << i;
      return;
    }
    const CudaGraph graph =
        CudaGraph::capture(stream, [&] { allreduce_device_enqueue(c, d.get(), n, dt, op, stream.handle()); });
    std::vector<float> got = read();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], in[i]) << what << ": ran at the capture, element " << i;
    for (int l = 1; l <= launches; ++l) {
      graph.launch(stream);
      got = read();
      for (size_t i = 0; i < n; ++i) {
        float w = want[i];  // the sum, then p times it (every rank holds the sum)
        for (int k = 1; k < l; ++k) w *= float(p);
        ASSERT_EQ(got[i], w) << what << ": launch " << l << ", element " << i;
      }
    }
  };
  for (size_t n : {size_t(0), size_t(1), size_t(35), size_t(4097)}) {
    check(DType::f32, ReduceOp::sum, n, 0);
    check(DType::bf16, ReduceOp::sum, n, 0);
    check(DType::f32, ReduceOp::avg, n, 0);
  }
  check(DType::f32, ReduceOp::sum, 35, 2);  // SyncBN's 2c + 1 floats at c = 17
  HPDT_EXPECT_THROW_MSG(allreduce_device_enqueue(c, nullptr, 4, DType::i32, ReduceOp::sum, stream.handle()), "i32");
}

// Our algorithms queued (allreduce_device_enqueue with ring, tree, rhd, hier: the nccl-p2p path without a host wait):
// the host all-reduce's bits on inexact inputs, f32 and bf16, at an odd count, after input queued on the stream; in a
// CUDA graph after an eager call has sized the transports' scratch (nothing at the capture, the result at the launch).
// The paths that need the host (mpi: staged or mpi-direct) are refused.
TEST(DeviceAllreduceEnqueue, OurAlgorithmsQueuedGiveTheHostAllreducesBitsAndAGraphHoldsThem) {
  HPDT_REQUIRE_GPU();
  use_my_gpu();
  CommunicatorOptions co;
#if HPDT_CUDA_EMU
  co.ranks_per_node = "1";
#endif
  Communicator c(MPI_COMM_WORLD, co);
  if (!c.gpu_per_rank()) GTEST_SKIP() << "needs a GPU per rank (" << c.local_size() << " ranks per node)";
  const int r = c.rank();
  const Stream stream = Stream::create_cuda(c.local_rank() % cuda_device_count());
  const auto s = static_cast<cudaStream_t>(stream.handle());
  const size_t n = 4097;
  for (Algorithm a : {Algorithm::ring, Algorithm::tree, Algorithm::rhd, Algorithm::hier})
    for (DType dt : {DType::f32, DType::bf16}) {
      const std::string what = std::string(algorithm_name(a)) + " " + std::string(dtype_name(dt));
      std::vector<float> in(n);
      for (size_t i = 0; i < n; ++i) in[i] = 0.1f * float(r + 1) + 1e-3f * float(i % 97) + 1e-7f * float(i);
      const size_t es = dtype_size(dt);
      std::vector<uint16_t> in16(n);
      for (size_t i = 0; i < n; ++i) in16[i] = f32_to_bf16_bits(in[i]);
      const void* host_in = dt == DType::f32 ? static_cast<const void*>(in.data()) : in16.data();
      std::vector<char> want(n * es), got(n * es);
      allreduce(c, host_in, want.data(), n, dt, ReduceOp::avg, a);
      DeviceBuffer d(n * es);
      auto queue_input = [&] { HPDT_CUDA_CHECK(cudaMemcpyAsync(d.get(), host_in, n * es, cudaMemcpyHostToDevice, s)); };
      auto enqueue = [&] { allreduce_device_enqueue(c, d.get(), n, dt, ReduceOp::avg, a, {}, stream.handle()); };
      queue_input();  // (not waited for: the all-reduce comes after it)
      enqueue();
      wait_enqueued(c, stream.handle(), what);
      d.download(got.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << what << ": not the host all-reduce's bits";
      queue_input();
      const CudaGraph graph = CudaGraph::capture(stream, enqueue);
      HPDT_CUDA_CHECK(cudaStreamSynchronize(s));
      d.download(got.data());
      ASSERT_EQ(std::memcmp(got.data(), host_in, got.size()), 0)
          << what << ": the graph's all-reduce ran at the capture";
      graph.launch(stream);
      wait_enqueued(c, stream.handle(), what + " in a graph");
      d.download(got.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << what << ": the graph's result differs";
    }
  DeviceBuffer d(64);
  HPDT_EXPECT_THROW_MSG(
      allreduce_device_enqueue(c, d.get(), 4, DType::f32, ReduceOp::sum, Algorithm::mpi, {}, stream.handle()),
      "whose host waits cannot be queued");
}

// Debug mode checks the enqueued all-reduce on the host at the call: different counts are named on every rank, before
// NCCL sees them (which would hang or corrupt), and a matching call then runs.
TEST(DeviceAllreduceEnqueue, DebugModeNamesADifferentCallOnEveryRank) {
  HPDT_REQUIRE_GPU();
  if (world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  use_my_gpu();
  CommunicatorOptions co;
  co.debug_checks = true;
#if HPDT_CUDA_EMU
  co.ranks_per_node = "1";
#endif
  Communicator c(MPI_COMM_WORLD, co);
  if (!c.gpu_per_rank()) GTEST_SKIP() << "needs a GPU per rank (" << c.local_size() << " ranks per node)";
  const Stream stream = Stream::create_cuda(c.local_rank() % cuda_device_count());
  std::vector<float> ones(8, 1.0f);
  DeviceBuffer d(ones.size() * sizeof(float));
  d.upload(ones.data());
  const size_t n = c.rank() == 0 ? 7 : 8;
  HPDT_EXPECT_THROW_MSG(allreduce_device_enqueue(c, d.get(), n, DType::f32, ReduceOp::sum, stream.handle()),
                        "collective mismatch (debug checks): rank " + std::to_string(c.rank()) +
                            " calls allreduce_device_enqueue nccl " + std::to_string(n) + " x f32 sum");
  allreduce_device_enqueue(c, d.get(), 8, DType::f32, ReduceOp::sum, stream.handle());
  wait_enqueued(c, stream.handle(), "the matching all-reduce");
  d.download(ones.data());
  EXPECT_EQ(ones[7], float(c.size()));
}

// ---- NCCL, one rank per process ---------------------------------------------------------------------

template <class T>
void check_nccl_identity(Communicator& self, size_t n, ReduceOp op, bool in_place, cudaStream_t stream) {
  std::vector<float> in(n);
  for (size_t i = 0; i < n; ++i) in[i] = int_input(world().rank(), i) * 0.5f;  // exact in every type
  const std::vector<T> host_in = to_type<T>(in);
  DeviceBuffer send(n * sizeof(T)), recv(n * sizeof(T));
  send.upload(host_in.data());
  recv.fill(0xff);
  void* out = in_place ? send.get() : recv.get();
  allreduce_device(self, send.get(), out, n, dtype_of_v<T>, op, Algorithm::nccl, AllreduceOptions{}, stream);
  std::vector<T> got(n);
  (in_place ? send : recv).download(got.data());
  const size_t i = first_difference(got, host_in);
  EXPECT_EQ(i, n) << "nccl " << dtype_name(dtype_of_v<T>) << " n=" << n << " " << reduce_op_name(op)
                  << (in_place ? " in place" : " out of place") << ": element " << i << " got "
                  << (i < n ? to_f32(got[i]) : 0.0f) << " want " << (i < n ? to_f32(host_in[i]) : 0.0f);
}

// Communicator(MPI_COMM_SELF) has local rank 0, so its NCCL communicator drives device 0: the buffers
// go there too (several processes may each hold a 1-rank NCCL communicator on the same GPU).
void use_self_gpu() { cuda_set_device(0); }

TEST(NcclOneRank, AllreduceReturnsInputExactly) {
  HPDT_REQUIRE_GPU();
  use_self_gpu();
  Communicator self(MPI_COMM_SELF);  // a 1-rank NCCL communicator in every process
  ASSERT_EQ(self.size(), 1);
  EXPECT_EQ(device_allreduce_path(self, 7, DType::f16, Algorithm::nccl), DevicePath::nccl);
  cudaStream_t stream = nullptr;
  HPDT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (size_t n : kCounts)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      for (bool in_place : {false, true}) {
        check_nccl_identity<float>(self, n, op, in_place, stream);
        check_nccl_identity<f16_t>(self, n, op, in_place, nullptr);
        check_nccl_identity<bf16_t>(self, n, op, in_place, stream);
      }
  HPDT_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(NcclOneRank, TransportSendRecvToSelf) {
  HPDT_REQUIRE_GPU();
  use_self_gpu();
  Communicator self(MPI_COMM_SELF);
  NcclTransport& t = self.nccl_transport();
  ASSERT_EQ(t.size(), 1);
  ASSERT_EQ(t.rank(), 0);
  EXPECT_EQ(t.world_rank_of(0), world().rank());

  const size_t n = 65537;
  std::vector<int> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = int(i * 2654435761u), b[i] = -int(i);
  DeviceBuffer da(n * sizeof(int)), db(n * sizeof(int)), ra(n * sizeof(int)), rb(n * sizeof(int));
  da.upload(a.data());
  db.upload(b.data());
  ra.fill(0);
  rb.fill(0);
  const uint64_t sent0 = t.bytes_sent();

  // Receive posted before the send; wait on the receive only.
  Transport::Request rr = t.irecv(ra.get(), n * sizeof(int), 0, 7);
  t.isend(da.get(), n * sizeof(int), 0, 7);
  t.wait(rr);
  std::vector<int> got(n);
  ra.download(got.data());
  EXPECT_EQ(got, a);
  t.wait_all();

  // Two transfers and a zero-byte one in one group, matched in posting order; wait_all.
  ra.fill(0);
  t.isend(da.get(), n * sizeof(int), 0, 1);
  t.isend(db.get(), n * sizeof(int), 0, 2);
  t.isend(da.get(), 0, 0, 3);
  t.irecv(ra.get(), n * sizeof(int), 0, 1);
  t.irecv(rb.get(), n * sizeof(int), 0, 2);
  t.irecv(rb.get(), 0, 0, 3);
  t.wait_all();
  ra.download(got.data());
  EXPECT_EQ(got, a);
  rb.download(got.data());
  EXPECT_EQ(got, b);
  EXPECT_EQ(t.bytes_sent() - sent0, 3 * n * sizeof(int));

  HPDT_EXPECT_THROW_MSG(t.isend(da.get(), 4, 1, 0), "out of range");
  HPDT_EXPECT_THROW_MSG(t.wait(99), "unknown request");
}

}  // namespace

#endif
