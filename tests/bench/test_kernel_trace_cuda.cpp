// The kernel trace (bench/kernel_trace, CUPTI) on a GPU: the kernels and copies it records are the ones that ran,
// named and timed; one trace at a time.
#include <gtest/gtest.h>

#include <algorithm>

#include "hpdt/bench/kernel_trace.h"
#include "hpdt/core/stream.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;

TEST(KernelTraceCuda, RecordsTheKernelsAndCopiesThatRan) {
  HPDT_REQUIRE_GPU();
  const Stream stream = Stream::create_cuda(0);
  Tensor host = Tensor::empty({1 << 20}, DType::f32);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = float(i % 7);
  Tensor dev = host.to(Device::cuda(0), stream);  // before the trace: not recorded
  stream.synchronize();

  bench::KernelTrace trace;
  EXPECT_FALSE(trace.library().empty());
  HPDT_EXPECT_THROW_MSG(bench::KernelTrace second, "another trace is running");
  for (int i = 0; i < 3; ++i) kernels::fill(dev, float(i), stream);
  Tensor back = dev.to(Device::cpu(), stream);
  stream.synchronize();
  const std::vector<bench::GpuActivity> acts = trace.stop();
  HPDT_EXPECT_THROW_MSG(trace.stop(), "not running");

  EXPECT_EQ(back.data<float>()[12345], 2.0f);
  const auto fills = std::count_if(acts.begin(), acts.end(),
                                   [](const bench::GpuActivity& a) { return a.name.find("fill_kernel") != std::string::npos; });
  EXPECT_EQ(fills, 3) << "the three fills, by their demangled name";
  const auto copies = std::count_if(acts.begin(), acts.end(), [](const bench::GpuActivity& a) { return a.name == "[memcpy DtoH]"; });
  EXPECT_EQ(copies, 1);
  EXPECT_FALSE(std::any_of(acts.begin(), acts.end(), [](const bench::GpuActivity& a) { return a.name == "[memcpy HtoD]"; }))
      << "the upload before the trace started";
  for (size_t i = 0; i < acts.size(); ++i) {
    EXPECT_LT(acts[i].start_ns, acts[i].end_ns) << acts[i].name;  // a 4 MB fill takes more than a nanosecond
    if (i) {
      EXPECT_LE(acts[i - 1].start_ns, acts[i].start_ns) << "in start order";
    }
  }
  const auto s = bench::summarize(acts);
  EXPECT_GT(s.busy_ms, 0.0);
  EXPECT_LE(s.busy_ms, s.span_ms);

  // a second trace after the first has stopped records only its own work
  bench::KernelTrace again;
  kernels::fill(dev, 5.0f, stream);
  stream.synchronize();
  const auto acts2 = again.stop();
  EXPECT_EQ(std::count_if(acts2.begin(), acts2.end(),
                          [](const bench::GpuActivity& a) { return a.name.find("fill_kernel") != std::string::npos; }),
            1);
}

}  // namespace
