// Glm5Model: loading, the batched step (embedding, mHC around every sublayer,
// final stream mean + norm, lm_head), the FFN sublayers and the collectives.
// The attention sublayers live in glm5_attention.cc, the MTP layer in glm5_mtp.cc.
#include "model/glm5/glm5_model.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/logging.h"
#include "model/glm5/glm5_upload.h"

namespace tf {

namespace {
// Whether CUDA graphs are on when neither Glm5Options nor TF_GRAPHS says (replay ==
// eager bit for bit on the H200, glm5_graphs_cuda_tests, 2026-11-29 run1).
constexpr bool kGraphsByDefault = true;

}  // namespace

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
  if (cache.logits_block_rows < 0) return invalid_argument("logits_block_rows must be 0 or more");
  if (cache.weight_dtype != DType::kF32 && ops_device(ops).is_cpu())
    return invalid_argument(std::string("weight matrices in ") + dtype_name(cache.weight_dtype) +
                            ": the CPU backend computes with f32 weights");
  std::unique_ptr<Glm5Model> m(new Glm5Model(cfg, ops, comm));
  m->indexer_ties_ = cache.indexer_ties;
  m->logits_block_rows_ = cache.logits_block_rows;
  TF_ASSIGN_OR_RETURN(m->weights_,
                      load_glm5_weights(weights, cfg, comm.rank(), comm.world_size(), cache.weight_dtype,
                                        cache.dense_quant, cache.head_quant, cache.draft_head_quant));
  // Weights go to the backend's device once (a no-op on the CPU backend).
  TF_RETURN_IF_ERROR(upload_glm5_weights(m->weights_, ops));
  m->device_ = ops_device(ops);
  // The q/k/v conv taps stacked for kda_conv_qkv_rows (one launch for the three).
  for (LayerWeights& lw : m->weights_.layers) {
    if (lw.attention != AttentionKind::kLinear) continue;
    KdaWeights& w = lw.kda;
    w.qkv_conv = ops.empty({3, w.q_conv.size(0), w.q_conv.size(1)});
    int j = 0;
    for (const Tensor* t : {&w.q_conv, &w.k_conv, &w.v_conv}) {
      Tensor dst = w.qkv_conv.select(0, j++);
      ops.copy(dst, *t);
    }
  }
  {
    bool on = cache.graphs == Glm5Options::Graphs::kOn;
    if (cache.graphs == Glm5Options::Graphs::kAuto) {
      const char* env = std::getenv("TF_GRAPHS");
      const std::string v = env ? env : "";
      on = ops.supports_graphs() && (v.empty() ? kGraphsByDefault : v != "0" && v != "off" && v != "false");
    }
    // Tensor parallelism: the collectives are captured too (NCCL; every rank captures
    // and replays the same segments, as every rank runs the same steps).
    m->graphs_ = std::make_unique<StepGraphs>(ops, on);
  }
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
      s->kda_.push_back(
          Glm5Sequence::KdaState::over(ops_.zeros({3, kw - 1, c}), ops_.zeros({lw.kda.heads, dk, dk})));
    } else {
      s->indexer_.emplace_back();
    }
  }
  return s;
}

Expected<std::unique_ptr<Glm5Sequence>> Glm5Model::fork(const Glm5Sequence& src) {
  const int64_t ps = pool_->page_size();
  if (src.length_ % ps != 0)
    return invalid_argument("fork: sequence length " + std::to_string(src.length_) + " is not a whole number of " +
                            std::to_string(ps) + "-token pages");
  // Allocation failures (device memory) come back as a Status: the caller goes on without.
  try {
    std::unique_ptr<Glm5Sequence> s = new_sequence();
    for (size_t i = 0; i < s->kda_.size(); ++i) {
      ops_.copy(s->kda_[i].conv, src.kda_[i].conv);
      ops_.copy(s->kda_[i].recurrent, src.kda_[i].recurrent);
    }
    for (size_t i = 0; i < s->indexer_.size(); ++i) copy_indexer_state(src.indexer_[i], s->indexer_[i]);
    pool_->share(src.pages_, src.length_ / ps, s->pages_);
    if (!s->pages_.empty()) s->pages_dev_ = upload_i32(s->pages_);
    s->length_ = src.length_;
    fork_mtp(src, *s);
    return s;
  } catch (const StatusError& e) {
    return e.status().with_context("fork");
  } catch (const std::exception& e) {
    return resource_exhausted(std::string("fork: ") + e.what());
  }
}

