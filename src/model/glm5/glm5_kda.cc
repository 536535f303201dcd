// The KDA sublayer of Glm5Model: Kimi Delta Attention (linear attention with a
// short causal conv and a per-head [Dk, Dv] recurrent state per sequence).
// Projections run over all rows of the step; the stateful part runs per
// sequence, or over a run of adjacent decode rows at once (*_rows ops). The three
// parts are separate so that the step can capture the row-only ones in its
// decode graphs (step_graphs.h): kda_project and kda_output are pure functions of
// their input rows, kda_core updates the sequences' states.
#include <vector>

#include "model/glm5/glm5_model.h"

namespace tf {

std::vector<Tensor> Glm5Model::kda_project(int layer, const Tensor& x) {
  const KdaWeights& w = weights_.layers[layer].kda;
  const int64_t n = x.size(0), dk = cfg_.linear_head_dim, hl = w.heads, c = hl * dk;
  Tensor q = ops_.empty({n, c}), k = ops_.empty({n, c}), v = ops_.empty({n, c});
  ops_.matmul(q, x, w.q_proj);
  ops_.matmul(k, x, w.k_proj);
  ops_.matmul(v, x, w.v_proj);
  Tensor fa = ops_.empty({n, dk}), f = ops_.empty({n, c}), g = ops_.empty({n, c});
  ops_.matmul(fa, x, w.f_a);
  ops_.matmul(f, fa, w.f_b);
  const bool has_lb = cfg_.linear_lower_bound.has_value();
  ops_.kda_gate(g, f, w.dt_bias, w.a_log, has_lb, has_lb ? static_cast<float>(*cfg_.linear_lower_bound) : 0.0f);
  Tensor beta = ops_.empty({n, hl});
  ops_.matmul(beta, x, w.b_proj);
  ops_.sigmoid(beta, beta);
  // The output gate's projections also depend only on x (used after the core).
  Tensor ga = ops_.empty({n, dk}), gate = ops_.empty({n, c});
  ops_.matmul(ga, x, w.g_a);
  ops_.matmul(gate, ga, w.g_b);
  return {q, k, v, g, beta, gate};
}

Tensor Glm5Model::kda_core(int layer, int kda_index, const std::vector<Tensor>& proj, const std::vector<Span>& spans) {
  const KdaWeights& w = weights_.layers[layer].kda;
  const Tensor &q = proj[0], &k = proj[1], &v = proj[2], &g = proj[3], &beta = proj[4];
  const int64_t n = q.size(0), c = w.heads * cfg_.linear_head_dim;
  Tensor core = ops_.empty({n, c});
  for (size_t s = 0; s < spans.size();) {
    // A run of decode rows (one token each, adjacent in the batch) goes through the
    // *_rows ops: one launch for all its sequences, the same result as one by one.
    size_t e = s;
    while (e < spans.size() && spans[e].rows == 1 && spans[e].row0 == spans[s].row0 + static_cast<int64_t>(e - s)) ++e;
    if (e - s >= 2) {
      const int64_t r0 = spans[s].row0, r1 = r0 + static_cast<int64_t>(e - s), b = r1 - r0;
      std::vector<Tensor*> sq, sk, sv, sr;
      for (size_t i = s; i < e; ++i) {
        Glm5Sequence::KdaState& st = spans[i].seq->kda_[kda_index];
        sq.push_back(&st.conv_q);
        sk.push_back(&st.conv_k);
        sv.push_back(&st.conv_v);
        sr.push_back(&st.recurrent);
      }
      Tensor cq = ops_.empty({b, c}), ck = ops_.empty({b, c}), cv = ops_.empty({b, c});
      ops_.causal_conv1d_silu_rows(cq, q.slice(0, r0, r1), sq, w.q_conv);
      ops_.causal_conv1d_silu_rows(ck, k.slice(0, r0, r1), sk, w.k_conv);
      ops_.causal_conv1d_silu_rows(cv, v.slice(0, r0, r1), sv, w.v_conv);
      Tensor out = core.slice(0, r0, r1);
      ops_.kda_recurrent_rows(out, cq, ck, cv, g.slice(0, r0, r1), beta.slice(0, r0, r1), sr);
      s = e;
      continue;
    }
    const Span& sp = spans[s++];
    Glm5Sequence::KdaState& st = sp.seq->kda_[kda_index];
    const int64_t r0 = sp.row0, r1 = sp.row0 + sp.rows;
    Tensor cq = ops_.empty({sp.rows, c}), ck = ops_.empty({sp.rows, c}), cv = ops_.empty({sp.rows, c});
    ops_.causal_conv1d_silu(cq, q.slice(0, r0, r1), st.conv_q, w.q_conv);
    ops_.causal_conv1d_silu(ck, k.slice(0, r0, r1), st.conv_k, w.k_conv);
    ops_.causal_conv1d_silu(cv, v.slice(0, r0, r1), st.conv_v, w.v_conv);
    Tensor out = core.slice(0, r0, r1);
    // Decode uses the recurrent form, prefill chunks the chunked form (as the reference).
    if (sp.rows == 1)
      ops_.kda_recurrent(out, cq, ck, cv, g.slice(0, r0, r1), beta.slice(0, r0, r1), st.recurrent);
    else
      ops_.kda_chunked(out, cq, ck, cv, g.slice(0, r0, r1), beta.slice(0, r0, r1), st.recurrent, 64);
  }
  return core;
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
