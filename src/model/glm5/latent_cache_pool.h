// LatentCachePool: the shared, paged store of MLA latents for every sequence.
//
// Storage is [mla_layers, num_pages + 1, page_size, width] (the last: scratch_page()) on the ops device, in the chosen dtype (f32
// for exact reference checks, bf16, or fp8 e4m3 with one f32 scale per token
// and layer). A sequence owns a page table (physical page ids); page i holds its
// tokens [i*page_size, (i+1)*page_size) for all MLA layers at once. Pages come
// from a free list and go back when the sequence is dropped. The model owns the
// storage type here; allocation policy beyond the free list (prefix sharing,
// eviction) belongs to src/cache later.
#pragma once

#include <cstdint>
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
  // Returns every page of `table` to the pool and clears it.
  void release(std::vector<int32_t>& table);

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
};

}  // namespace tf
