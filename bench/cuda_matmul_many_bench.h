// The matmul_many section of cuda_ops_bench (cuda_matmul_many_bench.cc).
#pragma once

#include "kernels/api/ops.h"

namespace tf::bench {

// Times one GLM-5.3-Flash layer's projections of a shared input at m = 1 and 8 rows,
// graph-replayed, as separate matmul calls and as one Ops::matmul_many call: the KDA
// set (q/k/v q4 8192x4096, f_a/g_a 128x4096 and b_proj 64x4096 bf16), the MLA set
// (q_a 1536x4096 and kv_a 512x4096 q4) and the indexer set (wk, compress_gate 128x4096,
// weights_proj 32x4096 bf16). Weights rotate over copies larger than L2, as in decode.
// Prints "[matmul-many]" lines; returns false when the two disagree in any bit.
bool bench_matmul_many(Ops& ops, double hbm_bytes_per_s);

}  // namespace tf::bench