void Glm5Model::copy_indexer_state(const Glm5Sequence::IndexerState& from, Glm5Sequence::IndexerState& to) {
  if (!from.ring.is_null()) {
    ensure_indexer_ring(to);
    ops_.copy(to.ring, from.ring);
    to.ring_rows = from.ring_rows;
  }
  if (from.pools > 0) {
    ensure_pool_capacity(to, from.pools);
    Tensor dst = to.pool_keys.slice(0, 0, from.pools);
    ops_.copy(dst, from.pool_keys.slice(0, 0, from.pools));
    to.pools = from.pools;
  }
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

// A graph step's collectives ran inside the replays, where the communicator does not
// follow each call: the step is watched as a whole (flush: bounded by the op timeout;
// a dead or hung peer aborts the communicator and fails the step kUnavailable).
void Glm5Model::watch_graph_step() {
  if (comm_.world_size() == 1) return;
  Status st = comm_.flush();
  if (!st.is_ok()) throw StatusError(st.with_context("tensor-parallel graph step"));
}

Tensor Glm5Model::logits_for(const Tensor& hidden_rows, const Matrix* head) {
  const int64_t r = hidden_rows.size(0), v = cfg_.vocab_size, vl = weights_.vocab.size();
  Tensor local = ops_.empty({r, vl});
  ops_.matmul(local, hidden_rows, head != nullptr ? *head : weights_.lm_head);
  const int world = comm_.world_size();
  if (world == 1) return local;
  // Uneven vocab shards: pad every shard to the largest, gather, then unpad. The shard's
  // copies go before the whole rows are made: with every row's logits (prompt_logprobs) a
  // step holds [rows, vocab] f32 twice at most, not three times.
  const int64_t vmax = (v + world - 1) / world;
  Tensor gathered = ops_.empty({world, r, vmax});
  {
    Tensor padded = local;
    if (vl != vmax) {
      padded = ops_.zeros({r, vmax});
      Tensor padded_cols = padded.slice(1, 0, vl);
      ops_.copy(padded_cols, local);
    }
    local = Tensor();
    Status st = comm_.all_gather(padded, gathered);
    if (!st.is_ok()) throw StatusError(st.with_context("tensor-parallel logits all-gather"));
  }
  Tensor out = ops_.empty({r, v});
  for (int k = 0; k < world; ++k) {
    const ShardRange s = shard_range(v, k, world);
    Tensor dst = out.slice(1, s.begin, s.end);
    ops_.copy(dst, gathered.select(0, k).slice(1, 0, s.size()));
  }
  return out;
}

namespace {

// An MLP's first half: a = swiglu(gate_up · x) [n, intermediate].
Tensor mlp_activation(Ops& ops, const MlpWeights& w, const Tensor& x, float limit) {
  const int64_t n = x.size(0), il = w.exl3 ? w.exl3_intermediate : w.down.size(1);
  Tensor gu = ops.empty({n, 2 * il});
  if (w.exl3) {
    // EXL3 expert: gate and up into the two column halves of gate_up.
    Tensor g = gu.slice(1, 0, il), u = gu.slice(1, il, 2 * il);
    ops.exl3_matmul(g, x, w.exl3->gate);
    ops.exl3_matmul(u, x, w.exl3->up);
  } else {
    ops.matmul(gu, x, w.gate_up);
  }
  Tensor a = ops.empty({n, il});
  ops.swiglu(a, gu, limit);
  return a;
}

// Its second half: down · a [n, hidden], or summed into *sum_into.
Tensor mlp_down(Ops& ops, const MlpWeights& w, const Tensor& a, int64_t hidden, Tensor* sum_into) {
  const int64_t n = a.size(0);
  if (w.exl3) {
    Tensor y = ops.empty({n, hidden});
    ops.exl3_matmul(y, a, w.exl3->down);
    if (sum_into == nullptr) return y;
    ops.add(*sum_into, *sum_into, y);
    return *sum_into;
  }
  // Summing into an existing tensor: the down projection accumulates (out += ...,
  // one rounding per element: the bits of add(out, out, y)) with one launch less.
  if (sum_into != nullptr) {
    ops.matmul(*sum_into, a, w.down, /*accumulate=*/true);
    return *sum_into;
  }
  Tensor y = ops.empty({n, hidden});
  ops.matmul(y, a, w.down);
  return y;
}

// What of the MoE layer's shared expert runs on a side branch, and beside what, where
// the backend overlaps branches (TF_BRANCH_MOE, read at each MoE layer, so a captured
// graph keeps the mode it was captured with; A/B of where it pays):
//   router          gate_up + SwiGLU beside the router, joined before the routed
//                   experts; the down projection accumulates into their sum (default);
//   experts-gateup  the same, joined after the routed experts;
//   experts         the whole shared expert beside the router and the routed experts,
//                   added to their sum after the join (routed + shared rounds once per
//                   element: the bits of the accumulating down projection).
// Either way the same arithmetic as without branches, so the same bits. H200 (run3s9 +
// run4s9, EXL3 experts + DENSE=q4, decode-1 tok/s): no branches 97.2-97.7, router 100.5 /
// 101.3 / 101.4, experts-gateup 100.9 / 101.2 / 100.4, experts 93.8: the gate_up GEMV hides
// behind the small router kernels, but a q4 GEMV beside the integer-ALU-bound EXL3
// kernels slows them more than it saves (router keeps it off them).
enum class SharedBranch { kBesideRouter, kBesideExpertsGateUp, kBesideExperts };

SharedBranch shared_branch() {
  const char* e = std::getenv("TF_BRANCH_MOE");
  const std::string v = e ? e : "";
  if (v == "experts") return SharedBranch::kBesideExperts;
  if (v == "experts-gateup") return SharedBranch::kBesideExpertsGateUp;
  return SharedBranch::kBesideRouter;
}

}  // namespace

Tensor Glm5Model::mlp_forward(const MlpWeights& w, const Tensor& x, Tensor* sum_into) {
  const Tensor a = mlp_activation(ops_, w, x, static_cast<float>(cfg_.swiglu_limit));
  return mlp_down(ops_, w, a, cfg_.hidden_size, sum_into);
}

Tensor Glm5Model::moe_forward(const MoeWeights& w, const Tensor& x) {
  if (!ops_.concurrent_branches(x.size(0))) {
    const std::vector<Tensor> gate = moe_gate(w, x);
    Tensor out = moe_routed(w, x, gate[1], gate[0]);
    return moe_finish(w, x, out);
  }
  // The shared expert (or its first half) on a side branch: until the sum it is
  // independent of the router and the routed experts.
  const float limit = static_cast<float>(cfg_.swiglu_limit);
  const SharedBranch mode = shared_branch();
  Ops::SideBranch side(ops_);
  const Tensor shared = mode == SharedBranch::kBesideExperts ? mlp_forward(w.shared, x)
                                                             : mlp_activation(ops_, w.shared, x, limit);
  side.end();
  const std::vector<Tensor> gate = moe_gate(w, x);
  if (mode == SharedBranch::kBesideRouter) side.join();
  Tensor out = moe_routed(w, x, gate[1], gate[0]);
  side.join();
  if (mode == SharedBranch::kBesideExperts) {
    ops_.add(out, out, shared);
    return out;
  }
  return mlp_down(ops_, w.shared, shared, cfg_.hidden_size, &out);
}

std::vector<Tensor> Glm5Model::moe_gate(const MoeWeights& w, const Tensor& x) {
  const int64_t n = x.size(0), e = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  Tensor logits = ops_.empty({n, e});
  ops_.matmul(logits, x, w.router);
  Tensor wts = ops_.empty({n, k});
  Tensor ids = ops_.empty({n, k}, DType::kI32);
  ops_.moe_route(wts, ids, logits, w.bias, cfg_.n_group, cfg_.topk_group, static_cast<int>(k), cfg_.norm_topk_prob,
                 static_cast<float>(cfg_.routed_scaling_factor));
  return {wts, ids};
}

Tensor Glm5Model::moe_routed(const MoeWeights& w, const Tensor& x, const Tensor& ids, const Tensor& wts) {
  const int64_t n = x.size(0);
  Tensor out;
  if (!w.experts_gate_up.is_null()) {
    // Stacked experts: the backend groups the tokens per expert itself (on the device
    // for CUDA), summing each token's expert outputs in ascending expert id.
    out = ops_.empty({n, cfg_.hidden_size});
    ops_.moe_experts(out, x, ids, wts, w.experts_gate_up, w.experts_down, static_cast<float>(cfg_.swiglu_limit));
  } else if (w.fp8_experts.num_experts() > 0) {
    // The release's FP8 experts, as stored (grouped on the device for CUDA).
    out = ops_.empty({n, cfg_.hidden_size});
    ops_.moe_experts_fp8(out, x, ids, wts, w.fp8_experts, static_cast<float>(cfg_.swiglu_limit));
  } else if (w.exl3_experts) {
    // EXL3 experts as one table: grouped by the backend (on the device for CUDA).
    out = ops_.empty({n, cfg_.hidden_size});
    ops_.moe_experts_exl3(out, x, ids, wts, *w.exl3_experts, static_cast<float>(cfg_.swiglu_limit));
  } else {
    out = routed_experts_by_host_grouping(w, x, ids, wts);
  }
  return out;
}

Tensor Glm5Model::moe_finish(const MoeWeights& w, const Tensor& x, Tensor& routed) {
  return mlp_forward(w.shared, x, &routed);  // routed += shared expert
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
  Tensor post, comb, normed;
};

// One mHC site: the stream mixing coefficients and the sublayer's input,
// rms_norm(collapse(streams), norm_weight), as one op (Ops::mhc_pre).
HcOut hc_pre(Ops& ops, const HyperConnectionWeights& w, const Tensor& norm_weight, const Tensor& streams,
             int64_t m, float norm_eps, float hc_eps, int iters) {
  const int64_t n = streams.size(0), h = streams.size(2);
  HcOut o;
  o.post = ops.empty({n, m});
  o.comb = ops.empty({n, m, m});
  o.normed = ops.empty({n, h});
  ops.mhc_pre(o.post, o.comb, o.normed, streams, w.fn, w.base, w.scale, norm_weight, norm_eps, hc_eps, iters);
  return o;
}

// A sublayer's output y into the streams (mhc_expand with the site's post, comb and
// the residual streams) and the next mHC site, as one op (Ops::mhc_expand_pre).
HcOut hc_expand_pre(Ops& ops, const HyperConnectionWeights& w, const Tensor& norm_weight, Tensor& streams_out,
                    const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& residual, int64_t m,
                    float norm_eps, float hc_eps, int iters) {
  const int64_t n = streams_out.size(0), h = streams_out.size(2);
  HcOut o;
  o.post = ops.empty({n, m});
  o.comb = ops.empty({n, m, m});
  o.normed = ops.empty({n, h});
  ops.mhc_expand_pre(streams_out, o.post, o.comb, o.normed, y, post, comb, residual, w.fn, w.base, w.scale,
                     norm_weight, norm_eps, hc_eps, iters);
  return o;
}

// Segment keys of StepGraphs: the first one, then one per layer, then the head.
constexpr int kSegFirst = 0;
int seg_key_layer(int layer) { return 1 + layer; }
int seg_key_final(int layers) { return 1 + layers; }

// Closes the profiler's step on every path out of step().
struct StepMarks {
  explicit StepMarks(Ops& o) : ops(o) { ops.begin_step(); }
  ~StepMarks() { ops.end_step(); }
  Ops& ops;
};

}  // namespace

