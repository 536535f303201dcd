// Glm5Model: the GLM-5.3-Flash text decoder over the Ops interface, driven by a
// batched step.
//
// step() advances several sequences at once, each by a span of new tokens (a
// prefill chunk of any length, one decode token, or a speculative verify span: the
// pending token and drafts, kept up to the first rejected one by commit_speculation,
// glm5_speculation.cc). Per-token work (projections,
// norms, mHC, MLP/MoE, lm_head) runs over all rows of the batch together; the
// stateful parts (KDA conv + recurrence, MLA latent cache, indexer pools,
// attention) run per sequence against its Glm5Sequence; runs of adjacent decode
// rows go through the batched *_rows ops instead (KDA: glm5_kda.cc; MLA + indexer:
// glm5_attention.cc, a fixed number of launches per layer). Every op is
// row-independent, so a sequence's results do not depend on its batch-mates.
//
// Decode steps (one token per sequence, at most 64) run as segments captured per
// batch bucket and replayed (step_graphs.h, CUDA graphs), one per layer with its
// attention core inside (the KDA and MLA decode-row ops read their per-row state
// addresses from one upload per step). All rows' logits come from one lm_head call
// and one download.
//
// Tensor parallelism: each rank holds its shard (glm5_weights.h) and runs the
// same step with the same inputs; one all-reduce per sublayer (after the
// attention and the FFN output projections) and one all-gather of the logits.
//
// Devices: the model is written once against Ops. Weights are uploaded at load,
// activations and per-sequence state (KDA conv/recurrent, indexer rings and pool
// keys, page tables) are allocated through Ops, so they live wherever the backend
// computes. Host round trips are explicit (ops.to_host / to_device) and few: the
// step's token ids and small index arrays in, the results out, the MoE routing
// table (tokens are grouped per expert on the host) and the indexer's top-k pools
// (expanded to token indices on the host).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/ops.h"
#include "model/config.h"
#include "model/glm5/glm5_weights.h"
#include "model/glm5/latent_cache_pool.h"
#include "model/glm5/step_graphs.h"
#include "model/weight_source.h"

namespace tf {

struct Glm5Options {
  // The paged MLA latent cache.
  DType latent_dtype = DType::kBF16;  // f32 (exact), bf16 or f8_e4m3
  int64_t page_size = 64;             // tokens per page
  int64_t num_pages = 1024;
  // Exact ties among the indexer's pool scores (frequent: a pool whose per-head
  // scores are all negative scores 0 after the ReLU). kTorchCpu reproduces
  // transformers' prefill and decode exactly, but then a chunked prefill can pick
  // differently from a one-shot one; kLowerIndex makes chunking irrelevant, so it
  // is the serving default and the transformers-parity tests ask for kTorchCpu.
  TopkTies indexer_ties = TopkTies::kLowerIndex;
  // Projection matrices on the device: f32, or bf16 (CUDA backend: half the
  // memory and bytes per step, exact for BF16 checkpoints; see load_glm5_weights).
  DType weight_dtype = DType::kF32;
  // DENSE=q4 / fp8: the large dense matrices re-quantized at load (model/dense_quant.h,
  // load_glm5_weights lists which); kDense keeps them weight_dtype.
  MatrixFormat dense_quant = MatrixFormat::kDense;
  // LM_HEAD=q4 / fp8: lm_head re-quantized at load the same way; kDense keeps it weight_dtype.
  MatrixFormat head_quant = MatrixFormat::kDense;
  // The head the MTP layer's drafts read (MtpWeights::draft_head): a copy of lm_head in this
  // format, made at load when it differs from head_quant; kDense: lm_head itself.
  MatrixFormat draft_head_quant = MatrixFormat::kDense;
  // Decode steps (every entry one token, at most 64 rows) replay captured graphs of
  // their row-only segments (step_graphs.h). kAuto: when the backend has real
  // graphs (CUDA), TF_GRAPHS=1/0 decides, unset the build's default
  // (kGraphsByDefault in glm5_model.cc). kOn on the CPU
  // backend runs the same padded segment path without graphs (tests).
  enum class Graphs { kAuto, kOff, kOn };
  Graphs graphs = Graphs::kAuto;
  // A step wanting more rows' logits than this (every row of prompt chunks being scored,
  // long verify spans) makes them this many rows at a time, each block scored
  // (StepEntry::scored_tokens) and its host rows copied before the next is made: the device
  // never holds [rows, vocab] f32 for all of them (~0.6 MB a row at the release's
  // vocabulary). 0: one block.
  int64_t logits_block_rows = 256;
};

// Per-sequence state: the page table into the shared latent pool, KDA conv and
// recurrent states, indexer pools. Created by Glm5Model::new_sequence; its pages
// go back to the pool when it is destroyed (it must not outlive the model).
class Glm5Sequence {
 public:
  ~Glm5Sequence();
  Glm5Sequence(const Glm5Sequence&) = delete;
  Glm5Sequence& operator=(const Glm5Sequence&) = delete;
  int64_t length() const { return length_; }

