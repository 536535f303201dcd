// See shared_masks.h.
#include "sampling/grammar/shared_masks.h"

namespace tf::grammar {

SharedMasks::Mask SharedMasks::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  cache_.splice(cache_.begin(), cache_, it->second);
  return cache_.front().second;
}

void SharedMasks::put(const std::string& key, Mask mask) {
  std::lock_guard<std::mutex> lock(mu_);
  ++computed_;
  if (index_.count(key)) return;  // another choice computed it meanwhile
  cache_.emplace_front(key, std::move(mask));
  index_[key] = cache_.begin();
  if (cache_.size() > capacity_) {
    index_.erase(cache_.back().first);
    cache_.pop_back();
  }
}

void SharedMasks::refuse() {
  std::lock_guard<std::mutex> lock(mu_);
  refused_ = true;
}

bool SharedMasks::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

uint64_t SharedMasks::computed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return computed_;
}

}  // namespace tf::grammar
