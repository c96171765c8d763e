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
  std::exception_ptr failed;
  try {
    queue_work();
  } catch (...) {
    failed = std::current_exception();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  alloc.end_pool_capture(pool_id);
  (void)cudaGetLastError();  // the capture's own error is reported below
  if (failed) {
    if (graph) (void)cudaGraphDestroy(graph);
    try {
      std::rethrow_exception(failed);
    } catch (const std::exception& e) {
      HPDT_FAIL("CudaGraph::capture: the captured work failed (", e.what(),
                "): inside a capture only kernels, device copies and memsets on the capturing stream may be queued");
    }
  }
  HPDT_CHECK(end == cudaSuccess, "CudaGraph::capture: the capture failed: ", cudaGetErrorString(end),
             " (an operation of the captured work is not capturable: an allocation, a synchronous copy, a host "
             "wait or work on the legacy stream)");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  HPDT_CUDA_CHECK(inst);
  CudaGraph g;
  g.pool_ = std::move(pool);
  g.exec_ = std::shared_ptr<void>(exec, [](void* p) { (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(p)); });
  return g;
#else
  (void)stream;
  (void)queue_work;
  HPDT_FAIL("CudaGraph::capture needs CUDA, but hpdt was built without it (configure with -DHPDT_CUDA=ON)");
#endif
}

void CudaGraph::launch(const Stream& stream) const {
  HPDT_CHECK(exec_ != nullptr, "CudaGraph::launch: the graph is empty (capture one first)");
#if HPDT_HAVE_CUDA
  HPDT_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_.get()), static_cast<cudaStream_t>(stream.handle())));
#else
  (void)stream;
#endif
}

}  // namespace hpdt