 private:
  friend class Glm5Model;
  Glm5Sequence() = default;

  struct KdaState {
    Tensor conv;                    // [3, K-1, C_local]: q, k, v (one address for the decode rows)
    Tensor conv_q, conv_k, conv_v;  // [K-1, C_local]: views of conv
    Tensor recurrent;               // [H_l, Dk, Dv]
    // The state over these tensors, with conv's views.
    static KdaState over(Tensor conv_qkv, Tensor recurrent_state) {
      KdaState s;
      s.conv = std::move(conv_qkv);
      s.conv_q = s.conv.select(0, 0);
      s.conv_k = s.conv.select(0, 1);
      s.conv_v = s.conv.select(0, 2);
      s.recurrent = std::move(recurrent_state);
      return s;
    }
  };
  // The counters always equal what the length gives (ring_rows = length % kp, pools =
  // length / kp); the decode-row ops derive them on the device from the position.
  struct IndexerState {
    Tensor ring;               // [2, kp, Di]: raw key rows, then gate rows, of the incomplete pool
    Tensor ring_k, ring_gate;  // views of ring: token p sits in row p % kp
    int64_t ring_rows = 0;
    Tensor pool_keys;          // [capacity, Di]: the first `pools` rows are the pooled keys
    int64_t pools = 0;
  };
  LatentCachePool* pool_ = nullptr;
  LatentCachePool* mtp_pool_ = nullptr;
  int64_t length_ = 0;
  std::vector<int32_t> pages_;
  Tensor pages_dev_, mtp_pages_dev_;  // the page tables on the ops device (int32)
  std::vector<KdaState> kda_;          // by KDA layer order
  std::vector<IndexerState> indexer_;  // by MLA layer order (unused for shared layers)
  // MTP draft layer (glm5_mtp.cc): its own latent pages and indexer, holding the pairs
  // (h_i, t_{i+1}) of positions i < mtp_length_. The main model's final hidden rows of the
  // positions after that wait in mtp_pending_ until their next token is known (one row
  // after a plain step; a verify span's rows until its commit), their own tokens beside.
  int64_t mtp_length_ = 0;
  std::vector<int32_t> mtp_pages_;
  IndexerState mtp_indexer_;
  Tensor mtp_pending_;                      // [rows, H] on the ops device, or null
  std::vector<int32_t> mtp_pending_tokens_;  // the tokens at those rows' positions

