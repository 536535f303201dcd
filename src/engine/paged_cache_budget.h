// PagedCacheBudget: the scheduler's CacheBudget over a pool of fixed-size pages.
//
// A request reserves ceil(tokens / page_size) pages up front (prompt + max new
// tokens), so the model's page pool (LatentCachePool, same page count) can never
// run dry mid-request: the sum of reservations never exceeds the pool. The pool
// hands out physical pages lazily as a sequence grows; this class only counts.
// pool_tokens / pool_free_tokens in /health come from here.
//
// Kept prompts (prompt reuse) hold reservations too, but they give way: a
// Reclaimer (the engine) evicts them when a reservation would not fit otherwise,
// so their pages count as free for admission and in free_tokens().
#pragma once

#include <cstdint>
#include <unordered_map>

#include "engine/cache_budget.h"

namespace tf {

class PagedCacheBudget final : public CacheBudget {
 public:
  // What can be given back on demand.
  class Reclaimer {
   public:
    virtual ~Reclaimer() = default;
    virtual int64_t reclaimable_pages() const = 0;
    // Releases one holder's reservation (through release()); false when none is left.
    virtual bool reclaim_one() = 0;
  };

  PagedCacheBudget(int64_t num_pages, int64_t page_size);
  // `reclaimer` (null: none) must outlive this budget or be unset first.
  void set_reclaimer(Reclaimer* reclaimer) { reclaimer_ = reclaimer; }

  int64_t capacity_tokens() const override { return num_pages_ * page_size_; }
  int64_t free_tokens() const override { return (num_pages_ - used_pages_ + reclaimable()) * page_size_; }
  bool can_admit(int64_t tokens) const override;
  Expected<CacheHandle> reserve(int64_t tokens) override;
  void release(CacheHandle handle) override;

  int64_t pages_for(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }
  // Pages no reservation holds (kept prompts' pages are held).
  int64_t unreserved_pages() const { return num_pages_ - used_pages_; }
  size_t live_reservations() const { return live_.size(); }

 private:
  int64_t num_pages_;
  int64_t page_size_;
  int64_t used_pages_ = 0;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, int64_t> live_;  // handle id -> pages
  Reclaimer* reclaimer_ = nullptr;
  int64_t reclaimable() const { return reclaimer_ ? reclaimer_->reclaimable_pages() : 0; }
};

}  // namespace tf
