// Prefill-sized moe_experts (many rows per expert) through cuBLAS grouped GEMM: after
// the device grouping (moe_grouping.cuh), one download of the slot table (the GEMM
// sizes must be known on the host), then per projection ONE cublasGemmGroupedBatchedEx
// over every active expert (no per-expert host loop; where the installed cuBLAS refuses
// grouped GEMM for bf16 in / f32 out, one cublasGemmEx per expert), on rows gathered
// per expert:
//   xg [P, H] bf16 = x rows by row_token;  gu [P, 2I] f32 = xg · gate_up[e]^T;
//   act [P, I] bf16 = swiglu(gu);           y [P, H] f32 = act · down[e]^T.
// It synchronises with the host, so it is only used outside graph capture (prefill); a
// caller gets false back (and runs the tensor-core tiles) when cuBLAS refuses the call.
#include "kernels/cuda/moe_prefill_cublas.h"

#include <cublas_v2.h>

#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_moe.h"
#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

// xg[r] = xb[row_token[r]] for r < *num_rows (16-byte vectors; h % 8 == 0).
__global__ void gather_kernel(__nv_bfloat16* __restrict__ xg, const __nv_bfloat16* __restrict__ xb,
                              const int* __restrict__ row_token, const int* __restrict__ num_rows, int64_t h) {
  const int64_t vecs = h / 8, total = static_cast<int64_t>(*num_rows) * vecs;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / vecs, v = i % vecs;
    reinterpret_cast<uint4*>(xg + r * h)[v] =
        reinterpret_cast<const uint4*>(xb + static_cast<int64_t>(row_token[r]) * h)[v];
  }
}

// act[r, c] = bf16(swiglu(gu[r, c], gu[r, I + c])) for r < *num_rows.
__global__ void swiglu_kernel(__nv_bfloat16* __restrict__ act, const float* __restrict__ gu,
                              const int* __restrict__ num_rows, int64_t idim, float limit) {
  const int64_t total = static_cast<int64_t>(*num_rows) * idim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / idim, c = i % idim;
    const float g = fminf(gu[r * 2 * idim + c], limit);
    const float u = fminf(fmaxf(gu[r * 2 * idim + idim + c], -limit), limit);
    act[i] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
  }
}

bool ok(cudaError_t e) { return e == cudaSuccess; }

thread_local const char* g_last_path = "none";

}  // namespace

const char* moe_prefill_last_path() { return g_last_path; }

