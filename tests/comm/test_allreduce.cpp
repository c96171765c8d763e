// The all-reduce family under mpiexec: every algorithm x element counts (0, 1, fewer than ranks,
// primes) x f32/f16/bf16 x sum/avg x in/out of place. Integer-valued inputs must give exact results;
// random inputs must give the same bits on every rank and in a second run.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hpdt/comm/allreduce.h"
#include "hpdt/core/error.h"
#include "hpdt_test.h"

using namespace hpdt;
using namespace hpdt::comm;

namespace {

Communicator& world() {
  static Communicator c(MPI_COMM_WORLD);
  return c;
}

const std::vector<size_t> kCounts = {0, 1, 2, 3, 5, 7, 13, 64, 1021, 4099, 65537};
const std::vector<Algorithm> kAlgos = {Algorithm::ring, Algorithm::tree, Algorithm::rhd, Algorithm::hier, Algorithm::mpi,
                                       Algorithm::shm,  Algorithm::automatic};
const std::vector<DType> kTypes = {DType::f32, DType::f16, DType::bf16};

// Small integers, so every partial sum is exact in f32, f16 (|sum| <= 8*5 < 2048) and bf16 (< 256).
float int_input(int rank, size_t i) { return float(int((size_t(rank) * 7 + i * 3) % 11) - 5); }

template <class T>
std::vector<T> to_type(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = from_f32<T>(x[i]);
  return out;
}

uint64_t fnv(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

// True on every rank iff all ranks passed the same hash.
bool same_on_all_ranks(uint64_t h) {
  uint64_t lo = h, hi = h;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

template <class T>
void check_exact(Algorithm a, size_t n, ReduceOp op, bool in_place, size_t segment_bytes = 0,
                 IntraNode intra = IntraNode::shm) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  std::vector<float> in(n), expect(n);
  for (size_t i = 0; i < n; ++i) {
    in[i] = int_input(r, i);
    float s = 0;
    for (int q = 0; q < p; ++q) s += int_input(q, i);
    expect[i] = op == ReduceOp::avg ? s / float(p) : s;
  }
  std::vector<T> send = to_type<T>(in), recv(n, from_f32<T>(-999.0f)), want = to_type<T>(expect);
  AllreduceOptions o;
  o.segment_bytes = segment_bytes;
  o.intra_node = intra;
  if (in_place)
    allreduce(c, send.data(), send.data(), n, dtype_of_v<T>, op, a, o);
  else
    allreduce(c, send.data(), recv.data(), n, dtype_of_v<T>, op, a, o);
  const std::vector<T>& got = in_place ? send : recv;
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << algorithm_name(a) << " " << dtype_name(dtype_of_v<T>) << " n=" << n << " " << reduce_op_name(op)
                     << (in_place ? " in place" : " out of place") << ": first wrong element " << first << " got "
                     << (first < n ? to_f32(got[first]) : 0.0f) << " want " << (first < n ? to_f32(want[first]) : 0.0f);
  if (!in_place) {
    EXPECT_EQ(fnv(send.data(), n * sizeof(T)), fnv(to_type<T>(in).data(), n * sizeof(T))) << "send buffer modified";
  }
}

template <class T>
void check_bitwise(Algorithm a, size_t n, IntraNode intra = IntraNode::shm) {
  Communicator& c = world();
  std::mt19937 gen(1234u + unsigned(c.rank()));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> in(n);
  for (auto& v : in) v = dist(gen);
  const std::vector<T> send = to_type<T>(in);
  std::vector<T> out1(n), out2(n);
  AllreduceOptions o;
  o.intra_node = intra;
  allreduce(c, send.data(), out1.data(), n, dtype_of_v<T>, ReduceOp::avg, a, o);
  allreduce(c, send.data(), out2.data(), n, dtype_of_v<T>, ReduceOp::avg, a, o);
  const uint64_t h1 = fnv(out1.data(), n * sizeof(T)), h2 = fnv(out2.data(), n * sizeof(T));
  EXPECT_EQ(h1, h2) << algorithm_name(a) << " " << dtype_name(dtype_of_v<T>) << " n=" << n << ": second run differs";
  EXPECT_TRUE(same_on_all_ranks(h1)) << algorithm_name(a) << " " << dtype_name(dtype_of_v<T>) << " n=" << n
                                     << ": ranks disagree";
  // And close to the exact mean (random inputs: rounding only).
  double max_err = 0;
  std::vector<double> sum(n, 0.0);
  for (int q = 0; q < c.size(); ++q) {
    std::mt19937 g(1234u + unsigned(q));
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) sum[i] += double(to_f32(from_f32<T>(d(g))));
  }
  for (size_t i = 0; i < n; ++i) max_err = std::max(max_err, std::abs(double(to_f32(out1[i])) - sum[i] / c.size()));
  const double tol = sizeof(T) == 4 ? 1e-5 : (dtype_of_v<T> == DType::f16 ? 4e-3 : 3e-2);
  EXPECT_LT(max_err, tol) << algorithm_name(a) << " " << dtype_name(dtype_of_v<T>) << " n=" << n;
}

template <class T>
void exact_all(Algorithm a) {
  for (size_t n : kCounts)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      for (bool in_place : {false, true}) check_exact<T>(a, n, op, in_place);
}

}  // namespace

class AllreduceTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(AllreduceTest, ExactF32) { exact_all<float>(GetParam()); }
TEST_P(AllreduceTest, ExactF16) { exact_all<f16_t>(GetParam()); }
TEST_P(AllreduceTest, ExactBF16) { exact_all<bf16_t>(GetParam()); }

TEST_P(AllreduceTest, SmallSegmentsPipeline) {
  // Segments much smaller than a chunk: many pipelined messages per step.
  for (size_t n : {size_t(1021), size_t(65537)}) check_exact<float>(GetParam(), n, ReduceOp::sum, false, 256);
}

TEST_P(AllreduceTest, BitwiseAcrossRanksAndRuns) {
  for (size_t n : {size_t(1), size_t(7), size_t(4099), size_t(100003)}) {
    check_bitwise<float>(GetParam(), n);
    check_bitwise<bf16_t>(GetParam(), n);
    check_bitwise<f16_t>(GetParam(), n);
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllreduceTest, ::testing::ValuesIn(kAlgos),
                         [](const ::testing::TestParamInfo<Algorithm>& param_info) { return std::string(algorithm_name(param_info.param)); });

TEST(Allreduce, BadArguments) {
  float x = 1;
  HPDT_EXPECT_THROW_MSG(allreduce(world(), &x, &x, 1, DType::i32, ReduceOp::sum, Algorithm::ring), "not supported");
  HPDT_EXPECT_THROW_MSG(parse_algorithm("butterfly"), "ring, tree, rhd, hier, mpi, nccl, shm or auto");
  EXPECT_EQ(parse_algorithm("rhd"), Algorithm::rhd);
  EXPECT_EQ(algorithm_name(Algorithm::automatic), "auto");
  // Host memory never goes to NCCL (allreduce_device does, in GPU builds).
  HPDT_EXPECT_THROW_MSG(allreduce(world(), &x, &x, 1, DType::f32, ReduceOp::sum, Algorithm::nccl), "use allreduce_device");
}

TEST(Allreduce, CudaAwareQuery) {
  // HPDT_MPI_CUDA_AWARE overrides the MPI's answer; unset, the answer comes from the MPI (any value).
  const char* old = std::getenv("HPDT_MPI_CUDA_AWARE");
  const bool had = old != nullptr;
  const std::string saved = had ? old : "";
  setenv("HPDT_MPI_CUDA_AWARE", "0", 1);
  EXPECT_FALSE(mpi_cuda_aware());
  setenv("HPDT_MPI_CUDA_AWARE", "1", 1);
  EXPECT_TRUE(mpi_cuda_aware());
  unsetenv("HPDT_MPI_CUDA_AWARE");
  (void)mpi_cuda_aware();
  if (had) setenv("HPDT_MPI_CUDA_AWARE", saved.c_str(), 1);
}

TEST(Allreduce, BroadcastAndAllgather) {
  Communicator& c = world();
  for (int root = 0; root < c.size(); ++root) {
    std::vector<int> v(37, c.rank() == root ? root + 100 : -1);
    broadcast(c, v.data(), v.size() * sizeof(int), root);
    for (int x : v) ASSERT_EQ(x, root + 100);
  }
  std::vector<int> mine(5, c.rank()), all(5 * size_t(c.size()), -1);
  allgather(c, mine.data(), all.data(), mine.size() * sizeof(int));
  for (int q = 0; q < c.size(); ++q)
    for (int i = 0; i < 5; ++i) ASSERT_EQ(all[size_t(q) * 5 + size_t(i)], q);
}

TEST(Communicator, Placement) {
  Communicator& c = world();
  EXPECT_GE(c.node_count(), 1);
  int total = 0;
  for (int s : c.node_sizes()) total += s;
  EXPECT_EQ(total, c.size());
  EXPECT_EQ(c.node_of(c.rank()), c.node());
  EXPECT_GE(c.min_local_size(), 1);
  EXPECT_LT(c.local_rank(), c.local_size());
  int cross = 0;
  MPI_Comm_size(c.cross_comm(), &cross);
  EXPECT_LE(cross, c.node_count());
}

// shm beyond one chunk (1 MiB per rank): several chunks alternate the two buffer sets and back-to-back
// calls continue the alternation; exact on integer inputs.
TEST(Shm, SeveralChunksAndCallsAreExact) {
  Communicator& c = world();
  if (c.node_count() != 1) GTEST_SKIP() << "shm needs all ranks on one node; this run has " << c.describe();
  for (size_t n : {size_t(600001), size_t(262144), size_t(262145)}) {
    for (int call = 0; call < 3; ++call) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = float(int((i * 7 + size_t(c.rank()) * 13 + size_t(call)) % 29) - 14);
      std::vector<float> want(n, 0.0f);
      for (int q = 0; q < c.size(); ++q)
        for (size_t i = 0; i < n; ++i) want[i] += float(int((i * 7 + size_t(q) * 13 + size_t(call)) % 29) - 14);
      allreduce(c, x.data(), x.data(), n, DType::f32, ReduceOp::sum, Algorithm::shm);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) bad += x[i] != want[i];
      ASSERT_EQ(bad, 0u) << "n " << n << " call " << call;
    }
  }
}

