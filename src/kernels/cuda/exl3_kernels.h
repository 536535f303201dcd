// Host entry points of the CUDA EXL3 kernels (exl3_gemv.cu, exl3_moe.cu), called by
// CudaOps. Weights must already be on the context's GPU (upload_exl3_experts, or the
// caller's own copies); activations are packed f32 device tensors.
#pragma once

#include "core/tensor.h"
#include "kernels/api/exl3_weight.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// W_hat f16 [k, n] on the device (the decode alone; for tests and prefill).
Tensor exl3_decode_w_hat(CudaContext& ctx, const Exl3Weight& w);

// out [T, n_out] = x [T, k_in] · W (Ops::exl3_matmul's contract). T <= 8 rows per
// GEMV pass; larger T run in passes of 64 rows (same per-row arithmetic).
void exl3_matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Exl3Weight& w);

// The routed EXL3 experts of a MoE layer (Ops::moe_experts_exl3's contract), grouped
// on the device without a host sync; false (nothing done) for more than 64 tokens,
// which the caller runs per expert instead.
bool exl3_moe_experts(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                      const Exl3ExpertTable& experts, float swiglu_limit);

// Copies every expert tensor of `experts` to the GPU and builds the device pointer
// table the grouped kernels index (kept in experts.backend_state).
Status exl3_upload_experts(CudaContext& ctx, Exl3ExpertTable& experts);

}  // namespace tf::cuda
