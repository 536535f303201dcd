// LatentCachePool: the shared, paged store of MLA latents for every sequence.
//
// Storage is [mla_layers, num_pages + 1, page_size, width] (the last: scratch_page()) on the ops device, in the chosen dtype (f32
// for exact reference checks, bf16, or fp8 e4m3 with one f32 scale per token
// and layer). A sequence owns a page table (physical page ids); page i holds its
// tokens [i*page_size, (i+1)*page_size) for all MLA layers at once. Pages come
// from a free list and go back when no table holds them any more: a page may be
// shared (share()) by tables whose sequences have the same tokens there (a kept
// prompt and the sequences resumed from it; only full pages are shared, and a full
// page is never written again, so sharing needs no copy-on-write).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/ops.h"

namespace tf {

class LatentCachePool {
 public:
  LatentCachePool(Ops& ops, int mla_layers, int64_t width, int64_t page_size, int64_t num_pages, DType dtype);

  DType dtype() const { return dtype_; }
  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  // A physical page outside the free list (never any sequence's): padded decode rows of
  // a graph bucket write their latents there.
  int32_t scratch_page() const { return static_cast<int32_t>(num_pages_); }

  // Grows `table` so that it covers `tokens` tokens; resource_exhausted when the pool is empty
  // (the table is left unchanged then).
  Status reserve(std::vector<int32_t>& table, int64_t tokens);
  // Appends the first `pages` pages of `from` to `to` (which must be empty), each now
  // held once more: the tables share them until each is released.
  void share(const std::vector<int32_t>& from, int64_t pages, std::vector<int32_t>& to);
  // Copies page `from`'s rows (every layer's, with their scales) onto page `to`.
  void copy_page(Ops& ops, int32_t from, int32_t to);
  // Drops `table`'s hold on each of its pages (a page no table holds goes back to the
  // free list) and clears it.
  void release(std::vector<int32_t>& table);
  // A prompt state on disk (Glm5Model::snapshot / restore): the rows of `pages` with their
  // scales, as data [pages, layers, page_size, width] and scales [pages, layers, page_size]
  // on the ops device (page-major, so that a run of pages is one contiguous slice), and
  // the way back onto pages a table holds alone.
  void read_pages(Ops& ops, std::span<const int32_t> pages, Tensor& data, Tensor& scales) const;
  void write_pages(Ops& ops, std::span<const int32_t> pages, const Tensor& data, const Tensor& scales);
  // The shapes of read_pages' tensors for `pages` pages.
  Shape pages_shape(int64_t pages) const { return {pages, storage_.size(0), page_size_, width_}; }
  Shape scales_shape(int64_t pages) const { return {pages, storage_.size(0), page_size_}; }

  // The kernel view of MLA layer `layer` for a sequence with page table `table` (int32,
  // on the ops device: the kernels read it there) and `tokens` cached tokens.
  LatentPagesView view(int layer, const Tensor& table, int64_t tokens) const;
  // The cache part of a DecodeRowsView for MLA layer `layer` (rows and per-row arrays unset).
  DecodeRowsView rows_view(int layer) const;
  void* layer_pages(int layer) const;
  float* layer_scales(int layer) const;

 private:
  DType dtype_;
  int mla_layers_;
  int64_t width_, page_size_, num_pages_;
  Tensor storage_;
  Tensor scales_;
  std::vector<int32_t> free_;
  std::vector<int32_t> holders_;  // per page: the tables holding it (0: free)
};

}  // namespace tf
