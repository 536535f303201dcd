// Prefill-sized EXL3 MoE calls through decoded W_hat and cuBLAS (exl3_moe_prefill.cu).
#pragma once

#include "core/tensor.h"
#include "kernels/api/exl3_weight.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

namespace exl3 {
struct ExpertPtrs;  // exl3_moe_flat.cuh
}

// moe_experts_exl3's contract for a prefill call (x, ids, weights, out already checked;
// `table` = the uploaded experts' device pointers). Synchronises with the host. Returns
// false, having written nothing the caller relies on, while the stream is being captured
// or when cuBLAS refuses the GEMM (the caller then runs the grouped kernels).
bool exl3_moe_prefill(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids,
                      const Tensor& weights, const Exl3ExpertTable& ex, const exl3::ExpertPtrs* table,
                      float swiglu_limit);

// The path the last call on this thread took ("cublas-grouped", "cublas-per-expert",
// "capturing", "cublas refused"), for tests.
const char* exl3_moe_prefill_last_path();

}  // namespace tf::cuda
