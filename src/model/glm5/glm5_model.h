// Glm5Model: the GLM-5.3-Flash text decoder over the Ops interface, driven by a
// batched step.
//
// step() advances several sequences at once, each by a span of new tokens (a
// prefill chunk of any length or one decode token). Per-token work (projections,
// norms, mHC, MLP/MoE, lm_head) runs over all rows of the batch together; the
// stateful parts (KDA conv + recurrence, MLA latent cache, indexer pools,
// attention) run per sequence against its Glm5Sequence. Every op is
// row-independent, so a sequence's results do not depend on its batch-mates.
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

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/ops.h"
#include "model/config.h"
#include "model/glm5/glm5_weights.h"
#include "model/glm5/latent_cache_pool.h"
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
    Tensor conv_q, conv_k, conv_v;  // [K-1, C_local]
    Tensor recurrent;               // [H_l, Dk, Dv]
  };
  struct IndexerState {
    Tensor ring_k, ring_gate;  // [kp, Di]: raw key / gate rows of the incomplete pool
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
  // MTP draft layer: its own latent pages and indexer.
  int64_t mtp_length_ = 0;
  std::vector<int32_t> mtp_pages_;
  IndexerState mtp_indexer_;
};

struct StepEntry {
  Glm5Sequence* sequence = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every position of the span, not only the last
};

// Both on the host (the step's one explicit download), whatever the backend.
struct StepResult {
  Tensor logits;  // [rows, vocab]: the last position, or every position on request
  Tensor hidden;  // [rows, hidden]: final hidden state (after the norm) for the same rows
};

class Glm5Model {
 public:
  // Loads this rank's shard. `comm` and `ops` must outlive the model.
  static Expected<std::unique_ptr<Glm5Model>> load(const Glm5Config& config, const WeightSource& weights, Ops& ops,
                                                   Communicator& comm, const Glm5Options& cache = {});

  const Glm5TextConfig& config() const { return cfg_; }
  LatentCachePool& cache_pool() { return *pool_; }
  bool has_mtp() const { return weights_.mtp.has_value(); }

  std::unique_ptr<Glm5Sequence> new_sequence();
  // Advances every entry (distinct sequences) by its tokens; results in entry order.
  // On error no sequence has advanced its length (its states may be partly updated).
  Expected<std::vector<StepResult>> step(std::span<const StepEntry> batch);

  // MTP draft (speculative decoding; math inferred, spec §5): for one sequence,
  // hidden [T, H] (main model final hidden states at positions p..p+T-1) and the
  // next tokens [T] (tokens at p+1..p+T) -> draft logits [T, vocab]. The layer keeps
  // its own latent cache in `seq`, positions aligned with the main model's.
  // `hidden` may be on the host or the ops device; the logits come back on the host.
  Expected<Tensor> mtp_step(Glm5Sequence& seq, const Tensor& hidden, std::span<const int32_t> next_tokens);

 private:
  Glm5Model(const Glm5TextConfig& cfg, Ops& ops, Communicator& comm) : cfg_(cfg), ops_(ops), comm_(comm) {}

  struct Span {
    Glm5Sequence* seq;
    int64_t row0, rows, pos0;  // rows [row0, row0+rows) of the batch, positions from pos0
  };
  // Sublayers: input x [N, H] (after the pre-norm), output [N, H] (already all-reduced).
  Tensor kda_forward(int layer, int kda_index, const Tensor& x, const std::vector<Span>& spans);
  Tensor mla_forward(const LayerWeights& lw, int mla_index, const Tensor& x, const std::vector<Span>& spans,
                     std::vector<Tensor>& shared_topk, bool mtp);
  // The indexer's projections of all rows of a step (one matmul each, whatever the
  // number of sequences); indexer_forward then works on one sequence's rows.
  struct IndexerRows {
    Tensor q, key, gate, wts;  // [N, Hi*Di], [N, Di] (normed), [N, Di], [N, Hi] (scaled)
  };
  IndexerRows indexer_project(const IndexerWeights& iw, const Tensor& x, const Tensor& q_resid);
  Tensor indexer_forward(const IndexerWeights& iw, const IndexerRows& rows, const Span& sp,
                         Glm5Sequence::IndexerState& st);
  Tensor ffn_forward(const LayerWeights& lw, const Tensor& x);
  Tensor mlp_forward(const MlpWeights& w, const Tensor& x);
  Tensor moe_forward(const MoeWeights& w, const Tensor& x);
  Tensor routed_experts_by_host_grouping(const MoeWeights& w, const Tensor& x, const Tensor& ids, const Tensor& wts);
  void all_reduce(Tensor& t);
  Tensor logits_for(const Tensor& hidden_rows);
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
  Device device_;  // where ops_ allocates
  Tensor mean_w_;  // [rows, M] of 1/M on the device: the final stream mean's weights
};

}  // namespace tf
