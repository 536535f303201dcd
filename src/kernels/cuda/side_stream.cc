// SideStream (see side_stream.h): fork / join of a second stream by events.
#include "kernels/cuda/side_stream.h"

#include <string>

#include "kernels/cuda/cuda_check.h"

namespace tf::cuda {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // as the main handle's (cuda_ops.cc)

void throw_if(const Status& s) {
  if (!s.is_ok()) throw StatusError(s);
}

}  // namespace

Expected<std::unique_ptr<SideStream>> SideStream::create(int device, bool high_priority) {
  auto s = std::unique_ptr<SideStream>(new SideStream());
  s->device_ = device;
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  int least = 0, greatest = 0;
  TF_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  s->priority_ = high_priority ? greatest : least;
  // Blocking, as the main stream: both order against legacy default-stream copies.
  TF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&s->side_, cudaStreamDefault, s->priority_));
  TF_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s->fork_, cudaEventDisableTiming));
  TF_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s->done_, cudaEventDisableTiming));
  if (cublasCreate(&s->cublas_) != CUBLAS_STATUS_SUCCESS)
    return internal_error("side stream: cublasCreate failed on cuda:" + std::to_string(device));
  if (cublasSetStream(s->cublas_, s->side_) != CUBLAS_STATUS_SUCCESS)
    return internal_error("side stream: cublasSetStream failed");
  cublasSetMathMode(s->cublas_, CUBLAS_DEFAULT_MATH);  // as the main handle: no TF32
  TF_CUDA_RETURN_IF_ERROR(cudaMalloc(&s->workspace_, kCublasWorkspaceBytes));
  if (cublasSetWorkspace(s->cublas_, s->workspace_, kCublasWorkspaceBytes) != CUBLAS_STATUS_SUCCESS)
    return internal_error("side stream: cublasSetWorkspace failed on cuda:" + std::to_string(device));
  return s;
}

SideStream::~SideStream() {
  if (side_) cudaStreamSynchronize(side_);
  if (cublas_) cublasDestroy(cublas_);
  if (workspace_) cudaFree(workspace_);
  if (fork_) cudaEventDestroy(fork_);
  if (done_) cudaEventDestroy(done_);
  if (side_) cudaStreamDestroy(side_);
}

void SideStream::begin(CudaContext& ctx, bool concurrent) {
  if (state_ != State::kIdle)
    throw StatusError(internal_error("branch_begin: a side branch is already open (branches do not nest)"));
  concurrent_ = concurrent;
  done_recorded_ = false;
  if (concurrent_) {
    throw_if(cuda_status(cudaEventRecord(fork_, ctx.stream), "branch_begin: cudaEventRecord"));
    throw_if(cuda_status(cudaStreamWaitEvent(side_, fork_, 0), "branch_begin: cudaStreamWaitEvent"));
    main_ = ctx.stream;
    main_cublas_ = ctx.cublas;
    ctx.stream = side_;
    ctx.cublas = cublas_;
    ctx.alloc->begin_hold();
  }
  state_ = State::kSide;
}

void SideStream::end(CudaContext& ctx) {
  if (state_ != State::kSide) throw StatusError(internal_error("branch_end: no side branch is open"));
  state_ = State::kMain;
  if (!concurrent_) return;
  const cudaError_t err = cudaEventRecord(done_, side_);
  done_recorded_ = err == cudaSuccess;
  ctx.stream = main_;
  ctx.cublas = main_cublas_;
  throw_if(cuda_status(err, "branch_end: cudaEventRecord"));
}

void SideStream::join(CudaContext& ctx) {
  if (state_ == State::kIdle) throw StatusError(internal_error("branch_join: no side branch is open"));
  if (state_ == State::kSide) throw StatusError(internal_error("branch_join: the side branch was not ended"));
  state_ = State::kIdle;
  if (!concurrent_) return;
  cudaError_t err = done_recorded_ ? cudaStreamWaitEvent(ctx.stream, done_, 0) : cudaErrorInvalidResourceHandle;
  // Without the wait (an error), only a finished side stream makes its blocks safe to reuse.
  if (err != cudaSuccess) (void)cudaStreamSynchronize(side_);
  ctx.alloc->end_hold();
  throw_if(cuda_status(err, "branch_join: cudaStreamWaitEvent"));
}

Status SideStream::close(CudaContext& ctx) {
  Status first;
  for (State step : {State::kSide, State::kMain}) {
    if (state_ != step) continue;
    try {
      step == State::kSide ? end(ctx) : join(ctx);
    } catch (const StatusError& e) {
      if (first.is_ok()) first = e.status();
    }
  }
  return first;
}

}  // namespace tf::cuda
