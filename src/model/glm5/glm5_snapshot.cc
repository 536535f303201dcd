// Glm5Model::snapshot / restore: a sequence's state as named host tensors and back
// (prompt reuse's store on disk, engine/prompt_store.h).
//
// Names: kda.<i>.conv / kda.<i>.recurrent (by KDA layer), indexer.<i>.ring /
// indexer.<i>.pool_keys (by MLA layer, each only when the sequence has it), latent.pages /
// latent.scales (page-major: [pages, mla layers, page_size, width]), and for the MTP layer
// mtp.pages / mtp.scales / mtp.indexer.* / mtp.pending / mtp.pending_tokens. The latent
// pages and pooled keys run along the sequence (SequenceSnapshot::tokens_per_row); the MTP
// layer's cache does not count as such, since it lags the sequence (its rows are kept whole). The pages go
// through the device kPagesPerCopy at a time, so a long prompt's snapshot needs little
// device memory beside the pool.
#include <algorithm>
#include <string>

#include "model/glm5/glm5_model.h"

namespace tf {

namespace {

constexpr int64_t kPagesPerCopy = 64;

// The pieces of tensor `name`, which together must have `shape` and `dtype` (each on the
// host, packed, with shape's trailing dims; kInvalidArgument otherwise).
const std::vector<Tensor>& expect_pieces(const SnapshotPieces& tensors, const std::string& name,
                                         const Shape& shape, DType dtype) {
  auto it = tensors.find(name);
  if (it == tensors.end() || it->second.empty())
    throw StatusError(invalid_argument("state tensor " + name + " is missing"));
  int64_t rows = 0;
  std::string seen;
  bool fits = true;
  for (const Tensor& t : it->second) {
    Shape tail = t.shape();
    if (!tail.empty()) tail[0] = shape.empty() ? 0 : shape[0];
    fits = fits && t.dim() == static_cast<int64_t>(shape.size()) && tail == shape && t.dtype() == dtype &&
           t.device().is_cpu() && t.is_contiguous();
    rows += t.dim() > 0 ? t.size(0) : 0;
    seen += (seen.empty() ? "" : " + ") + t.describe();
  }
  if (!fits || (!shape.empty() && rows != shape[0]))
    throw StatusError(invalid_argument("state tensor " + name + " is " + seen + ", this model needs " +
                                       dtype_name(dtype) + shape_to_string(shape) + " on the host, packed"));
  return it->second;
}

// A tensor that is one piece.
const Tensor& expect_tensor(const SnapshotPieces& tensors, const std::string& name, const Shape& shape,
                            DType dtype) {
  const std::vector<Tensor>& pieces = expect_pieces(tensors, name, shape, dtype);
  if (pieces.size() != 1)
    throw StatusError(invalid_argument("state tensor " + name + " comes in " + std::to_string(pieces.size()) +
                                       " pieces; it does not run along the sequence"));
  return pieces[0];
}

int64_t pages_for(int64_t tokens, int64_t page_size) { return (tokens + page_size - 1) / page_size; }

}  // namespace

size_t SequenceSnapshot::bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : tensors) n += t.nbytes();
  return n;
}

Tensor Glm5Model::host_copy(const Tensor& t) {
  if (!device_.is_cpu()) return ops_.to_host(t);
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  out.copy_from(t);
  return out;
}

void Glm5Model::snapshot_pages(const LatentCachePool& pool, std::span<const int32_t> pages,
                               const std::string& name, SequenceSnapshot& out) {
  const auto n = static_cast<int64_t>(pages.size());
  if (n == 0) return;  // every row lies before the snapshot's `from`
  Tensor data = Tensor::empty(pool.pages_shape(n), pool.dtype());
  Tensor scales = Tensor::empty(pool.scales_shape(n), DType::kF32);
  for (int64_t at = 0; at < n; at += kPagesPerCopy) {
    const int64_t k = std::min(kPagesPerCopy, n - at);
    Tensor dev_data, dev_scales;
    pool.read_pages(ops_, pages.subspan(static_cast<size_t>(at), static_cast<size_t>(k)), dev_data,
                    dev_scales);
    data.slice(0, at, at + k).copy_from(ops_.to_host(dev_data));
    scales.slice(0, at, at + k).copy_from(ops_.to_host(dev_scales));
  }
  out.tensors.emplace_back(name + ".pages", std::move(data));
  out.tensors.emplace_back(name + ".scales", std::move(scales));
}