  // Speculative decoding (StepEntry::speculative): a verified span whose drafts may be
  // rejected leaves what Glm5Model::commit_speculation needs to keep only its first rows.
  // The latent cache needs nothing (rows past the length are dead); the recurrent states
  // are updated on a second set of states (a full accept swaps them in) with the inputs
  // kept, so that a partial accept replays the kept rows onto the untouched states.
  struct KdaJournal {
    Tensor x_q, x_k, x_v;       // the span's pre-conv rows [T, C]
    Tensor q, k, v, g, beta;    // the recurrence's inputs (after the conv) [T, ...]
  };
  struct IndexerJournal {
    Tensor ring_before;  // a copy of the ring before the span
    int64_t ring_rows = 0, pools = 0;
    Tensor key, gate;    // the span's rows [T, Di]
  };
  struct Speculation {
    bool pending = false;
    int64_t pos0 = 0, rows = 0;
    std::vector<KdaJournal> kda;          // by KDA layer
    std::vector<IndexerJournal> indexer;  // by MLA layer (empty entries for shared layers)
  };
  Speculation spec_;
  std::vector<KdaState> spec_kda_;  // the states after the whole span (allocated at the first speculation)
};

struct StepEntry {
  Glm5Sequence* sequence = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every position of the span, not only the last
  bool host_logits = true;  // download this entry's logits to StepResult::logits
  bool want_hidden = false;  // download the final hidden states to StepResult::hidden
  // MTP drafter (glm5_mtp.cc): `mtp` keeps the MTP layer's cache in step with the sequence
  // (every step of the sequence must then have it: the layer reads each position's pair).
  // mtp_drafts = k > 0 (with mtp and one token) drafts k tokens after that token with the
  // layer and verifies them in this step: the span becomes [token, d1 .. dk], speculative
  // with every row's logits, and StepResult::drafts gives d1 .. dk (none when the layer has
  // nothing to draft from yet; the entry is then a speculative span of one row).
  bool mtp = false;
  int mtp_drafts = 0;
  // Speculative decoding: the span is the pending token and drafts after it, verified in
  // this step. Its rows run the decode arithmetic (the recurrence token by token), so row j
  // gives bit for bit what serial decoding would; the sequence must then see
  // commit_speculation (which keeps the span's first rows) before any other step.
  bool speculative = false;
  // Rows of `tokens` whose input embedding is given instead of looked up: image and
  // video features at their placeholder tokens (transformers' masked_scatter). Each
  // run puts rows [src, src + count) of `embeds` at span rows [row, row + count).
  struct EmbedRun {
    int64_t row = 0, count = 0, src = 0;
  };
  std::span<const EmbedRun> embed_runs;
  const Tensor* embeds = nullptr;  // [k, hidden] f32, on the host or the ops device
  // Scoring given tokens (a prompt's logprobs): with all_logits, row j's logits score
  // scored_tokens[j] under score_params (Ops::sample_rows with scored_token set: its raw
  // logprob and top logprobs) on the device as they are made, so only the scores come to
  // the host (StepResult::scores). At most the span's rows; none when empty.
  std::span<const int32_t> scored_tokens;
  SampleRowParams score_params;
};

// The step computes the logits of all entries' rows in one lm_head call and
// downloads them (and the hidden states, when asked) once; each result is a row view.
struct StepResult {
  Tensor logits;  // host [rows, vocab]: the last position, or every position on request (null: !host_logits)
  Tensor hidden;  // host [rows, hidden]: final hidden state (after the norm) for the same rows (null: !want_hidden)
  // The same logits rows on the backend's device, valid until the next step: a view of the
  // step's one logits tensor; only the last row when the step made its logits in blocks
  // (Glm5Options::logits_block_rows).
  Tensor device_logits;
  std::vector<int32_t> drafts;  // StepEntry::mtp_drafts: the drafts verified after the entry's token
  std::vector<SampleRowResult> scores;  // StepEntry::scored_tokens: one per token, in order
};

// A sequence's whole state as named host tensors (Glm5Model::snapshot / restore,
// glm5_snapshot.cc): prompt reuse writes kept prompts' states to disk and resumes from
// them after they left the device, or after a restart.
struct SequenceSnapshot {
  int64_t length = 0;
  int64_t mtp_length = 0;  // positions in the MTP layer's cache (0: the sequence had none)
  std::vector<std::pair<std::string, Tensor>> tensors;  // host, packed; names as restore() reads them
  // The tensors whose dim 0 runs along the sequence (the latent pages and their scales, the
  // indexers' pooled keys), each with the tokens one of its rows holds: their rows for the
  // tokens before `from` are left out (snapshot(seq, from)), and a store may keep the rows
  // of a prompt's leading tokens apart, shared by every longer prompt.
  std::map<std::string, int64_t> tokens_per_row;
  int64_t from = 0;
  size_t bytes() const;
};

// A snapshot's tensors by name for Glm5Model::restore, each as one or more host pieces
// along dim 0 in order (a store keeps a prompt's leading rows in blocks of their own:
// they are uploaded from where they lie, never gathered into one host tensor first).
using SnapshotPieces = std::map<std::string, std::vector<Tensor>>;

class Glm5Model {
 public:
  // Loads this rank's shard. `comm` and `ops` must outlive the model.
  static Expected<std::unique_ptr<Glm5Model>> load(const Glm5Config& config, const WeightSource& weights, Ops& ops,
                                                   Communicator& comm, const Glm5Options& cache = {});

