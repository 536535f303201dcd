// Matmul against quantized matrices (fp8 block-scaled, q4; kernels/api/matrix.h)
// on the GPU, host side.
//
// Decode (rows <= ctx.exact_rows): quant_gemv, tensor-core GEMVs for both formats.
// Weights are exact in f16 and bf16 (q4: integers -8..7; e4m3: 4 significant bits), so
// they are dequantized in registers straight into mma.m16n8k16 A fragments; x (f32) is
// split into two terms hi + lo: the slice kernel (the default) scales each (row, 64-wide
// chunk) by a power of two and splits into f16 (22 significant bits; vs the CPU <= 9.5e-7
// relative on the H200), the streaming kernel into bf16 (16 bits, <= 2^-17 per element).
// The 8 rows of x are the MMA's n. Each 64-wide chunk of K is
// summed by the tensor cores and then multiplied by its scale in f32. Up to 8 rows of x
// share one read of the weights (more rows: one pass per 8).
//
// Four kernels. The slice path (QuantGemvArgs::legacy, what quant_matmul uses by default) runs for
// q4 the ring kernel when selected (quant_gemv_ring.h, QuantGemvArgs::ring: x turned once per call into
// MMA records (in each block's shared memory, or by an x kernel into the workspace), then one persistent
// block per SM streams units of rows x the whole K through a shared-memory ring filled by async copies;
// no second kernel), or, for A/B,
// either the B-operand kernel (quant_gemv_bop.cuh, QuantGemvArgs::b_operand: weights as the
// MMA's B operand straight from global memory, one 8-byte load per lane, row and group; x hi / lo
// as A rows 0-7 / 8-15; issue #8) or the slice kernel (quant_gemv_legacy.cuh), both on the same
// plan: blocks of 128 rows x a slice of K (QuantGemvPlan), x
// staged per block in shared memory for the rows present, slices summed by a second
// kernel in slice order (or the last block, or cluster rank 0); several matrices of one
// format and k in one launch (quant_gemv_many). The streaming kernel (quant_gemv.cu,
// TF_QUANT_GEMV=stream): 32-row blocks whose warps split K, x through a cp.async ring,
// clusters splitting K further; one launch, no workspace.
//
// Row independence (the contract of kernels/cuda/small_gemm.h): an MMA's column n
// depends only on column n of B, and each launch plan (blocks, K split, their fixed-order
// sums) is a function of (n, k, SM count) only, never of m, so a row's bits do not depend
// on the other rows of the call (nor on the other matrices of a quant_gemv_many call).
//
// Prefill, fp8: our FP8 block-scaled tensor-core GEMM (fp8_block_gemm.h) with
// TF_FP8_PREFILL=mma, cuBLASLt's with =lt; by default the dequantize path below.
//
// Prefill (more rows): the matrix is dequantized to BF16 in device scratch (the caching
// allocator's block, reused call to call) and multiplied by cuBLAS (x rounded to bf16,
// fp32 accumulation).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/api/matrix.h"

