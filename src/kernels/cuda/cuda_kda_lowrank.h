// The KDA low-rank ups in one launch (Ops::kda_lowrank_gates on the GPU at decode
// rows): g = kda_gate(fa · f_b^T), gate = ga · g_b^T and beta = sigmoid(beta_logits),
// in place of two small GEMMs and two elementwise kernels (issue #8: four launches of
// ~2-5 us each per KDA layer inside the graph, for 4 MB of bf16 weights).
#pragma once

#include <atomic>

#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// Runs Ops::kda_lowrank_gates fused when the call fits the kernel (at most
// ctx.exact_rows rows, f_b and g_b of one dtype (f32 or bf16), R a multiple of 4 up to
// 256 with one small_gemm K slice, H*Dk a multiple of 4, 16-byte aligned inputs, the
// legacy switch off) and returns true; returns false without enqueuing anything
// otherwise (the caller then runs the default sequence). Each output has the bits of
// the default sequence on this backend (small_gemm's per-lane FMA order and butterfly,
// kda_gate's and sigmoid's expressions). Throws StatusError on tensors that do not
// match each other.
bool kda_lowrank_gates_fused(CudaContext& ctx, Tensor& g, Tensor& gate, Tensor& beta, const Tensor& fa,
                             const Tensor& ga, const Tensor& beta_logits, const Tensor& f_b, const Tensor& g_b,
                             const Tensor& dt_bias, const Tensor& a_log, bool has_lower_bound, float lower_bound);

// Whether the fused kernel launches with programmatic dependent launch (it then loads
// its weights while the kernel before it finishes, and waits for it before reading the
// activations; the same bits either way). On unless TF_KDA_PDL=0; benchmarks and tests
// flip it.
std::atomic<bool>& kda_lowrank_pdl();

}  // namespace tf::cuda
