// The MTP (NextN) draft layer, spec §5 (inferred, as DeepSeek-V3 / GLM-4.5 NextN and
// vLLM's MTP ports run it): for the main model's final hidden state h_i (after the stream
// mean and the final norm) and the next token t_{i+1},
//   u = W_eh [enorm(emb(t_{i+1})); hnorm(h_i)]   (the embedding zeroed at position 0),
// one single-stream pre-norm block (MLA + indexer with its own cache, MoE), then the
// shared-head norm and the model's lm_head: logits for t_{i+2}. A chained draft feeds the
// layer's own normed output back as the next h with the draft it just made.
//
// As the engine drives it (StepEntry::mtp): the layer's cache holds the pair of every
// position whose next token is known, so that a draft starts from full context; a step
// first drafts for the entries that ask (the pending rows get their next token, the last
// one's logits give d1, chained steps d2..dk on positions given back afterwards), then runs
// the main forward, then completes the pairs its rows know (a plain span: all but its last
// row; a verify span waits for its commit, which keeps the rows used).
#include <algorithm>
#include <string>

#include "model/glm5/glm5_model.h"

namespace tf {

Glm5Model::MtpOut Glm5Model::mtp_forward(const std::vector<MtpRows>& items, bool want_logits) {
  const MtpWeights& w = *weights_.mtp;
  const int64_t h = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  std::vector<Span> spans;
  std::vector<int32_t> ids, last_rows;
  std::vector<Tensor> views;
  views.reserve(2 * items.size());
  int64_t n = 0;
  for (const MtpRows& it : items) {
    const int64_t r = it.hidden.size(0);
    if (r <= 0 || static_cast<int64_t>(it.next.size()) != r || it.hidden.dim() != 2 || it.hidden.size(1) != h)
      throw StatusError(internal_error("mtp: " + std::to_string(it.next.size()) + " next tokens for hidden rows " +
                                       it.hidden.describe()));
    Glm5Sequence& seq = *it.seq;
    if (Status s = mtp_pool_->reserve(seq.mtp_pages_, seq.mtp_length_ + r); !s.is_ok())
      throw StatusError(s.with_context("mtp draft layer cache"));
    sync_page_table(seq.mtp_pages_, seq.mtp_pages_dev_);
    spans.push_back({&seq, n, r, seq.mtp_length_});
    ids.insert(ids.end(), it.next.begin(), it.next.end());
    n += r;
    last_rows.push_back(static_cast<int32_t>(n - 1));
  }
  Tensor e = ops_.empty({n, h});
  ops_.embedding(e, weights_.embed, upload_i32(ids));
  // The hidden rows of every item, packed.
  Tensor hid;
  if (items.size() == 1 && items[0].hidden.is_contiguous()) {
    hid = on_device(items[0].hidden);
  } else {
    hid = ops_.empty({n, h});
    std::vector<Tensor*> dst;
    std::vector<const Tensor*> src;
    for (size_t i = 0; i < items.size(); ++i) {
      views.push_back(hid.slice(0, spans[i].row0, spans[i].row0 + spans[i].rows));
      dst.push_back(&views.back());
      views.push_back(on_device(items[i].hidden));
      src.push_back(&views.back());
    }
    ops_.copy_many(dst, src);
  }
  // [enorm(e); hnorm(h)]: each half copied into its column block of `cat`.
  Tensor cat = ops_.empty({n, 2 * h});
  Tensor en = cat.slice(1, 0, h), hn = cat.slice(1, h, 2 * h);
  Tensor en_packed = ops_.empty({n, h}), hn_packed = ops_.empty({n, h});
  ops_.rms_norm(en_packed, e, w.enorm, eps);
  ops_.rms_norm(hn_packed, hid, w.hnorm, eps);
  ops_.copy(en, en_packed);
  ops_.copy(hn, hn_packed);
  for (const Span& sp : spans)
    if (sp.pos0 == 0) {  // position 0: no embedding (vLLM's MTP ports)
      Tensor row = en.slice(0, sp.row0, sp.row0 + 1);
      ops_.copy(row, ops_.zeros({1, h}));
    }
  Tensor u = ops_.empty({n, h});
  ops_.matmul(u, cat, w.eh_proj);
  std::vector<Tensor> shared(spans.size());
  Tensor a = ops_.empty({n, h});
  ops_.rms_norm(a, u, w.block.input_norm, eps);
  Tensor y = mla_forward(w.block, 0, a, spans, shared, true);
  ops_.add(u, u, y);
  ops_.rms_norm(a, u, w.block.post_norm, eps);
  y = ffn_forward(w.block, a);
  ops_.add(u, u, y);
  MtpOut out;
  out.hidden = ops_.empty({n, h});
  ops_.rms_norm(out.hidden, u, w.shared_head_norm, eps);
  if (static_cast<int64_t>(last_rows.size()) == n) {
    out.last_hidden = out.hidden;
  } else {
    out.last_hidden = ops_.empty({static_cast<int64_t>(last_rows.size()), h});
    ops_.gather_rows(out.last_hidden, out.hidden, upload_i32(last_rows));
  }
  if (want_logits) out.last_logits = logits_for(out.last_hidden, draft_head());
  for (const Span& sp : spans) sp.seq->mtp_length_ += sp.rows;
  return out;
}

std::vector<int32_t> Glm5Model::argmax_rows(const Tensor& logits) {
  const int64_t r = logits.size(0);
  std::vector<SampleRowResult> res(static_cast<size_t>(r));
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < r; ++i) rows.push_back(logits.slice(0, i, i + 1));
  std::vector<SampleRowParams> params(static_cast<size_t>(r));
  for (SampleRowParams& p : params) p.greedy = true;
  ops_.sample_rows(res, rows, params);
  std::vector<int32_t> out(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    const SampleRowResult& s = res[static_cast<size_t>(i)];
    if (s.status == SampleRowStatus::kOk) {
      out[static_cast<size_t>(i)] = s.token;
      continue;
    }
    // Not decided on the device: the row on the host (the first of the largest).
    const std::vector<float> v = to_host(rows[static_cast<size_t>(i)]).to_vector();
    out[static_cast<size_t>(i)] = static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  }
  return out;
}

