// core/ on the GPU: device tensors and their copies, Tensor::zeros, the caching allocator on cudaMalloc,
// pinned host tensors, streams and CUDA events. (The kernels' tests use all of these; this checks them
// on their own, with the ordering rules the H100 run of 2026-11-26 showed matter: work on hpdt's
// non-blocking streams is not ordered with the legacy default stream.)
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "hpdt/core/allocator.h"
#include "hpdt/core/cuda_graph.h"
#if HPDT_HAVE_CUDA
#include "hpdt/core/check_cuda.h"
#endif
#include "hpdt/core/runtime.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;

class CoreCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    HPDT_REQUIRE_GPU();
    stream = Stream::create_cuda(0);
    other = Stream::create_cuda(0);
  }
  static Tensor random_bytes(const Shape& s, DType dt, uint32_t seed) {
    Tensor t = Tensor::empty(s, dt);
    std::mt19937 g(seed);
    auto* p = static_cast<uint8_t*>(t.data());
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(g());
    return t;
  }
  static bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
  }
  Stream stream, other;
};

// Host -> device -> host keeps every byte, for every dtype and odd sizes, and through views.
TEST_F(CoreCuda, RoundTripEveryDtypeAndView) {
  uint32_t seed = 1;
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8})
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(4099), int64_t(1) << 20}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      const Tensor h = random_bytes({n}, dt, seed++);
      const Tensor d = h.to(Device::cuda(0), stream);
      ASSERT_TRUE(d.is_cuda());
      const Tensor back = d.to(Device::cpu(), stream);
      stream.synchronize();
      EXPECT_TRUE(same_bytes(h, back));
      if (n > 2) {  // a view in the middle of the device tensor
        const Tensor part = d.flat(1, n - 2).to(Device::cpu(), stream);
        stream.synchronize();
        EXPECT_EQ(std::memcmp(part.data(), static_cast<const char*>(h.data()) + dtype_size(dt), part.nbytes()), 0);
      }
    }
}

// clone on one stream, read on another after an event: equal.
TEST_F(CoreCuda, CloneThenEventOrdersAnotherStream) {
  const Tensor h = random_bytes({3, 1001}, DType::f32, 42);
  const Tensor d = h.to(Device::cuda(0), stream);
  const Tensor c = d.clone(stream);
  Event done(Device::cuda(0));
  done.record(stream);
  done.wait(other);
  const Tensor back = c.to(Device::cpu(), other);
  other.synchronize();
  EXPECT_TRUE(same_bytes(h, back));
  EXPECT_TRUE(done.query());
}

// Tensor::zeros without a stream is zero for work on any stream as soon as it returns, also where the
// caching allocator hands back a block that held other bytes (poisoned here on a non-blocking stream).
TEST_F(CoreCuda, ZerosWithoutAStreamAreReadyForEveryStream) {
  const int64_t n = int64_t(1) << 22;  // 16 MiB of f32: a copy long enough to overlap a late memset
  for (int round = 0; round < 4; ++round) {
    {
      const Tensor poison = random_bytes({n}, DType::f32, 7 + round).to(Device::cuda(0), Stream::cuda_default(0));
      Stream::cuda_default(0).synchronize();
    }
    const Tensor z = Tensor::zeros({n}, DType::f32, Device::cuda(0));
    const Tensor back = z.to(Device::cpu(), other);  // at once, on a non-blocking stream
    other.synchronize();
    const float* p = back.data<float>();
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; ++i) nonzero += p[i] != 0.0f;
    EXPECT_EQ(nonzero, 0) << "round " << round;
  }
}

// The device caching allocator: a freed block of one size class comes back for the next request of that
// class on the same stream without a new cudaMalloc; bytes in use return to where they were.
TEST_F(CoreCuda, CachingAllocatorReusesDeviceBlocks) {
  CachingAllocator& a = cuda_caching_allocator(0);
  stream.synchronize();
  a.release_cached();  // no block of an earlier test (whose stream handle this one may reuse) in the way
  const CachingAllocator::Stats before = a.stats();
  void* p = nullptr;
  {
    const Tensor t = Tensor::empty({3 << 20}, DType::u8, Device::cuda(0), AllocOptions{.stream = &stream});
    p = t.data();
  }
  const CachingAllocator::Stats mid = a.stats();
  EXPECT_EQ(mid.bytes_in_use, before.bytes_in_use);
  EXPECT_GE(mid.bytes_cached, CachingAllocator::round_size(3 << 20));
  {
    const Tensor t = Tensor::empty({3 << 20}, DType::u8, Device::cuda(0), AllocOptions{.stream = &stream});
    EXPECT_EQ(t.data(), p) << "the cached block was not reused";
  }
  const CachingAllocator::Stats after = a.stats();
  EXPECT_EQ(after.raw_allocations, mid.raw_allocations);
  EXPECT_EQ(after.cache_hits, mid.cache_hits + 1);
}

