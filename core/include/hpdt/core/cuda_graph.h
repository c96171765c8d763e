// A CUDA graph captured from the work one thread queues on one stream, replayed with launch(): one launch
// for a whole training step instead of hundreds (llm.c and PyTorch's CUDA graphs do the same).
//
// What the captured work may do is what stream capture allows: kernels, device copies and memsets queued
// on that stream, taking memory the caching allocator already holds (for a training step: run it eagerly
// twice first, since a step allocates while the model still holds the previous step's activations). Host waits,
// synchronous copies, copies to pageable memory, cudaMalloc and work on the legacy stream make the capture fail;
// capture() then throws, naming the call (every CUDA call in hpdt is checked). Each replay runs the same kernels with
// the same arguments: pointers, sizes and host scalars (learning rate, step count, loss scale) are those of the
// capture. The memory the captured work allocates is the graph's while it lives: the caching allocator keeps
// it in a private pool (CachingAllocator::begin_pool), so no later allocation gets a block the replays write,
// and gives it back to its general cache when the graph is destroyed. (Memory allocated before the capture
// and used inside it, a layer's buffers from the warm-up, stays its owner's: keep it alive, unchanged in
// place, while the graph replays.)
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "hpdt/core/stream.h"

namespace hpdt {

class CudaGraph {
 public:
  using Split = std::function<void()>;
  CudaGraph() = default;  // empty: launch() throws
  // Runs queue_work() with `stream` capturing (this thread only: other threads' CUDA calls are unaffected)
  // and instantiates the graph. Nothing of the captured work runs now.
  static CudaGraph capture(const Stream& stream, const std::function<void()>& queue_work);
  // The same, the work cut into parts, one graph each, wherever it calls split(): between the parts' launches the
  // host can act on what the parts before have queued (hpdt-train hands each complete gradient bucket to the
  // all-reduce). One private pool holds the memory of all of them; parts() is the number of split() calls + 1.
  static CudaGraph capture_parts(const Stream& stream, const std::function<void(const Split& split)>& queue_work);
  // Queues one replay of every part, in order, on `stream` (a CUDA stream of the capture's device).
  void launch(const Stream& stream) const;
  void launch_part(const Stream& stream, size_t part) const;  // part < parts()
  size_t parts() const { return execs_.size(); }
  bool empty() const { return execs_.empty(); }

 private:
  std::shared_ptr<void> pool_;                // the caching allocator's private pool (released after the parts)
  std::vector<std::shared_ptr<void>> execs_;  // cudaGraphExec_t, one a part
};

}  // namespace hpdt
