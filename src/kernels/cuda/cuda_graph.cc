// GraphCapturer (see cuda_graph.h): stream capture into the shared arena,
// instantiation, replay.
#include "kernels/cuda/cuda_graph.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/op_profiler.h"
#include "kernels/cuda/side_stream.h"

namespace tf::cuda {
namespace {

constexpr size_t kFirstArenaBytes = size_t{256} << 20;

class CudaGraph final : public Ops::Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, std::shared_ptr<void> arena) : exec(exec), arena(std::move(arena)) {}
  ~CudaGraph() override {
    if (exec) cudaGraphExecDestroy(exec);
  }
  cudaGraphExec_t exec;
  std::shared_ptr<void> arena;  // the memory its captured allocations point into
};

}  // namespace

Status GraphCapturer::ensure_arena(CudaContext& ctx, size_t bytes) {
  if (arena_ && arena_bytes_ >= bytes) return Status();
  void* p = nullptr;
  TF_RETURN_IF_ERROR(cuda_status(cudaSetDevice(ctx.device), "graph arena"));
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return resource_exhausted("graph capture arena: cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" +
                              std::to_string(ctx.device) + " failed: " + cudaGetErrorString(err));
  }
  // Older graphs keep the previous arena alive through their own reference.
  arena_ = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
  arena_bytes_ = bytes;
  return Status();
}

Expected<std::unique_ptr<Ops::Graph>> GraphCapturer::capture_once(CudaContext& ctx, OpProfiler* prof,
                                                                  SideStream* side, const std::function<void()>& fn,
                                                                  size_t& wanted) {
  TF_RETURN_IF_ERROR(ensure_arena(ctx, std::max(arena_bytes_, kFirstArenaBytes)));
  TF_RETURN_IF_ERROR(cuda_status(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal),
                                 "cudaStreamBeginCapture"));
  ctx.alloc->begin_arena(arena_, static_cast<char*>(arena_.get()), arena_bytes_);
  ctx.capturing = true;
  if (prof) prof->set_paused(true);
  Status body;
  try {
    fn();
  } catch (const StatusError& e) {
    body = e.status();
  } catch (const std::exception& e) {
    body = internal_error(std::string("exception while capturing: ") + e.what());
  }
  // An unjoined fork would fail the capture (and leave the side stream in it).
  if (side != nullptr && side->open()) {
    const Status closed = side->close(ctx);
    if (body.is_ok()) body = closed.is_ok() ? internal_error("a side branch was left open") : closed;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(ctx.stream, &graph);
  if (prof) prof->set_paused(false);
  ctx.capturing = false;
  wanted = ctx.alloc->end_arena();
  (void)cudaGetLastError();  // an illegal call during capture leaves a sticky-free error here
  if (!body.is_ok() || end != cudaSuccess || graph == nullptr) {
    if (graph) cudaGraphDestroy(graph);
    if (!body.is_ok()) return body.with_context("graph capture");
    return internal_error(std::string("graph capture: cudaStreamEndCapture: ") + cudaGetErrorName(end) + " (" +
                          cudaGetErrorString(end) + ")");
  }
  cudaGraphExec_t exec = nullptr;
  // Kernel nodes carry their capturing stream's priority (a side branch's may be higher).
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    (void)cudaGetLastError();
    return internal_error(std::string("cudaGraphInstantiate: ") + cudaGetErrorName(inst));
  }
  return std::unique_ptr<Ops::Graph>(new CudaGraph(exec, arena_));
}

Expected<std::unique_ptr<Ops::Graph>> GraphCapturer::capture(CudaContext& ctx, OpProfiler* prof, SideStream* side,
                                                             const std::function<void()>& fn) {
  if (ctx.capturing) return internal_error("graph capture: already capturing");
  if (side != nullptr && side->open()) return internal_error("graph capture: inside an open side branch");
  size_t wanted = 0;
  auto g = capture_once(ctx, prof, side, fn, wanted);
  if (g || wanted <= arena_bytes_) return g;
  // The arena was too small: a bigger one (for this and later captures), once.
  TF_RETURN_IF_ERROR(ensure_arena(ctx, 2 * wanted));
  return capture_once(ctx, prof, side, fn, wanted);
}

Status GraphCapturer::replay(CudaContext& ctx, Ops::Graph& graph) {
  auto* g = dynamic_cast<CudaGraph*>(&graph);
  if (g == nullptr) return invalid_argument("cuda backend: replay of a graph it did not capture");
  return cuda_status(cudaGraphLaunch(g->exec, ctx.stream), "cudaGraphLaunch");
}

}  // namespace tf::cuda
