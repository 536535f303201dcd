// Speculative spans of Glm5Model (StepEntry::speculative) and commit_speculation.
//
// A verify step runs the pending token and its drafts as one span. Every row of it must
// give what serial decoding would, and after the engine compares the samples with the
// drafts, the sequence must hold the state after the kept rows only:
// - the latent cache is indexed by position, so rows past the new length are dead (and
//   are written again later);
// - the KDA conv and recurrent states are updated in place by serial decoding, so the span
//   runs on a second set of states (copies of the states before it), token by token like
//   decode rows, and keeps its inputs: a full accept swaps the second set in; a partial
//   one replays the kept rows' recurrence onto the untouched states and takes the conv
//   state from the kept rows' inputs (the conv state is the last K-1 pre-conv rows);
// - the indexer's pooled keys are appended per completed pool, so a pool completed by
//   kept rows is right and later ones are dropped by the count; its ring of the
//   incomplete pool's rows is rebuilt from a copy taken before the span and the span's
//   own key rows.
#include <deque>
#include <string>
#include <tuple>
#include <utility>

#include "model/glm5/glm5_model.h"

namespace tf {

void Glm5Model::begin_speculation(Glm5Sequence& seq, int64_t pos0, int64_t rows) {
  Glm5Sequence::Speculation& spec = seq.spec_;
  spec.pos0 = pos0;
  spec.rows = rows;
  spec.kda.assign(seq.kda_.size(), {});
  spec.indexer.assign(seq.indexer_.size(), {});
  if (seq.spec_kda_.size() != seq.kda_.size()) {
    // The second set of states, shaped like the first (kept for the sequence's life).
    seq.spec_kda_.clear();
    for (const Glm5Sequence::KdaState& st : seq.kda_)
      seq.spec_kda_.push_back(
          Glm5Sequence::KdaState::over(ops_.empty(st.conv.shape()), ops_.empty(st.recurrent.shape())));
  }
  // The span runs on copies of the states before it (every layer's in one copy_many).
  std::vector<Tensor*> dst;
  std::vector<const Tensor*> src;
  for (size_t i = 0; i < seq.kda_.size(); ++i) {
    dst.push_back(&seq.spec_kda_[i].conv);
    src.push_back(&seq.kda_[i].conv);
    dst.push_back(&seq.spec_kda_[i].recurrent);
    src.push_back(&seq.kda_[i].recurrent);
  }
  if (!dst.empty()) ops_.copy_many(dst, src);
}

void Glm5Model::kda_core_speculative(int layer, int kda_index, const std::vector<Tensor>& proj, const Span& sp,
                                     Tensor& out) {
  const KdaWeights& w = weights_.layers[layer].kda;
  const int64_t c = w.heads * cfg_.linear_head_dim, r0 = sp.row0, r1 = sp.row0 + sp.rows;
  const size_t ki = static_cast<size_t>(kda_index);
  Glm5Sequence::KdaState& after = sp.seq->spec_kda_[ki];
  Glm5Sequence::KdaJournal& j = sp.seq->spec_.kda[ki];
  j.x_q = proj[0].slice(0, r0, r1);
  j.x_k = proj[1].slice(0, r0, r1);
  j.x_v = proj[2].slice(0, r0, r1);
  j.g = proj[3].slice(0, r0, r1);
  j.beta = proj[4].slice(0, r0, r1);
  j.q = ops_.empty({sp.rows, c});
  j.k = ops_.empty({sp.rows, c});
  j.v = ops_.empty({sp.rows, c});
  ops_.causal_conv1d_silu(j.q, j.x_q, after.conv_q, w.q_conv);
  ops_.causal_conv1d_silu(j.k, j.x_k, after.conv_k, w.k_conv);
  ops_.causal_conv1d_silu(j.v, j.x_v, after.conv_v, w.v_conv);
  // Token by token, as decode rows run (not the chunked prefill form): the same bits.
  ops_.kda_recurrent(out, j.q, j.k, j.v, j.g, j.beta, after.recurrent);
}

void Glm5Model::note_indexer_before(int mla_index, const Span& sp, const IndexerRows& rows,
                                    Glm5Sequence::IndexerState& st) {
  ensure_indexer_ring(st);
  Glm5Sequence::IndexerJournal& j = sp.seq->spec_.indexer[static_cast<size_t>(mla_index)];
  j.ring_before = ops_.empty(st.ring.shape());
  ops_.copy(j.ring_before, st.ring);
  j.ring_rows = st.ring_rows;
  j.pools = st.pools;
  j.key = rows.key.slice(0, sp.row0, sp.row0 + sp.rows);
  j.gate = rows.gate.slice(0, sp.row0, sp.row0 + sp.rows);
}

Status Glm5Model::commit_speculation(Glm5Sequence& seq, int64_t keep) {
  Glm5Sequence::Speculation& sp = seq.spec_;
  if (!sp.pending) return invalid_argument("commit_speculation: the sequence has no speculative step to commit");
  if (keep < 1 || keep > sp.rows)
    return invalid_argument("commit_speculation: keeps " + std::to_string(keep) + " rows of a span of " +
                            std::to_string(sp.rows));
  try {
    // The state copies of every layer go in two copy_many calls (one launch each on CUDA):
    // first what is read from a state that is also written (into temporaries), then the rest.
    std::deque<Tensor> views;
    std::vector<Tensor*> dst1, dst2;
    std::vector<const Tensor*> src1, src2;
    auto later = [&](Tensor dst, Tensor src) {
      views.push_back(std::move(dst));
      Tensor* d = &views.back();
      views.push_back(std::move(src));
      dst2.push_back(d);
      src2.push_back(&views.back());
    };
    for (size_t i = 0; i < seq.kda_.size(); ++i) {
      if (keep == sp.rows) {
        std::swap(seq.kda_[i], seq.spec_kda_[i]);
        continue;
      }
      const Glm5Sequence::KdaJournal& j = sp.kda[i];
      Glm5Sequence::KdaState& st = seq.kda_[i];
      // The kept rows' recurrence onto the state before the span.
      Tensor out = ops_.empty({keep, j.v.size(1)});
      ops_.kda_recurrent(out, j.q.slice(0, 0, keep), j.k.slice(0, 0, keep), j.v.slice(0, 0, keep),
                         j.g.slice(0, 0, keep), j.beta.slice(0, 0, keep), st.recurrent);
      // The conv state: the last K-1 pre-conv rows up to the kept end (older state rows move up).
      for (auto [state, x] : {std::pair{&st.conv_q, &j.x_q}, {&st.conv_k, &j.x_k}, {&st.conv_v, &j.x_v}}) {
        const int64_t k1 = state->size(0);
        if (k1 == 0) continue;
        if (keep >= k1) {
          later(state->slice(0, 0, k1), x->slice(0, keep - k1, keep));
          continue;
        }
        views.push_back(ops_.empty({k1 - keep, state->size(1)}));
        Tensor* tmp = &views.back();
        views.push_back(state->slice(0, keep, k1));
        dst1.push_back(tmp);
        src1.push_back(&views.back());
        later(state->slice(0, 0, k1 - keep), *tmp);
        later(state->slice(0, k1 - keep, k1), x->slice(0, 0, keep));
      }
    }
    const int64_t kp = cfg_.index_kpool, length = sp.pos0 + keep;
    for (size_t i = 0; i < sp.indexer.size() && i < seq.indexer_.size(); ++i) {
      const Glm5Sequence::IndexerJournal& j = sp.indexer[i];
      if (j.key.is_null()) continue;  // a layer sharing another's top-k
      Glm5Sequence::IndexerState& st = seq.indexer_[i];
      const int64_t pools = length / kp, ring_rows = length % kp;
      const Tensor before_k = j.ring_before.select(0, 0), before_gate = j.ring_before.select(0, 1);
      for (auto [ring, before, fresh] : {std::tuple{&st.ring_k, &before_k, &j.key}, {&st.ring_gate, &before_gate, &j.gate}}) {
        if (pools == j.pools) {
          // No pool completed by the kept rows: the ring's rows before the span, then the kept ones.
          if (j.ring_rows > 0) later(ring->slice(0, 0, j.ring_rows), before->slice(0, 0, j.ring_rows));
          if (ring_rows > j.ring_rows)
            later(ring->slice(0, j.ring_rows, ring_rows), fresh->slice(0, 0, ring_rows - j.ring_rows));
        } else if (ring_rows > 0) {
          // The new incomplete pool holds the last kept rows only.
          later(ring->slice(0, 0, ring_rows), fresh->slice(0, keep - ring_rows, keep));
        }
      }
      st.pools = pools;
      st.ring_rows = ring_rows;
    }
    if (!dst1.empty()) ops_.copy_many(dst1, src1);
    if (!dst2.empty()) ops_.copy_many(dst2, src2);
    seq.length_ = length;
    // The MTP layer's waiting rows are the span's (StepEntry::mtp): the kept ones stay.
    if (!seq.mtp_pending_.is_null() && seq.mtp_pending_.size(0) > keep) {
      seq.mtp_pending_ = seq.mtp_pending_.slice(0, 0, keep);
      seq.mtp_pending_tokens_.resize(static_cast<size_t>(keep));
    }
    sp = Glm5Sequence::Speculation{};
    return Status::ok();
  } catch (const StatusError& e) {
    return e.status().with_context("glm5 commit_speculation");
  }
}

}  // namespace tf
