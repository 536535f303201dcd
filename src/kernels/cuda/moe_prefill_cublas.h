// Prefill-sized moe_experts through cuBLAS grouped GEMM (moe_prefill_cublas.cu): one
// download of the device grouping's slot table, then one grouped GEMM per projection.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/moe_grouping.cuh"

namespace tf::cuda {

// Calls with at least this many tokens (and bf16 weights above exact_rows) take this path.
constexpr int64_t kMoeCublasMinTokens = 256;

// y [P, h] f32 for every grouped row of g (grouped already on ctx.stream), from xb [T, h]
// (x in bf16) and the stacked bf16 experts. Synchronises with the host. Returns false,
// having written nothing the caller relies on, while the stream is being captured or when
// cuBLAS refuses the grouped GEMM (the caller then runs the tensor-core tiles).
bool moe_prefill_cublas(CudaContext& ctx, float* y, const __nv_bfloat16* xb, const Tensor& gate_up,
                        const Tensor& down, int64_t h, int64_t idim, int64_t experts, int64_t pairs,
                        const MoeGroups& g, float limit);

}  // namespace tf::cuda