  const Glm5TextConfig& config() const { return cfg_; }
  LatentCachePool& cache_pool() { return *pool_; }
  bool has_mtp() const { return weights_.mtp.has_value(); }
  // The decode-step graphs (captures, fallbacks, replays so far).
  const StepGraphs& step_graphs() const { return *graphs_; }
  StepGraphs& mutable_step_graphs() { return *graphs_; }  // tests

  std::unique_ptr<Glm5Sequence> new_sequence();
  // A new sequence holding `src`'s state as it is now, to go on from there (prompt reuse:
  // a kept prompt, and each sequence resumed from it): the KDA and indexer states are
  // copied, the latent pages shared (LatentCachePool::share). src's length must be a
  // whole number of pages (a shared page is full, so never written again); kInvalidArgument
  // otherwise. The MTP draft layer's cache goes along (its full pages shared, the last copied).
  Expected<std::unique_ptr<Glm5Sequence>> fork(const Glm5Sequence& src);
  // The state of `seq` (whose length is a whole number of pages, with no speculative step
  // pending) copied to the host: KDA conv and recurrent states, indexer rings and pooled
  // keys, the latent pages (with their scales) and the MTP layer's cache.
  // With `from` > 0 (a multiple of the page and the indexer pool) the rows of
  // SequenceSnapshot::tokens_per_row's tensors start at that token.
  Expected<SequenceSnapshot> snapshot(const Glm5Sequence& seq, int64_t from = 0);
  // The bytes snapshot(seq, from) would take on the host, without copying anything.
  int64_t snapshot_bytes(const Glm5Sequence& seq, int64_t from = 0) const;
  // A new sequence holding a snapshot's state (the tensors by name, on the host): every
  // tensor is checked against this model's shapes and dtypes (kInvalidArgument naming the
  // first one that differs or is missing); kResourceExhausted when the pool has no room
  // for its pages.
  Expected<std::unique_ptr<Glm5Sequence>> restore(int64_t length, int64_t mtp_length,
                                                  const SnapshotPieces& tensors);
  // The same with each tensor whole.
  Expected<std::unique_ptr<Glm5Sequence>> restore(int64_t length, int64_t mtp_length,
                                                  const std::map<std::string, Tensor>& tensors);
  // Advances every entry (distinct sequences) by its tokens; results in entry order.
  // On error no sequence has advanced its length (its states may be partly updated).
  Expected<std::vector<StepResult>> step(std::span<const StepEntry> batch);
  // After a speculative step of `seq` (StepEntry::speculative): keeps the first `rows` rows
  // of its span (1 <= rows <= the span), as if only they had been stepped: the length, the
  // KDA states and the indexer pools and ring then equal those of a serial run.
  Status commit_speculation(Glm5Sequence& seq, int64_t rows);
  bool speculation_pending(const Glm5Sequence& seq) const { return seq.spec_.pending; }

