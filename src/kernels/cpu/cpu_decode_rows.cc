// The batched decode-row MLA/DSA ops (ops.h: DecodeRowsView) on the CPU. Each row is
// handed to the one-sequence kernel with that row's page table, position and indexer
// state, so a row's result is the one-sequence result by construction (the reference
// the CUDA *_rows kernels are compared with).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

[[noreturn]] void bad(const char* op, const std::string& what) {
  throw StatusError(invalid_argument(std::string(op) + ": " + what));
}

void check_view(const char* op, const DecodeRowsView& v, bool cache, bool indexer) {
  if (v.rows < 0 || (v.rows > 0 && v.positions == nullptr)) bad(op, "decode rows without positions");
  if (cache && v.rows > 0) {
    if (v.page_tables == nullptr || v.page_size <= 0 || v.width <= 0 || v.pages == nullptr)
      bad(op, "decode rows without latent pages, page tables or sizes");
    if (v.dtype == DType::kF8E4M3 && v.scales == nullptr) bad(op, "fp8 latent pages without scales");
  }
  if (indexer && v.kpool < 1) bad(op, "indexer pool size " + std::to_string(v.kpool) + " < 1");
  for (int64_t b = 0; b < v.rows; ++b)
    if (v.positions[b] < 0) bad(op, "row " + std::to_string(b) + " has a negative position");
}

// Row b's paged cache as the one-sequence ops see it (positions[b] + 1 tokens).
LatentPagesView row_view(const DecodeRowsView& v, int64_t b) {
  LatentPagesView c;
  c.pages = v.pages;
  c.scales = v.scales;
  c.dtype = v.dtype;
  c.page_size = v.page_size;
  c.width = v.width;
  c.page_stride = v.page_stride;
  c.page_table = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(v.page_tables[b]));
  c.num_tokens = v.positions[b] + 1;
  return c;
}

float* addr(const int64_t* table, int64_t b) { return reinterpret_cast<float*>(static_cast<uintptr_t>(table[b])); }

// Row b of a packed [B, ...] tensor as a packed [1, ...] tensor.
Tensor row(const Tensor& t, int64_t b) { return t.slice(0, b, b + 1); }

void check_rows(const char* op, const Tensor& t, int64_t rows) {
  if (t.dim() == 0 || t.size(0) != rows || !t.is_contiguous())
    bad(op, t.describe() + " is not packed with one row per decode row (" + std::to_string(rows) + ")");
}

}  // namespace

void latent_store_rows(const DecodeRowsView& v, const Tensor& latent) {
  check_view("latent_store_rows", v, true, false);
  check_rows("latent_store_rows latent", latent, v.rows);
  for (int64_t b = 0; b < v.rows; ++b) latent_store(row_view(v, b), v.pages, v.scales, row(latent, b), v.positions[b]);
}

void indexer_update_rows(const DecodeRowsView& v, const Tensor& key, const Tensor& gate, const Tensor& ape) {
  check_view("indexer_update_rows", v, false, true);
  check_f32("indexer_update_rows key", key, v.rows * v.index_dim);
  check_f32("indexer_update_rows gate", gate, v.rows * v.index_dim);
  check_f32("indexer_update_rows ape", ape, v.kpool * v.index_dim);
  if (v.rows > 0 && (v.rings == nullptr || v.pool_keys == nullptr)) bad("indexer_update_rows", "no indexer state");
  const int64_t kp = v.kpool, d = v.index_dim;
  for (int64_t b = 0; b < v.rows; ++b) {
    const int64_t pos = v.positions[b], slot = pos % kp;
    float* ring = addr(v.rings, b);
    std::copy_n(key.data<float>() + b * d, d, ring + slot * d);
    std::copy_n(gate.data<float>() + b * d, d, ring + (kp + slot) * d);
    if (slot != kp - 1) continue;
    Tensor keys = Tensor::view_of(ring, {1, kp, d}, DType::kF32);
    Tensor gates = Tensor::view_of(ring + kp * d, {1, kp, d}, DType::kF32);
    Tensor out = Tensor::view_of(addr(v.pool_keys, b) + (pos / kp) * d, {1, d}, DType::kF32);
    indexer_pool_keys(out, keys, gates, ape);
  }
}