// hier's two ways of working inside a node (AllreduceOptions::intra_node; the parameterised cases above
// run the default, shm): p2p exact and reproducible, and shm over several chunks of its window (each
// chunk's shards cross the nodes in turn) and back-to-back calls. Run on one node and on the virtual
// nodes of tests/comm/CMakeLists.txt (2x2, 3x2, 3+1).
TEST(HierIntraNode, P2pIsExactAndReproducible) {
  for (size_t n : kCounts)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      for (bool in_place : {false, true}) {
        check_exact<float>(Algorithm::hier, n, op, in_place, 0, IntraNode::p2p);
        check_exact<bf16_t>(Algorithm::hier, n, op, in_place, 0, IntraNode::p2p);
      }
  for (size_t n : {size_t(7), size_t(100003)}) check_bitwise<float>(Algorithm::hier, n, IntraNode::p2p);
}

TEST(HierIntraNode, ShmSeveralChunksAndCallsAreExactAndReproducible) {
  for (size_t n : {size_t(262144), size_t(600001)}) {
    for (int call = 0; call < 2; ++call)
      for (bool in_place : {false, true}) check_exact<float>(Algorithm::hier, n, ReduceOp::sum, in_place);
    check_bitwise<float>(Algorithm::hier, n);
    check_bitwise<f16_t>(Algorithm::hier, n);
  }
}

TEST(HierIntraNode, Names) {
  EXPECT_EQ(parse_intra_node("shm"), IntraNode::shm);
  EXPECT_EQ(parse_intra_node("p2p"), IntraNode::p2p);
  EXPECT_EQ(intra_node_name(IntraNode::p2p), "p2p");
  HPDT_EXPECT_THROW_MSG(parse_intra_node("nvlink"), "expected shm or p2p");
}

