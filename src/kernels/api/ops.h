// Ops: the narrow, backend-neutral operator interface the model is written against.
//
// Every op takes its outputs first, then its inputs. Tensors are f32 and packed
// (row-major, contiguous) unless a signature says otherwise, and live on the
// backend's device (Ops::empty allocates there). Small index arrays (token ids,
// top-k indices, row counts) are int32 tensors on the same device.
//
// Granularity: each op is one kernel a CUDA backend can implement on its own
// (a GEMM, a row-wise norm, a fused recurrence). The contract every backend
// keeps: a row's result depends only on that row's inputs, never on which
// other rows are in the call, so batching sequences does not change results.
//
// Shape letters: T rows (tokens), H heads, D/K/V/R widths, E experts, P pools.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/exl3_weight.h"
#include "kernels/api/fp8_expert_stack.h"
#include "kernels/api/matrix.h"
#include "kernels/api/sample_rows.h"

namespace tf {

// A sequence's paged latent cache as the attention kernel sees it.
// pages: [num_pages, page_size, width] of dtype f32, bf16 or f8_e4m3 (for fp8,
// `scales` holds one f32 multiplier per (page, slot)). page_table maps the
// sequence's logical page i to a physical page.
// What a backend's allocator holds on its device (DeviceAllocator on CUDA; all zero on the
// CPU, whose tensors are plain heap memory): the bytes of tensors alive now, the most
// alive at once since the last reset_memory_peak(), and the bytes taken from the driver
// (alive + cached for reuse + a graph capture arena).
struct MemoryUse {
  int64_t in_use_bytes = 0;
  int64_t peak_in_use_bytes = 0;
  int64_t held_bytes = 0;
};

struct LatentPagesView {
  const void* pages = nullptr;
  const float* scales = nullptr;  // fp8 only
  DType dtype = DType::kF32;
  int64_t page_size = 0;
  int64_t width = 0;        // latent width R
  int64_t page_stride = 0;  // elements between consecutive physical pages
  const int32_t* page_table = nullptr;
  int64_t num_tokens = 0;   // tokens currently cached (indices >= this are ignored)
};

enum class TopkTies { kLowerIndex, kTorchCpu };

// Decode rows of one step (one new token per row, each row its own sequence) as the
// batched MLA/DSA ops see them. Every per-row quantity lives in device memory (for the
// CPU backend: host memory), so a call's launches depend only on `rows` and the model's
// constants, never on sequence lengths: the *_rows ops below are capture-safe for CUDA
// graphs (no host sync, no allocation), except where a comment says otherwise. The host
// fills the arrays with one upload per step.
struct DecodeRowsView {
  int64_t rows = 0;
  const int32_t* positions = nullptr;  // [rows]: absolute position of the row's new token
  // [rows]: the address (uint64) of the row's int32 page table into the latent pages.
  const int64_t* page_tables = nullptr;
  // The paged latent cache of one MLA layer (as LatentPagesView, minus the per-sequence parts).
  void* pages = nullptr;
  float* scales = nullptr;  // fp8 only
  DType dtype = DType::kF32;
  int64_t page_size = 0, width = 0, page_stride = 0;
  // DSA indexer state of one layer, per row: the address of a f32 ring [2, kp, D] (raw keys,
  // then gates, of the incomplete pool: token p in slot p % kp) and of the pooled keys f32
  // [capacity >= (position + 1) / kp, D] (pool i in row i). Null when the layer has no indexer.
  const int64_t* rings = nullptr;
  const int64_t* pool_keys = nullptr;
  int64_t kpool = 0, index_dim = 0;
};

// KDA decode rows of one step (one new token per row, each row its own sequence) for
// one KDA layer: per-row state addresses in device memory (CPU backend: host memory),
// filled by one upload per step, so the ops below launch the same work whatever the
// sequences and are capture-safe. Address 0 marks a padded row (a graph bucket's
// spare rows): its outputs are zeros and no state is touched.
struct KdaRowsView {
  int64_t rows = 0;
  // [rows]: the address of the row's f32 conv state [3, K-1, C] (q, k, v), or 0.
  const int64_t* conv_states = nullptr;
  // [rows]: the address of the row's f32 recurrent state [H, Dk, Dv], or 0.
  const int64_t* recurrent_states = nullptr;
  int64_t heads = 0, key_dim = 0, value_dim = 0;  // H, Dk, Dv
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;