bool moe_prefill_cublas(CudaContext& ctx, float* y, const __nv_bfloat16* xb, const Tensor& gate_up,
                        const Tensor& down, int64_t h, int64_t idim, int64_t experts, int64_t pairs,
                        const MoeGroups& g, float limit) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (ctx.capturing || !ok(cudaStreamIsCapturing(ctx.stream, &cap)) || cap != cudaStreamCaptureStatusNone) {
    g_last_path = "tiles (capturing)";
    return false;
  }
  const int64_t slots = moe_max_slots(experts, pairs);
  // The slot table: num_active, then slot_expert, slot_first, slot_count (contiguous in MoeGroups).
  std::vector<int> table(static_cast<size_t>(3 * slots));
  int active = 0;
  for (cudaError_t e : {cudaMemcpyAsync(&active, g.num_active, sizeof(int), cudaMemcpyDeviceToHost, ctx.stream),
                        cudaMemcpyAsync(table.data(), g.slot_expert, table.size() * sizeof(int),
                                        cudaMemcpyDeviceToHost, ctx.stream),
                        cudaStreamSynchronize(ctx.stream)}) {
    const Status s = cuda_status(e, "moe_experts: slot table download");
    if (!s.is_ok()) throw StatusError(s);
  }
  g_last_path = "cublas (nothing routed)";
  if (active == 0) return true;  // nothing routed (combine writes zeros)
  const int* s_expert = table.data();
  const int* s_first = s_expert + slots;
  const int* s_count = s_first + slots;

  // Scratch: xg [P, H] bf16, gu [P, 2I] f32, act [P, I] bf16, then the pointer arrays (6 per group).
  auto up = [](int64_t n) { return (n + 255) / 256 * 256; };
  const int64_t xg_b = up(pairs * h * 2), gu_b = up(pairs * 2 * idim * 4), act_b = up(pairs * idim * 2);
  Tensor scratch = ctx.scratch(xg_b + gu_b + act_b + 6 * active * 8);
  char* base = static_cast<char*>(scratch.raw());
  auto* xg = reinterpret_cast<__nv_bfloat16*>(base);
  auto* gu = reinterpret_cast<float*>(base + xg_b);
  auto* act = reinterpret_cast<__nv_bfloat16*>(base + xg_b + gu_b);
  void** ptrs = reinterpret_cast<void**>(base + xg_b + gu_b + act_b);

  gather_kernel<<<grid_1d(pairs * h / 8), 256, 0, ctx.stream>>>(xg, xb, g.row_token, g.num_rows, h);
  check_launch("moe_experts (gather rows)");

  const auto* wg = static_cast<const char*>(gate_up.raw());
  const auto* wd = static_cast<const char*>(down.raw());
  std::vector<void*> host_ptrs(static_cast<size_t>(6 * active));
  std::vector<int> m1(active), n1(active), k1(active), lda1(active), ldb1(active), ldc1(active), m2(active),
      k2(active), lda2(active), ldb2(active), ldc2(active), group_size(active, 1);
  std::vector<cublasOperation_t> ta(active, CUBLAS_OP_T), tb(active, CUBLAS_OP_N);
  std::vector<float> alpha(active, 1.0f), beta(active, 0.0f);
  for (int s = 0; s < active; ++s) {
    const int64_t e = s_expert[s], r0 = s_first[s];
    host_ptrs[0 * active + s] = const_cast<char*>(wg + e * 2 * idim * h * 2);
    host_ptrs[1 * active + s] = xg + r0 * h;
    host_ptrs[2 * active + s] = gu + r0 * 2 * idim;
    host_ptrs[3 * active + s] = const_cast<char*>(wd + e * h * idim * 2);
    host_ptrs[4 * active + s] = act + r0 * idim;
    host_ptrs[5 * active + s] = y + r0 * h;
    // Column-major: gu_g^T [2I, n] = op_T(W_e^T [H, 2I]) · xg_g^T [H, n]; y likewise with down.
    m1[s] = static_cast<int>(2 * idim);
    n1[s] = s_count[s];
    k1[s] = static_cast<int>(h);
    lda1[s] = static_cast<int>(h);
    ldb1[s] = static_cast<int>(h);
    ldc1[s] = static_cast<int>(2 * idim);
    m2[s] = static_cast<int>(h);
    k2[s] = static_cast<int>(idim);
    lda2[s] = static_cast<int>(idim);
    ldb2[s] = static_cast<int>(idim);
    ldc2[s] = static_cast<int>(h);
  }
  const Status up_s = cuda_status(
      cudaMemcpyAsync(ptrs, host_ptrs.data(), host_ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice, ctx.stream),
      "moe_experts: pointer upload");
  if (!up_s.is_ok()) throw StatusError(up_s);
  void* const* p = ptrs;
  // One grouped GEMM per projection; where this cuBLAS refuses grouped GEMM for these
  // types, one cublasGemmEx per active expert instead (the same products).
  auto per_expert = [&](int first_ptr, const int* m, const int* kk, const int* lda, const int* ldb, const int* ldc) {
    for (int s = 0; s < active; ++s) {
      const cublasStatus_t e = cublasGemmEx(
          ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, m[s], n1[s], kk[s], &alpha[s], host_ptrs[(first_ptr + 0) * active + s],
          CUDA_R_16BF, lda[s], host_ptrs[(first_ptr + 1) * active + s], CUDA_R_16BF, ldb[s], &beta[s],
          host_ptrs[(first_ptr + 2) * active + s], CUDA_R_32F, ldc[s], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (e != CUBLAS_STATUS_SUCCESS) return e;
    }
    return CUBLAS_STATUS_SUCCESS;
  };
  bool grouped = true;
  cublasStatus_t st = cublasGemmGroupedBatchedEx(
      ctx.cublas, ta.data(), tb.data(), m1.data(), n1.data(), k1.data(), alpha.data(), p + 0 * active, CUDA_R_16BF,
      lda1.data(), p + 1 * active, CUDA_R_16BF, ldb1.data(), beta.data(), p + 2 * active, CUDA_R_32F, ldc1.data(),
      active, group_size.data(), CUBLAS_COMPUTE_32F);
  if (st != CUBLAS_STATUS_SUCCESS) {
    grouped = false;
    st = per_expert(0, m1.data(), k1.data(), lda1.data(), ldb1.data(), ldc1.data());
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    swiglu_kernel<<<grid_1d(pairs * idim), 256, 0, ctx.stream>>>(act, gu, g.num_rows, idim, limit);
    check_launch("moe_experts (swiglu)");
    st = grouped ? cublasGemmGroupedBatchedEx(ctx.cublas, ta.data(), tb.data(), m2.data(), n1.data(), k2.data(),
                                              alpha.data(), p + 3 * active, CUDA_R_16BF, lda2.data(), p + 4 * active,
                                              CUDA_R_16BF, ldb2.data(), beta.data(), p + 5 * active, CUDA_R_32F,
                                              ldc2.data(), active, group_size.data(), CUBLAS_COMPUTE_32F)
                 : CUBLAS_STATUS_NOT_SUPPORTED;
    if (st != CUBLAS_STATUS_SUCCESS) {
      grouped = false;
      st = per_expert(3, m2.data(), k2.data(), lda2.data(), ldb2.data(), ldc2.data());
    }
  }
  g_last_path = st != CUBLAS_STATUS_SUCCESS ? "tiles (cuBLAS failed)" : grouped ? "cublas-grouped" : "cublas-per-expert";
  // The host arrays must outlive the enqueued copy: wait before they go.
  const Status sync = cuda_status(cudaStreamSynchronize(ctx.stream), "moe_experts: grouped GEMM");
  if (!sync.is_ok()) throw StatusError(sync);
  return st == CUBLAS_STATUS_SUCCESS;
}

}  // namespace tf::cuda
