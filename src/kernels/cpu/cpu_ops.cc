// CpuOps: the Ops interface dispatched to the free functions of cpu_kernels.h,
// plus the shared helpers (row splitting, argument checks).
#include "kernels/cpu/cpu_ops.h"

#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_sampling.h"
#include "kernels/cpu/exl3_linear.h"

namespace tf {
namespace cpu {

void parallel_rows(int64_t n, int64_t cost, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  // Below ~32k multiply-adds a thread hand-off costs more than it saves.
  const int64_t per_item = cost < 1 ? 1 : cost;
  const int64_t min_chunk = per_item >= 32768 ? 1 : (32768 + per_item - 1) / per_item;
  ThreadPool::global().parallel_for(n, fn, min_chunk);
}

void check_f32(const char* op, const Tensor& t, int64_t numel) {
  if (t.dtype() != DType::kF32 || !t.is_contiguous() || (numel >= 0 && t.numel() != numel)) {
    throw StatusError(invalid_argument(std::string(op) + ": expected packed f32" +
                                       (numel >= 0 ? " of " + std::to_string(numel) + " elements" : "") +
                                       ", got " + t.describe()));
  }
}

void check_i32(const char* op, const Tensor& t, int64_t numel) {
  if (t.dtype() != DType::kI32 || !t.is_contiguous() || (numel >= 0 && t.numel() != numel)) {
    throw StatusError(invalid_argument(std::string(op) + ": expected packed i32" +
                                       (numel >= 0 ? " of " + std::to_string(numel) + " elements" : "") +
                                       ", got " + t.describe()));
  }
}

}  // namespace cpu

namespace {

class CpuOps final : public Ops {
 public:
  const char* name() const override { return "cpu"; }
  Tensor empty(const Shape& shape, DType dtype) override { return Tensor::empty(shape, dtype); }
  Tensor zeros(const Shape& shape, DType dtype) override { return Tensor::zeros(shape, dtype); }
  Tensor to_device(const Tensor& host) override { return to_host(host); }
  Tensor to_host(const Tensor& t) override {
    if (!t.device().is_cpu()) throw StatusError(invalid_argument("cpu to_host: " + t.describe() + " is not on the host"));
    return t.contiguous();
  }
  void copy(Tensor& dst, const Tensor& src) override {
    if (!dst.device().is_cpu() || !src.device().is_cpu() || dst.shape() != src.shape() || dst.dtype() != src.dtype())
      throw StatusError(invalid_argument("cpu copy: " + src.describe() + " into " + dst.describe() +
                                         " (host tensors of one shape and dtype)"));
    dst.copy_from(src);
  }

