// The q4 decode GEMV that streams each block's whole K through a shared-memory ring filled by async
// copies (QuantGemvArgs::ring; the q4 default when quant_ring_default(); kernel in quant_gemv_ring.cu).
// Internal to quant_gemv.cu's dispatch and its tests.
//
// x (up to 8 rows per pass) becomes f16 hi + lo MMA records of x * 2^e per (row, 64-wide chunk) with the
// 2^-e beside them: written by a small kernel into the workspace and copied per stage, or
// (QuantGemvArgs::ring_x) by the GEMV's own block into shared memory after the dependency wait. The GEMV
// kernel (one block per SM, persistent) takes units of U output rows x the WHOLE K. A producer warp copies
// each unit's weights and scales stage by stage (S chunks) into a ring of shared-memory slots (2D tensor
// copies + mbarriers; the first slots' weights are requested before the programmatic-dependent-launch wait,
// so at the model's shapes most of a block's weights are in flight at once); 8 (or 16, ring_warps) consumer
// warps (16 rows each; the weights as the MMA's A operand, or B: QuantGemvArgs::ring_operand,
// quant_gemv_ring_chunk.cuh) do the MMAs. With ksplit K parts per unit (U = 16 * consumer warps / ksplit),
// part j sums the chunks c = j (mod ksplit) in ascending order and the parts are added in part order through
// shared memory: no second kernel, no partial sums in global memory.
//
// Bits: a row's output depends only on its own x row, k, ksplit (a function of n, k and the SM
// count: quant_ring_plan) and the operand layout, never on m, the stage size, the ring depth, the copy
// path, where x's records are built or the other matrices of a quant_gemv_many launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/quant_gemv.h"

namespace tf::cuda {

struct QuantRingPlan {
  int ksplit = 1;           // K parts per unit (1, 2, 4, 8)
  int64_t unit_rows = 128;  // 16 * consumer warps / ksplit
  int64_t units = 0;        // ceil(n / unit_rows)
};
// ksplit_override: 0 the plan's choice, else 1, 2, 4 or 8 (benchmarks and tests); warps: consumer warps
// per block (8, or 16: QuantGemvArgs::ring_warps), unit_rows = 16 * warps / ksplit.
QuantRingPlan quant_ring_plan(int64_t n, int64_t k, int sm_count, int ksplit_override = 0, int warps = 8);

// Bytes of x fragments (the start of the workspace) for m rows (passes of 8) and k.
int64_t quant_ring_workspace_bytes(int64_t m, int64_t k);

// Whether the ring kernel can take this call (q4, 16-byte aligned codes and workspace).
bool quant_ring_supported(const QuantGemvArgs& common, const QuantGemvSegment* segs, int count);

// Whether QuantGemvArgs::ring = -1 (with b_operand unset) picks the ring kernel for q4: TF_QUANT_RING=1 / 0
// overrides the built-in default (read once; quant_gemv.cu).
bool quant_ring_default();

// What QuantGemvArgs::ring_operand = 0 / ring_pad = -1 / ring_x = -1 pick (read once): the weights as the
// MMA's A operand unless TF_QUANT_RING_OPERAND=b, padded tensor boxes unless TF_QUANT_RING_PAD=0, x records
// built by the x kernel unless TF_QUANT_RING_X=1 (then in the ring kernel where one round of its threads
// does it). The first two off is session 9's kernel (same bits).
bool quant_ring_weights_a_default();
bool quant_ring_pad_default();
bool quant_ring_x_in_kernel_default();
// Whether x is read by 16-byte loads where its alignment allows (ring::x_record_item): on unless
// TF_QUANT_RING_X_VEC=0. Same bits.
bool quant_ring_x_vec_default();

// Enqueues the call (common already checked by quant_gemv / quant_gemv_many; segments with n = 0
// skipped); throws StatusError on bad segments or a launch failure.
void quant_gemv_ring(cudaStream_t stream, const QuantGemvArgs& common, const QuantGemvSegment* segs,
                     int count);

}  // namespace tf::cuda
