// Free functions behind the CPU backend (cpu_ops.cc dispatches to them), one family
// per file. All work on packed f32 host tensors and split rows across
// ThreadPool::global(); each row is computed by one thread with a fixed loop
// order, so a row's result never depends on the other rows of the call.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/api/ops.h"

namespace tf::cpu {

// Splits [0, n) over the global pool; `cost` is the work per item, used to keep
// tiny ops on the calling thread.
void parallel_rows(int64_t n, int64_t cost, const std::function<void(int64_t, int64_t)>& fn);
// Throws StatusError naming `op` when a tensor is not packed f32 of the expected element count.
void check_f32(const char* op, const Tensor& t, int64_t numel = -1);
void check_i32(const char* op, const Tensor& t, int64_t numel = -1);

// The dot product behind every CPU matmul (matmul, head_matmul, moe_experts): 8
// partial sums combined in a fixed order, so an output depends only on its two vectors.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

void matmul(Tensor& out, const Tensor& x, const Tensor& w, bool accumulate);
void head_matmul(Tensor& out, const Tensor& x, const Tensor& w);
// out = x · W^T for a quantized Matrix (cpu_quant_linear.cc).
void quant_matmul(Tensor& out, const Tensor& x, const Matrix& w, bool accumulate);
void embedding(Tensor& out, const Tensor& table, const Tensor& ids);
void gather_rows(Tensor& out, const Tensor& x, const Tensor& idx);
void scatter_add_rows(Tensor& out, const Tensor& x, const Tensor& idx, const Tensor& scale);

void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps);
void layer_norm(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);
void gated_rms_norm(Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight, float eps);

void swiglu(Tensor& out, const Tensor& gate_up, float limit);
void add(Tensor& out, const Tensor& a, const Tensor& b);
void scale(Tensor& out, const Tensor& x, float s);
void sigmoid(Tensor& out, const Tensor& x);
void softmax(Tensor& out, const Tensor& x);
void topk(Tensor& values, Tensor& indices, const Tensor& x, int k, TopkTies ties);

// Bidirectional-encoder ops (cpu_vision.cc).
void add_bias(Tensor& out, const Tensor& x, const Tensor& bias);
void gelu(Tensor& out, const Tensor& x);
void rotary(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin);
void segment_attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                       float scale);

void mhc_coefficients(Tensor& pre, Tensor& post, Tensor& comb, const Tensor& mix, const Tensor& base,
                      const Tensor& scale, float hc_eps, int sinkhorn_iters);
void mhc_collapse(Tensor& out, const Tensor& streams, const Tensor& pre);
void mhc_expand(Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& residual);

void causal_conv1d_silu(Tensor& out, const Tensor& x, Tensor& state, const Tensor& weight);
void kda_gate(Tensor& g, const Tensor& f, const Tensor& dt_bias, const Tensor& a_log, bool has_lower_bound,
              float lower_bound);
void kda_recurrent(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                   const Tensor& beta, Tensor& state);
void kda_chunked(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                 const Tensor& beta, Tensor& state, int chunk_size);
// KDA decode rows over host state addresses (KdaRowsView; 0 = padded row: zeros).
void kda_conv_qkv_rows(Tensor& out_q, Tensor& out_k, Tensor& out_v, const Tensor& x_q, const Tensor& x_k,
                       const Tensor& x_v, const KdaRowsView& rows, const Tensor& weight);
void kda_recurrent_state_rows(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const KdaRowsView& rows);

void mla_sparse_attention(Tensor& out, const Tensor& q, const LatentPagesView& cache, const Tensor& indices,
                          float scale);
void latent_store(const LatentPagesView& cache, void* pages, float* scales, const Tensor& latent, int64_t first);
void indexer_pool_keys(Tensor& out, const Tensor& keys, const Tensor& gate, const Tensor& ape);
void indexer_token_indices(Tensor& indices, const Tensor& pools, int64_t first_position, int pool_size, bool tail);
void indexer_scores(Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                    const Tensor& candidates, float scale);
// The decode-row ops (cpu_decode_rows.cc): per row, the one-sequence kernels above.
void latent_store_rows(const DecodeRowsView& rows, const Tensor& latent);
void indexer_update_rows(const DecodeRowsView& rows, const Tensor& key, const Tensor& gate, const Tensor& ape);
void indexer_scores_rows(Tensor& out, const DecodeRowsView& rows, const Tensor& q, const Tensor& weights, float scale,
                         int64_t select);
void indexer_topk_rows(Tensor& selected, const Tensor& scores, const DecodeRowsView& rows, TopkTies ties);
void indexer_token_indices_rows(Tensor& indices, const Tensor& selected, const DecodeRowsView& rows, bool tail);
void mla_sparse_attention_rows(Tensor& out, const Tensor& q, const DecodeRowsView& rows, const Tensor& indices,
                               float scale);

void moe_route(Tensor& weights, Tensor& ids, const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
               int k, bool norm, float scaling);
void moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights, const Tensor& gate_up,
                 const Tensor& down, float swiglu_limit);

}  // namespace tf::cpu