void Glm5Model::restore_pages(LatentCachePool& pool, std::vector<int32_t>& pages, int64_t tokens,
                              const std::string& name, const SnapshotPieces& tensors) {
  const int64_t n = pages_for(tokens, pool.page_size());
  const std::vector<Tensor>& data =
      expect_pieces(tensors, name + ".pages", pool.pages_shape(n), pool.dtype());
  const std::vector<Tensor>& scales =
      expect_pieces(tensors, name + ".scales", pool.scales_shape(n), DType::kF32);
  if (data.size() != scales.size())
    throw StatusError(
        invalid_argument("state tensors " + name + ".pages and .scales come in pieces that differ"));
  for (size_t i = 0; i < data.size(); ++i)
    if (data[i].size(0) != scales[i].size(0))
      throw StatusError(
          invalid_argument("state tensors " + name + ".pages and .scales come in pieces that differ"));
  if (Status s = pool.reserve(pages, tokens); !s.is_ok()) throw StatusError(s);
  int64_t first = 0;  // the piece's first page
  for (size_t i = 0; i < data.size(); ++i) {
    const int64_t rows = data[i].size(0);
    for (int64_t at = 0; at < rows; at += kPagesPerCopy) {
      const int64_t k = std::min(kPagesPerCopy, rows - at);
      pool.write_pages(
          ops_,
          std::span<const int32_t>(pages).subspan(static_cast<size_t>(first + at), static_cast<size_t>(k)),
          ops_.to_device(data[i].slice(0, at, at + k)), ops_.to_device(scales[i].slice(0, at, at + k)));
    }
    first += rows;
  }
}

void Glm5Model::snapshot_indexer(const Glm5Sequence::IndexerState& st, const std::string& name, int64_t from,
                                 SequenceSnapshot& out) {
  if (!st.ring.is_null()) out.tensors.emplace_back(name + ".ring", host_copy(st.ring));
  if (st.pools == 0) return;
  const int64_t first = from / cfg_.index_kpool;
  if (st.pools > first)
    out.tensors.emplace_back(name + ".pool_keys", host_copy(st.pool_keys.slice(0, first, st.pools)));
}

void Glm5Model::restore_indexer(Glm5Sequence::IndexerState& st, int64_t length, const std::string& name,
                                const SnapshotPieces& tensors) {
  // Counters follow from the length (glm5_model.h); a layer that never ran its indexer (a
  // shared one) has neither tensor.
  const int64_t kp = cfg_.index_kpool, di = cfg_.index_head_dim;
  if (tensors.count(name + ".ring")) {
    const Tensor& ring = expect_tensor(tensors, name + ".ring", {2, kp, di}, DType::kF32);
    ensure_indexer_ring(st);
    ops_.copy(st.ring, ring);
    st.ring_rows = length % kp;
  }
  if (tensors.count(name + ".pool_keys")) {
    const int64_t pools = length / kp;
    const std::vector<Tensor>& keys = expect_pieces(tensors, name + ".pool_keys", {pools, di}, DType::kF32);
    ensure_pool_capacity(st, pools);
    int64_t at = 0;
    for (const Tensor& piece : keys) {
      Tensor dst = st.pool_keys.slice(0, at, at + piece.size(0));
      ops_.copy(dst, piece);
      at += piece.size(0);
    }
    st.pools = pools;
  }
}