std::vector<std::vector<int32_t>> Glm5Model::mtp_draft(std::span<const StepEntry> batch) {
  std::vector<std::vector<int32_t>> drafts(batch.size());
  std::vector<MtpRows> items;
  std::vector<size_t> entry_of;
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepEntry& e = batch[i];
    Glm5Sequence& seq = *e.sequence;
    if (e.mtp_drafts <= 0 || seq.mtp_pending_.is_null()) continue;
    // The pending rows' next tokens: the tokens after them, then the entry's token.
    std::vector<int32_t> next(seq.mtp_pending_tokens_.begin() + 1, seq.mtp_pending_tokens_.end());
    next.push_back(e.tokens[0]);
    items.push_back({&seq, seq.mtp_pending_, std::move(next)});
    entry_of.push_back(i);
    seq.mtp_pending_ = Tensor();
    seq.mtp_pending_tokens_.clear();
  }
  if (items.empty()) return drafts;
  MtpOut out = mtp_forward(items, true);
  std::vector<int32_t> tokens = argmax_rows(out.last_logits);
  std::vector<Tensor> fed(items.size());  // each item's last normed output row
  for (size_t j = 0; j < items.size(); ++j) {
    drafts[entry_of[j]].push_back(tokens[j]);
    fed[j] = out.last_hidden.slice(0, static_cast<int64_t>(j), static_cast<int64_t>(j) + 1);
  }
  // Chained drafts write positions that the next pairs overwrite: the lengths and the
  // indexer rings (what a pool completed by them changed) are put back afterwards.
  struct Saved {
    Glm5Sequence* seq;
    int64_t length, ring_rows, pools;
    Tensor ring;
  };
  std::vector<Saved> saved;
  for (size_t j = 0; j < items.size(); ++j) {
    if (batch[entry_of[j]].mtp_drafts < 2) continue;
    Glm5Sequence& seq = *items[j].seq;
    Glm5Sequence::IndexerState& st = seq.mtp_indexer_;
    Saved s{&seq, seq.mtp_length_, st.ring_rows, st.pools, Tensor()};
    if (!st.ring.is_null()) {
      s.ring = ops_.empty(st.ring.shape());
      ops_.copy(s.ring, st.ring);
    }
    saved.push_back(std::move(s));
  }
  for (;;) {
    std::vector<MtpRows> chain;
    std::vector<size_t> at;
    for (size_t j = 0; j < items.size(); ++j) {
      std::vector<int32_t>& d = drafts[entry_of[j]];
      if (static_cast<int>(d.size()) >= batch[entry_of[j]].mtp_drafts) continue;
      chain.push_back({items[j].seq, fed[j], {d.back()}});
      at.push_back(j);
    }
    if (chain.empty()) break;
    MtpOut o = mtp_forward(chain, true);
    tokens = argmax_rows(o.last_logits);
    for (size_t c = 0; c < chain.size(); ++c) {
      drafts[entry_of[at[c]]].push_back(tokens[c]);
      fed[at[c]] = o.last_hidden.slice(0, static_cast<int64_t>(c), static_cast<int64_t>(c) + 1);
    }
  }
  for (Saved& s : saved) {
    Glm5Sequence::IndexerState& st = s.seq->mtp_indexer_;
    s.seq->mtp_length_ = s.length;
    st.ring_rows = s.ring_rows;
    st.pools = s.pools;
    if (!s.ring.is_null()) ops_.copy(st.ring, s.ring);
  }
  return drafts;
}