  // Allocation on this backend's device (uninitialised / zeroed).
  virtual Tensor empty(const Shape& shape, DType dtype = DType::kF32) = 0;
  virtual Tensor zeros(const Shape& shape, DType dtype = DType::kF32) = 0;
  // The device memory this backend's tensors take (MemoryUse); the engine reports it and
  // measures a step's working memory as the peak over what the weights and pool take.
  virtual MemoryUse memory_use() const { return {}; }
  virtual void reset_memory_peak() {}

  // ---- transfers (synchronous whenever the host is involved) ----------------
  // A packed copy of a host tensor on this backend's device; a packed host copy of
  // a tensor of this backend. (The CPU backend: packed host copies.)
  virtual Tensor to_device(const Tensor& host) = 0;
  virtual Tensor to_host(const Tensor& t) = 0;
  // dst = src, same shape and dtype; each on the host or this backend's device,
  // packed or row-strided (last dimension packed, e.g. a column block of a matrix).
  virtual void copy(Tensor& dst, const Tensor& src) = 0;
  // copy(*dsts[i], *srcs[i]) for every i (the destinations must not overlap any other pair's
  // tensors); a backend may run the device-to-device ones as one launch (CUDA: one kernel,
  // where a graph would otherwise hold a chain of copy-engine nodes).
  virtual void copy_many(const std::vector<Tensor*>& dsts, const std::vector<const Tensor*>& srcs) {
    if (dsts.size() != srcs.size())
      throw StatusError(invalid_argument("copy_many: " + std::to_string(dsts.size()) + " destinations for " +
                                         std::to_string(srcs.size()) + " sources"));
    for (size_t i = 0; i < dsts.size(); ++i) copy(*dsts[i], *srcs[i]);
  }

  // ---- linear algebra ------------------------------------------------------
  // out[T, N] = x[T, K] · w[N, K]^T  (accumulate: out += ...).
  virtual void matmul(Tensor& out, const Tensor& x, const Tensor& w, bool accumulate = false) = 0;
  // The same for a Matrix (matrix.h): a dense one goes to the op above, a quantized
  // one (fp8 block-scaled, q4) to quant_matmul. Not virtual: backends override those two.
  void matmul(Tensor& out, const Tensor& x, const Matrix& w, bool accumulate = false) {
    if (w.is_dense()) return matmul(out, x, w.dense(), accumulate);
    quant_matmul(out, x, w, accumulate);
  }
  // out[T, N] = x[T, K] · W^T for a quantized W (the default throws StatusError).
  virtual void quant_matmul(Tensor& out, const Tensor& x, const Matrix& w, bool accumulate);
  // Several projections of one input: *outs[i] = x · ws[i]^T for each i, with the
  // semantics, checks and bits of matmul(*outs[i], x, *ws[i]) (matrices of any formats,
  // mixed). The default is that loop; a GPU backend runs the matrices of one format in
  // one launch at decode rows (fewer launches per token). outs and ws have the same
  // length and no null entries; the outputs must not overlap x or each other.
  virtual void matmul_many(const std::vector<Tensor*>& outs, const Tensor& x, const std::vector<const Matrix*>& ws);
  // Per-head matmul: out[T, H, N] = x[T, H, K] · w[H, N, K]^T for every head.
  virtual void head_matmul(Tensor& out, const Tensor& x, const Tensor& w) = 0;
  // out[n, D] = table[ids[n], D] (ids int32 [n]).
  virtual void embedding(Tensor& out, const Tensor& table, const Tensor& ids) = 0;
  // out[n, D] = x[idx[n], D].
  virtual void gather_rows(Tensor& out, const Tensor& x, const Tensor& idx) = 0;
  // out[idx[n], D] += scale[n] * x[n, D], applied in n order (rows with equal idx
  // are summed in the order given).
  virtual void scatter_add_rows(Tensor& out, const Tensor& x, const Tensor& idx, const Tensor& scale) = 0;

  // ---- norms (over the last dimension) -------------------------------------
  // out = x / sqrt(mean(x^2) + eps) * weight   (weight may be a null Tensor: unweighted).
  virtual void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) = 0;
  // out = (x - mean) / sqrt(var + eps) * weight + bias.
  virtual void layer_norm(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) = 0;
  // KDA output norm: out = rms_norm(x, weight, eps) * sigmoid(gate); x, gate [rows, D], weight [D].
  virtual void gated_rms_norm(Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight, float eps) = 0;

