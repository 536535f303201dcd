// Glm5Model: loading, the batched step (embedding, mHC around every sublayer,
// final stream mean + norm, lm_head), the FFN sublayers and the collectives.
// The attention sublayers live in glm5_attention.cc, the MTP layer in glm5_mtp.cc.
#include "model/glm5/glm5_model.h"

#include <algorithm>
#include <string>

#include "core/logging.h"
#include "model/glm5/glm5_upload.h"

namespace tf {

Glm5Sequence::~Glm5Sequence() {
  if (pool_) pool_->release(pages_);
  if (mtp_pool_) mtp_pool_->release(mtp_pages_);
}

Expected<std::unique_ptr<Glm5Model>> Glm5Model::load(const Glm5Config& config, const WeightSource& weights, Ops& ops,
                                                     Communicator& comm, const Glm5Options& cache) {
  const Glm5TextConfig& cfg = config.text;
  if (cfg.qk_nope_head_dim != cfg.qk_head_dim)
    return unimplemented("glm5 model: qk_head_dim " + std::to_string(cfg.qk_head_dim) + " != qk_nope_head_dim");
  if (cache.latent_dtype != DType::kF32 && cache.latent_dtype != DType::kBF16 &&
      cache.latent_dtype != DType::kF8E4M3)
    return invalid_argument(std::string("latent cache dtype ") + dtype_name(cache.latent_dtype) +
                            " (expected f32, bf16 or f8_e4m3)");
  if (cache.page_size <= 0 || cache.num_pages <= 0)
    return invalid_argument("latent cache: page_size and num_pages must be positive");
  if (cache.weight_dtype != DType::kF32 && ops_device(ops).is_cpu())
    return invalid_argument(std::string("weight matrices in ") + dtype_name(cache.weight_dtype) +
                            ": the CPU backend computes with f32 weights");
  std::unique_ptr<Glm5Model> m(new Glm5Model(cfg, ops, comm));
  m->indexer_ties_ = cache.indexer_ties;
  TF_ASSIGN_OR_RETURN(m->weights_,
                      load_glm5_weights(weights, cfg, comm.rank(), comm.world_size(), cache.weight_dtype));
  // Weights go to the backend's device once (a no-op on the CPU backend).
  TF_RETURN_IF_ERROR(upload_glm5_weights(m->weights_, ops));
  m->device_ = ops_device(ops);
  for (const std::string& name : weights.unknown_tensors()) TF_LOG_WARN("checkpoint tensor not used: {}", name);
  for (int i = 0; i < cfg.num_hidden_layers; ++i) {
    const bool linear = cfg.layer_types[i] == AttentionKind::kLinear;
    m->kda_index_.push_back(linear ? m->num_kda_++ : -1);
    m->mla_index_.push_back(linear ? -1 : m->num_mla_++);
    // As in the reference, a "shared" layer reuses the top-k of the layer right
    // before it, which must be a DSA layer running its own ("full") indexer.
    if (!linear && cfg.indexer_types[i] == IndexerKind::kShared &&
        (i == 0 || cfg.layer_types[i - 1] != AttentionKind::kSparseMla ||
         cfg.indexer_types[i - 1] != IndexerKind::kFull))
      return invalid_argument("config: shared DSA layer " + std::to_string(i) +
                              " does not follow a full DSA layer whose top-k it could reuse");
  }
  m->pool_ = std::make_unique<LatentCachePool>(ops, m->num_mla_, cfg.kv_lora_rank, cache.page_size, cache.num_pages,
                                               cache.latent_dtype);
  if (m->weights_.mtp)
    m->mtp_pool_ = std::make_unique<LatentCachePool>(ops, 1, cfg.kv_lora_rank, cache.page_size, cache.num_pages,
                                                     cache.latent_dtype);
  return m;
}

std::unique_ptr<Glm5Sequence> Glm5Model::new_sequence() {
  std::unique_ptr<Glm5Sequence> s(new Glm5Sequence());
  s->pool_ = pool_.get();
  s->mtp_pool_ = mtp_pool_.get();
  const int64_t kw = cfg_.linear_conv_kernel_dim, dk = cfg_.linear_head_dim;
  for (const auto& lw : weights_.layers) {
    if (lw.attention == AttentionKind::kLinear) {
      const int64_t c = lw.kda.heads * dk;
      Glm5Sequence::KdaState st;
      st.conv_q = ops_.zeros({kw - 1, c});
      st.conv_k = ops_.zeros({kw - 1, c});
      st.conv_v = ops_.zeros({kw - 1, c});
      st.recurrent = ops_.zeros({lw.kda.heads, dk, dk});
      s->kda_.push_back(std::move(st));
    } else {
      s->indexer_.emplace_back();
    }
  }
  return s;
}

Tensor Glm5Model::on_device(const Tensor& t) { return to_ops_device(ops_, device_, t); }

Tensor Glm5Model::to_host(const Tensor& t) { return device_.is_cpu() && t.is_contiguous() ? t : ops_.to_host(t); }

Tensor Glm5Model::upload_i32(const std::vector<int32_t>& v) {
  return ops_.to_device(
      Tensor::view_of(const_cast<int32_t*>(v.data()), {static_cast<int64_t>(v.size())}, DType::kI32));
}

void Glm5Model::sync_page_table(const std::vector<int32_t>& pages, Tensor& dev) {
  // Tables only grow while a sequence lives, so a size change is the only change.
  if (pages.empty() || (!dev.is_null() && dev.numel() == static_cast<int64_t>(pages.size()))) return;
  dev = upload_i32(pages);
}

void Glm5Model::all_reduce(Tensor& t) {
  if (comm_.world_size() == 1) return;
  Status st = comm_.all_reduce_sum(t);
  if (!st.is_ok()) throw StatusError(st.with_context("tensor-parallel all-reduce"));
}

Tensor Glm5Model::logits_for(const Tensor& hidden_rows) {
  const int64_t r = hidden_rows.size(0), v = cfg_.vocab_size, vl = weights_.vocab.size();
  Tensor local = ops_.empty({r, vl});
  ops_.matmul(local, hidden_rows, weights_.lm_head);
  const int world = comm_.world_size();
  if (world == 1) return local;
  // Uneven vocab shards: pad every shard to the largest, gather, then unpad.
  const int64_t vmax = (v + world - 1) / world;
  Tensor padded = ops_.zeros({r, vmax});
  Tensor padded_cols = padded.slice(1, 0, vl);
  ops_.copy(padded_cols, local);
  Tensor gathered = ops_.empty({world, r, vmax});
  Status st = comm_.all_gather(padded, gathered);
  if (!st.is_ok()) throw StatusError(st.with_context("tensor-parallel logits all-gather"));
  Tensor out = ops_.empty({r, v});
  for (int k = 0; k < world; ++k) {
    const ShardRange s = shard_range(v, k, world);
    Tensor dst = out.slice(1, s.begin, s.end);
    ops_.copy(dst, gathered.select(0, k).slice(1, 0, s.size()));
  }
  return out;
}

Tensor Glm5Model::mlp_forward(const MlpWeights& w, const Tensor& x) {
  if (w.exl3) {
    // EXL3 expert: gate and up into the two column halves of gate_up.
    const int64_t n = x.size(0), il = w.exl3_intermediate;
    Tensor gu = ops_.empty({n, 2 * il});
    Tensor g = gu.slice(1, 0, il), u = gu.slice(1, il, 2 * il);
    ops_.exl3_matmul(g, x, w.exl3->gate);
    ops_.exl3_matmul(u, x, w.exl3->up);
    Tensor a = ops_.empty({n, il});
    ops_.swiglu(a, gu, static_cast<float>(cfg_.swiglu_limit));
    Tensor y = ops_.empty({n, cfg_.hidden_size});
    ops_.exl3_matmul(y, a, w.exl3->down);
    return y;
  }
  const int64_t n = x.size(0), il = w.down.size(1);
  Tensor gu = ops_.empty({n, 2 * il});
  ops_.matmul(gu, x, w.gate_up);
  Tensor a = ops_.empty({n, il});
  ops_.swiglu(a, gu, static_cast<float>(cfg_.swiglu_limit));
  Tensor y = ops_.empty({n, cfg_.hidden_size});
  ops_.matmul(y, a, w.down);
  return y;
}

Tensor Glm5Model::moe_forward(const MoeWeights& w, const Tensor& x) {
  const int64_t n = x.size(0), e = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  Tensor logits = ops_.empty({n, e});
  ops_.matmul(logits, x, w.router);
  Tensor wts = ops_.empty({n, k});
  Tensor ids = ops_.empty({n, k}, DType::kI32);
  ops_.moe_route(wts, ids, logits, w.bias, cfg_.n_group, cfg_.topk_group, static_cast<int>(k), cfg_.norm_topk_prob,
                 static_cast<float>(cfg_.routed_scaling_factor));
  Tensor out;
  if (!w.experts_gate_up.is_null()) {
    // Stacked experts: the backend groups the tokens per expert itself (on the device
    // for CUDA), summing each token's expert outputs in ascending expert id.
    out = ops_.empty({n, cfg_.hidden_size});
    ops_.moe_experts(out, x, ids, wts, w.experts_gate_up, w.experts_down, static_cast<float>(cfg_.swiglu_limit));
  } else {
    out = routed_experts_by_host_grouping(w, x, ids, wts);
  }
  Tensor shared = mlp_forward(w.shared, x);
  ops_.add(out, out, shared);
  return out;
}

// Per-expert weights (EXL3 experts): the routing table goes to the host, which groups
// the tokens per expert and runs each expert's MLP on its own rows.
Tensor Glm5Model::routed_experts_by_host_grouping(const MoeWeights& w, const Tensor& x, const Tensor& ids,
                                                  const Tensor& wts) {
  const int64_t n = x.size(0), e = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  // Tokens of each expert, in token order; experts visited in ascending id so that a
  // token's expert outputs are summed in the reference's order. The grouping is done
  // on the host (an explicit download of the [n, k] routing table; every expert's
  // token list then goes back up in one upload).
  const Tensor ids_h = to_host(ids), wts_h = to_host(wts);
  std::vector<std::vector<int32_t>> tok(e);
  std::vector<std::vector<float>> sc(e);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = ids_h.data<int32_t>()[t * k + j];
      tok[id].push_back(static_cast<int32_t>(t));
      sc[id].push_back(wts_h.data<float>()[t * k + j]);
    }
  std::vector<int32_t> all_tok;
  std::vector<float> all_sc;
  std::vector<int64_t> first(e + 1, 0);
  for (int64_t ex = 0; ex < e; ++ex) {
    first[ex] = static_cast<int64_t>(all_tok.size());
    all_tok.insert(all_tok.end(), tok[ex].begin(), tok[ex].end());
    all_sc.insert(all_sc.end(), sc[ex].begin(), sc[ex].end());
  }
  first[e] = static_cast<int64_t>(all_tok.size());
  const Tensor all_idx = upload_i32(all_tok);
  const Tensor all_scale =
      ops_.to_device(Tensor::view_of(all_sc.data(), {static_cast<int64_t>(all_sc.size())}, DType::kF32));
  Tensor out = ops_.zeros({n, cfg_.hidden_size});
  for (int64_t ex = 0; ex < e; ++ex) {
    if (tok[ex].empty()) continue;
    const int64_t ne = static_cast<int64_t>(tok[ex].size());
    Tensor idx = all_idx.slice(0, first[ex], first[ex] + ne);
    Tensor scale = all_scale.slice(0, first[ex], first[ex] + ne);
    Tensor xe = ops_.empty({ne, cfg_.hidden_size});
    ops_.gather_rows(xe, x, idx);
    Tensor ye = mlp_forward(w.experts[ex], xe);
    ops_.scatter_add_rows(out, ye, idx, scale);
  }
  return out;
}

