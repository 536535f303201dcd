// Small-batch GEMM (decode GEMV) for matmul / head_matmul up to kSmallGemmMaxRows
// rows: out[h][r, c] (+)= sum_i x[h][r, i] * w[h][c, i], x f32, w f32 or bf16,
// accumulation f32. Host side of small_gemm.cu.
//
// The contract that shapes the kernel: the bits of a row's result depend only on
// that row, the weights and the shapes, never on the other rows of the call nor
// their number (decode with 1 or 40 sequences gives each the same logits). Each
// output is a fixed sequence of FMAs per lane plus a fixed warp butterfly; the
// launch plan (rows and columns per warp, loads in flight) only changes which
// warp runs that sequence, so any plan gives the same bits (tested). K may be cut
// into slices summed in a fixed order (small_gemm_k_splits: a function of the
// shape only, never of m), which gives narrow-N, long-K decode projections
// enough warps.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tf::cuda {

constexpr int64_t kSmallGemmMaxRows = 64;

// Operands per head h: x + h*x_hs (rows ldx apart), w + h*w_hs ([n, k] packed),
// out + h*o_hs (rows ldo apart). Element strides, not bytes.
struct SmallGemmArgs {
  float* out = nullptr;
  int64_t ldo = 0, o_hs = 0;
  const float* x = nullptr;
  int64_t ldx = 0, x_hs = 0;
  const void* w = nullptr;
  DType w_dtype = DType::kF32;  // kF32 or kBF16
  int64_t w_hs = 0;
  int64_t m = 0, n = 0, k = 0, heads = 1;
  bool accumulate = false;
};

// How a call is spread over the GPU: each warp computes rows_per_warp rows (a
// bucket of m) times cols_per_warp adjacent columns; above 8 rows several warps
// of a block share the same columns (their weight loads meet in L1).
struct SmallGemmPlan {
  int rows_per_warp = 1;  // 1, 2, 4 or 8
  int cols_per_warp = 1;  // 1, 2, 4 or 8
};

// The plan small_gemm() uses for these sizes on a GPU with `sm_count` SMs;
// cols_per_warp > 0 forces that column count (tests and benchmarks sweep it).
SmallGemmPlan small_gemm_plan(int64_t m, int64_t n, int64_t heads, int sm_count, int cols_per_warp = 0);

// Slices of K (1, 2, 4 or 8) for these sizes: enough that n * heads * slices
// warps cover the GPU while every slice keeps >= 256 elements of K. Depends on the
// shape only, so a row's bits never depend on the batch.
int small_gemm_k_splits(int64_t n, int64_t k, int64_t heads);

// Enqueues the product on `stream`. m may exceed kSmallGemmMaxRows (the rows run
// in slices of 64). k_splits > 0 forces that many K slices (1, 2, 4 or 8; other
// bits than the default: benchmarks compare). Throws StatusError on a bad dtype or
// plan, or a failed launch.
void small_gemm(cudaStream_t stream, const SmallGemmArgs& args, int cols_per_warp = 0, int k_splits = 0);

// Several matrices against one x [m, k] (heads 1) in one launch, e.g. a layer's
// projections of the same input: out_i (+)= x · w_i^T. Each matrix keeps the K
// slices and warp layout small_gemm would give it alone (so its bits equal a
// small_gemm call on it: the contract above); the column count per warp, which
// does not change bits, is the smallest of theirs. Calls that do not fit one launch
// (more than kSmallGemmMaxMatrices, mixed dtypes, operands not aligned for vector
// loads) run as small_gemm calls one after the other, with the same bits.
struct SmallGemmMatrix {
  float* out = nullptr;
  int64_t ldo = 0;
  const void* w = nullptr;  // [n, k] packed
  DType w_dtype = DType::kF32;
  int64_t n = 0;
};
constexpr int kSmallGemmMaxMatrices = 8;
void small_gemm_many(cudaStream_t stream, const float* x, int64_t ldx, int64_t m, int64_t k,
                     const SmallGemmMatrix* mats, int count, bool accumulate);

}  // namespace tf::cuda