// {x [r, H]} -> {streams [r, M, H], post, comb, a}: every stream starts as the
// embedding; then layer 0's attention-site mHC and input norm.
std::vector<Tensor> Glm5Model::seg_first(int64_t m, const Tensor& x) {
  const int64_t r = x.size(0), hdim = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  Tensor streams = ops_.empty({r, m, hdim});
  for (int64_t j = 0; j < m; ++j) {
    Tensor dst = streams.select(1, j);
    ops_.copy(dst, x);
  }
  if (cfg_.num_hidden_layers == 0) return {streams};
  const LayerWeights& lw = weights_.layers[0];
  HcOut hc = hc_pre(ops_, lw.attn_hc, lw.input_norm, streams, m, eps, static_cast<float>(cfg_.hc_eps),
                    cfg_.hc_sinkhorn_iters);
  const Tensor a = hc.normed;
  std::vector<Tensor> out{streams, hc.post, hc.comb, a};
  if (lw.attention == AttentionKind::kLinear)
    for (Tensor& t : kda_project(0, a)) out.push_back(std::move(t));
  return out;
}

// Layer i from its attention core on: {y (MLA output) or core (KDA), post, comb,
// streams[, gate (KDA)]} -> the KDA output projection, the FFN site, then the next
// layer's attention-site mHC and norm (and its KDA projections):
// {streams, post, comb, a[, q, k, v, g, beta, gate]} (last layer: {streams}).
std::vector<Tensor> Glm5Model::seg_layer(int i, const std::vector<Tensor>& in) {
  const std::vector<Tensor> site = ffn_site(i, in);
  Tensor y = ffn_forward(weights_.layers[i], site[3]);
  return layer_tail(i, y, site[1], site[2], site[0]);
}

