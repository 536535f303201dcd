// BlockCache: the free lists of the caching device allocator (device_allocator.h),
// kept free of CUDA so that its rules are unit-tested on any machine.
//
// Freed blocks are cached by size and handed out again. That is safe on one stream:
// a block's next user is enqueued after its last one. While a side branch is open
// (Ops::SideBranch: a second stream until the join) a block freed by one branch could
// be handed to the other, whose kernels are not ordered after the first's, so
// blocks freed inside a hold window are held, not cached, until end_hold() (the
// join, after which both branches' work precedes anything enqueued next).
// Not thread-safe: the allocator calls it under its mutex.
#pragma once

#include <cstddef>
#include <map>
#include <utility>
#include <vector>

namespace tf::cuda {

class BlockCache {
 public:
  // The smallest cached block of at least `block` bytes, unless it is over twice the
  // size (a small tensor must not pin a huge block); nullptr when there is none.
  // `got` is the block's size.
  void* take(size_t block, size_t& got) {
    auto it = free_.lower_bound(block);
    if (it == free_.end() || it->first > 2 * block) return nullptr;
    got = it->first;
    void* p = it->second;
    cached_ -= got;
    free_.erase(it);
    return p;
  }

  // A freed block: cached for reuse, or held while a hold window is open.
  void put(void* p, size_t block) {
    if (holding_) {
      held_.emplace_back(block, p);
      held_bytes_ += block;
      return;
    }
    free_.emplace(block, p);
    cached_ += block;
  }

  // Opens / closes the hold window; end_hold() caches what was held.
  void begin_hold() { holding_ = true; }
  void end_hold() {
    holding_ = false;
    for (const auto& [block, p] : held_) {
      free_.emplace(block, p);
      cached_ += block;
    }
    held_.clear();
    held_bytes_ = 0;
  }
  bool holding() const { return holding_; }

  // Every cached block (for the driver); held blocks stay held.
  std::multimap<size_t, void*> take_cached() {
    cached_ = 0;
    return std::exchange(free_, {});
  }
  // Every block, held ones too (the allocator is going away).
  std::vector<void*> take_all() {
    std::vector<void*> all;
    for (const auto& [block, p] : free_) all.push_back(p);
    for (const auto& [block, p] : held_) all.push_back(p);
    free_.clear();
    held_.clear();
    cached_ = held_bytes_ = 0;
    return all;
  }

  size_t cached_bytes() const { return cached_; }
  size_t held_bytes() const { return held_bytes_; }

 private:
  std::multimap<size_t, void*> free_;  // block size -> pointer
  std::vector<std::pair<size_t, void*>> held_;
  size_t cached_ = 0, held_bytes_ = 0;
  bool holding_ = false;
};

}  // namespace tf::cuda
