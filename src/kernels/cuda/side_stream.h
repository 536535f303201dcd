// SideStream: the CUDA side of Ops::branch_begin / branch_end / branch_join (ops.h).
//
// begin records an event on the main stream, makes the side stream wait for it and
// points the context (stream, cuBLAS handle) at the side stream, so the ops that
// follow are enqueued there; end records an event on the side stream and points the
// context back at the main stream; join makes the main stream wait for that event.
// The same calls work eagerly and during stream capture: the side stream joins the
// capture through its wait on the fork event (a captured fork), and the main
// stream's wait on the end event is the captured join, which the capture needs before
// it may end. The side stream has its own cuBLAS handle and workspace (two GEMMs
// running at once must not share one), is created at the device's highest priority
// unless TF_BRANCH_PRIORITY=0 (a short side branch beside a long kernel then gets the
// block slots that free up first; captured kernel nodes keep their stream's priority,
// cuda_graph.cc instantiates with node priorities), and from begin to join the
// allocator holds every freed block (device_allocator.h).
//
// An inline branch (begin(ctx, /*concurrent=*/false): the op profiler times eager
// ops with events on the main stream) changes nothing: its ops run in order.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "core/status.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

class SideStream {
 public:
  static Expected<std::unique_ptr<SideStream>> create(int device, bool high_priority);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  // The three steps of a branch; each throws StatusError when called out of turn (a
  // branch_begin before the previous join: branches do not nest) or on a CUDA error.
  // end and join restore the main stream and release the held blocks even then.
  void begin(CudaContext& ctx, bool concurrent);
  void end(CudaContext& ctx);
  void join(CudaContext& ctx);
  bool open() const { return state_ != State::kIdle; }
  // Ends and joins a branch left open (a capture whose function failed inside one);
  // never throws.
  Status close(CudaContext& ctx);

  cudaStream_t stream() const { return side_; }
  int priority() const { return priority_; }

 private:
  SideStream() = default;
  enum class State { kIdle, kSide, kMain };

  int device_ = 0;
  int priority_ = 0;
  cudaStream_t side_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
  cudaEvent_t fork_ = nullptr, done_ = nullptr;
  State state_ = State::kIdle;
  bool concurrent_ = false;
  bool done_recorded_ = false;  // end() recorded done_ (else join waits for the whole side stream)
  cudaStream_t main_ = nullptr;
  cublasHandle_t main_cublas_ = nullptr;
};

}  // namespace tf::cuda