// A graph step's layer: {streams, post, comb, a[, q, k, v, g, beta, gate]} -> the
// attention core over the bucket's rows (padded rows: harmless scratch), then as
// seg_layer (or seg_layer_to_router).
std::vector<Tensor> Glm5Model::seg_layer_graph(int i, const std::vector<Tensor>& in, bool to_router) {
  const LayerWeights& lw = weights_.layers[i];
  std::vector<Tensor> site;
  if (lw.attention == AttentionKind::kLinear) {
    const std::vector<Tensor> proj{in[4], in[5], in[6], in[7], in[8]};
    if (decode_runs_.size() != 1 || !decode_runs_[0].graph)
      throw StatusError(internal_error("graph step without its one padded decode run"));
    Tensor core = ops_.empty({decode_runs_[0].width, weights_.layers[i].kda.heads * cfg_.linear_head_dim});
    kda_core_rows(i, kda_index_[i], proj, decode_runs_[0], core);
    site = {core, in[1], in[2], in[0], in[9]};
  } else {
    // A shared DSA layer finds the previous layer's top-k in decode_topk_.
    std::vector<Tensor> topk(graph_spans_.size());
    site = {mla_forward(lw, mla_index_[i], in[3], graph_spans_, topk, false), in[1], in[2], in[0]};
  }
  return to_router ? seg_layer_to_router(i, site) : seg_layer(i, site);
}