  // MTP draft layer (speculative decoding; math inferred, spec §5) on one sequence's own
  // MTP cache, as StepEntry::mtp runs it: hidden [T, H] (main model final hidden states at
  // positions p..p+T-1, p = the layer's length so far) and the next tokens [T] (the tokens
  // at p+1..p+T) -> draft logits [T, vocab] and the layer's normed output rows [T, H] (the
  // hidden a chained draft step feeds back; the logits through the drafts' head,
  // Glm5Options::draft_head_quant). `hidden` may be on the host or the ops device; the
  // results come back on the host.
  struct MtpStepResult {
    Tensor logits, hidden;
  };
  Expected<MtpStepResult> mtp_step(Glm5Sequence& seq, const Tensor& hidden, std::span<const int32_t> next_tokens);
  int64_t mtp_length(const Glm5Sequence& seq) const { return seq.mtp_length_; }

 private:
  Glm5Model(const Glm5TextConfig& cfg, Ops& ops, Communicator& comm) : cfg_(cfg), ops_(ops), comm_(comm) {}

  struct Span {
    Glm5Sequence* seq;
    int64_t row0, rows, pos0;  // rows [row0, row0+rows) of the batch, positions from pos0
    bool speculative = false;  // StepEntry::speculative: keep what commit_speculation needs
  };
  // Sublayers: input x [N, H] (after the pre-norm), output [N, H] (already all-reduced).
  // KDA in three parts: row-only projections {q, k, v, g, beta, gate}, the stateful
  // conv + recurrence (core [N, C]), the row-only gated norm + output projection.
  std::vector<Tensor> kda_project(int layer, const Tensor& x);
  Tensor kda_core(int layer, int kda_index, const std::vector<Tensor>& proj, const std::vector<Span>& spans);
  Tensor kda_output(int layer, const Tensor& core, const Tensor& gate);

