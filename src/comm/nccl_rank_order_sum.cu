// Rank-order sum kernels for the NCCL communicator (see nccl_rank_order_sum.h).
// Grid-stride loops; only additions, so no FMA contraction can change the bits.
#include "comm/nccl_rank_order_sum.h"

#include <cuda_bf16.h>

#include <algorithm>

namespace tf {
namespace {

__global__ void rank_order_sum_f32(const float* __restrict__ g, int ranks, size_t n, float* __restrict__ out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    float acc = g[i];
    for (int r = 1; r < ranks; ++r) acc += g[static_cast<size_t>(r) * n + i];
    out[i] = acc;
  }
}

__global__ void rank_order_sum_bf16(const __nv_bfloat16* __restrict__ g, int ranks, size_t n,
                                    __nv_bfloat16* __restrict__ out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    float acc = __bfloat162float(g[i]);
    for (int r = 1; r < ranks; ++r) acc += __bfloat162float(g[static_cast<size_t>(r) * n + i]);
    out[i] = __float2bfloat16_rn(acc);
  }
}

}  // namespace

cudaError_t launch_rank_order_sum(const void* gathered, int ranks, size_t n, void* out, bool is_bf16,
                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr unsigned kThreads = 256;
  unsigned blocks = static_cast<unsigned>(std::min<size_t>((n + kThreads - 1) / kThreads, 4096));
  if (is_bf16) {
    rank_order_sum_bf16<<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(gathered), ranks, n,
                                                         static_cast<__nv_bfloat16*>(out));
  } else {
    rank_order_sum_f32<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(gathered), ranks, n,
                                                        static_cast<float*>(out));
  }
  return cudaGetLastError();
}

}  // namespace tf