void indexer_scores_rows(Tensor& out, const DecodeRowsView& v, const Tensor& q, const Tensor& weights, float scale,
                         int64_t select) {
  check_view("indexer_scores_rows", v, false, true);
  check_rows("indexer_scores_rows out", out, v.rows);
  check_f32("indexer_scores_rows out", out);
  const int64_t w = v.rows == 0 ? 0 : out.numel() / v.rows, d = v.index_dim;
  const int64_t h = v.rows == 0 ? 0 : weights.numel() / v.rows;
  check_f32("indexer_scores_rows q", q, v.rows * h * d);
  check_f32("indexer_scores_rows weights", weights, v.rows * h);
  if (v.rows > 0 && v.pool_keys == nullptr) bad("indexer_scores_rows", "no pooled keys");
  for (int64_t b = 0; b < v.rows; ++b) {
    const int64_t n = std::min<int64_t>((v.positions[b] + 1) / v.kpool, w);
    if (n == 0 || n <= select) continue;  // none, or all of them selected (ops.h)
    const Tensor pk = Tensor::view_of(addr(v.pool_keys, b), {n, d}, DType::kF32);
    int32_t cand_v = static_cast<int32_t>(n);
    const Tensor cand = Tensor::view_of(&cand_v, {1}, DType::kI32);
    Tensor o = Tensor::view_of(out.data<float>() + b * w, {1, n}, DType::kF32);
    indexer_scores(o, row(q, b), pk, row(weights, b), cand, scale);
  }
}

void indexer_topk_rows(Tensor& selected, const Tensor& scores, const DecodeRowsView& v, TopkTies ties) {
  check_view("indexer_topk_rows", v, false, true);
  check_rows("indexer_topk_rows scores", scores, v.rows);
  check_rows("indexer_topk_rows selected", selected, v.rows);
  check_f32("indexer_topk_rows scores", scores);
  check_i32("indexer_topk_rows selected", selected);
  const int64_t w = v.rows == 0 ? 0 : scores.numel() / v.rows, s = v.rows == 0 ? 0 : selected.numel() / v.rows;
  for (int64_t b = 0; b < v.rows; ++b) {
    int32_t* sel = selected.data<int32_t>() + b * s;
    std::fill_n(sel, s, -1);
    const int64_t n = std::min<int64_t>((v.positions[b] + 1) / v.kpool, w), k = std::min(s, n);
    if (k == 0) continue;
    if (k == n) {  // every candidate, in pool order: no score is read (indexer_scores_rows may skip the row)
      for (int64_t j = 0; j < n; ++j) sel[j] = static_cast<int32_t>(j);
      continue;
    }
    const Tensor x = Tensor::view_of(const_cast<float*>(scores.data<float>()) + b * w, {1, n}, DType::kF32);
    Tensor vals = Tensor::empty({1, k}, DType::kF32);
    Tensor idx = Tensor::view_of(sel, {1, k}, DType::kI32);
    topk(vals, idx, x, static_cast<int>(k), ties);
    std::sort(sel, sel + k);
  }
}

void indexer_token_indices_rows(Tensor& indices, const Tensor& selected, const DecodeRowsView& v, bool tail) {
  check_view("indexer_token_indices_rows", v, false, true);
  check_rows("indexer_token_indices_rows indices", indices, v.rows);
  check_rows("indexer_token_indices_rows selected", selected, v.rows);
  for (int64_t b = 0; b < v.rows; ++b) {
    Tensor ib = row(indices, b);
    indexer_token_indices(ib, row(selected, b), v.positions[b], static_cast<int>(v.kpool), tail);
  }
}

void mla_sparse_attention_rows(Tensor& out, const Tensor& q, const DecodeRowsView& v, const Tensor& indices,
                               float scale) {
  check_view("mla_sparse_attention_rows", v, true, false);
  check_rows("mla_sparse_attention_rows out", out, v.rows);
  check_rows("mla_sparse_attention_rows q", q, v.rows);
  check_rows("mla_sparse_attention_rows indices", indices, v.rows);
  for (int64_t b = 0; b < v.rows; ++b) {
    Tensor ob = row(out, b);
    mla_sparse_attention(ob, row(q, b), row_view(v, b), row(indices, b), scale);
  }
}

}  // namespace tf::cpu
