// CudaContext: what every CUDA op needs besides its tensors: the device, the
// stream all work is enqueued on, the cuBLAS handle bound to it, the caching
// allocator, and a device-side error word that kernels set on bad indices
// (kernels cannot return a Status; CudaOps checks the word when it synchronises).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/staging_ring.h"

namespace tf::cuda {

// Bits of the device error word.
enum KernelError : unsigned {
  kErrEmbeddingId = 1u << 0,   // embedding: token id outside the table
  kErrGatherIndex = 1u << 1,   // gather_rows / scatter_add_rows: row index out of range
  kErrMoeExpertId = 1u << 2,   // moe_experts: expert id outside [0, E)
};

struct CudaContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::shared_ptr<DeviceAllocator> alloc;
  unsigned* error_word = nullptr;  // device memory, one word
  StagingRing* staging = nullptr;  // pinned memory for uploads that do not wait (staging_ring.h)
  // Calls with at most this many rows (matmul, head_matmul, moe_experts tokens) use
  // the row-independent kernels (f32 activations; a row's bits do not depend on the
  // other rows); larger ones use cuBLAS (bf16 weights: tensor cores, x rounded to bf16).
  int64_t exact_rows = 64;
  // True while the stream is being captured into a graph: uploads through the
  // staging ring (host memory read when the copy runs) are refused then.
  bool capturing = false;

  // Device scratch memory (freed back to the cache when the Tensor goes).
  Tensor scratch(int64_t bytes);
  // Device scratch holding a copy of `bytes` host bytes, queued on the stream
  // through the staging ring: the host buffer may go at once, nothing waits.
  Tensor upload(const void* host, int64_t bytes);
};

}  // namespace tf::cuda
