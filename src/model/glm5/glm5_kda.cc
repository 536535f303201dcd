// The KDA sublayer of Glm5Model: Kimi Delta Attention (linear attention with a
// short causal conv and a per-head [Dk, Dv] recurrent state per sequence).
// Projections run over all rows of the step (kda_project, kda_output: pure functions
// of their input rows); the stateful core (kda_core) runs prefill spans per sequence
// and each run of adjacent decode rows at once through kda_core_rows: the fused q/k/v
// conv and the recurrence over the states' addresses that prepare_decode_rows uploads
// with the step's metadata (KdaRowsView). Those launches do not depend on the
// sequences, so a graph step captures the core inside its layer segment
// (step_graphs.h); the kernels are the one-sequence arithmetic, so eager and replayed
// steps give the same bits.
#include <vector>

#include "model/glm5/glm5_model.h"

namespace tf {

std::vector<Tensor> Glm5Model::kda_project(int layer, const Tensor& x) {
  const KdaWeights& w = weights_.layers[layer].kda;
  const int64_t n = x.size(0), dk = cfg_.linear_head_dim, hl = w.heads, c = hl * dk;
  Tensor q = ops_.empty({n, c}), k = ops_.empty({n, c}), v = ops_.empty({n, c});
  Tensor fa = ops_.empty({n, dk}), beta = ops_.empty({n, hl}), ga = ops_.empty({n, dk});
  // Every projection of x in one call: the backend runs those of one format together
  // (CUDA decode: q/k/v in one quantized GEMV launch, f_a/b_proj/g_a in one small GEMM).
  const Matrix f_a(w.f_a), b_proj(w.b_proj), g_a(w.g_a);
  ops_.matmul_many({&q, &k, &v, &fa, &beta, &ga}, x, {&w.q_proj, &w.k_proj, &w.v_proj, &f_a, &b_proj, &g_a});
  // The low-rank ups in one op: the forget gate g = kda_gate(fa · f_b^T), the output
  // gate (used after the core; it also depends only on x) and beta = σ(b_proj x), in
  // place. CUDA at decode rows: one launch, the bits of the separate ops.
  Tensor g = ops_.empty({n, c}), gate = ops_.empty({n, c});
  const bool has_lb = cfg_.linear_lower_bound.has_value();
  ops_.kda_lowrank_gates(g, gate, beta, fa, ga, beta, w.f_b, w.g_b, w.dt_bias, w.a_log, has_lb,
                         has_lb ? static_cast<float>(*cfg_.linear_lower_bound) : 0.0f);
  return {q, k, v, g, beta, gate};
}

Tensor Glm5Model::kda_core(int layer, int kda_index, const std::vector<Tensor>& proj, const std::vector<Span>& spans) {
  const KdaWeights& w = weights_.layers[layer].kda;
  const Tensor &q = proj[0], &k = proj[1], &v = proj[2], &g = proj[3], &beta = proj[4];
  const int64_t n = q.size(0), c = w.heads * cfg_.linear_head_dim;
  Tensor core = ops_.empty({n, c});
  for (size_t s = 0; s < spans.size();) {
    // A run of decode rows (one token each, adjacent in the batch) goes through the
    // decode-row ops: one launch each for all its sequences (the states' addresses were
    // uploaded with the step's metadata), the same result as one by one.
    if (s < decode_run_at_.size() && decode_run_at_[s] >= 0) {
      const DecodeRun& run = decode_runs_[static_cast<size_t>(decode_run_at_[s])];
      const int64_t r0 = run.row0, r1 = r0 + run.width;
      std::vector<Tensor> rows;
      for (const Tensor& t : proj) rows.push_back(t.slice(0, r0, r1));
      Tensor out = core.slice(0, r0, r1);
      kda_core_rows(layer, kda_index, rows, run, out);
      s += run.spans;
      continue;
    }
    const Span& sp = spans[s++];
    if (sp.speculative) {
      Tensor out = core.slice(0, sp.row0, sp.row0 + sp.rows);
      kda_core_speculative(layer, kda_index, proj, sp, out);
      continue;
    }
    Glm5Sequence::KdaState& st = sp.seq->kda_[kda_index];
    const int64_t r0 = sp.row0, r1 = sp.row0 + sp.rows;
    Tensor cq = ops_.empty({sp.rows, c}), ck = ops_.empty({sp.rows, c}), cv = ops_.empty({sp.rows, c});
    ops_.causal_conv1d_silu(cq, q.slice(0, r0, r1), st.conv_q, w.q_conv);
    ops_.causal_conv1d_silu(ck, k.slice(0, r0, r1), st.conv_k, w.k_conv);
    ops_.causal_conv1d_silu(cv, v.slice(0, r0, r1), st.conv_v, w.v_conv);
    Tensor out = core.slice(0, r0, r1);
    // Prefill chunks use the chunked form (decode rows, the recurrent form, went above).
    ops_.kda_chunked(out, cq, ck, cv, g.slice(0, r0, r1), beta.slice(0, r0, r1), st.recurrent, 64);
  }
  return core;
}

void Glm5Model::kda_core_rows(int layer, int kda_index, const std::vector<Tensor>& proj, const DecodeRun& run,
                              Tensor& core) {
  const KdaWeights& w = weights_.layers[layer].kda;
  const int64_t b = run.width, c = w.heads * cfg_.linear_head_dim;
  const int64_t* meta = decode_meta_.data<int64_t>();
  KdaRowsView v;
  v.rows = b;
  v.conv_states = meta + run.kda_conv_at[static_cast<size_t>(kda_index)];
  v.recurrent_states = meta + run.kda_rec_at[static_cast<size_t>(kda_index)];
  v.heads = w.heads;
  v.key_dim = cfg_.linear_head_dim;
  v.value_dim = cfg_.linear_head_dim;
  Tensor cq = ops_.empty({b, c}), ck = ops_.empty({b, c}), cv = ops_.empty({b, c});
  ops_.kda_conv_qkv_rows(cq, ck, cv, proj[0], proj[1], proj[2], v, w.qkv_conv);
  ops_.kda_recurrent_state_rows(core, cq, ck, cv, proj[3], proj[4], v);
}

Tensor Glm5Model::kda_output(int layer, const Tensor& core, const Tensor& gate) {
  const KdaWeights& w = weights_.layers[layer].kda;
  const int64_t n = core.size(0), c = w.heads * cfg_.linear_head_dim;
  Tensor normed = ops_.empty({n, c});
  ops_.gated_rms_norm(normed, core, gate, w.o_norm, static_cast<float>(cfg_.rms_norm_eps));
  Tensor y = ops_.empty({n, cfg_.hidden_size});
  ops_.matmul(y, normed, w.o_proj);
  all_reduce(y);
  return y;
}

}  // namespace tf
