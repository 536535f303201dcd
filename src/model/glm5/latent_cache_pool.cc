// LatentCachePool: storage and free list (see latent_cache_pool.h).
#include "model/glm5/latent_cache_pool.h"

#include <algorithm>
#include <string>

namespace tf {

LatentCachePool::LatentCachePool(Ops& ops, int mla_layers, int64_t width, int64_t page_size, int64_t num_pages,
                                 DType dtype)
    : dtype_(dtype), mla_layers_(mla_layers), width_(width), page_size_(page_size), num_pages_(num_pages) {
  const int64_t layers = std::max(1, mla_layers);
  // One page more than the free list hands out: the scratch page of padded decode rows.
  storage_ = ops.zeros({layers, num_pages + 1, page_size, width}, dtype);
  scales_ = ops.zeros({layers, num_pages + 1, page_size}, DType::kF32);
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
  holders_.assign(static_cast<size_t>(num_pages), 0);
}

Status LatentCachePool::reserve(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t need = (tokens + page_size_ - 1) / page_size_ - static_cast<int64_t>(table.size());
  if (need <= 0) return Status::ok();
  if (need > free_pages())
    return resource_exhausted("latent cache: " + std::to_string(need) + " more pages needed, " +
                              std::to_string(free_pages()) + " free of " + std::to_string(num_pages_));
  for (int64_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    holders_[static_cast<size_t>(free_.back())] = 1;
    free_.pop_back();
  }
  return Status::ok();
}

void LatentCachePool::share(const std::vector<int32_t>& from, int64_t pages, std::vector<int32_t>& to) {
  pages = std::min<int64_t>(pages, static_cast<int64_t>(from.size()));
  for (int64_t i = 0; i < pages; ++i) {
    const int32_t p = from[static_cast<size_t>(i)];
    ++holders_[static_cast<size_t>(p)];
    to.push_back(p);
  }
}

void LatentCachePool::copy_page(Ops& ops, int32_t from, int32_t to) {
  std::vector<Tensor> views;
  views.reserve(static_cast<size_t>(4 * storage_.size(0)));
  std::vector<Tensor*> dst;
  std::vector<const Tensor*> src;
  for (int64_t l = 0; l < storage_.size(0); ++l)
    for (const Tensor* t : {&storage_, &scales_}) {
      views.push_back(t->select(0, l).select(0, to));
      dst.push_back(&views.back());
      views.push_back(t->select(0, l).select(0, from));
      src.push_back(&views.back());
    }
  ops.copy_many(dst, src);
}

namespace {
// Copies between the pool's rows of `pages` (every layer) and a page-major tensor pair:
// to_pool decides the direction. One copy_many for all of them.
void copy_pages(Ops& ops, const Tensor& storage, const Tensor& scales, std::span<const int32_t> pages,
                const Tensor& data, const Tensor& data_scales, bool to_pool) {
  const int64_t layers = storage.size(0);
  std::vector<Tensor> views;
  views.reserve(pages.size() * static_cast<size_t>(4 * layers));
  std::vector<Tensor*> dst;
  std::vector<const Tensor*> src;
  for (size_t i = 0; i < pages.size(); ++i)
    for (int64_t l = 0; l < layers; ++l)
      for (auto [pool, flat] : {std::pair{&storage, &data}, {&scales, &data_scales}}) {
        views.push_back(pool->select(0, l).select(0, pages[i]));
        Tensor* p = &views.back();
        views.push_back(flat->select(0, static_cast<int64_t>(i)).select(0, l));
        Tensor* f = &views.back();
        dst.push_back(to_pool ? p : f);
        src.push_back(to_pool ? f : p);
      }
  ops.copy_many(dst, src);
}
}  // namespace

void LatentCachePool::read_pages(Ops& ops, std::span<const int32_t> pages, Tensor& data,
                                 Tensor& scales) const {
  data = ops.empty(pages_shape(static_cast<int64_t>(pages.size())), dtype_);
  scales = ops.empty(scales_shape(static_cast<int64_t>(pages.size())), DType::kF32);
  copy_pages(ops, storage_, scales_, pages, data, scales, false);
}

void LatentCachePool::write_pages(Ops& ops, std::span<const int32_t> pages, const Tensor& data,
                                  const Tensor& scales) {
  const int64_t n = static_cast<int64_t>(pages.size());
  if (data.shape() != pages_shape(n) || data.dtype() != dtype_ || scales.shape() != scales_shape(n) ||
      scales.dtype() != DType::kF32)
    throw StatusError(invalid_argument("latent cache: pages " + data.describe() + " / scales " +
                                       scales.describe() + " do not match " + std::to_string(n) +
                                       " pages of this pool"));
  copy_pages(ops, storage_, scales_, pages, data, scales, true);
}

void LatentCachePool::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    if (--holders_[static_cast<size_t>(*it)] == 0) free_.push_back(*it);
  }
  table.clear();
}

void* LatentCachePool::layer_pages(int layer) const {
  return static_cast<char*>(storage_.raw()) + static_cast<size_t>(layer) * (num_pages_ + 1) * page_size_ * width_ *
                                                  dtype_size(dtype_);
}

float* LatentCachePool::layer_scales(int layer) const {
  return scales_.data<float>() + static_cast<int64_t>(layer) * (num_pages_ + 1) * page_size_;
}

LatentPagesView LatentCachePool::view(int layer, const Tensor& table, int64_t tokens) const {
  LatentPagesView v;
  v.pages = layer_pages(layer);
  v.scales = layer_scales(layer);
  v.dtype = dtype_;
  v.page_size = page_size_;
  v.width = width_;
  v.page_stride = page_size_ * width_;
  v.page_table = table.data<int32_t>();
  v.num_tokens = tokens;
  return v;
}

DecodeRowsView LatentCachePool::rows_view(int layer) const {
  DecodeRowsView v;
  v.pages = layer_pages(layer);
  v.scales = layer_scales(layer);
  v.dtype = dtype_;
  v.page_size = page_size_;
  v.width = width_;
  v.page_stride = page_size_ * width_;
  return v;
}

}  // namespace tf