Tensor Glm5Model::ffn_forward(const LayerWeights& lw, const Tensor& x) {
  Tensor y = lw.mlp == MlpKind::kDense ? mlp_forward(lw.dense, x) : moe_forward(lw.moe, x);
  all_reduce(y);
  return y;
}

namespace {

struct HcOut {
  Tensor post, comb, collapsed;
};

HcOut hc_pre(Ops& ops, const HyperConnectionWeights& w, const Tensor& streams, int64_t m, float norm_eps,
             float hc_eps, int iters) {
  const int64_t n = streams.size(0), h = streams.size(2), mix = (2 + m) * m;
  Tensor flat = streams.reshape({n, m * h});
  Tensor normed = ops.empty({n, m * h});
  ops.rms_norm(normed, flat, Tensor(), norm_eps);
  Tensor logits = ops.empty({n, mix});
  ops.matmul(logits, normed, w.fn);
  HcOut o;
  Tensor pre = ops.empty({n, m});
  o.post = ops.empty({n, m});
  o.comb = ops.empty({n, m, m});
  ops.mhc_coefficients(pre, o.post, o.comb, logits, w.base, w.scale, hc_eps, iters);
  o.collapsed = ops.empty({n, h});
  ops.mhc_collapse(o.collapsed, streams, pre);
  return o;
}

}  // namespace