  Tensor mla_forward(const LayerWeights& lw, int mla_index, const Tensor& x, const std::vector<Span>& spans,
                     std::vector<Tensor>& shared_topk, bool mtp);
  // The indexer's projections of all rows of a step (one matmul each, whatever the
  // number of sequences); indexer_forward then works on one sequence's rows.
  struct IndexerRows {
    Tensor q, key, gate, wts;  // [N, Hi*Di], [N, Di] (normed), [N, Di], [N, Hi] (scaled)
  };
  // Overwrites the rows of x [N, H] that `e` gives embeddings for (image/video features).
  void put_embeddings(Tensor& x, const StepEntry& e, const Span& sp);
  IndexerRows indexer_project(const IndexerWeights& iw, const Tensor& x, const Tensor& q_resid);
  Tensor indexer_forward(const IndexerWeights& iw, const IndexerRows& rows, const Span& sp,
                         Glm5Sequence::IndexerState& st);
  // Decode rows (glm5_attention.cc): each run of adjacent one-token spans goes through the
  // *_rows ops (a fixed number of launches per MLA layer, whatever the lengths). Before the
  // layers, prepare_decode_rows grows the indexer state the step needs (no allocation is
  // left for the launches) and uploads the runs' per-row metadata in one copy.
  struct DecodeRun {
    size_t first_span = 0, spans = 0;
    // Rows of the *_rows calls: spans, or a graph bucket (the spare rows are padded:
    // MLA on the scratch page at position 0, KDA with address 0).
    int64_t width = 0;
    bool graph = false;  // the one run of a graph step (indices go to decode_topk_)
    int64_t row0 = 0;
    int64_t positions_at = 0, tables_at = 0;  // int64 offsets into decode_meta_
    std::vector<int64_t> rings_at, pool_keys_at;  // by MLA layer; -1 without an indexer
    std::vector<int64_t> kda_conv_at, kda_rec_at;  // by KDA layer
    std::vector<std::pair<Glm5Sequence*, int64_t>> rows;  // sequence and position of each row
  };
  // pad_to > 0 (a graph step): the spans are one run of decode rows, padded to pad_to rows.
  void prepare_decode_rows(const std::vector<Span>& spans, int64_t pad_to);
  // The KDA conv + recurrence of a decode run's rows (a graph step: the bucket's), over
  // the state addresses prepare_decode_rows uploaded: proj {q, k, v, g, beta} [width, ...]
  // -> core [width, C] (packed rows).
  void kda_core_rows(int layer, int kda_index, const std::vector<Tensor>& proj, const DecodeRun& run, Tensor& core);
  // A graph step's layer segment: the attention core, then seg_layer (or its part up
  // to the router when `to_router`). in: the previous segment's outputs.
  std::vector<Tensor> seg_layer_graph(int layer, const std::vector<Tensor>& in, bool to_router);
  // A decode run's rows view of MLA layer mla_index (positions and page tables from the
  // step's metadata), and its top-k token indices: the indexer's cache update, scores and
  // top-k (a layer without an indexer takes the previous layer's).
  DecodeRowsView decode_rows_view(int mla_index, const DecodeRun& run) const;
  Tensor indexer_decode_rows(const MlaWeights& w, int mla_index, const DecodeRun& run, const IndexerRows& irows,
                             std::vector<Tensor>& shared_topk);
  void ensure_indexer_ring(Glm5Sequence::IndexerState& st);
  void ensure_pool_capacity(Glm5Sequence::IndexerState& st, int64_t pools);
  // Speculative spans (glm5_speculation.cc): the conv and recurrence of one span on the
  // sequence's second set of states, the inputs journaled; and the indexer state noted
  // before a span is appended to it.
  void begin_speculation(Glm5Sequence& seq, int64_t pos0, int64_t rows);
  void kda_core_speculative(int layer, int kda_index, const std::vector<Tensor>& proj, const Span& sp, Tensor& out);
  void note_indexer_before(int mla_index, const Span& sp, const IndexerRows& rows, Glm5Sequence::IndexerState& st);
  // The MTP layer (glm5_mtp.cc) over rows of several sequences: each item's hidden rows
  // [r, H] (ops device) at its next positions, with the tokens after them -> the normed
  // output of each item's last row [items, H] and, when asked, its logits [items, V].
  struct MtpRows {
    Glm5Sequence* seq = nullptr;
    Tensor hidden;
    std::vector<int32_t> next;
  };
  struct MtpOut {
    Tensor last_hidden, last_logits, hidden;  // hidden: every row's normed output [N, H]
  };
  MtpOut mtp_forward(const std::vector<MtpRows>& items, bool logits);
  // A step's MTP parts: the drafts of the entries that ask (before the main forward), and
  // the pairs its rows complete (after it).
  std::vector<std::vector<int32_t>> mtp_draft(std::span<const StepEntry> batch);
  void mtp_keep(std::span<const StepEntry> batch, const std::vector<Span>& spans,
                const std::vector<std::span<const int32_t>>& tokens, const Tensor& hidden);
  const Matrix* draft_head() const {
    return weights_.mtp && !weights_.mtp->draft_head.is_null() ? &weights_.mtp->draft_head : nullptr;
  }
  // Greedy tokens of logits rows [r, V] on the ops device (the lowest id among ties).
  std::vector<int32_t> argmax_rows(const Tensor& logits);
  void copy_indexer_state(const Glm5Sequence::IndexerState& from, Glm5Sequence::IndexerState& to);
  void fork_mtp(const Glm5Sequence& src, Glm5Sequence& dst);
  // snapshot / restore's parts (glm5_snapshot.cc).
  Tensor host_copy(const Tensor& t);
  void snapshot_pages(const LatentCachePool& pool, std::span<const int32_t> pages, const std::string& name,
                      SequenceSnapshot& out);
  void restore_pages(LatentCachePool& pool, std::vector<int32_t>& pages, int64_t tokens,
                     const std::string& name, const SnapshotPieces& tensors);
  void snapshot_indexer(const Glm5Sequence::IndexerState& st, const std::string& name, int64_t from,
                        SequenceSnapshot& out);
  void restore_indexer(Glm5Sequence::IndexerState& st, int64_t length, const std::string& name,
                       const SnapshotPieces& tensors);
  Tensor ffn_forward(const LayerWeights& lw, const Tensor& x);
  // A dense MLP or expert; with sum_into, its output is added to *sum_into (returned).
  Tensor mlp_forward(const MlpWeights& w, const Tensor& x, Tensor* sum_into = nullptr);
  Tensor moe_forward(const MoeWeights& w, const Tensor& x);
  // moe_forward's parts: the router {weights, ids}, the routed experts, the shared expert added.
  std::vector<Tensor> moe_gate(const MoeWeights& w, const Tensor& x);
  Tensor moe_routed(const MoeWeights& w, const Tensor& x, const Tensor& ids, const Tensor& wts);
  Tensor moe_finish(const MoeWeights& w, const Tensor& x, Tensor& routed);
  Tensor routed_experts_by_host_grouping(const MoeWeights& w, const Tensor& x, const Tensor& ids, const Tensor& wts);
  void all_reduce(Tensor& t);
  // Ends a graph step at TP > 1: waits for its replays' collectives, bounded (glm5_model.cc).
  void watch_graph_step();
  // lm_head (or `head`, with the same rows: the MTP drafts' head) over the rows, all-gathered.
  Tensor logits_for(const Tensor& hidden_rows, const Matrix* head = nullptr);
  // The step's row-only segments (bodies of StepGraphs segments, also run eagerly).
  std::vector<Tensor> seg_first(int64_t m, const Tensor& x);
  std::vector<Tensor> seg_layer(int layer, const std::vector<Tensor>& in);
  // seg_layer cut around the routed experts (for a bucket whose whole segment cannot
  // be captured: the experts' host grouping above EXACT_ROWS rows).
  std::vector<Tensor> seg_layer_to_router(int layer, const std::vector<Tensor>& in);
  std::vector<Tensor> seg_layer_from_experts(int layer, const std::vector<Tensor>& in);
  std::vector<Tensor> ffn_site(int layer, const std::vector<Tensor>& in);
  std::vector<Tensor> layer_tail(int layer, const Tensor& y, const Tensor& post, const Tensor& comb,
                                 const Tensor& streams);
  std::vector<Tensor> seg_final(const std::vector<Tensor>& in, bool logits);
  // `t` on the ops device and packed: itself when it already is, else a copy there.
  Tensor on_device(const Tensor& t);
  // `t` on the host and packed (the explicit download of results; free on the CPU backend).
  Tensor to_host(const Tensor& t);
  // A small host int32 array as an ops-device tensor [n].
  Tensor upload_i32(const std::vector<int32_t>& v);
  // Re-uploads a page table after reserve() grew it.
  void sync_page_table(const std::vector<int32_t>& pages, Tensor& dev);

