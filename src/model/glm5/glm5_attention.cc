// The MLA attention sublayer of Glm5Model, in the absorbed form over the paged
// latent cache, with the DSA indexer (k-pools anchored at token 0, top-k pools expanded to
// tokens, plus the visible tail of the incomplete pool).
//
// Prefill spans run per sequence (indexer_forward, one attention call each). Runs of
// adjacent decode rows (one token per sequence) run through the *_rows ops: latent store,
// indexer ring/pool update, scores, top-k, token expansion and attention, each one launch
// for the whole run, with positions, page tables and indexer state addresses read from a
// device buffer that prepare_decode_rows fills with one upload before the layers. Both
// paths give a sequence the same result (the *_rows ops are the one-sequence ops per row).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>

#include "model/glm5/glm5_model.h"

namespace tf {

Glm5Model::IndexerRows Glm5Model::indexer_project(const IndexerWeights& iw, const Tensor& x, const Tensor& q_resid) {
  const int64_t n = x.size(0), hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
  IndexerRows r;
  r.q = ops_.empty({n, hi * di});
  ops_.matmul(r.q, q_resid, iw.wq_b);
  Tensor kraw = ops_.empty({n, di});
  r.key = ops_.empty({n, di});
  r.gate = ops_.empty({n, di});
  r.wts = ops_.empty({n, hi});
  // The three projections of x in one call (one launch on CUDA at decode rows).
  const Matrix wk(iw.wk), compress_gate(iw.compress_gate), weights_proj(iw.weights_proj);
  ops_.matmul_many({&kraw, &r.gate, &r.wts}, x, {&wk, &compress_gate, &weights_proj});
  ops_.layer_norm(r.key, kraw, iw.k_norm_w, iw.k_norm_b, 1e-6f);
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
  ensure_indexer_ring(st);
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
    ensure_pool_capacity(st, need);
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
  if (ksel > 0 && ksel == pools && sp.speculative) {
    // Every pool is kept whatever its score (a short context): in pool order without scoring,
    // as the decode rows take them (a pool past a row's position gives -1s).
    std::vector<int32_t> all(static_cast<size_t>(t * pools));
    for (int64_t i = 0; i < t; ++i)
      for (int64_t p = 0; p < pools; ++p) all[static_cast<size_t>(i * pools + p)] = static_cast<int32_t>(p);
    sel = upload_i32(all).reshape({t, pools});
  } else if (ksel > 0) {
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
  Tensor kv = ops_.empty({n, r}), latent = ops_.empty({n, r});
  // q_a and kv_a both project x: one call (one launch on CUDA at decode rows when
  // their formats match).
  ops_.matmul_many({&qa, &kv}, x, {&w.q_a, &w.kv_a});
  ops_.rms_norm(q_resid, qa, w.q_a_norm, eps);

  // A step of decode rows only: the indexer (its projections, cache update, scores and
  // top-k) on a side branch beside the q / latent chain, which it meets only at the
  // attention (through the top-k indices).
  size_t decode_spans = 0;
  for (const DecodeRun& run : decode_runs_) decode_spans += run.spans;
  static const bool indexer_branch = [] {  // TF_BRANCH_INDEXER=0: in order (A/B)
    const char* e = std::getenv("TF_BRANCH_INDEXER");
    return !(e && std::string(e) == "0");
  }();
  const bool beside =
      indexer_branch && w.indexer && !mtp && decode_spans == spans.size() && ops_.concurrent_branches(n);
  IndexerRows irows;
  std::vector<Tensor> run_indices;  // by decode run, when beside
  std::optional<Ops::SideBranch> side;
  if (beside) {
    side.emplace(ops_);
    irows = indexer_project(*w.indexer, x, q_resid);
    for (const DecodeRun& run : decode_runs_)
      run_indices.push_back(indexer_decode_rows(w, mla_index, run, irows, shared_topk));
    side->end();
  }

  Tensor q = ops_.empty({n, hl, dqk});
  ops_.matmul(q, q_resid, w.q_b);
  Tensor q_abs = ops_.empty({n, hl, r});
  ops_.head_matmul(q_abs, q, w.w_uk_t);
  ops_.rms_norm(latent, kv, w.kv_a_norm, eps);

  LatentCachePool& pool = mtp ? *mtp_pool_ : *pool_;
  const int layer = mtp ? 0 : mla_index;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  Tensor ctx = ops_.empty({n, hl, r});
  if (w.indexer && !beside) irows = indexer_project(*w.indexer, x, q_resid);
  for (size_t s = 0; s < spans.size(); ++s) {
    if (!mtp && s < decode_run_at_.size() && decode_run_at_[s] >= 0) {
      const size_t ri = static_cast<size_t>(decode_run_at_[s]);
      const DecodeRun& run = decode_runs_[ri];
      const DecodeRowsView v = decode_rows_view(mla_index, run);
      ops_.latent_store_rows(v, latent.slice(0, run.row0, run.row0 + run.width));
      Tensor indices;
      if (beside) {
        side->join();  // no-op after the first run
        indices = run_indices[ri];
      } else {
        indices = indexer_decode_rows(w, mla_index, run, irows, shared_topk);
      }
      Tensor out = ctx.slice(0, run.row0, run.row0 + run.width);
      ops_.mla_sparse_attention_rows(out, q_abs.slice(0, run.row0, run.row0 + run.width), v, indices, scale);
      s += run.spans - 1;
      continue;
    }
    const Span& sp = spans[s];
    const Tensor& table = mtp ? sp.seq->mtp_pages_dev_ : sp.seq->pages_dev_;
    const LatentPagesView view = pool.view(layer, table, sp.pos0 + sp.rows);
    ops_.latent_store(view, pool.layer_pages(layer), pool.layer_scales(layer),
                      latent.slice(0, sp.row0, sp.row0 + sp.rows), sp.pos0);
    Tensor indices;
    if (w.indexer) {
      Glm5Sequence::IndexerState& st = mtp ? sp.seq->mtp_indexer_ : sp.seq->indexer_[mla_index];
      if (sp.speculative && !mtp) note_indexer_before(mla_index, sp, irows, st);
      indices = indexer_forward(*w.indexer, irows, sp, st);
      shared_topk[s] = indices;
    } else {
      indices = shared_topk[s];
      if (indices.is_null()) throw StatusError(internal_error("shared DSA layer without a previous top-k"));
    }
    Tensor out = ctx.slice(0, sp.row0, sp.row0 + sp.rows);
    ops_.mla_sparse_attention(out, q_abs.slice(0, sp.row0, sp.row0 + sp.rows), view, indices, scale);
  }
  if (side) side->join();
  Tensor o = ops_.empty({n, hl, dv});
  ops_.head_matmul(o, ctx, w.w_uv);
  Tensor y = ops_.empty({n, cfg_.hidden_size});
  ops_.matmul(y, o, w.o_proj);
  all_reduce(y);
  return y;
}

void Glm5Model::ensure_indexer_ring(Glm5Sequence::IndexerState& st) {
  if (!st.ring.is_null()) return;
  st.ring = ops_.zeros({2, cfg_.index_kpool, cfg_.index_head_dim});
  st.ring_k = st.ring.select(0, 0);
  st.ring_gate = st.ring.select(0, 1);
}

void Glm5Model::ensure_pool_capacity(Glm5Sequence::IndexerState& st, int64_t pools) {
  if (!st.pool_keys.is_null() && st.pool_keys.size(0) >= pools) return;
  // Grow geometrically so that decode appends amortise to no copies.
  const int64_t cap = std::max<int64_t>({pools, 64, st.pool_keys.is_null() ? 0 : 2 * st.pool_keys.size(0)});
  Tensor grown = ops_.empty({cap, cfg_.index_head_dim});
  if (st.pools > 0) {
    Tensor dst = grown.slice(0, 0, st.pools);
    ops_.copy(dst, st.pool_keys.slice(0, 0, st.pools));
  }
  st.pool_keys = grown;
}

void Glm5Model::prepare_decode_rows(const std::vector<Span>& spans, int64_t pad_to) {
  decode_runs_.clear();
  decode_run_at_.assign(spans.size(), -1);
  graph_spans_.clear();
  const int64_t kp = cfg_.index_kpool;
  if (pad_to > static_cast<int64_t>(spans.size()) && num_mla_ > 0 && !pad_seq_) {
    // The scratch sequence of padded rows: position 0 on the pool's scratch page.
    pad_seq_.reset(new Glm5Sequence());
    pad_seq_->pages_dev_ = upload_i32({pool_->scratch_page()});
    pad_seq_->indexer_.resize(static_cast<size_t>(num_mla_));
    for (Glm5Sequence::IndexerState& st : pad_seq_->indexer_) {
      ensure_indexer_ring(st);
      ensure_pool_capacity(st, 1);
    }
  }
  // Host image of the metadata: per run, positions (int32, packed two per int64), page
  // table addresses, then per indexer layer ring and pool-key addresses, then per KDA
  // layer the conv and recurrent state addresses (0 for padded rows). A graph run's
  // layout depends only on its width, so a captured bucket reads the same offsets.
  std::vector<int64_t> meta;
  auto address = [](const Tensor& t) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.raw())); };
  int64_t max_pools = 0;
  for (size_t s = 0; s < spans.size();) {
    size_t e = s;
    // A speculative span runs on its own even at one row (glm5_speculation.cc).
    while (e < spans.size() && spans[e].rows == 1 && !spans[e].speculative &&
           spans[e].row0 == spans[s].row0 + static_cast<int64_t>(e - s))
      ++e;
    if (e == s) {
      ++s;
      continue;
    }
    DecodeRun run;
    run.first_span = s;
    run.spans = e - s;
    run.row0 = spans[s].row0;
    run.graph = pad_to > 0;
    if (run.graph && (s != 0 || e != spans.size() || run.row0 != 0 || pad_to < static_cast<int64_t>(run.spans)))
      throw StatusError(internal_error("graph step: the batch is not one run of decode rows"));
    const int64_t b = static_cast<int64_t>(run.spans), width = run.graph ? pad_to : b;
    run.width = width;
    // The sequence of row i (the scratch one for a padded row) and its position.
    auto seq_of = [&](int64_t i) { return i < b ? spans[s + static_cast<size_t>(i)].seq : pad_seq_.get(); };
    auto pos_of = [&](int64_t i) { return i < b ? spans[s + static_cast<size_t>(i)].pos0 : int64_t{0}; };
    run.positions_at = static_cast<int64_t>(meta.size());
    meta.resize(meta.size() + static_cast<size_t>((width + 1) / 2), 0);
    for (int64_t i = 0; i < width; ++i) {
      const int64_t pos = pos_of(i);
      if (pos > INT32_MAX - 1) throw StatusError(out_of_range("decode position " + std::to_string(pos)));
      const int32_t p32 = static_cast<int32_t>(pos);
      std::memcpy(reinterpret_cast<char*>(meta.data() + run.positions_at) + i * 4, &p32, 4);
      if (kp > 0) max_pools = std::max(max_pools, (pos + 1) / kp);
    }
    for (size_t i = s; i < e; ++i) run.rows.emplace_back(spans[i].seq, spans[i].pos0);
    run.tables_at = static_cast<int64_t>(meta.size());
    if (num_mla_ > 0)
      for (int64_t i = 0; i < width; ++i) meta.push_back(address(seq_of(i)->pages_dev_));
    run.rings_at.assign(static_cast<size_t>(num_mla_), -1);
    run.pool_keys_at.assign(static_cast<size_t>(num_mla_), -1);
    for (size_t l = 0; l < weights_.layers.size(); ++l) {
      const int m = mla_index_[l];
      if (m < 0 || !weights_.layers[l].mla.indexer) continue;
      // The state this step needs exists before the launches: the ring, and room for
      // the pool a row may complete.
      for (size_t i = s; i < e; ++i) {
        Glm5Sequence::IndexerState& st = spans[i].seq->indexer_[static_cast<size_t>(m)];
        ensure_indexer_ring(st);
        ensure_pool_capacity(st, (spans[i].pos0 + 1) / kp);
      }
      run.rings_at[static_cast<size_t>(m)] = static_cast<int64_t>(meta.size());
      for (int64_t i = 0; i < width; ++i) meta.push_back(address(seq_of(i)->indexer_[static_cast<size_t>(m)].ring));
      run.pool_keys_at[static_cast<size_t>(m)] = static_cast<int64_t>(meta.size());
      for (int64_t i = 0; i < width; ++i)
        meta.push_back(address(seq_of(i)->indexer_[static_cast<size_t>(m)].pool_keys));
      // The host counters follow the positions (the device does the work).
      for (size_t i = s; i < e; ++i) {
        Glm5Sequence::IndexerState& st = spans[i].seq->indexer_[static_cast<size_t>(m)];
        st.pools = (spans[i].pos0 + 1) / kp;
        st.ring_rows = (spans[i].pos0 + 1) % kp;
      }
    }
    if (run.graph && num_mla_ > 0 && decode_topk_.is_null()) {
      // Allocated outside any capture (once; its address is baked into the graphs).
      const bool tail = cfg_.index_kpool_always_select_tail && kp > 1;
      decode_topk_ = ops_.zeros({StepGraphs::kMaxBucket, cfg_.index_topk + (tail ? kp - 1 : 0)}, DType::kI32);
    }
    {
      run.kda_conv_at.assign(static_cast<size_t>(num_kda_), -1);
      run.kda_rec_at.assign(static_cast<size_t>(num_kda_), -1);
      for (int k = 0; k < num_kda_; ++k) {
        run.kda_conv_at[static_cast<size_t>(k)] = static_cast<int64_t>(meta.size());
        for (int64_t i = 0; i < width; ++i) meta.push_back(i < b ? address(seq_of(i)->kda_[static_cast<size_t>(k)].conv) : 0);
        run.kda_rec_at[static_cast<size_t>(k)] = static_cast<int64_t>(meta.size());
        for (int64_t i = 0; i < width; ++i)
          meta.push_back(i < b ? address(seq_of(i)->kda_[static_cast<size_t>(k)].recurrent) : 0);
      }
    }
    if (run.graph) graph_spans_ = spans;
    decode_run_at_[s] = static_cast<int>(decode_runs_.size());
    decode_runs_.push_back(std::move(run));
    s = e;
  }
  if (decode_runs_.empty()) return;
  // Score columns: a power of two, only growing. A captured graph has the old width
  // baked in: growing it (rare: doubling) drops the graphs.
  const int64_t old_width = decode_scores_width_;
  while (decode_scores_width_ < std::max<int64_t>(max_pools, 1))
    decode_scores_width_ = std::max<int64_t>(64, 2 * decode_scores_width_);
  const int64_t words = static_cast<int64_t>(meta.size());
  bool moved = false;
  if (decode_meta_.is_null() || decode_meta_.numel() < words) {
    // Room for the largest bucket's layout at once, so that the buffer (whose address
    // the graphs hold) rarely moves.
    const int64_t per_row = (words + static_cast<int64_t>(spans.size())) / std::max<int64_t>(decode_runs_[0].width, 1);
    decode_meta_ = ops_.empty({std::max<int64_t>({words, 1024, (per_row + 1) * StepGraphs::kMaxBucket})}, DType::kI64);
    moved = true;
  }
  if (graphs_ && (moved || (old_width != 0 && old_width != decode_scores_width_))) graphs_->clear();
  Tensor dst = decode_meta_.slice(0, 0, words);
  ops_.copy(dst, Tensor::view_of(meta.data(), {words}, DType::kI64));
}