int64_t Glm5Model::snapshot_bytes(const Glm5Sequence& seq, int64_t from) const {
  int64_t n = 0;
  auto add = [&n](const Tensor& t) { n += t.is_null() ? 0 : static_cast<int64_t>(t.nbytes()); };
  auto add_indexer = [&](const Glm5Sequence::IndexerState& st, int64_t from_token) {
    add(st.ring);
    n += std::max<int64_t>(0, st.pools - from_token / cfg_.index_kpool) * cfg_.index_head_dim *
         static_cast<int64_t>(sizeof(float));
  };
  auto add_pages = [&n](const LatentCachePool& pool, int64_t pages) {
    n += shape_numel(pool.pages_shape(pages)) * static_cast<int64_t>(dtype_size(pool.dtype())) +
         shape_numel(pool.scales_shape(pages)) * static_cast<int64_t>(sizeof(float));
  };
  for (const auto& k : seq.kda_) {
    add(k.conv);
    add(k.recurrent);
  }
  for (const auto& st : seq.indexer_) add_indexer(st, from);
  add_pages(*pool_,
            std::max<int64_t>(0, static_cast<int64_t>(seq.pages_.size()) - from / pool_->page_size()));
  if (mtp_pool_ && seq.mtp_length_ > 0) {
    add_pages(*mtp_pool_, static_cast<int64_t>(seq.mtp_pages_.size()));
    add_indexer(seq.mtp_indexer_, 0);
    add(seq.mtp_pending_);
    n += static_cast<int64_t>(seq.mtp_pending_tokens_.size() * sizeof(int32_t));
  }
  return n;
}

Expected<SequenceSnapshot> Glm5Model::snapshot(const Glm5Sequence& seq, int64_t from) {
  const int64_t ps = pool_->page_size(), kp = cfg_.index_kpool;
  if (seq.length_ % ps != 0)
    return invalid_argument("snapshot: sequence length " + std::to_string(seq.length_) +
                            " is not a whole number of " + std::to_string(ps) + "-token pages");
  if (from < 0 || from > seq.length_ || from % ps != 0 || from % kp != 0)
    return invalid_argument("snapshot: from token " + std::to_string(from) + " of " +
                            std::to_string(seq.length_) +
                            " is not a whole number of pages and indexer pools");
  if (seq.spec_.pending) return invalid_argument("snapshot: a speculative step is still to be committed");
  try {
    SequenceSnapshot out;
    out.length = seq.length_;
    out.from = from;
    for (size_t i = 0; i < seq.kda_.size(); ++i) {
      out.tensors.emplace_back("kda." + std::to_string(i) + ".conv", host_copy(seq.kda_[i].conv));
      out.tensors.emplace_back("kda." + std::to_string(i) + ".recurrent", host_copy(seq.kda_[i].recurrent));
    }
    for (size_t i = 0; i < seq.indexer_.size(); ++i) {
      const std::string name = "indexer." + std::to_string(i);
      snapshot_indexer(seq.indexer_[i], name, from, out);
      if (seq.indexer_[i].pools > 0) out.tokens_per_row[name + ".pool_keys"] = kp;
    }
    snapshot_pages(*pool_, std::span<const int32_t>(seq.pages_).subspan(static_cast<size_t>(from / ps)),
                   "latent", out);
    out.tokens_per_row["latent.pages"] = ps;
    out.tokens_per_row["latent.scales"] = ps;
    if (mtp_pool_ && seq.mtp_length_ > 0) {
      out.mtp_length = seq.mtp_length_;
      snapshot_pages(*mtp_pool_, seq.mtp_pages_, "mtp", out);
      snapshot_indexer(seq.mtp_indexer_, "mtp.indexer", 0, out);
      if (!seq.mtp_pending_.is_null()) {
        out.tensors.emplace_back("mtp.pending", host_copy(seq.mtp_pending_));
        std::vector<int32_t> tokens = seq.mtp_pending_tokens_;
        Tensor t = Tensor::empty({static_cast<int64_t>(tokens.size())}, DType::kI32);
        std::copy(tokens.begin(), tokens.end(), t.data<int32_t>());
        out.tensors.emplace_back("mtp.pending_tokens", std::move(t));
      }
    }
    return out;
  } catch (const StatusError& e) {
    return e.status().with_context("snapshot");
  } catch (const std::exception& e) {
    return resource_exhausted(std::string("snapshot: ") + e.what());
  }
}

