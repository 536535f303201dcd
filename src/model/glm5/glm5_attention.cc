// The attention sublayers of Glm5Model: KDA (linear attention with conv and
// recurrent state) and MLA in the absorbed form over the paged latent cache,
// with the DSA indexer (k-pools anchored at token 0, top-k pools expanded to
// tokens, plus the visible tail of the incomplete pool).
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "model/glm5/glm5_model.h"

namespace tf {

Tensor Glm5Model::kda_forward(int layer, int kda_index, const Tensor& x, const std::vector<Span>& spans) {
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
  Tensor ga = ops_.empty({n, dk}), gate = ops_.empty({n, c});
  ops_.matmul(ga, x, w.g_a);
  ops_.matmul(gate, ga, w.g_b);
  Tensor normed = ops_.empty({n, c});
  ops_.gated_rms_norm(normed, core, gate, w.o_norm, static_cast<float>(cfg_.rms_norm_eps));
  Tensor y = ops_.empty({n, cfg_.hidden_size});
  ops_.matmul(y, normed, w.o_proj);
  all_reduce(y);
  return y;
}

Glm5Model::IndexerRows Glm5Model::indexer_project(const IndexerWeights& iw, const Tensor& x, const Tensor& q_resid) {
  const int64_t n = x.size(0), hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
  IndexerRows r;
  r.q = ops_.empty({n, hi * di});
  ops_.matmul(r.q, q_resid, iw.wq_b);
  Tensor kraw = ops_.empty({n, di});
  r.key = ops_.empty({n, di});
  ops_.matmul(kraw, x, iw.wk);
  ops_.layer_norm(r.key, kraw, iw.k_norm_w, iw.k_norm_b, 1e-6f);
  r.gate = ops_.empty({n, di});
  ops_.matmul(r.gate, x, iw.compress_gate);
  r.wts = ops_.empty({n, hi});
  ops_.matmul(r.wts, x, iw.weights_proj);
  ops_.scale(r.wts, r.wts, 1.0f / std::sqrt(static_cast<float>(hi)));
  return r;
}

Tensor Glm5Model::indexer_forward(const IndexerWeights& iw, const IndexerRows& rows, const Span& sp,
                                  Glm5Sequence::IndexerState& st) {
  const int64_t t = sp.rows, di = cfg_.index_head_dim, kp = cfg_.index_kpool;
  const int64_t r0 = sp.row0, r1 = sp.row0 + t;
  const Tensor q = rows.q.slice(0, r0, r1), key = rows.key.slice(0, r0, r1), gate = rows.gate.slice(0, r0, r1);
  const Tensor wts = rows.wts.slice(0, r0, r1);

  // Append the span's keys; a pool's key is computed once, when its last token arrives.
  // The incomplete pool's raw rows wait in a device ring of kp rows; the span's
  // completed pools are pooled in one call (each pool's key depends only on its rows).
  if (st.ring_k.is_null()) {
    st.ring_k = ops_.empty({kp, di});
    st.ring_gate = ops_.empty({kp, di});
  }
  const int64_t avail = st.ring_rows + t, complete = avail / kp;
  if (complete > 0) {
    // [ring rows; new rows] for the completed pools only.
    const int64_t used = complete * kp - st.ring_rows;  // new rows consumed by completed pools
    Tensor kbuf = ops_.empty({complete * kp, di}), gbuf = ops_.empty({complete * kp, di});
    for (auto [buf, ring, fresh] : {std::tuple{&kbuf, &st.ring_k, &key}, {&gbuf, &st.ring_gate, &gate}}) {
      if (st.ring_rows > 0) {
        Tensor head = buf->slice(0, 0, st.ring_rows);
        ops_.copy(head, ring->slice(0, 0, st.ring_rows));
      }
      Tensor rest = buf->slice(0, st.ring_rows, complete * kp);
      ops_.copy(rest, fresh->slice(0, 0, used));
    }
    const int64_t need = st.pools + complete;
    if (st.pool_keys.is_null() || st.pool_keys.size(0) < need) {
      // Grow geometrically so that decode appends amortise to no copies.
      const int64_t cap = std::max<int64_t>({need, 16, st.pool_keys.is_null() ? 0 : 2 * st.pool_keys.size(0)});
      Tensor grown = ops_.empty({cap, di});
      if (st.pools > 0) {
        Tensor dst = grown.slice(0, 0, st.pools);
        ops_.copy(dst, st.pool_keys.slice(0, 0, st.pools));
      }
      st.pool_keys = grown;
    }
    Tensor pk = st.pool_keys.slice(0, st.pools, need);
    ops_.indexer_pool_keys(pk, kbuf.reshape({complete, kp, di}), gbuf.reshape({complete, kp, di}), iw.ape);
    st.pools = need;
    st.ring_rows = 0;
  }
  if (const int64_t left = avail - complete * kp; left > st.ring_rows) {
    // Rows of the new incomplete pool (all from this span when a pool completed).
    const int64_t from = t - (left - st.ring_rows);
    for (auto [ring, fresh] : {std::pair{&st.ring_k, &key}, {&st.ring_gate, &gate}}) {
      Tensor dst = ring->slice(0, st.ring_rows, left);
      ops_.copy(dst, fresh->slice(0, from, t));
    }
    st.ring_rows = left;
  }
  const int64_t pools = st.pools;
  const bool tail = cfg_.index_kpool_always_select_tail && kp > 1;
  const int64_t width = cfg_.index_topk + (tail ? kp - 1 : 0);
  // Selected pools become token indices on the device (no round trip through the host).
  const int64_t ksel = std::min<int64_t>(cfg_.index_topk / kp, pools);
  Tensor sel;
  if (ksel > 0) {
    std::vector<int32_t> cand(t);
    for (int64_t i = 0; i < t; ++i) cand[i] = static_cast<int32_t>((sp.pos0 + i + 1) / kp);
    Tensor scores = ops_.empty({t, pools});
    ops_.indexer_scores(scores, q, st.pool_keys.slice(0, 0, pools), wts, upload_i32(cand),
                        1.0f / std::sqrt(static_cast<float>(di)));
    Tensor vals = ops_.empty({t, ksel});
    sel = ops_.empty({t, ksel}, DType::kI32);
    ops_.topk(vals, sel, scores, static_cast<int>(ksel), indexer_ties_);
  } else {
    sel = ops_.empty({t, 0}, DType::kI32);
  }
  Tensor indices = ops_.empty({t, width}, DType::kI32);
  ops_.indexer_token_indices(indices, sel, sp.pos0, static_cast<int>(kp), tail);
  return indices;
}

Tensor Glm5Model::mla_forward(const LayerWeights& lw, int mla_index, const Tensor& x, const std::vector<Span>& spans,
                              std::vector<Tensor>& shared_topk, bool mtp) {
  const MlaWeights& w = lw.mla;
  const int64_t n = x.size(0), hl = w.heads, r = cfg_.kv_lora_rank, dqk = cfg_.qk_head_dim, dv = cfg_.v_head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  Tensor qa = ops_.empty({n, cfg_.q_lora_rank}), q_resid = ops_.empty({n, cfg_.q_lora_rank});
  ops_.matmul(qa, x, w.q_a);
  ops_.rms_norm(q_resid, qa, w.q_a_norm, eps);
  Tensor q = ops_.empty({n, hl, dqk});
  ops_.matmul(q, q_resid, w.q_b);
  Tensor q_abs = ops_.empty({n, hl, r});
  ops_.head_matmul(q_abs, q, w.w_uk_t);
  Tensor kv = ops_.empty({n, r}), latent = ops_.empty({n, r});
  ops_.matmul(kv, x, w.kv_a);
  ops_.rms_norm(latent, kv, w.kv_a_norm, eps);

  LatentCachePool& pool = mtp ? *mtp_pool_ : *pool_;
  const int layer = mtp ? 0 : mla_index;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  Tensor ctx = ops_.empty({n, hl, r});
  IndexerRows irows;
  if (w.indexer) irows = indexer_project(*w.indexer, x, q_resid);
  for (size_t s = 0; s < spans.size(); ++s) {
    const Span& sp = spans[s];
    const Tensor& table = mtp ? sp.seq->mtp_pages_dev_ : sp.seq->pages_dev_;
    const LatentPagesView view = pool.view(layer, table, sp.pos0 + sp.rows);
    ops_.latent_store(view, pool.layer_pages(layer), pool.layer_scales(layer),
                      latent.slice(0, sp.row0, sp.row0 + sp.rows), sp.pos0);
    Tensor indices;
    if (w.indexer) {
      Glm5Sequence::IndexerState& st = mtp ? sp.seq->mtp_indexer_ : sp.seq->indexer_[mla_index];
      indices = indexer_forward(*w.indexer, irows, sp, st);
      shared_topk[s] = indices;
    } else {
      indices = shared_topk[s];
      if (indices.is_null()) throw StatusError(internal_error("shared DSA layer without a previous top-k"));
    }
    Tensor out = ctx.slice(0, sp.row0, sp.row0 + sp.rows);
    ops_.mla_sparse_attention(out, q_abs.slice(0, sp.row0, sp.row0 + sp.rows), view, indices, scale);
  }
  Tensor o = ops_.empty({n, hl, dv});
  ops_.head_matmul(o, ctx, w.w_uv);
  Tensor y = ops_.empty({n, cfg_.hidden_size});
  ops_.matmul(y, o, w.o_proj);
  all_reduce(y);
  return y;
}

}  // namespace tf