  // ---- elementwise ----------------------------------------------------------
  // gate_up [T, 2I] (gate columns first) -> out [T, I] = silu(min(gate, limit)) * clamp(up, -limit, limit).
  virtual void swiglu(Tensor& out, const Tensor& gate_up, float limit) = 0;
  virtual void add(Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual void scale(Tensor& out, const Tensor& x, float s) = 0;
  virtual void sigmoid(Tensor& out, const Tensor& x) = 0;
  // Softmax over the last dimension.
  virtual void softmax(Tensor& out, const Tensor& x) = 0;
  // Row-wise top-k of x [T, N]: values [T, k] (descending; equal values by lower index),
  // indices int32 [T, k]. `ties` decides which of several equal values at the k-th
  // place is kept: the lower index, or what PyTorch's CPU top-k keeps (the reference;
  // its choice depends on N, so it can differ between a prefill and a decode).
  virtual void topk(Tensor& values, Tensor& indices, const Tensor& x, int k, TopkTies ties = TopkTies::kLowerIndex) = 0;
  // out [T, D] = x [T, D] + bias [D]: the bias row added to every row (a linear layer's
  // bias after matmul). out may be x.
  virtual void add_bias(Tensor& out, const Tensor& x, const Tensor& bias) = 0;
  // The exact GELU: out = x/2 · (1 + erf(x/√2)) (PyTorch's nn.GELU()). out may be x.
  virtual void gelu(Tensor& out, const Tensor& x) = 0;

  // ---- bidirectional encoders (the vision tower) ------------------------------
  // Rotary embedding in the half-rotation convention (rotate_half) with per-row
  // tables: x, out [T, H, D] (D even; any packed shape of T·H·D elements), cos, sin
  // [T, D]; with c = D/2, for i < c:
  //   out[t,h,i]   = x[t,h,i]   · cos[t,i]   − x[t,h,i+c] · sin[t,i]
  //   out[t,h,i+c] = x[t,h,i+c] · cos[t,i+c] + x[t,h,i]   · sin[t,i+c].
  // out may be x.
  virtual void rotary(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) = 0;
  // Bidirectional (non-causal) attention inside segments of rows: q, k, v, out
  // [T, H, D]; offsets int32 [S+1] with 0 = offsets[0] <= ... <= offsets[S] = T. A row
  // t of segment s (offsets[s] <= t < offsets[s+1]) attends to that segment's rows
  // only, head by head:
  //   out[t, h] = sum_j softmax_j(scale · q[t,h]·k[j,h]) v[j,h],  j in [offsets[s], offsets[s+1]).
  // The softmax is in f32; no T x T score matrix is materialised (memory O(T)), so a
  // segment may hold tens of thousands of rows. A segment's result depends only on its
  // own rows: segments are independent, whatever else is in the call.
  virtual void segment_attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& offsets, float scale) = 0;

  // ---- hyper-connections (mHC) ---------------------------------------------
  // From mix logits [T, (2+M)M] (= fn · rmsnorm(streams)): pre [T, M] = σ(l·s0 + b) + eps,
  // post [T, M] = 2σ(l·s1 + b), comb [T, M, M] = Sinkhorn(softmax(l·s2 + b) + eps, iters).
  virtual void mhc_coefficients(Tensor& pre, Tensor& post, Tensor& comb, const Tensor& mix, const Tensor& base,
                                const Tensor& scale, float hc_eps, int sinkhorn_iters) = 0;
  // out [T, D] = sum_m pre[T, m] * streams[T, m, D].
  virtual void mhc_collapse(Tensor& out, const Tensor& streams, const Tensor& pre) = 0;
  // out [T, M, D]: out[m] = post[m] * y + sum_j comb[j, m] * residual[j]  (comb used transposed).
  virtual void mhc_expand(Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb,
                          const Tensor& residual) = 0;
  // One mHC site before its sublayer: logits = fn · rms_norm(streams [T, M*D] flat, no
  // weight, norm_eps), then pre/post/comb as mhc_coefficients, collapsed =
  // mhc_collapse(streams, pre) and out [T, D] = rms_norm(collapsed, norm_weight, norm_eps).
  // streams [T, M, D]; fn [(2+M)M, M*D]; base, scale as mhc_coefficients; post [T, M],
  // comb [T, M, M]. The default runs those five ops; a GPU backend may fuse them at decode
  // rows, with rounding differences only (the norm has no weight, so it factors out of
  // the fn dot products), each row still independent of the others.
  virtual void mhc_pre(Tensor& post, Tensor& comb, Tensor& out, const Tensor& streams, const Tensor& fn,
                       const Tensor& base, const Tensor& scale, const Tensor& norm_weight, float norm_eps,
                       float hc_eps, int sinkhorn_iters);
  // mhc_expand(streams_out, y, prev_post, prev_comb, residual), then mhc_pre over
  // streams_out: a sublayer's output into the streams and the next site's pre-step in one
  // op. The default runs the two; a GPU backend may compute the streams inside the
  // pre-step's pass (streams_out keeps mhc_expand's bits).
  virtual void mhc_expand_pre(Tensor& streams_out, Tensor& post, Tensor& comb, Tensor& out, const Tensor& y,
                              const Tensor& prev_post, const Tensor& prev_comb, const Tensor& residual,
                              const Tensor& fn, const Tensor& base, const Tensor& scale, const Tensor& norm_weight,
                              float norm_eps, float hc_eps, int sinkhorn_iters);