void Glm5Model::mtp_keep(std::span<const StepEntry> batch, const std::vector<Span>& spans,
                         const std::vector<std::span<const int32_t>>& tokens, const Tensor& hidden) {
  const int64_t h = cfg_.hidden_size;
  std::vector<MtpRows> items;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].mtp) continue;
    const Span& sp = spans[i];
    Glm5Sequence& seq = *sp.seq;
    const std::span<const int32_t> toks = tokens[i];
    // The span's rows from `stay` on wait for their next token: a plain span's last row,
    // all of a verify span's (its commit keeps the rows used).
    const int64_t stay = sp.speculative ? 0 : sp.rows - 1;
    const int64_t old = seq.mtp_pending_.is_null() ? 0 : seq.mtp_pending_.size(0);
    MtpRows it{&seq, Tensor(), {}};
    if (old > 0) {
      it.next.assign(seq.mtp_pending_tokens_.begin() + 1, seq.mtp_pending_tokens_.end());
      it.next.push_back(toks[0]);
    }
    it.next.insert(it.next.end(), toks.begin() + 1, toks.begin() + 1 + stay);
    const Tensor done = hidden.slice(0, sp.row0, sp.row0 + stay);
    if (old > 0 && stay > 0) {
      it.hidden = ops_.empty({old + stay, h});
      Tensor a = it.hidden.slice(0, 0, old), b = it.hidden.slice(0, old, old + stay);
      ops_.copy_many({&a, &b}, {&seq.mtp_pending_, &done});
    } else {
      it.hidden = old > 0 ? seq.mtp_pending_ : done;
    }
    if (!it.next.empty()) items.push_back(std::move(it));
    // The rows that stay, in a tensor of their own (the step's buffers are reused).
    seq.mtp_pending_ = ops_.empty({sp.rows - stay, h});
    ops_.copy(seq.mtp_pending_, hidden.slice(0, sp.row0 + stay, sp.row0 + sp.rows));
    seq.mtp_pending_tokens_.assign(toks.begin() + stay, toks.end());
  }
  if (!items.empty()) (void)mtp_forward(items, false);
}

void Glm5Model::fork_mtp(const Glm5Sequence& src, Glm5Sequence& dst) {
  if (!mtp_pool_ || src.mtp_length_ == 0) return;
  const int64_t ps = mtp_pool_->page_size(), full = src.mtp_length_ / ps;
  // Full pages are shared; the last one is still written, so it is copied.
  mtp_pool_->share(src.mtp_pages_, full, dst.mtp_pages_);
  if (src.mtp_length_ % ps != 0) {
    if (Status s = mtp_pool_->reserve(dst.mtp_pages_, src.mtp_length_); !s.is_ok()) throw StatusError(s);
    mtp_pool_->copy_page(ops_, src.mtp_pages_[static_cast<size_t>(full)], dst.mtp_pages_[static_cast<size_t>(full)]);
  }
  if (!dst.mtp_pages_.empty()) dst.mtp_pages_dev_ = upload_i32(dst.mtp_pages_);
  dst.mtp_length_ = src.mtp_length_;
  copy_indexer_state(src.mtp_indexer_, dst.mtp_indexer_);
  if (!src.mtp_pending_.is_null()) {
    dst.mtp_pending_ = ops_.empty(src.mtp_pending_.shape());
    ops_.copy(dst.mtp_pending_, src.mtp_pending_);
    dst.mtp_pending_tokens_ = src.mtp_pending_tokens_;
  }
}

Expected<Glm5Model::MtpStepResult> Glm5Model::mtp_step(Glm5Sequence& seq, const Tensor& hidden,
                                                       std::span<const int32_t> next_tokens) {
  if (!weights_.mtp) return unimplemented("mtp_step: the checkpoint has no MTP layer (num_nextn_predict_layers = 0)");
  const int64_t t = static_cast<int64_t>(next_tokens.size());
  if (t == 0 || hidden.dim() != 2 || hidden.size(0) != t || hidden.size(1) != cfg_.hidden_size)
    return invalid_argument("mtp_step: hidden " + hidden.describe() + " does not match " + std::to_string(t) +
                            " next tokens");
  for (int32_t id : next_tokens)
    if (id < 0 || id >= cfg_.vocab_size) return out_of_range("mtp_step: token id " + std::to_string(id));
  try {
    MtpOut out = mtp_forward({{&seq, on_device(hidden), {next_tokens.begin(), next_tokens.end()}}}, false);
    MtpStepResult r;
    r.hidden = to_host(out.hidden);
    r.logits = to_host(logits_for(out.hidden, draft_head()));
    return r;
  } catch (const StatusError& err) {
    return err.status().with_context("glm5 mtp_step");
  }
}

}  // namespace tf
