#include "engine/cache_budget.h"

#include <algorithm>

namespace tf {

Expected<CacheHandle> CountingCacheBudget::reserve(int64_t tokens) {
  if (!can_admit(tokens)) {
    return resource_exhausted("cache budget: " + std::to_string(tokens) + " tokens requested, " +
                              std::to_string(free_tokens()) + " of " + std::to_string(capacity_) + " free");
  }
  used_ += tokens;
  const uint64_t id = next_id_++;
  live_.emplace_back(id, tokens);
  return CacheHandle{id};
}

void CountingCacheBudget::release(CacheHandle handle) {
  auto it = std::find_if(live_.begin(), live_.end(), [&](const auto& e) { return e.first == handle.id; });
  if (it == live_.end()) return;
  used_ -= it->second;
  live_.erase(it);
}

}  // namespace tf