  // ---- Kimi Delta Attention (one sequence per call) -------------------------
  // Depthwise causal conv over time with SiLU: x [T, C] pre-conv projections,
  // state [K-1, C] the previous K-1 rows (updated in place), weight [C, K]
  // (tap K-1 multiplies the newest row).
  virtual void causal_conv1d_silu(Tensor& out, const Tensor& x, Tensor& state, const Tensor& weight) = 0;
  // Forget gate: g [T, H*Dk] from f [T, H*Dk]: x = f + dt_bias; with a lower bound lb:
  // lb * σ(exp(A_log[h]) * x), else -exp(A_log[h]) * softplus(x).
  virtual void kda_gate(Tensor& g, const Tensor& f, const Tensor& dt_bias, const Tensor& a_log, bool has_lower_bound,
                        float lower_bound) = 0;
  // The low-rank ups of a KDA layer in one op: g = kda_gate(fa · f_b^T, dt_bias, a_log, ...),
  // gate = ga · g_b^T and beta = sigmoid(beta_logits). fa, ga [T, R]; f_b, g_b [H*Dk, R]
  // (f32 or bf16); g, gate [T, H*Dk]; beta, beta_logits [T, H] (beta may be beta_logits:
  // in place). The default runs matmul, kda_gate, sigmoid and matmul (their bits); a GPU
  // backend does it in one launch at decode rows (the same bits as its matmul there).
  virtual void kda_lowrank_gates(Tensor& g, Tensor& gate, Tensor& beta, const Tensor& fa, const Tensor& ga,
                                 const Tensor& beta_logits, const Tensor& f_b, const Tensor& g_b,
                                 const Tensor& dt_bias, const Tensor& a_log, bool has_lower_bound, float lower_bound);
  // The delta rule with per-channel decay, q and k l2-normalised (eps 1e-6) and q scaled
  // by Dk^-1/2 inside. q, k, g [T, H, Dk]; v [T, H, Dv]; beta [T, H]; state [H, Dk, Dv]
  // (in/out); out [T, H, Dv]. Recurrent: token by token. Chunked: the WY form over
  // chunks of chunk_size (prefill); both compute the same function.
  virtual void kda_recurrent(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                             const Tensor& beta, Tensor& state) = 0;
  virtual void kda_chunked(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                           const Tensor& beta, Tensor& state, int chunk_size) = 0;
  // Decode of B sequences in one call, one token each: row b of x/q/k/v/g/beta/out
  // goes with states[b], with exactly the result of the one-sequence op on that row
  // (the defaults loop over the rows; a GPU backend does all rows in one launch).
  virtual void causal_conv1d_silu_rows(Tensor& out, const Tensor& x, std::span<Tensor* const> states,
                                       const Tensor& weight);
  virtual void kda_recurrent_rows(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                  const Tensor& beta, std::span<Tensor* const> states);
  // The same over a KdaRowsView (capture-safe; padded rows: zeros). The q, k and v
  // short convolutions of a layer in one call: x_*, out_* [B, C], weight [3, C, K]
  // (q, k, v taps), row b's conv state [3, K-1, C]; each result equals
  // causal_conv1d_silu on that row and that part of its state (K = 1: no state, no
  // padded rows: every row is computed).
  virtual void kda_conv_qkv_rows(Tensor& out_q, Tensor& out_k, Tensor& out_v, const Tensor& x_q, const Tensor& x_k,
                                 const Tensor& x_v, const KdaRowsView& rows, const Tensor& weight);
  // kda_recurrent for row b with its recurrent state: q, k, g [B, H*Dk], v, out [B, H*Dv],
  // beta [B, H]; the same bits as kda_recurrent on that row alone.
  virtual void kda_recurrent_state_rows(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& g, const Tensor& beta, const KdaRowsView& rows);