Expected<std::unique_ptr<Glm5Sequence>> Glm5Model::restore(int64_t length, int64_t mtp_length,
                                                           const std::map<std::string, Tensor>& tensors) {
  SnapshotPieces pieces;
  for (const auto& [name, t] : tensors) pieces[name] = {t};
  return restore(length, mtp_length, pieces);
}

Expected<std::unique_ptr<Glm5Sequence>> Glm5Model::restore(int64_t length, int64_t mtp_length,
                                                           const SnapshotPieces& tensors) {
  const int64_t ps = pool_->page_size();
  if (length <= 0 || length % ps != 0)
    return invalid_argument("restore: length " + std::to_string(length) +
                            " is not a positive whole number of " + std::to_string(ps) + "-token pages");
  if (mtp_length < 0 || mtp_length > length || (mtp_length > 0 && !mtp_pool_))
    return invalid_argument("restore: MTP length " + std::to_string(mtp_length) + " for a sequence of " +
                            std::to_string(length) + (mtp_pool_ ? "" : " (this model has no MTP layer)"));
  try {
    std::unique_ptr<Glm5Sequence> s = new_sequence();
    for (size_t i = 0; i < s->kda_.size(); ++i) {
      Glm5Sequence::KdaState& k = s->kda_[i];
      const std::string name = "kda." + std::to_string(i);
      ops_.copy(k.conv, expect_tensor(tensors, name + ".conv", k.conv.shape(), k.conv.dtype()));
      ops_.copy(k.recurrent,
                expect_tensor(tensors, name + ".recurrent", k.recurrent.shape(), k.recurrent.dtype()));
    }
    for (size_t i = 0; i < s->indexer_.size(); ++i)
      restore_indexer(s->indexer_[i], length, "indexer." + std::to_string(i), tensors);
    restore_pages(*pool_, s->pages_, length, "latent", tensors);
    s->pages_dev_ = upload_i32(s->pages_);
    s->length_ = length;
    if (mtp_length > 0) {
      restore_pages(*mtp_pool_, s->mtp_pages_, mtp_length, "mtp", tensors);
      s->mtp_pages_dev_ = upload_i32(s->mtp_pages_);
      s->mtp_length_ = mtp_length;
      restore_indexer(s->mtp_indexer_, mtp_length, "mtp.indexer", tensors);
      if (auto it = tensors.find("mtp.pending"); it != tensors.end() && !it->second.empty()) {
        const Tensor& pending = it->second[0];
        if (pending.dim() != 2)
          throw StatusError(invalid_argument("state tensor mtp.pending is " + pending.describe()));
        const int64_t rows = pending.size(0);
        const Tensor& host = expect_tensor(tensors, "mtp.pending", {rows, cfg_.hidden_size}, DType::kF32);
        const Tensor& tokens = expect_tensor(tensors, "mtp.pending_tokens", {rows}, DType::kI32);
        if (mtp_length + rows > length)
          throw StatusError(invalid_argument("state tensor mtp.pending has " + std::to_string(rows) +
                                             " rows; the MTP cache and the sequence are only " +
                                             std::to_string(length - mtp_length) + " apart"));
        s->mtp_pending_ = ops_.to_device(host);
        s->mtp_pending_tokens_.assign(tokens.data<int32_t>(), tokens.data<int32_t>() + rows);
      }
    }
    return s;
  } catch (const StatusError& e) {
    return e.status().with_context("restore");
  } catch (const std::exception& e) {
    return resource_exhausted(std::string("restore: ") + e.what());
  }
}

}  // namespace tf