namespace tf::cuda {

inline constexpr int kQuantGemvRows = 8;        // rows of x per weight pass (the MMA's n)
inline constexpr int64_t kQuantChunk = 64;      // K per scaled partial sum (a q4 group, half an fp8 block)
inline constexpr int64_t kQuantBlockRows = 128; // output rows per thread block (one fp8 scale row)
inline constexpr int64_t kQuantMaxSliceChunks = 24;  // K chunks per block (bounds the x tile in smem: 49 KB at 8 rows)

// The slice kernel's plan. How a call is spread: blocks of 128 output rows times `slices` slices of K of
// `chunks_per_slice` chunks each. With slices > 1 each block writes its partial sums
// to a workspace [slices, m, n] and a second kernel adds them in slice order (or the
// last block of the row block to finish does, QuantGemvArgs::fused_sum, or cluster
// rank 0, QuantGemvArgs::cluster_sum).
struct QuantGemvPlan {
  int64_t chunks = 0;
  int64_t chunks_per_slice = 0;
  int64_t slices = 1;
  int64_t row_blocks = 0;
};
// blocks_per_sm: how many blocks (of 128 rows: 8 warps, or 4, QuantGemvArgs::slice_warps) the plan
// aims at per SM (0: the default, 4); the plan does not depend on the warps per block;
// benchmarks sweep it.
QuantGemvPlan quant_gemv_plan(int64_t n, int64_t k, int sm_count, int blocks_per_sm = 0);

// Workspace the slice path needs for these sizes: the slice kernels' partial sums (when the plan has
// more than one slice) or the ring kernel's x fragments, whichever is larger.
int64_t quant_gemv_workspace_bytes(int64_t m, int64_t n, int64_t k, int sm_count, int blocks_per_sm = 0);

// SM count of the current device (cached per device).
int current_sm_count();

struct QuantGemvArgs {
  float* out = nullptr;  // [m, ldo]
  int64_t ldo = 0;
  const float* x = nullptr;  // [m, ldx]
  int64_t ldx = 0;
  MatrixFormat format = MatrixFormat::kQ4;
  const void* codes = nullptr;   // device, layout of matrix.h
  const void* scales = nullptr;  // device
  int64_t m = 0, n = 0, k = 0;
  bool accumulate = false;
  int sm_count = 0;              // 0: the current device's
  float* workspace = nullptr;    // device, quant_gemv_workspace_bytes(); may be null when that is 0
  int blocks_per_sm = 0;         // quant_gemv_plan's knob (0: the default)
  // K slices summed by the last block of each row block (one launch, a counter per row
  // block) instead of by a second kernel: the same bits (both add the slices in slice
  // order). Off by default: on the H200 it measured 10-25% slower (run3: every block's
  // __threadfence before the counter) than the second kernel.
  bool fused_sum = false;
  // The earlier kernel (quant_gemv_legacy.cuh) instead of the streaming one: benchmarks
  // and tests compare them. sm_count, workspace, blocks_per_sm and fused_sum apply to it
  // only; the streaming kernel needs no workspace.
  bool legacy = false;
  // Benchmarks only (the output is meaningless): 1 streams the weights without x or
  // MMAs, 2 computes without streaming (each warp reuses its first chunks). Streaming
  // kernel only.
  int probe = 0;
  // Programmatic dependent launch (streaming kernel): the weight loads start while the
  // kernel before finishes; x and out are read after it has. -1: on unless
  // TF_QUANT_PDL=0; 0 off; 1 on.
  int pdl = -1;
  // Blocks of a cluster splitting K (streaming kernel; benchmarks sweep it): 0 the
  // plan's choice (a function of n, k and the SM count), else 1..8.
  int splits = 0;
  // Chunks of weights each lane of the slice kernel keeps in flight (benchmarks sweep
  // it; the bits do not depend on it): 0 the default, q4 2/4/8, fp8 2/4.
  int inflight = 0;
  // Slice kernel: K slices summed by cluster rank 0 through distributed shared memory
  // (one launch, no workspace use) when every segment has the same 2..8 slices; the
  // same bits as the second kernel. 0 off (the default until measured), 1 on.
  int cluster_sum = 0;
  // Slice kernel: programmatic dependent launch (its first weight loads and the summing
  // kernel's launch overlap the kernel before; x, out and the workspace are touched
  // after it has finished). -1: on unless TF_QUANT_PDL=0 (run1s7: 1-5% faster at every
  // shape and m, q4 and fp8); 0 off; 1 on.
  int slice_pdl = -1;
  // Slice kernel, 16-byte aligned codes (fp8: K a multiple of 16): weights copied by cp.async into a
  // shared-memory ring per warp (whole 128-byte lines per request, nothing held in
  // registers) instead of the register ring; the same bits. -1 the default (on:
  // quant_gemv_legacy.cuh, kSmemWeightsDefault), 0 off, 1 on.
  int smem_weights = -1;
  // Slice kernel, shared-memory weight ring: warps per 128-row block. 0 the default
  // (quant_gemv_legacy.cuh, kSliceWarpsDefault), 8: one 16-row MMA tile per warp (more,
  // shorter warps per SM), 4: two tiles per warp (the earlier configuration). The same
  // bits either way; the register ring always runs 4 warps.
  int slice_warps = 0;
  // q4 through the slice path (legacy): the kernel with the weights as the MMA's B operand
  // (quant_gemv_bop.cuh: one 8-byte load per lane, row and group straight from global memory, x
  // hi/lo as A rows 0-7 / 8-15; the same plan, workspace and slice sums) instead of the slice
  // kernel. -1 the default (quant_gemv_legacy.cuh, kBOperandDefault), 0 off, 1 on. inflight
  // (2, 4, 8; 0 the default) is its chunks of weights in flight per lane. fp8 ignores it.
  int b_operand = -1;
  // q4 through the slice path (legacy): the ring kernel (quant_gemv_ring.h: units of rows x the whole
  // K streamed through a shared-memory ring by async copies, x written once per call as MMA fragments
  // into the workspace; one block per SM, no second kernel). -1 the default: quant_ring_default()
  // (TF_QUANT_RING=1/0; built in: on) for q4 unless b_operand is
  // set (0 or 1: that kernel, for A/B) or the call does not fit it (codes or workspace not 16-byte
  // aligned, no workspace: the B-operand kernel then); 0 off; 1 on (throws if it cannot).
  int ring = -1;
  int ring_ksplit = 0;  // ring kernel: K parts per unit, 0 the plan's (quant_ring_plan), else 1/2/4/8 (other bits)
  int ring_stage = 0;   // ring kernel: chunks per part per stage, 2, 4 or 8 (0: 8 for 1-2 K parts, else 4); same bits
  int ring_depth = 0;   // ring kernel: at most this many ring slots (0: as many as fit); the same bits
  int ring_warps = 0;   // ring kernel: consumer warps per block, 8 (0) or 16; the same bits for the same K split
  int ring_bulk = 0;    // ring kernel, weights copy: 0 / 2 one 2D tensor copy (TMA) per stage, 1 a cp.async.bulk per row
                        // and stage (run3s9), 3 16-byte cp.async (run4s9); the same bits
  // Ring kernel, MMA operands (quant_gemv_ring_chunk.cuh): 0 the default (quant_ring_weights_a_default(): A
  // unless TF_QUANT_RING_OPERAND=b), 1 the weights as the B operand and x hi / lo as A (session 9: 8 MMAs per
  // 16 rows and chunk), 2 the weights as A and x hi / lo as B columns (4 MMAs for up to 4 rows, 8 for 5..8);
  // 2 has other bits than 1, independent of m as well.
  int ring_operand = 0;
  // Ring kernel, 2D tensor copies: each row's box one chunk longer (the next stage's first chunk, or zeros
  // past K), so a slot's rows sit 32 bytes apart in the banks and the weights' 8-byte shared loads are not
  // 8-way conflicted. -1 the default (quant_ring_pad_default(): on unless TF_QUANT_RING_PAD=0), 0 off, 1 on;
  // the same bits.
  int ring_pad = -1;
  // Ring kernel, x: 0 the x kernel writes the MMA records to the workspace once and the x producer copies
  // them per stage (session 9); 1 each block writes the records of all of x's K into shared memory itself
  // (consumers and the x warp, after the dependency wait; no x kernel, no x copies) when one round of those
  // threads does it (m = 1 up to K = 4608, m = 2 up to 2304, ...), else as 0; 2 whenever they fit (76 KB). -1
  // the default (quant_ring_x_in_kernel_default(): 0 unless TF_QUANT_RING_X=1). The same bits.
  int ring_x = -1;
};

// TF_QUANT_GEMV=stream: quant_matmul (and the groups of matmul_many, which must run the
// kernel each of their matrices would alone) use the streaming kernel instead of the slice
// kernel. Read once.
bool stream_gemv_selected();

// Enqueues out = x · W^T (or +=) on `stream`; throws StatusError on bad arguments.
void quant_gemv(cudaStream_t stream, const QuantGemvArgs& a);

// Several matrices of one format and one k against one x (e.g. the q/k/v or gate/up
// projections of a layer): out_s (+)= x . W_s^T for each segment. `common` gives the
// format, k, x/ldx, m, accumulate, sm_count, workspace and the kernel knobs; its out,
// ldo, codes, scales and n are ignored. The bits of each segment equal a quant_gemv
// call on it alone (each segment keeps the plan it would get alone).
struct QuantGemvSegment {
  float* out = nullptr;
  int64_t ldo = 0;
  const void* codes = nullptr;
  const void* scales = nullptr;
  int64_t n = 0;
};
inline constexpr int kQuantGemvMaxSegments = 8;
// Workspace quant_gemv_many needs (device bytes; 0 when none).
int64_t quant_gemv_many_workspace_bytes(int64_t m, const QuantGemvSegment* segs, int count, int64_t k, int sm_count);
// Throws StatusError on bad arguments (count outside 0..kQuantGemvMaxSegments, a bad segment).
void quant_gemv_many(cudaStream_t stream, const QuantGemvArgs& common, const QuantGemvSegment* segs, int count);

// Dequantizes rows [r0, r1) of the matrix into `dst` (device bf16 [r1 - r0, k]) on
// `stream`. For fp8, r0 must start a 128-row scale block (throws otherwise).
void quant_dequantize_bf16_rows(cudaStream_t stream, const Matrix& w, int64_t r0, int64_t r1, void* dst);
// Rows quant_matmul's BF16 (prefill) path dequantizes at a time: its scratch stays near
// `budget_bytes` however large the matrix (a whole 154,880 x 4096 lm_head is 1.27 GB
// of BF16); a multiple of 128 rows (fp8 blocks), all of them when they fit.
int64_t quant_dequant_chunk_rows(int64_t n, int64_t k, int64_t budget_bytes);
inline constexpr int64_t kQuantDequantBudget = int64_t{64} << 20;

}  // namespace tf::cuda
