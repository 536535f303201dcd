// moe_experts' launch plan for the row-independent f32 path (cuda_moe.cu), exposed for
// benchmarks that compare plans: every plan gives the same bits (a plan only changes
// which warp computes an output and how many loads it keeps in flight), so the choice
// is purely a speed one. cuda::moe_experts (cuda_kernels.h) uses the default plan.
#pragma once

#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

struct MoeGemvPlan {
  int nc = 0;          // output columns per warp: 1, 2 or 4 (0: 1 up to 8 tokens, else 2)
  int u = 0;           // chunks per lane loaded before their math: 0 (by rows per warp), 2 (nc 4) or 8 (nc 1)
  bool no_l1 = false;  // weight loads bypass L1 (ld.global.nc.L1::no_allocate)
  // Tensor-core path (above exact_rows): 0 = cuBLAS grouped GEMM from kMoeCublasMinTokens
  // tokens, else the tiles; 1 = always the tiles; 2 = cuBLAS whenever not capturing.
  int prefill = 0;
};

// The plan moe_experts uses for a call of `tokens` tokens.
MoeGemvPlan moe_default_plan(int64_t tokens);

// What the last prefill-sized tensor-core call on this thread ran: "cublas-grouped",
// "cublas-per-expert", "tiles (capturing)", ... (moe_prefill_cublas.cu), for benchmarks.
const char* moe_prefill_last_path();

// moe_experts with an explicit plan for the f32 path (ignored on the tensor-core path).
void moe_experts_with_plan(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const Tensor& gate_up, const Tensor& down, float swiglu_limit, const MoeGemvPlan& plan);

// The grouped MoE paths' last launch: out[t] = 0 + sum over j of weights[t, j] *
// y[pair_row[t, j]] (rows of H floats), in j order, each product and sum rounded
// separately (as on the CPU); pair_row < 0 drops the term.
void launch_moe_combine(cudaStream_t stream, float* out, const float* y, const float* weights, const int* pair_row,
                        int64_t tokens, int k, int64_t h);

}  // namespace tf::cuda