// A capture cut into parts (CudaGraph::capture_parts, hpdt-train --cuda-graph on several ranks): nothing runs at
// capture; each part runs at its own launch, in order, so the host can act between them; a split right after another
// makes an empty part; the memory the capture took is the graph's (not handed out again while it lives).
TEST_F(CoreCuda, CudaGraphPartsRunAtTheirOwnLaunches) {
  const int64_t n = 4099;
  const AllocOptions on{.stream = &stream};
  const Tensor h1 = random_bytes({n}, DType::f32, 1), h2 = random_bytes({n}, DType::f32, 2);
  const Tensor src1 = h1.to(Device::cuda(0), stream), src2 = h2.to(Device::cuda(0), stream);
  Tensor a = Tensor::zeros({n}, DType::f32, Device::cuda(0), on),
         b = Tensor::zeros({n}, DType::f32, Device::cuda(0), on);
  { const Tensor warm = Tensor::empty({n}, DType::f32, Device::cuda(0), on); }  // cached: the capture takes it
  stream.synchronize();
  void* temp = nullptr;
  const CudaGraph g = CudaGraph::capture_parts(stream, [&](const CudaGraph::Split& split) {
    Tensor t = Tensor::empty({n}, DType::f32, Device::cuda(0), on);  // (a cudaMalloc would fail the capture)
    temp = t.data();
    copy(src1, t, stream);  // part 0: a = src1, through a temporary
    copy(t, a, stream);
    split();
    copy(src2, b, stream);  // part 1: b = src2
    split();
    split();  // part 2: empty; part 3: empty
  });
  ASSERT_EQ(g.parts(), 4u);
  const auto host = [&](const Tensor& t) {
    Tensor h = t.to(Device::cpu(), stream);
    stream.synchronize();
    return h;
  };
  const Tensor zero = Tensor::zeros({n}, DType::f32);
  EXPECT_TRUE(same_bytes(host(a), zero) && same_bytes(host(b), zero)) << "captured work ran at capture";
  g.launch_part(stream, 0);
  EXPECT_TRUE(same_bytes(host(a), h1));
  EXPECT_TRUE(same_bytes(host(b), zero)) << "part 1 ran with part 0";
  for (size_t part = 1; part < g.parts(); ++part) g.launch_part(stream, part);
  EXPECT_TRUE(same_bytes(host(b), h2));
  HPDT_EXPECT_THROW_MSG(g.launch_part(stream, 4), "part 4 of a graph of 4");
  const Tensor after = Tensor::empty({n}, DType::f32, Device::cuda(0), on);
  EXPECT_NE(after.data(), temp) << "a block of the graph's pool was handed out while the graph lives";
  // A part whose work waits for the host fails the capture, naming it.
  HPDT_EXPECT_THROW_MSG(CudaGraph::capture_parts(stream,
                                                 [&](const CudaGraph::Split& split) {
                                                   copy(src1, a, stream);
                                                   split();
                                                   stream.synchronize();
                                                 }),
                        "CudaGraph::capture");
  g.launch(stream);  // every part, the stream usable after the failed capture
  EXPECT_TRUE(same_bytes(host(a), h1) && same_bytes(host(b), h2));
}

// Pinned host tensors hold what was written and travel to the device and back.
TEST_F(CoreCuda, PinnedHostTensor) {
  Tensor h = Tensor::empty({4097}, DType::i32, Device::cpu(), AllocOptions{.pinned = true});
  for (int64_t i = 0; i < h.numel(); ++i) h.data<int32_t>()[i] = int32_t(i * 2654435761u);
  const Tensor back = h.to(Device::cuda(0), stream).to(Device::cpu(), stream, AllocOptions{.pinned = true});
  stream.synchronize();
  EXPECT_TRUE(same_bytes(h, back));
}

// CUDA events time device work: a few hundred MB of copies take more than zero and less than a minute.
TEST_F(CoreCuda, EventsTimeDeviceWork) {
  const Tensor a = Tensor::zeros({int64_t(1) << 26}, DType::f32, Device::cuda(0), AllocOptions{.stream = &stream});
  Event start(Device::cuda(0)), stop(Device::cuda(0));
  start.record(stream);
  for (int i = 0; i < 4; ++i) (void)a.clone(stream);
  stop.record(stream);
  stop.synchronize();
  const float ms = start.elapsed_ms(stop);
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 60e3f);
}

// A query's three answers (Event::query and comm's waits): done, not yet, or an error that throws. "Not yet" leaves no
// last error behind for the next launch check to report (the GPU side of this: test_elementwise_cuda's
// SpinHoldsItsStreamForItsTime). A pure function of the answer: no GPU needed, but the CUDA runtime's types (a
// CPU-only build has neither).
#if HPDT_HAVE_CUDA
TEST(CudaQuery, AnswersDoneNotYetOrThrows) {
  EXPECT_TRUE(detail::cuda_query_done(cudaSuccess, "cudaEventQuery(e)"));
  EXPECT_FALSE(detail::cuda_query_done(cudaErrorNotReady, "cudaEventQuery(e)"));
  EXPECT_NE(cudaPeekAtLastError(), cudaErrorNotReady);
  HPDT_EXPECT_THROW_MSG(detail::cuda_query_done(cudaErrorInvalidValue, "cudaEventQuery(e)"),
                        "CUDA error cudaErrorInvalidValue");
}
#endif

}  // namespace
