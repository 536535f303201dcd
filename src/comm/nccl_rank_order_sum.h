// Device version of rank_order_sum.h: out[i] = ((g_0[i] + g_1[i]) + ...) in f32,
// rounded once (round to nearest even) for bf16, so the CUDA and CPU backends
// produce the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace tf {

// `gathered`: `ranks` rows of `n` elements (f32, or bf16 when is_bf16).
cudaError_t launch_rank_order_sum(const void* gathered, int ranks, size_t n, void* out, bool is_bf16,
                                  cudaStream_t stream);

}  // namespace tf
