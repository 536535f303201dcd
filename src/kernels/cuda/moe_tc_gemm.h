// Grouped expert products on BF16 tensor cores for moe_experts above ctx.exact_rows
// tokens (host side of moe_tc_gemm.cu). The tokens are grouped per expert on the device
// (moe_grouping.cuh, with row tiles of moe_tc_tile_rows(tokens)); one launch per
// projection covers every active expert, so a call needs no host sync (capturable).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_grouping.cuh"

namespace tf::cuda {

// Rows per tile for a call of `tokens` tokens (16 up to 16 tokens, 32 up to 64, else 64).
int moe_tc_tile_rows(int64_t tokens);
// Whether the tensor-core path takes experts of hidden h and intermediate idim (rows
// of 16-byte chunks: both multiples of 8).
inline bool moe_tc_shapes_ok(int64_t h, int64_t idim) { return h % 8 == 0 && idim % 8 == 0; }

// act [P, idim] bf16 = swiglu(bf16(x[row_token[r]]) · gate_up[e]^T, limit) for every grouped
// row r (gate rows first in gate_up [E, 2*idim, h]; x [T, h] f32, rounded to bf16 as loaded;
// x 16-byte aligned).
void moe_tc_gate_up(cudaStream_t stream, __nv_bfloat16* act, const float* x, const __nv_bfloat16* gate_up,
                    int64_t idim, int64_t h, const MoeGroups& g, int64_t max_tiles, int tile_rows, float limit);
// y [P, h] f32 = act[r] · down[e]^T for every grouped row r (down [E, h, idim]).
void moe_tc_down(cudaStream_t stream, float* y, const __nv_bfloat16* act, const __nv_bfloat16* down, int64_t h,
                 int64_t idim, const MoeGroups& g, int64_t max_tiles, int tile_rows);
// xb = bf16(x) (round to nearest even), n elements.
void moe_to_bf16(cudaStream_t stream, __nv_bfloat16* xb, const float* x, int64_t n);

}  // namespace tf::cuda
