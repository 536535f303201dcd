#include "kernels/cuda/cublas_grouped_gemm.h"

#include <cstdint>

namespace tf::cuda {

cublasStatus_t run_gemm_problems(CudaContext& ctx, cublasOperation_t op_a, cublasOperation_t op_b,
                                 cudaDataType in_type, cudaDataType out_type,
                                 const std::vector<GemmProblem>& problems, bool* grouped) {
  const int count = static_cast<int>(problems.size());
  if (grouped) *grouped = true;
  if (count == 0) return CUBLAS_STATUS_SUCCESS;
  // Host arrays of one group per problem; device arrays of the A, B and C pointers.
  std::vector<const void*> ptrs(static_cast<size_t>(3 * count));
  std::vector<int> m(count), n(count), k(count), lda(count), ldb(count), ldc(count), group_size(count, 1);
  std::vector<cublasOperation_t> ta(count, op_a), tb(count, op_b);
  std::vector<float> alpha(count, 1.0f), beta(count, 0.0f);
  for (int i = 0; i < count; ++i) {
    const GemmProblem& p = problems[i];
    ptrs[i] = p.a;
    ptrs[count + i] = p.b;
    ptrs[2 * count + i] = p.c;
    m[i] = p.m, n[i] = p.n, k[i] = p.k, lda[i] = p.lda, ldb[i] = p.ldb, ldc[i] = p.ldc;
  }
  const Tensor dev = ctx.upload(ptrs.data(), static_cast<int64_t>(ptrs.size() * sizeof(void*)));
  auto* const* d = static_cast<void* const*>(dev.raw());
  cublasStatus_t st = cublasGemmGroupedBatchedEx(ctx.cublas, ta.data(), tb.data(), m.data(), n.data(),
                                                 k.data(), alpha.data(), d, in_type, lda.data(), d + count,
                                                 in_type, ldb.data(), beta.data(), d + 2 * count, out_type,
                                                 ldc.data(), count, group_size.data(), CUBLAS_COMPUTE_32F);
  if (st == CUBLAS_STATUS_SUCCESS) return st;
  if (grouped) *grouped = false;
  for (const GemmProblem& p : problems) {
    st = cublasGemmEx(ctx.cublas, op_a, op_b, p.m, p.n, p.k, &alpha[0], p.a, in_type, p.lda, p.b, in_type,
                      p.ldb, &beta[0], p.c, out_type, p.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  return st;
}

}  // namespace tf::cuda