  // ---- MLA + DSA (one sequence per call) ------------------------------------
  // Absorbed sparse attention over cached latents: q [T, H, R] (already multiplied
  // by W_UK), indices int32 [T, W] (-1 = none), out [T, H, R] = softmax_j(scale * q·c_j) c_j
  // over the listed tokens j. A row without any index gives zeros.
  virtual void mla_sparse_attention(Tensor& out, const Tensor& q, const LatentPagesView& cache,
                                    const Tensor& indices, float scale) = 0;
  // Writes latent rows [T, R] into token slots [first, first+T) of the paged cache
  // (converting to the page dtype; fp8 gets a per-token scale).
  virtual void latent_store(const LatentPagesView& cache, void* pages, float* scales, const Tensor& latent,
                            int64_t first) = 0;
  // Pooled indexer keys: out [P, D] = sum_i softmax_i(gate[p, i, :] + ape[i, :]) * keys[p, i, :]
  // (softmax over the k_p pool members, per channel). keys, gate [P, kp, D], ape [kp, D].
  virtual void indexer_pool_keys(Tensor& out, const Tensor& keys, const Tensor& gate, const Tensor& ape) = 0;
  // Pool scores: out [T, P] = sum_h w[t, h] * relu(scale * q[t, h, :]·pool[p, :]) for
  // p < candidates[t], and the f32 minimum for the other pools.
  virtual void indexer_scores(Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                              const Tensor& candidates, float scale) = 0;
  // Token indices for sparse attention from the selected pools: row i (absolute
  // position first_position + i, so pools p < (first_position + i + 1) / pool_size are
  // complete) gets tokens p*pool_size .. p*pool_size + pool_size-1 for each selected
  // complete pool p of pools [T, S] (a pool that is not complete gives -1s), then,
  // when `tail`, the tokens of its own incomplete pool; every other entry of
  // indices [T, W] (int32, W >= S*pool_size + (tail ? pool_size-1 : 0)) is -1.
  virtual void indexer_token_indices(Tensor& indices, const Tensor& pools, int64_t first_position, int pool_size,
                                     bool tail) = 0;

  // ---- MLA + DSA over a step's decode rows (DecodeRowsView; capture-safe) ---
  // Each gives, row for row, exactly what the one-sequence op above gives for that
  // row's sequence alone (same arithmetic and summation order).
  // latent [B, R]: row b goes to token slot positions[b] of its page table.
  virtual void latent_store_rows(const DecodeRowsView& rows, const Tensor& latent) = 0;
  // Indexer pool bookkeeping for one new token per row: key, gate [B, D] go into ring slot
  // position % kp; when position % kp == kp - 1 the pool position / kp is complete and its
  // pooled key (as indexer_pool_keys, ape [kp, D]) is written to pool_keys row position / kp.
  virtual void indexer_update_rows(const DecodeRowsView& rows, const Tensor& key, const Tensor& gate,
                                   const Tensor& ape) = 0;
  // Pool scores as indexer_scores with candidates (position + 1) / kp: out [B, W] (W >= every
  // row's candidate count; entries at or past a row's count are not written), q [B, H, D],
  // weights [B, H]; each row reads its own pool_keys. A row with at most `select` candidates
  // is not scored at all (none of its entries written): a top-k of `select` pools takes all of
  // them whatever their scores (indexer_topk_rows reads no score then); 0 scores every row.
  virtual void indexer_scores_rows(Tensor& out, const DecodeRowsView& rows, const Tensor& q, const Tensor& weights,
                                   float scale, int64_t select) = 0;
  // The selected pools of each row: among the row's n = min((position + 1) / kp, W)
  // candidates of scores [B, W], the min(S, n) with the largest scores (equal scores:
  // `ties` as in topk over that row's n scores), in ascending pool order, then -1s;
  // selected int32 [B, S]. kTorchCpu on CUDA syncs with the host (not capture-safe).
  virtual void indexer_topk_rows(Tensor& selected, const Tensor& scores, const DecodeRowsView& rows,
                                 TopkTies ties) = 0;
  // indexer_token_indices with first_position = positions[b] for row b: indices [B, Wi].
  virtual void indexer_token_indices_rows(Tensor& indices, const Tensor& selected, const DecodeRowsView& rows,
                                          bool tail) = 0;
  // mla_sparse_attention for row b over its page table and positions[b] + 1 cached tokens:
  // q, out [B, H, R], indices [B, Wi].
  virtual void mla_sparse_attention_rows(Tensor& out, const Tensor& q, const DecodeRowsView& rows,
                                         const Tensor& indices, float scale) = 0;

