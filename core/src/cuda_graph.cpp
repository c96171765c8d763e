#include "hpdt/core/cuda_graph.h"

#include <exception>

#include "hpdt/core/allocator.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"

#if HPDT_HAVE_CUDA
#include "hpdt/core/check_cuda.h"
#endif

namespace hpdt {

CudaGraph CudaGraph::capture(const Stream& stream, const std::function<void()>& queue_work) {
  return capture_parts(stream, [&](const Split&) { queue_work(); });
}

CudaGraph CudaGraph::capture_parts(const Stream& stream, const std::function<void(const Split& split)>& queue_work) {
#if HPDT_HAVE_CUDA
  HPDT_CHECK(stream.is_cuda() && stream.handle() != nullptr,
             "CudaGraph::capture: needs a created CUDA stream (the legacy default stream cannot be captured)");
  const auto s = static_cast<cudaStream_t>(stream.handle());
  // The capture's memory goes into a private pool that the graph holds: nothing else gets a block its replays write.
  CachingAllocator& alloc = cuda_caching_allocator(stream.device().index);
  const uint64_t pool_id = alloc.begin_pool(stream.handle());
  std::shared_ptr<void> pool(reinterpret_cast<void*>(pool_id), [&alloc](void* id) {
    try {
      alloc.release_pool(reinterpret_cast<uint64_t>(id));
    } catch (const std::exception& e) {  // (a destructor's: logged, not thrown)
      HPDT_LOG(error) << "CudaGraph: " << e.what();
    }
  });
  const cudaError_t begin = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (begin != cudaSuccess) alloc.end_pool_capture(pool_id);
  HPDT_CUDA_CHECK(begin);
  const char* const not_capturable =
      " (an operation of the captured work is not capturable: an allocation, a synchronous copy, a host wait or work "
      "on the legacy stream)";
  std::vector<cudaGraph_t> graphs;  // the parts captured so far (destroyed once instantiated, or on failure)
  const auto destroy_graphs = [&] {
    for (cudaGraph_t g : graphs) (void)cudaGraphDestroy(g);
    graphs.clear();
  };
  bool capturing = true;
  const auto end_part = [&]() -> cudaError_t {
    cudaGraph_t g = nullptr;
    capturing = false;
    const cudaError_t e = cudaStreamEndCapture(s, &g);
    if (e == cudaSuccess) graphs.push_back(g);
    return e;
  };
  const Split split = [&] {
    const cudaError_t e = end_part();
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      HPDT_FAIL("the capture of part ", graphs.size() + 1, " failed: ", cudaGetErrorString(e), not_capturable);
    }
    HPDT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    capturing = true;
  };
  std::exception_ptr failed;
  try {
    queue_work(split);
  } catch (...) {
    failed = std::current_exception();
  }
  const cudaError_t end = capturing ? end_part() : cudaSuccess;
  alloc.end_pool_capture(pool_id);
  (void)cudaGetLastError();  // the capture's own error is reported below
  if (failed) {
    destroy_graphs();
    try {
      std::rethrow_exception(failed);
    } catch (const std::exception& e) {
      HPDT_FAIL("CudaGraph::capture: the captured work failed (", e.what(),
                "): inside a capture only kernels, device copies and memsets on the capturing stream may be queued");
    }
  }
  if (end != cudaSuccess) destroy_graphs();
  HPDT_CHECK(end == cudaSuccess, "CudaGraph::capture: the capture failed: ", cudaGetErrorString(end), not_capturable);
  CudaGraph g;
  g.pool_ = std::move(pool);
  for (cudaGraph_t graph : graphs) {  // (an empty part, of two splits in a row, launches as nothing)
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    if (inst != cudaSuccess) destroy_graphs();
    HPDT_CUDA_CHECK(inst);
    g.execs_.emplace_back(exec, [](void* p) { (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(p)); });
  }
  destroy_graphs();
  return g;
#else
  (void)stream;
  (void)queue_work;
  HPDT_FAIL("CudaGraph::capture needs CUDA, but hpdt was built without it (configure with -DHPDT_CUDA=ON)");
#endif
}

void CudaGraph::launch(const Stream& stream) const {
  HPDT_CHECK(!execs_.empty(), "CudaGraph::launch: the graph is empty (capture one first)");
  for (size_t part = 0; part < execs_.size(); ++part) launch_part(stream, part);
}

void CudaGraph::launch_part(const Stream& stream, size_t part) const {
  HPDT_CHECK(part < execs_.size(), "CudaGraph::launch_part: part ", part, " of a graph of ", execs_.size());
#if HPDT_HAVE_CUDA
  HPDT_CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(execs_[part].get()), static_cast<cudaStream_t>(stream.handle())));
#else
  (void)stream;
#endif
}

}  // namespace hpdt
