// Free functions behind the CUDA backend (cuda_ops.cc dispatches to them), one
// family per .cu file, mirroring kernels/cpu/cpu_kernels.h. Activations are packed
// f32 device tensors; weights may be f32 or bf16 (matmul, head_matmul, embedding).
// Bad arguments throw StatusError naming the op and tensor, as the CPU backend does.
//
// Row independence: every kernel computes a row with a fixed reduction order that
// does not depend on how many rows the call has. The exception is matmul /
// head_matmul above kCublasMinRows rows (prefill), which go to cuBLAS.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/api/ops.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// The most rows CudaContext::exact_rows may be (the row-independent kernels' limit);
// above ctx.exact_rows rows matmul/head_matmul use cuBLAS (bf16 weights: x rounded to bf16).
constexpr int64_t kCublasMinRows = 64;

// Argument checks (throw StatusError): packed tensor of `dtype` on the context's
// device with `numel` elements (-1: any).
void check_dev(const CudaContext& ctx, const char* op, const Tensor& t, DType dtype, int64_t numel = -1);
void check_weight(const CudaContext& ctx, const char* op, const Tensor& t);  // packed f32 or bf16 on device
// Throws StatusError (internal) when the last launch failed.
void check_launch(const char* op);

void matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& w, bool accumulate);
void head_matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& w);
// out = x · W^T for a quantized Matrix on this GPU (quant_gemv.cu).
void quant_matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Matrix& w, bool accumulate);
void embedding(CudaContext& ctx, Tensor& out, const Tensor& table, const Tensor& ids);
void gather_rows(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& idx);
void scatter_add_rows(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& idx, const Tensor& scale);

void rms_norm(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& weight, float eps);
void layer_norm(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);
void gated_rms_norm(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                    float eps);

void swiglu(CudaContext& ctx, Tensor& out, const Tensor& gate_up, float limit);
void add(CudaContext& ctx, Tensor& out, const Tensor& a, const Tensor& b);
void scale(CudaContext& ctx, Tensor& out, const Tensor& x, float s);
void sigmoid(CudaContext& ctx, Tensor& out, const Tensor& x);
void softmax(CudaContext& ctx, Tensor& out, const Tensor& x);
void topk(CudaContext& ctx, Tensor& values, Tensor& indices, const Tensor& x, int k, TopkTies ties);
// PyTorch-CPU tie-breaking top-k on host rows (what topk(kTorchCpu) runs after a download).
void topk_torch_cpu_host(float* values, int32_t* indices, const float* x, int64_t rows, int64_t n, int k);

void mhc_coefficients(CudaContext& ctx, Tensor& pre, Tensor& post, Tensor& comb, const Tensor& mix,
                      const Tensor& base, const Tensor& scale, float hc_eps, int sinkhorn_iters);
void mhc_collapse(CudaContext& ctx, Tensor& out, const Tensor& streams, const Tensor& pre);
void mhc_expand(CudaContext& ctx, Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb,
                const Tensor& residual);

void causal_conv1d_silu(CudaContext& ctx, Tensor& out, const Tensor& x, Tensor& state, const Tensor& weight);
void kda_gate(CudaContext& ctx, Tensor& g, const Tensor& f, const Tensor& dt_bias, const Tensor& a_log,
              bool has_lower_bound, float lower_bound);
void causal_conv1d_silu_rows(CudaContext& ctx, Tensor& out, const Tensor& x, std::span<Tensor* const> states,
                             const Tensor& weight);
void kda_recurrent_rows(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& g, const Tensor& beta, std::span<Tensor* const> states);
void kda_recurrent(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& g, const Tensor& beta, Tensor& state);
void kda_conv_qkv_rows(CudaContext& ctx, Tensor& out_q, Tensor& out_k, Tensor& out_v, const Tensor& x_q,
                       const Tensor& x_k, const Tensor& x_v, const KdaRowsView& rows, const Tensor& weight);
void kda_recurrent_state_rows(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& g, const Tensor& beta, const KdaRowsView& rows);

void mla_sparse_attention(CudaContext& ctx, Tensor& out, const Tensor& q, const LatentPagesView& cache,
                          const Tensor& indices, float scale);
void latent_store(CudaContext& ctx, const LatentPagesView& cache, void* pages, float* scales, const Tensor& latent,
                  int64_t first);
void indexer_pool_keys(CudaContext& ctx, Tensor& out, const Tensor& keys, const Tensor& gate, const Tensor& ape);
void indexer_token_indices(CudaContext& ctx, Tensor& indices, const Tensor& pools, int64_t first_position,
                           int pool_size, bool tail);
void indexer_scores(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                    const Tensor& candidates, float scale);
// Decode rows (ops.h DecodeRowsView; cuda_attention.cu, cuda_indexer.cu, cuda_indexer_topk.cu).
void latent_store_rows(CudaContext& ctx, const DecodeRowsView& rows, const Tensor& latent);
void indexer_update_rows(CudaContext& ctx, const DecodeRowsView& rows, const Tensor& key, const Tensor& gate,
                         const Tensor& ape);
void indexer_scores_rows(CudaContext& ctx, Tensor& out, const DecodeRowsView& rows, const Tensor& q,
                         const Tensor& weights, float scale, int64_t select);
void indexer_topk_rows(CudaContext& ctx, Tensor& selected, const Tensor& scores, const DecodeRowsView& rows,
                       TopkTies ties);
void indexer_token_indices_rows(CudaContext& ctx, Tensor& indices, const Tensor& selected, const DecodeRowsView& rows,
                                bool tail);
void mla_sparse_attention_rows(CudaContext& ctx, Tensor& out, const Tensor& q, const DecodeRowsView& rows,
                               const Tensor& indices, float scale);

void moe_route(CudaContext& ctx, Tensor& weights, Tensor& ids, const Tensor& logits, const Tensor& bias,
               int n_group, int topk_group, int k, bool norm, float scaling);
// Routed experts grouped on the device (cuda_moe.cu): no host sync up to 64 tokens.
void moe_experts(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const Tensor& gate_up, const Tensor& down, float swiglu_limit);

}  // namespace tf::cuda