  // ---- MoE router ------------------------------------------------------------
  // Sigmoid router: s = σ(logits [T, E]); choice = s + bias; keep the topk_group groups
  // with the largest top-2 sums of n_group; take the top `k` experts among them;
  // weights = s at those experts, normalised (when norm) and multiplied by `scaling`.
  // Outputs: weights [T, k] f32, ids [T, k] int32 (ascending expert id).
  virtual void moe_route(Tensor& weights, Tensor& ids, const Tensor& logits, const Tensor& bias, int n_group,
                         int topk_group, int k, bool norm, float scaling) = 0;
  // The routed experts for all tokens in one call: for each token t,
  //   out[t] = sum over j = 0..k-1, in that order (starting from 0), of
  //            weights[t, j] * down[e] · swiglu(gate_up[e] · x[t], swiglu_limit),  e = ids[t, j]
  // (swiglu as the op above: gate rows first). x [T, H] f32; ids int32 [T, k] with
  // distinct experts in each row (what moe_route gives: ascending, so the sum runs in
  // ascending expert id); weights [T, k] f32; gate_up [E, 2I, H] and down [E, H, I]
  // stacked per expert, f32 or bf16. out [T, H] f32 is overwritten. A backend groups
  // the tokens per expert itself (CUDA: on the device, no host sync for T <= 64), so
  // each expert's weights are read once per call.
  virtual void moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const Tensor& gate_up, const Tensor& down, float swiglu_limit) = 0;

  // ---- quantized weights ----------------------------------------------------
  // out [T, n_out] = x [T, k_in] · W for an EXL3 weight (exl3_weight.h: W's Hadamard
  // rotations, suh, svh and bias included). k_in / n_out may be narrower than W's padded
  // dims (the input is zero-extended, padded outputs are dropped); out may be row-strided
  // (last dimension packed, e.g. a column block). Backends without EXL3 throw StatusError.
  virtual void exl3_matmul(Tensor& out, const Tensor& x, const Exl3Weight& w);
  // moe_experts (same contract: ids/weights [T, k], out [T, H] overwritten, each token's
  // expert outputs summed in j order from 0) over routed experts stored EXL3:
  //   out[t] = sum_j weights[t, j] * down[e] · swiglu(gate[e] · x[t] ++ up[e] · x[t]).
  // The default groups the tokens on the host (one download of ids) and runs each active
  // expert through exl3_matmul, swiglu and scatter_add_rows in ascending expert order;
  // the CUDA backend groups on the device (no host sync up to 64 tokens).
  virtual void moe_experts_exl3(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                                const Exl3ExpertTable& experts, float swiglu_limit);
  // moe_experts (same contract) over routed experts stored FP8 with 128x128 block scales
  // (fp8_expert_stack.h: the official release's bytes), out[t] = sum_j weights[t, j] *
  // down[e] · swiglu(gate[e] · x[t] ++ up[e] · x[t]). The default groups the tokens on the
  // host like moe_experts_exl3's and runs each active expert through matmul on its
  // Matrix::fp8_block views; the CUDA backend groups on the device (no host sync:
  // capturable) and dequantizes the weights in registers.
  virtual void moe_experts_fp8(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                               const Fp8ExpertStack& experts, float swiglu_limit);
  // Moves a layer's EXL3 experts to where this backend computes them, once at load
  // (the default, for backends that read host tensors: checks them, copies nothing).
  virtual Status upload_exl3_experts(Exl3ExpertTable& experts);

  // ---- sampling (sample_rows.h) ----------------------------------------------
  // One token per row: out[b] from logits row rows[b] (packed f32 [V] or [1, V] on
  // this backend's device; rows may be views of one batched tensor) under params[b],
  // with the host sampler's math; out is on the host. A row the backend cannot decide
  // exactly comes back kUndecided. The default throws StatusError (unimplemented).
  virtual void sample_rows(std::span<SampleRowResult> out, std::span<const Tensor> rows,
                           std::span<const SampleRowParams> params);

  // ---- captured op sequences (CUDA graphs) and step markers ----------------
  // capture(fn) records the ops `fn` issues without running them; replay() runs
  // them again, on the same memory: every tensor fn reads or writes that it did not
  // allocate itself must stay where it is while the graph lives. Tensors fn
  // allocates come from a capture arena shared by all graphs (CUDA) and are valid
  // only during a replay, so fn copies its results into tensors made beforehand.
  // fn must not synchronise with the host (downloads, uploads through host memory):
  // capture() then fails and the caller runs the ops eagerly. Backends without real
  // graphs (supports_graphs() false: CPU) keep fn and call it again on replay.
  class Graph {
   public:
    virtual ~Graph() = default;
  };
  virtual bool supports_graphs() const { return false; }
  virtual Expected<std::unique_ptr<Graph>> capture(std::function<void()> fn);
  virtual Status replay(Graph& graph);
  // A model step's bounds, for the op profiler (TF_PROFILE_OPS=1 on CUDA); no-ops by default.
  virtual void begin_step() {}
  virtual void end_step() {}

  // ---- side branches (independent op groups that may overlap) ---------------
  // The ops issued between branch_begin() and branch_end() form a side branch: it
  // starts after every op issued before branch_begin() and may run concurrently with
  // the ops issued after branch_end(), until branch_join(); ops after branch_join()
  // follow both. Use SideBranch (below) rather than the three calls. Until the join,
  // neither branch may write what the other reads or writes, and the side branch
  // must not synchronise with the host or run collectives. Branches do not nest: a
  // backend that overlaps them throws on a branch_begin() before the join. The
  // defaults (CPU) do nothing: the ops run in the order issued, so any result is that
  // of the same ops without branches. concurrent_branches(rows) says whether branches
  // of ops on that many rows overlap here (CUDA: up to its exact rows, where single
  // ops are latency-bound and accumulate as out + sum; not with TF_BRANCHES=0), so
  // that a caller only restructures work (e.g. computes a term of a sum apart) where
  // it can pay.
  virtual bool concurrent_branches(int64_t /*rows*/) const { return false; }
  virtual void branch_begin() {}
  virtual void branch_end() {}
  virtual void branch_join() {}
  class SideBranch;

 protected:
  // The quantized-expert ops' default (ops.cc): tokens grouped on the host, then per
  // active expert, in ascending id, gate_up(e, gate, up, x_rows) fills the expert's
  // gate and up columns [m, I] (row-strided views of one [m, 2I] tensor), SwiGLU, and
  // down(e, y, act) fills y [m, H]; the rows are added into out in token order.
  using ExpertGateUp = std::function<void(int64_t e, Tensor& gate, Tensor& up, const Tensor& x_rows)>;
  using ExpertDown = std::function<void(int64_t e, Tensor& y, const Tensor& act)>;
  void moe_experts_by_host_grouping(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                                    int64_t num_experts, int64_t hidden, int64_t intermediate, float swiglu_limit,
                                    const char* op, const ExpertGateUp& gate_up, const ExpertDown& down);
};

// A side branch as a scope: the constructor begins it, end() returns to the main
// branch, join() joins (the destructor ends and joins what is still open, also when
// an exception leaves the scope: a graph capture that fails inside the branch).
class Ops::SideBranch {
 public:
  explicit SideBranch(Ops& ops) : ops_(ops) {
    ops_.branch_begin();
    state_ = State::kSide;
  }
  ~SideBranch() {
    // Each step on its own: the backend is back on its main branch even when one fails
    // (the error resurfaces at the next synchronisation).
    try {
      end();
    } catch (...) {
    }
    try {
      join();
    } catch (...) {
    }
  }
  SideBranch(const SideBranch&) = delete;
  SideBranch& operator=(const SideBranch&) = delete;

  void end() {
    if (state_ != State::kSide) return;
    state_ = State::kMain;
    ops_.branch_end();
  }
  void join() {
    end();
    if (state_ != State::kMain) return;
    state_ = State::kJoined;
    ops_.branch_join();
  }

 private:
  enum class State { kSide, kMain, kJoined };
  Ops& ops_;
  State state_ = State::kJoined;
};

}  // namespace tf
