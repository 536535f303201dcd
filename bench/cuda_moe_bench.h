// The moe_experts section of cuda_ops_bench (cuda_moe_bench.cc).
#pragma once

#include "kernels/api/ops.h"

namespace tf::bench {

// Times Ops::moe_experts at GLM-5.3-Flash expert shapes (H 4096, I 2048, k 8, bf16
// weights; E 8 and 32; T 1, 4, 16, 64) beside the HBM roofline of the active experts'
// weights and beside the per-expert path it replaced (host grouping, gather, matmul,
// swiglu, matmul, scatter_add), checking that both give the same result.
// Returns false when a result check fails.
bool bench_moe_experts(Ops& ops, double hbm_bytes_per_s, int iters);

}  // namespace tf::bench
