#include "engine/paged_cache_budget.h"

#include <string>

namespace tf {

PagedCacheBudget::PagedCacheBudget(int64_t num_pages, int64_t page_size)
    : num_pages_(num_pages < 0 ? 0 : num_pages), page_size_(page_size < 1 ? 1 : page_size) {}

bool PagedCacheBudget::can_admit(int64_t tokens) const {
  return tokens >= 0 && pages_for(tokens) <= num_pages_ - used_pages_ + reclaimable();
}

Expected<CacheHandle> PagedCacheBudget::reserve(int64_t tokens) {
  if (!can_admit(tokens)) {
    return resource_exhausted("cache pool: " + std::to_string(tokens) + " tokens do not fit in the " +
                              std::to_string(free_tokens()) + " free tokens");
  }
  const int64_t pages = pages_for(tokens);
  while (pages > num_pages_ - used_pages_ && reclaimer_ && reclaimer_->reclaim_one()) {
  }
  if (pages > num_pages_ - used_pages_) {  // a reclaimer that promised more than it gave
    return resource_exhausted("cache pool: " + std::to_string(tokens) + " tokens do not fit in the " +
                              std::to_string((num_pages_ - used_pages_) * page_size_) + " free tokens");
  }
  used_pages_ += pages;
  const uint64_t id = next_id_++;
  live_.emplace(id, pages);
  return CacheHandle{id};
}

void PagedCacheBudget::release(CacheHandle handle) {
  auto it = live_.find(handle.id);
  if (it == live_.end()) return;
  used_pages_ -= it->second;
  live_.erase(it);
}

}  // namespace tf
