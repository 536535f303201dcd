// moe_experts_fp8 on the GPU (cuda_moe_fp8.cu): the official FP8 release's routed
// experts (Fp8ExpertStack), grouped per expert on the device and dequantized in
// registers.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/api/fp8_expert_stack.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// Tokens per launch sequence (grouping, gate_up, down, combine); longer calls run in
// chunks of this many, so the scratch stays bounded (act and y of 64 x k rows).
inline constexpr int64_t kMoeFp8ChunkTokens = 64;

// From this many tokens (prefill chunks, never captured) CudaOps takes the per-expert
// default instead (Ops::moe_experts_fp8: each active expert's FP8 matmuls, i.e. its
// weights dequantized to BF16 for cuBLAS, x rounded to bf16, the precision transformers
// computes FP8 layers in): the grouped kernels below stream every expert's weights once
// per 8 of its rows, which prefill-8k measured at 518 tok/s (run2s14).
inline constexpr int64_t kMoeFp8PrefillTokens = 256;

// Ops::moe_experts_fp8's contract with the experts on this context's device: the f32
// row-independent kernels (the weights dequantized exactly in registers, as moe_experts
// keeps f32 weights exact), no host sync. Throws StatusError on bad input.
void moe_experts_fp8(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                     const Fp8ExpertStack& experts, float swiglu_limit);

// The grouped kernels' launch plan, exposed for benchmarks that compare plans: every plan
// gives the same bits (a plan only changes which warp computes an output and how many
// loads it keeps in flight). nc: output columns per warp (1, 2 or 4); u: 16-byte chunks
// per lane loaded before their math (1, 2, 4 or 8). On 16-byte rows the pairs (1, 2/4/8),
// (2, 1/2/4), (4, 1/2) run as asked; otherwise u is 4 and nc 2 (asked 2 or more) or 1.
struct MoeFp8Plan {
  int nc = 2;
  int u = 4;
};
MoeFp8Plan moe_fp8_default_plan(int64_t tokens);
void moe_experts_fp8_with_plan(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids,
                               const Tensor& weights, const Fp8ExpertStack& experts, float swiglu_limit,
                               const MoeFp8Plan& plan);

}  // namespace tf::cuda