  void matmul(Tensor& out, const Tensor& x, const Tensor& w, bool accumulate) override {
    cpu::matmul(out, x, w, accumulate);
  }
  void quant_matmul(Tensor& out, const Tensor& x, const Matrix& w, bool accumulate) override {
    cpu::quant_matmul(out, x, w, accumulate);
  }
  void head_matmul(Tensor& out, const Tensor& x, const Tensor& w) override { cpu::head_matmul(out, x, w); }
  void embedding(Tensor& out, const Tensor& table, const Tensor& ids) override { cpu::embedding(out, table, ids); }
  void gather_rows(Tensor& out, const Tensor& x, const Tensor& idx) override { cpu::gather_rows(out, x, idx); }
  void scatter_add_rows(Tensor& out, const Tensor& x, const Tensor& idx, const Tensor& s) override {
    cpu::scatter_add_rows(out, x, idx, s);
  }
  void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) override {
    cpu::rms_norm(out, x, weight, eps);
  }
  void layer_norm(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) override {
    cpu::layer_norm(out, x, weight, bias, eps);
  }
  void gated_rms_norm(Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight, float eps) override {
    cpu::gated_rms_norm(out, x, gate, weight, eps);
  }
  void swiglu(Tensor& out, const Tensor& gate_up, float limit) override { cpu::swiglu(out, gate_up, limit); }
  void add(Tensor& out, const Tensor& a, const Tensor& b) override { cpu::add(out, a, b); }
  void scale(Tensor& out, const Tensor& x, float s) override { cpu::scale(out, x, s); }
  void sigmoid(Tensor& out, const Tensor& x) override { cpu::sigmoid(out, x); }
  void softmax(Tensor& out, const Tensor& x) override { cpu::softmax(out, x); }
  void topk(Tensor& values, Tensor& indices, const Tensor& x, int k, TopkTies ties) override {
    cpu::topk(values, indices, x, k, ties);
  }
  void add_bias(Tensor& out, const Tensor& x, const Tensor& bias) override { cpu::add_bias(out, x, bias); }
  void gelu(Tensor& out, const Tensor& x) override { cpu::gelu(out, x); }
  void rotary(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) override {
    cpu::rotary(out, x, cos, sin);
  }
  void segment_attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                         float scale) override {
    cpu::segment_attention(out, q, k, v, offsets, scale);
  }
  void mhc_coefficients(Tensor& pre, Tensor& post, Tensor& comb, const Tensor& mix, const Tensor& base,
                        const Tensor& scale, float hc_eps, int iters) override {
    cpu::mhc_coefficients(pre, post, comb, mix, base, scale, hc_eps, iters);
  }
  void mhc_collapse(Tensor& out, const Tensor& streams, const Tensor& pre) override {
    cpu::mhc_collapse(out, streams, pre);
  }
  void mhc_expand(Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb,
                  const Tensor& residual) override {
    cpu::mhc_expand(out, y, post, comb, residual);
  }
  void causal_conv1d_silu(Tensor& out, const Tensor& x, Tensor& state, const Tensor& weight) override {
    cpu::causal_conv1d_silu(out, x, state, weight);
  }
  void kda_gate(Tensor& g, const Tensor& f, const Tensor& dt_bias, const Tensor& a_log, bool has_lb,
                float lb) override {
    cpu::kda_gate(g, f, dt_bias, a_log, has_lb, lb);
  }
  void kda_recurrent(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                     const Tensor& beta, Tensor& state) override {
    cpu::kda_recurrent(out, q, k, v, g, beta, state);
  }
  void kda_chunked(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                   const Tensor& beta, Tensor& state, int chunk_size) override {
    cpu::kda_chunked(out, q, k, v, g, beta, state, chunk_size);
  }
  void kda_conv_qkv_rows(Tensor& out_q, Tensor& out_k, Tensor& out_v, const Tensor& x_q, const Tensor& x_k,
                         const Tensor& x_v, const KdaRowsView& rows, const Tensor& weight) override {
    cpu::kda_conv_qkv_rows(out_q, out_k, out_v, x_q, x_k, x_v, rows, weight);
  }
  void kda_recurrent_state_rows(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const KdaRowsView& rows) override {
    cpu::kda_recurrent_state_rows(out, q, k, v, g, beta, rows);
  }
  void mla_sparse_attention(Tensor& out, const Tensor& q, const LatentPagesView& cache, const Tensor& indices,
                            float scale) override {
    cpu::mla_sparse_attention(out, q, cache, indices, scale);
  }
  void latent_store(const LatentPagesView& cache, void* pages, float* scales, const Tensor& latent,
                    int64_t first) override {
    cpu::latent_store(cache, pages, scales, latent, first);
  }
  void indexer_token_indices(Tensor& indices, const Tensor& pools, int64_t first_position, int pool_size,
                             bool tail) override {
    cpu::indexer_token_indices(indices, pools, first_position, pool_size, tail);
  }
  void indexer_pool_keys(Tensor& out, const Tensor& keys, const Tensor& gate, const Tensor& ape) override {
    cpu::indexer_pool_keys(out, keys, gate, ape);
  }
  void indexer_scores(Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                      const Tensor& candidates, float scale) override {
    cpu::indexer_scores(out, q, pool_keys, weights, candidates, scale);
  }
  void latent_store_rows(const DecodeRowsView& rows, const Tensor& latent) override {
    cpu::latent_store_rows(rows, latent);
  }
  void indexer_update_rows(const DecodeRowsView& rows, const Tensor& key, const Tensor& gate,
                           const Tensor& ape) override {
    cpu::indexer_update_rows(rows, key, gate, ape);
  }
  void indexer_scores_rows(Tensor& out, const DecodeRowsView& rows, const Tensor& q, const Tensor& weights,
                           float scale, int64_t select) override {
    cpu::indexer_scores_rows(out, rows, q, weights, scale, select);
  }
  void indexer_topk_rows(Tensor& selected, const Tensor& scores, const DecodeRowsView& rows,
                         TopkTies ties) override {
    cpu::indexer_topk_rows(selected, scores, rows, ties);
  }
  void indexer_token_indices_rows(Tensor& indices, const Tensor& selected, const DecodeRowsView& rows,
                                  bool tail) override {
    cpu::indexer_token_indices_rows(indices, selected, rows, tail);
  }
  void mla_sparse_attention_rows(Tensor& out, const Tensor& q, const DecodeRowsView& rows, const Tensor& indices,
                                 float scale) override {
    cpu::mla_sparse_attention_rows(out, q, rows, indices, scale);
  }
  void moe_route(Tensor& weights, Tensor& ids, const Tensor& logits, const Tensor& bias, int n_group,
                 int topk_group, int k, bool norm, float scaling) override {
    cpu::moe_route(weights, ids, logits, bias, n_group, topk_group, k, norm, scaling);
  }
  void moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights, const Tensor& gate_up,
                   const Tensor& down, float swiglu_limit) override {
    cpu::moe_experts(out, x, ids, weights, gate_up, down, swiglu_limit);
  }
  void exl3_matmul(Tensor& out, const Tensor& x, const Exl3Weight& w) override {
    if (out.is_contiguous()) return cpu::exl3_matmul(out, x, w);
    Tensor packed = Tensor::empty(out.shape(), out.dtype());  // a column block: compute, then copy in
    cpu::exl3_matmul(packed, x, w);
    out.copy_from(packed);
  }
  void sample_rows(std::span<SampleRowResult> out, std::span<const Tensor> rows,
                   std::span<const SampleRowParams> params) override {
    cpu::sample_rows(out, rows, params);
  }
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace tf