  Glm5TextConfig cfg_;
  Ops& ops_;
  Communicator& comm_;
  Glm5Weights weights_;
  std::unique_ptr<LatentCachePool> pool_;
  std::unique_ptr<LatentCachePool> mtp_pool_;
  std::vector<int> kda_index_, mla_index_;  // layer -> index among its kind, or -1
  int num_kda_ = 0, num_mla_ = 0;
  TopkTies indexer_ties_ = TopkTies::kLowerIndex;
  int64_t logits_block_rows_ = 256;  // Glm5Options::logits_block_rows
  Device device_;  // where ops_ allocates
  Tensor mean_w_;  // [rows, M] of 1/M on the device: the final stream mean's weights
  // The step's decode runs (by span: index into decode_runs_, or -1) and their metadata:
  // a device int64 buffer that only grows, refilled by one upload per step.
  std::vector<DecodeRun> decode_runs_;
  std::vector<int> decode_run_at_;
  Tensor decode_meta_;
  // Graph steps: the spans (bodies read them; one decode run), the scratch sequence of
  // padded rows (indexer state, a page table onto the pool's scratch page; no KDA state),
  // and the run's top-k indices [kMaxBucket, width] for the shared DSA layers (a fixed
  // buffer: it crosses segments).
  std::vector<Span> graph_spans_;
  std::unique_ptr<Glm5Sequence> pad_seq_;
  Tensor decode_topk_;
  int64_t decode_scores_width_ = 0;  // pool-score columns of the decode rows; only grows
  std::unique_ptr<StepGraphs> graphs_;
};

}  // namespace tf
