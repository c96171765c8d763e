#include "hpdt/core/cuda_graph.h"

#include <exception>

#include "hpdt/core/error.h"

#if HPDT_HAVE_CUDA
#include "hpdt/core/check_cuda.h"
#endif

namespace hpdt {

CudaGraph CudaGraph::capture(const Stream& stream, const std::function<void()>& queue_work) {
#if HPDT_HAVE_CUDA
  HPDT_CHECK(stream.is_cuda() && stream.handle() != nullptr,
             "CudaGraph::capture: needs a created CUDA stream (the legacy default stream cannot be captured)");
  const auto s = static_cast<cudaStream_t>(stream.handle());
  HPDT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  std::exception_ptr failed;
  try {
    queue_work();
  } catch (...) {
    failed = std::current_exception();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
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