// The attention output into the streams, then the FFN site's mHC and norm:
// {streams, post, comb, a}.
std::vector<Tensor> Glm5Model::ffn_site(int i, const std::vector<Tensor>& in) {
  const int64_t r = in[0].size(0), hdim = cfg_.hidden_size, m = cfg_.hc_mult;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const LayerWeights& lw = weights_.layers[i];
  const Tensor attn = lw.attention == AttentionKind::kLinear ? kda_output(i, in[0], in[4]) : in[0];
  Tensor streams = ops_.empty({r, m, hdim});
  HcOut hc = hc_expand_pre(ops_, lw.ffn_hc, lw.post_norm, streams, attn, in[1], in[2], in[3], m, eps,
                           static_cast<float>(cfg_.hc_eps), cfg_.hc_sinkhorn_iters);
  return {streams, hc.post, hc.comb, hc.normed};
}

// The FFN output y into the streams, then the next layer's attention site (and
// its KDA projections).
std::vector<Tensor> Glm5Model::layer_tail(int i, const Tensor& y, const Tensor& post, const Tensor& comb,
                                          const Tensor& streams) {
  const int64_t r = y.size(0), hdim = cfg_.hidden_size, m = cfg_.hc_mult;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  Tensor next = ops_.empty({r, m, hdim});
  if (i + 1 >= cfg_.num_hidden_layers) {
    ops_.mhc_expand(next, y, post, comb, streams);
    return {next};
  }
  const LayerWeights& nw = weights_.layers[i + 1];
  HcOut nh = hc_expand_pre(ops_, nw.attn_hc, nw.input_norm, next, y, post, comb, streams, m, eps,
                           static_cast<float>(cfg_.hc_eps), cfg_.hc_sinkhorn_iters);
  const Tensor na = nh.normed;
  std::vector<Tensor> out{next, nh.post, nh.comb, na};
  if (nw.attention == AttentionKind::kLinear)
    for (Tensor& t : kda_project(i + 1, na)) out.push_back(std::move(t));
  return out;
}

// seg_layer up to the MoE router: {streams, post, comb, a, weights, ids}.
std::vector<Tensor> Glm5Model::seg_layer_to_router(int i, const std::vector<Tensor>& in) {
  std::vector<Tensor> out = ffn_site(i, in);
  for (Tensor& t : moe_gate(weights_.layers[i].moe, out[3])) out.push_back(std::move(t));
  return out;
}

// seg_layer after the routed experts: {routed, streams, post, comb, a} -> as seg_layer.
std::vector<Tensor> Glm5Model::seg_layer_from_experts(int i, const std::vector<Tensor>& in) {
  Tensor routed = in[0];
  Tensor y = moe_finish(weights_.layers[i].moe, in[4], routed);
  all_reduce(y);
  return layer_tail(i, y, in[2], in[3], in[1]);
}

// {streams, mean weights [r, M]} -> {hidden [r, H]} (+ logits [r, V]): the plain
// mean over the streams, the final norm, the lm_head.
std::vector<Tensor> Glm5Model::seg_final(const std::vector<Tensor>& in, bool logits) {
  const int64_t r = in[0].size(0), hdim = cfg_.hidden_size;
  Tensor pooled = ops_.empty({r, hdim});
  ops_.mhc_collapse(pooled, in[0], in[1]);
  Tensor hidden = ops_.empty({r, hdim});
  ops_.rms_norm(hidden, pooled, weights_.norm, static_cast<float>(cfg_.rms_norm_eps));
  if (!logits) return {hidden};
  return {hidden, logits_for(hidden)};
}

void Glm5Model::put_embeddings(Tensor& x, const StepEntry& e, const Span& sp) {
  if (e.embed_runs.empty()) return;
  if (!e.embeds || e.embeds->dim() != 2 || e.embeds->size(1) != cfg_.hidden_size || e.embeds->dtype() != DType::kF32)
    throw StatusError(invalid_argument("step: an entry's embeddings must be f32 [rows, " +
                                       std::to_string(cfg_.hidden_size) + "]"));
  for (const StepEntry::EmbedRun& r : e.embed_runs) {
    if (r.count <= 0 || r.row < 0 || r.row + r.count > sp.rows || r.src < 0 || r.src + r.count > e.embeds->size(0))
      throw StatusError(invalid_argument("step: an embedding run lies outside its span or its embeddings"));
    Tensor dst = x.slice(0, sp.row0 + r.row, sp.row0 + r.row + r.count);
    ops_.copy(dst, e.embeds->slice(0, r.src, r.src + r.count));
  }
}

