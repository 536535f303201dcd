// A list of independent GEMMs (the active experts of a prefill MoE call) run as one
// cublasGemmGroupedBatchedEx, or as one cublasGemmEx each where the installed cuBLAS
// refuses the grouped call for these types (cublas_grouped_gemm.cc).
#pragma once

#include <cublas_v2.h>

#include <vector>

#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// One problem in cuBLAS's column-major terms: C [m, n] = op(A) [m, k] · op(B) [k, n]
// (alpha 1, beta 0; f32 compute).
struct GemmProblem {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
};

// Enqueues the problems on ctx.stream (A and B of `in_type`, C of `out_type`, the same
// ops for all). The device pointer arrays go through ctx.upload, so nothing waits and
// `problems` may go when this returns. `grouped` (if given) tells which call ran.
cublasStatus_t run_gemm_problems(CudaContext& ctx, cublasOperation_t op_a, cublasOperation_t op_b,
                                 cudaDataType in_type, cudaDataType out_type,
                                 const std::vector<GemmProblem>& problems, bool* grouped = nullptr);

}  // namespace tf::cuda