TEST(Shm, RefusedAcrossNodes) {
  if (world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  CommunicatorOptions o;
  o.ranks_per_node = "1";  // every rank its own virtual node
  Communicator split(MPI_COMM_WORLD, o);
  float x = 1;
  HPDT_EXPECT_THROW_MSG(allreduce(split, &x, &x, 1, DType::f32, ReduceOp::sum, Algorithm::shm), "use hier");
}

TEST(Tuning, BuiltInFallback) {
  EXPECT_EQ(TuningTable::fallback(1 << 20, 1, 1).algorithm, Algorithm::ring);  // one rank: nothing to do
  EXPECT_EQ(TuningTable::fallback(4096, 2, 1).algorithm, Algorithm::shm);      // one node: shm at every size
  EXPECT_EQ(TuningTable::fallback(64 << 20, 8, 1).algorithm, Algorithm::shm);
  EXPECT_EQ(TuningTable::fallback(1 << 20, 4, 2).algorithm, Algorithm::hier);  // several ranks per node
  EXPECT_EQ(TuningTable::fallback(1024, 2, 2).algorithm, Algorithm::rhd);      // one rank per node, small
  EXPECT_EQ(TuningTable::fallback(1 << 20, 2, 2).algorithm, Algorithm::ring);
}

// A table's entry: the most specific one that matches (exact world size and nodes before wildcards, then file order);
// none when nothing matches, and choose() then falls back to the built-in choice.
TEST(Tuning, MatchTakesTheMostSpecificEntry) {
  const TuningTable t = TuningTable::parse(R"({"format": "hpdt-allreduce-tuning", "version": 1, "entries": [
      {"min_bytes": 0, "max_bytes": 1024, "algorithm": "tree"},
      {"world_size": 4, "nodes": 1, "min_bytes": 0, "max_bytes": 1024, "algorithm": "rhd"},
      {"world_size": 4, "min_bytes": 0, "max_bytes": 1024, "algorithm": "ring"},
      {"world_size": 4, "nodes": 1, "min_bytes": 4096, "max_bytes": 0, "algorithm": "nccl", "segment_bytes": 512}]})",
                                           "inline.json");
  EXPECT_EQ(t.source(), "inline.json");
  EXPECT_EQ(t.match(100, 4, 1)->algorithm, Algorithm::rhd);
  EXPECT_EQ(t.match(100, 4, 2)->algorithm, Algorithm::ring);
  EXPECT_EQ(t.match(100, 3, 2)->algorithm, Algorithm::tree);
  EXPECT_EQ(t.match(1 << 30, 4, 1)->segment_bytes, 512u);
  EXPECT_FALSE(t.match(2048, 4, 1).has_value());  // between the ranges
  EXPECT_FALSE(t.match(4096, 4, 2).has_value());
  EXPECT_EQ(t.choose(2048, 4, 1).algorithm, TuningTable::fallback(2048, 4, 1).algorithm);
  HPDT_EXPECT_THROW_MSG(TuningTable::parse(R"({"format": "hpdt-allreduce-tuning", "version": 1, "entries": [
      {"algorithm": "nvlink"}]})",
                                           "bad.json"),
                        "tuning file bad.json: entry 0");
}

// A table measured on GPUs (hpdt-allreduce-perf --device cuda) names nccl where NCCL won. Host memory cannot take
// NCCL: auto passes over such an entry to the built-in choice, and the all-reduce runs (until 2026-12-01 it threw,
// and hpdt-train on the CPU or through its host mirror stopped at its first bucket with the all-reduce job's
// tuning.json).
TEST(Tuning, AutoOnHostMemoryPassesOverNccl) {
  Communicator& c = world();
  const TuningTable t = TuningTable::parse(R"({"format": "hpdt-allreduce-tuning", "version": 1, "entries": [
      {"min_bytes": 0, "max_bytes": 4096, "algorithm": "tree"},
      {"min_bytes": 4096, "max_bytes": 0, "algorithm": "nccl"}]})",
                                           "gpu-tuning.json");
  AllreduceOptions o;
  o.tuning = &t;
  EXPECT_EQ(resolve_auto(c, 100, o).algorithm, Algorithm::tree);
  EXPECT_EQ(resolve_auto(c, 1 << 20, o).algorithm, TuningTable::fallback(1 << 20, c.size(), c.node_count()).algorithm);
  for (size_t n : {size_t(7), size_t(65537)}) {  // 28 bytes: tree; 256 KiB: the built-in choice
    std::vector<float> x(n), want(n, 0.0f);
    for (size_t i = 0; i < n; ++i) x[i] = int_input(c.rank(), i);
    for (int q = 0; q < c.size(); ++q)
      for (size_t i = 0; i < n; ++i) want[i] += int_input(q, i);
    allreduce(c, x.data(), x.data(), n, DType::f32, ReduceOp::sum, Algorithm::automatic, o);
    EXPECT_EQ(x, want) << "n " << n;
  }
}

// Without a usable GPU, asking for the NCCL communicator must throw on every rank with the same
// message naming the failed ranks, never leave the others waiting in the ncclUniqueId broadcast.
TEST(Communicator, NcclWithoutGpuThrowsOnEveryRank) {
#if HPDT_HAVE_CUDA
  if (hpdt::cuda_available()) GTEST_SKIP() << "a GPU is usable here; this case is for ranks without one";
  Communicator c(MPI_COMM_WORLD);
  HPDT_EXPECT_THROW_MSG(c.nccl(), "NCCL communicator: cannot be created: rank(s) 0");
  // The communicator is still usable for MPI collectives afterwards (nobody is stuck in a broadcast).
  int one = 1, total = 0;
  ASSERT_EQ(MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(total, c.size());
#else
  GTEST_SKIP() << "built without CUDA: there is no NCCL communicator to ask for";
#endif
}
