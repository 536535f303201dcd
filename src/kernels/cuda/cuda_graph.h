// CUDA graphs for Ops::capture / Ops::replay on the CUDA backend.
//
// capture() records the function's work on the backend stream with
// cudaStreamBeginCapture(..., ThreadLocal): a call that is illegal while capturing
// (a host sync, a pageable copy, cudaMalloc) fails, and so does the capture, which
// the caller turns into eager execution. While capturing, the caching allocator
// serves every allocation from the shared capture arena (device_allocator.h), and
// staged uploads are refused (CudaContext::capturing): their host bytes would be
// read again at every replay. An arena too small for a capture is replaced by one
// twice the size wanted and the capture retried once; graphs keep the arena they
// were captured in alive. Side branches (side_stream.h) inside the function become
// parallel branches of the graph: a branch the function left open is joined before
// the capture ends, and graphs are instantiated with their kernel nodes' priorities
// (captured from their streams').
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "core/status.h"
#include "kernels/api/ops.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

class OpProfiler;
class SideStream;

class GraphCapturer {
 public:
  GraphCapturer() = default;
  GraphCapturer(const GraphCapturer&) = delete;
  GraphCapturer& operator=(const GraphCapturer&) = delete;

  // `side` (may be null): the backend's side stream, joined if fn leaves a branch open.
  Expected<std::unique_ptr<Ops::Graph>> capture(CudaContext& ctx, OpProfiler* prof, SideStream* side,
                                                const std::function<void()>& fn);
  Status replay(CudaContext& ctx, Ops::Graph& graph);
  size_t arena_bytes() const { return arena_bytes_; }

 private:
  Status ensure_arena(CudaContext& ctx, size_t bytes);
  // One capture attempt; `wanted` gets the arena bytes the function asked for.
  Expected<std::unique_ptr<Ops::Graph>> capture_once(CudaContext& ctx, OpProfiler* prof, SideStream* side,
                                                     const std::function<void()>& fn, size_t& wanted);

  std::shared_ptr<void> arena_;  // device memory (cudaFree when the last graph goes)
  size_t arena_bytes_ = 0;
};

}  // namespace tf::cuda