Expected<std::vector<StepResult>> Glm5Model::step(std::span<const StepEntry> batch) {
  try {
    const int64_t hdim = cfg_.hidden_size, m = cfg_.hc_mult;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    std::vector<Span> spans;
    std::vector<int32_t> ids;
    for (size_t i = 0; i < batch.size(); ++i) {
      const StepEntry& e = batch[i];
      if (!e.sequence) return invalid_argument("step: entry " + std::to_string(i) + " has no sequence");
      if (e.tokens.empty()) return invalid_argument("step: entry " + std::to_string(i) + " has no tokens");
      for (size_t j = 0; j < i; ++j)
        if (batch[j].sequence == e.sequence)
          return invalid_argument("step: sequence appears twice in one batch (entries " + std::to_string(j) +
                                  " and " + std::to_string(i) + ")");
      for (int32_t t : e.tokens)
        if (t < 0 || t >= cfg_.vocab_size)
          return out_of_range("step: token id " + std::to_string(t) + " outside the vocabulary of " +
                              std::to_string(cfg_.vocab_size));
      spans.push_back({e.sequence, static_cast<int64_t>(ids.size()), static_cast<int64_t>(e.tokens.size()),
                       e.sequence->length_});
      ids.insert(ids.end(), e.tokens.begin(), e.tokens.end());
    }
    if (num_mla_ > 0)
      for (const Span& sp : spans) {
        TF_RETURN_IF_ERROR(pool_->reserve(sp.seq->pages_, sp.pos0 + sp.rows));
        sync_page_table(sp.seq->pages_, sp.seq->pages_dev_);
      }
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n == 0) return std::vector<StepResult>{};

    Tensor x = ops_.empty({n, hdim});
    ops_.embedding(x, weights_.embed, upload_i32(ids));
    // Every stream starts as the embedding.
    Tensor streams = ops_.empty({n, m, hdim});
    for (int64_t j = 0; j < m; ++j) {
      Tensor dst = streams.select(1, j);
      ops_.copy(dst, x);
    }

    std::vector<Tensor> shared_topk(spans.size());
    for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
      const LayerWeights& lw = weights_.layers[i];
      // Attention site.
      HcOut hc = hc_pre(ops_, lw.attn_hc, streams, m, eps, static_cast<float>(cfg_.hc_eps), cfg_.hc_sinkhorn_iters);
      Tensor a = ops_.empty({n, hdim});
      ops_.rms_norm(a, hc.collapsed, lw.input_norm, eps);
      Tensor y = lw.attention == AttentionKind::kLinear ? kda_forward(i, kda_index_[i], a, spans)
                                                        : mla_forward(lw, mla_index_[i], a, spans, shared_topk, false);
      Tensor next = ops_.empty({n, m, hdim});
      ops_.mhc_expand(next, y, hc.post, hc.comb, streams);
      streams = next;
      // FFN site.
      hc = hc_pre(ops_, lw.ffn_hc, streams, m, eps, static_cast<float>(cfg_.hc_eps), cfg_.hc_sinkhorn_iters);
      ops_.rms_norm(a, hc.collapsed, lw.post_norm, eps);
      y = ffn_forward(lw, a);
      next = ops_.empty({n, m, hdim});
      ops_.mhc_expand(next, y, hc.post, hc.comb, streams);
      streams = next;
    }
    // Final head: plain mean over the streams, then the final norm.
    // The 1/M weights live on the device, uploaded again only when a step has more rows.
    if (mean_w_.is_null() || mean_w_.size(0) < n) {
      const int64_t cap = std::max<int64_t>(n, 64);
      mean_w_ = ops_.to_device(Tensor::from_floats(
          {cap, m}, std::vector<float>(static_cast<size_t>(cap * m), 1.0f / static_cast<float>(m))));
    }
    const Tensor mean_w = mean_w_.slice(0, 0, n);
    Tensor pooled = ops_.empty({n, hdim});
    ops_.mhc_collapse(pooled, streams, mean_w);
    Tensor hidden = ops_.empty({n, hdim});
    ops_.rms_norm(hidden, pooled, weights_.norm, eps);

    std::vector<StepResult> out;
    for (size_t i = 0; i < spans.size(); ++i) {
      const Span& sp = spans[i];
      const int64_t r0 = batch[i].all_logits ? sp.row0 : sp.row0 + sp.rows - 1;
      Tensor rows = ops_.empty({sp.row0 + sp.rows - r0, hdim});
      ops_.copy(rows, hidden.slice(0, r0, sp.row0 + sp.rows));
      StepResult res;
      res.logits = to_host(logits_for(rows));
      res.hidden = to_host(rows);
      out.push_back(std::move(res));
    }
    for (const Span& sp : spans) sp.seq->length_ = sp.pos0 + sp.rows;
    return out;
  } catch (const StatusError& e) {
    return e.status().with_context("glm5 step");
  }
}

}  // namespace tf