DecodeRowsView Glm5Model::decode_rows_view(int mla_index, const DecodeRun& run) const {
  const int64_t* meta = decode_meta_.data<int64_t>();
  DecodeRowsView v = pool_->rows_view(mla_index);
  v.rows = run.width;
  v.positions = reinterpret_cast<const int32_t*>(meta + run.positions_at);
  v.page_tables = meta + run.tables_at;
  v.kpool = cfg_.index_kpool;
  v.index_dim = cfg_.index_head_dim;
  return v;
}

Tensor Glm5Model::indexer_decode_rows(const MlaWeights& w, int mla_index, const DecodeRun& run,
                                      const IndexerRows& irows, std::vector<Tensor>& shared_topk) {
  const int64_t b = run.width, r0 = run.row0, r1 = run.row0 + b;
  const int64_t kp = cfg_.index_kpool, di = cfg_.index_head_dim;
  Tensor indices;
  if (w.indexer) {
    const IndexerWeights& iw = *w.indexer;
    const int64_t* meta = decode_meta_.data<int64_t>();
    DecodeRowsView v = decode_rows_view(mla_index, run);
    v.rings = meta + run.rings_at[static_cast<size_t>(mla_index)];
    v.pool_keys = meta + run.pool_keys_at[static_cast<size_t>(mla_index)];
    ops_.indexer_update_rows(v, irows.key.slice(0, r0, r1), irows.gate.slice(0, r0, r1), iw.ape);
    const bool tail = cfg_.index_kpool_always_select_tail && kp > 1;
    const int64_t width = cfg_.index_topk + (tail ? kp - 1 : 0), ksel = cfg_.index_topk / kp;
    Tensor scores = ops_.empty({b, decode_scores_width_});
    // Rows with at most ksel pools (contexts under index_topk tokens) select all of them: not scored.
    ops_.indexer_scores_rows(scores, v, irows.q.slice(0, r0, r1), irows.wts.slice(0, r0, r1),
                             1.0f / std::sqrt(static_cast<float>(di)), ksel);
    Tensor sel = ops_.empty({b, ksel}, DType::kI32);
    ops_.indexer_topk_rows(sel, scores, v, indexer_ties_);
    if (run.graph) {
      // A fixed buffer: the next (shared) layer is in another segment.
      if (decode_topk_.is_null() || decode_topk_.size(1) != width || decode_topk_.size(0) < b)
        throw StatusError(internal_error("graph step: no top-k buffer for the decode rows"));
      indices = decode_topk_.slice(0, 0, b);
    } else {
      indices = ops_.empty({b, width}, DType::kI32);
    }
    ops_.indexer_token_indices_rows(indices, sel, v, tail);
    shared_topk[run.first_span] = indices;
  } else {
    indices = shared_topk[run.first_span];
    if (indices.is_null() && run.graph && !decode_topk_.is_null()) indices = decode_topk_.slice(0, 0, b);
    if (indices.is_null()) throw StatusError(internal_error("shared DSA layer without a previous top-k"));
  }
  return indices;
}

}  // namespace tf