Expected<std::vector<StepResult>> Glm5Model::step(std::span<const StepEntry> batch) {
  try {
    StepMarks marks(ops_);
    const int64_t m = cfg_.hc_mult;
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
      for (const std::span<const int32_t> ids : {e.tokens, e.scored_tokens})
        for (int32_t t : ids)
          if (t < 0 || t >= cfg_.vocab_size)
            return out_of_range("step: token id " + std::to_string(t) + " outside the vocabulary of " +
                                std::to_string(cfg_.vocab_size));
      if (e.sequence->spec_.pending)
        return invalid_argument("step: entry " + std::to_string(i) +
                                "'s sequence has a speculative step not committed (commit_speculation)");
      if (e.mtp && !weights_.mtp)
        return invalid_argument("step: entry " + std::to_string(i) +
                                " asks for MTP drafts, but the checkpoint has no MTP layer");
      if (!e.scored_tokens.empty() && (!e.all_logits || e.scored_tokens.size() > e.tokens.size()))
        return invalid_argument("step: entry " + std::to_string(i) + " scores " +
                                std::to_string(e.scored_tokens.size()) + " tokens (at most its " +
                                std::to_string(e.tokens.size()) + " rows, with all_logits)");
      if (e.mtp_drafts < 0 || e.mtp_drafts > 63 || (e.mtp_drafts > 0 && (!e.mtp || e.tokens.size() != 1)))
        return invalid_argument("step: entry " + std::to_string(i) + " asks for " + std::to_string(e.mtp_drafts) +
                                " MTP drafts (0..63, after one token, with mtp)");
    }
    // MTP drafts first: they are the rest of their entries' spans.
    std::vector<std::vector<int32_t>> drafts(batch.size());
    bool any_drafts = false;
    for (const StepEntry& e : batch) any_drafts = any_drafts || e.mtp_drafts > 0;
    if (any_drafts) drafts = mtp_draft(batch);
    std::vector<std::vector<int32_t>> own(batch.size());
    std::vector<std::span<const int32_t>> tokens(batch.size());
    std::vector<bool> all_logits(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      const StepEntry& e = batch[i];
      tokens[i] = e.tokens;
      all_logits[i] = e.all_logits;
      bool speculative = e.speculative;
      if (e.mtp_drafts > 0) {
        own[i].assign(e.tokens.begin(), e.tokens.end());
        own[i].insert(own[i].end(), drafts[i].begin(), drafts[i].end());
        tokens[i] = own[i];
        all_logits[i] = speculative = true;
      }
      spans.push_back({e.sequence, static_cast<int64_t>(ids.size()), static_cast<int64_t>(tokens[i].size()),
                       e.sequence->length_, speculative});
      ids.insert(ids.end(), tokens[i].begin(), tokens[i].end());
    }
    for (const Span& sp : spans)
      if (sp.speculative) begin_speculation(*sp.seq, sp.pos0, sp.rows);
    if (num_mla_ > 0)
      for (const Span& sp : spans) {
        TF_RETURN_IF_ERROR(pool_->reserve(sp.seq->pages_, sp.pos0 + sp.rows));
        sync_page_table(sp.seq->pages_, sp.seq->pages_dev_);
      }
    const int64_t n = static_cast<int64_t>(ids.size());
    // A decode step (one token per sequence) runs padded to a bucket of rows, as
    // captured graphs (the attention cores included); anything else runs eagerly.
    bool decode = n == static_cast<int64_t>(spans.size());
    for (const Span& sp : spans) decode = decode && !sp.speculative;
    const int64_t bucket = graphs_ && graphs_->enabled() && decode ? StepGraphs::bucket_for(n) : 0;
    // Decode rows' MLA/indexer (graph step: also KDA) metadata: one upload (glm5_attention.cc).
    prepare_decode_rows(spans, bucket);
    if (n == 0) return std::vector<StepResult>{};
    const int64_t rows = bucket > 0 ? bucket : n;
    StepGraphs eager(ops_, false);
    StepGraphs& g = bucket > 0 ? *graphs_ : eager;
    // Rows [0, n) of a segment output (padded in graph mode).
    auto real = [&](const Tensor& t) { return bucket > 0 ? t.slice(0, 0, n) : t; };

    Tensor x = ops_.empty({n, cfg_.hidden_size});
    ops_.embedding(x, weights_.embed, upload_i32(ids));
    for (size_t i = 0; i < batch.size(); ++i) put_embeddings(x, batch[i], spans[i]);
    std::vector<Tensor> cur =
        g.run(kSegFirst, bucket, n, {{x, false}}, [this, m](const std::vector<Tensor>& in) { return seg_first(m, in[0]); });

    std::vector<Tensor> shared_topk(spans.size());
    for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
      const LayerWeights& lw = weights_.layers[i];
      if (bucket > 0) {
        // Graph step: the whole layer, its attention core included, is one segment on
        // the previous segment's outputs (the cores read their per-row state addresses
        // from the step's metadata upload).
        std::vector<StepGraphs::Input> in;
        for (const Tensor& t : cur) in.push_back({t, true});
        if (lw.mlp == MlpKind::kSparse && g.fell_back(seg_key_layer(i), bucket)) {
          // The layer could not be captured whole at this bucket (the routed experts
          // sync with the host): captured up to the router and after the experts.
          const int base = seg_key_final(cfg_.num_hidden_layers) + 1 + 2 * i;
          const std::vector<Tensor> mid = g.run(
              base, bucket, n, in, [this, i](const std::vector<Tensor>& x) { return seg_layer_graph(i, x, true); });
          Tensor routed = moe_routed(lw.moe, real(mid[3]), real(mid[5]), real(mid[4]));
          cur = g.run(base + 1, bucket, n,
                      {{routed, false}, {mid[0], true}, {mid[1], true}, {mid[2], true}, {mid[3], true}},
                      [this, i](const std::vector<Tensor>& x) { return seg_layer_from_experts(i, x); });
        } else {
          cur = g.run(seg_key_layer(i), bucket, n, in,
                      [this, i](const std::vector<Tensor>& x) { return seg_layer_graph(i, x, false); });
        }
        continue;
      }
      // Eager step: the stateful core on the rows, then the rest of the layer.
      std::vector<StepGraphs::Input> in;
      if (lw.attention == AttentionKind::kLinear) {
        std::vector<Tensor> proj;
        for (size_t j = 4; j < 9; ++j) proj.push_back(cur[j]);
        in = {{kda_core(i, kda_index_[i], proj, spans), false}, {cur[1], true}, {cur[2], true}, {cur[0], true},
              {cur[9], true}};
      } else {
        in = {{mla_forward(lw, mla_index_[i], cur[3], spans, shared_topk, false), false},
              {cur[1], true},
              {cur[2], true},
              {cur[0], true}};
      }
      cur = g.run(seg_key_layer(i), bucket, n, in, [this, i](const std::vector<Tensor>& x) { return seg_layer(i, x); });
    }
    // Final head: plain mean over the streams, then the final norm.
    // The 1/M weights live on the device, uploaded again only when a step has more rows.
    if (mean_w_.is_null() || mean_w_.size(0) < rows) {
      const int64_t cap = std::max<int64_t>(rows, 64);
      mean_w_ = ops_.to_device(Tensor::from_floats(
          {cap, m}, std::vector<float>(static_cast<size_t>(cap * m), 1.0f / static_cast<float>(m))));
    }
    // The rows whose logits are wanted: each entry's last row, or all its rows.
    std::vector<int64_t> first_row(batch.size() + 1, 0);
    std::vector<int32_t> wanted;
    for (size_t i = 0; i < spans.size(); ++i) {
      const Span& sp = spans[i];
      const int64_t r0 = all_logits[i] ? sp.row0 : sp.row0 + sp.rows - 1;
      for (int64_t r = r0; r < sp.row0 + sp.rows; ++r) wanted.push_back(static_cast<int32_t>(r));
      first_row[i + 1] = static_cast<int64_t>(wanted.size());
    }
    const auto num_wanted = static_cast<int64_t>(wanted.size());
    // Many rows' logits (prompt chunks being scored): made in blocks (Glm5Options::
    // logits_block_rows). Decided from the rows alone: tensor-parallel ranks make the same calls.
    const bool in_blocks = logits_block_rows_ > 0 && num_wanted > logits_block_rows_;
    const bool all_rows = !in_blocks && num_wanted == n;
    const std::vector<Tensor> head =
        g.run(seg_key_final(cfg_.num_hidden_layers), bucket, n, {{cur[0], true}, {mean_w_.slice(0, 0, rows), true}},
              [this, all_rows](const std::vector<Tensor>& in) { return seg_final(in, all_rows); });
    if (bucket > 0) watch_graph_step();
    // The MTP layer's pairs this step completes (its own forward, after the main one).
    bool any_mtp = false;
    for (const StepEntry& e : batch) any_mtp = any_mtp || e.mtp;
    if (any_mtp) mtp_keep(batch, spans, tokens, real(head[0]));
    // One lm_head call for every wanted row of every sequence (or one per block of them).
    Tensor hidden, logits;
    if (all_rows) {
      hidden = real(head[0]);
      logits = real(head[1]);
    } else {
      hidden = ops_.empty({num_wanted, cfg_.hidden_size});
      ops_.gather_rows(hidden, head[0], upload_i32(wanted));
      if (!in_blocks) logits = logits_for(hidden);
    }

    // One download of the logits (and of the hidden states) for all entries that ask.
    bool any_host = false, any_hidden = false;
    int64_t host_rows = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      any_host = any_host || batch[i].host_logits;
      any_hidden = any_hidden || batch[i].want_hidden;
      if (batch[i].host_logits) host_rows += first_row[i + 1] - first_row[i];
    }
    // A packed host copy that is not the (reused) graph output buffer itself.
    auto download = [&](const Tensor& t) {
      Tensor h = to_host(t);
      if (bucket > 0 && h.raw() == t.raw()) {
        Tensor c = Tensor::empty(t.shape(), t.dtype());
        c.copy_from(t);
        h = c;
      }
      return h;
    };
    std::vector<StepResult> out(batch.size());
    // The scored rows (StepEntry::scored_tokens) among wanted rows [b0, b1), whose logits
    // `block` holds: scored on the device, in row order.
    auto score_rows = [&](const Tensor& block, int64_t b0, int64_t b1) {
      std::vector<Tensor> rows;
      std::vector<SampleRowParams> params;
      std::vector<size_t> entry_of;
      for (size_t i = 0; i < batch.size(); ++i) {
        const std::span<const int32_t> scored = batch[i].scored_tokens;
        const int64_t r0 = std::max(b0, first_row[i]);
        const int64_t r1 = std::min(b1, first_row[i] + static_cast<int64_t>(scored.size()));
        for (int64_t r = r0; r < r1; ++r) {
          rows.push_back(block.select(0, r - b0));
          params.push_back(batch[i].score_params);
          params.back().scored_token = scored[static_cast<size_t>(r - first_row[i])];
          entry_of.push_back(i);
        }
      }
      if (rows.empty()) return;
      std::vector<SampleRowResult> scores(rows.size());
      ops_.sample_rows(scores, rows, params);
      for (size_t k = 0; k < scores.size(); ++k) out[entry_of[k]].scores.push_back(scores[k]);
    };
    // Host copies of the wanted rows [b0, b1) of the entries that ask for host logits, from
    // `block` (those rows' logits): one download when every row is such an entry's.
    Tensor logits_h;
    auto download_rows = [&](const Tensor& block, int64_t b0, int64_t b1) {
      if (host_rows == num_wanted && b0 == 0 && b1 == num_wanted) {
        logits_h = download(block);
        return;
      }
      if (logits_h.is_null()) logits_h = Tensor::empty({num_wanted, block.size(1)}, DType::kF32);
      // Adjacent such entries' rows are adjacent: one copy for each run of them.
      for (size_t i = 0, j = 0; i < batch.size(); i = j) {
        for (j = i + 1; batch[i].host_logits && j < batch.size() && batch[j].host_logits;) ++j;
        const int64_t r0 = std::max(b0, first_row[i]), r1 = std::min(b1, first_row[j]);
        if (!batch[i].host_logits || r0 >= r1) continue;
        Tensor dst = logits_h.slice(0, r0, r1);
        dst.copy_from(to_host(block.slice(0, r0 - b0, r1 - b0)));
      }
    };
    if (in_blocks) {
      // `logits` keeps each entry's last row on the device (sampling's); the rows of entries
      // that ask go to the host.
      size_t entry = 0;
      for (int64_t b0 = 0; b0 < num_wanted; b0 += logits_block_rows_) {
        const int64_t b1 = std::min(num_wanted, b0 + logits_block_rows_);
        const Tensor block = logits_for(hidden.slice(0, b0, b1));
        score_rows(block, b0, b1);
        if (b0 == 0) logits = ops_.empty({static_cast<int64_t>(batch.size()), block.size(1)});
        for (; entry < batch.size() && first_row[entry + 1] <= b1; ++entry) {
          Tensor last = logits.slice(0, static_cast<int64_t>(entry), static_cast<int64_t>(entry) + 1);
          const int64_t r = first_row[entry + 1] - 1 - b0;
          ops_.copy(last, block.slice(0, r, r + 1));
        }
        if (any_host) download_rows(block, b0, b1);
      }
    } else {
      score_rows(logits, 0, num_wanted);
      if (any_host) download_rows(logits, 0, num_wanted);
    }
    const Tensor hidden_h = any_hidden ? download(hidden) : Tensor();
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t r0 = first_row[i], r1 = first_row[i + 1];
      const auto e = static_cast<int64_t>(i);
      out[i].device_logits = in_blocks ? logits.slice(0, e, e + 1) : logits.slice(0, r0, r1);
      if (batch[i].host_logits) out[i].logits = logits_h.slice(0, r0, r1);
      if (batch[i].want_hidden) out[i].hidden = hidden_h.slice(0, r0, r1);
      out[i].drafts = std::move(drafts[i]);
    }
    for (const Span& sp : spans) {
      sp.seq->length_ = sp.pos0 + sp.rows;
      sp.seq->spec_.pending = sp.speculative;
    }
    return out;
  } catch (const StatusError& e) {
    return e.status().with_context("glm5 step");
  }
}

}  // namespace tf
