// See response_store.h.
#include "server/response_store.h"

#include <utility>

namespace tf::server {

void ResponseStore::put(const std::string& id, StoredResponse stored) {
  const size_t bytes = id.size() + stored.response.dump().size() + stored.items.dump().size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) erase_locked(it->second);
  if (bytes > max_bytes_ || max_responses_ == 0) return;
  while (!order_.empty() && (order_.size() >= max_responses_ || bytes_ + bytes > max_bytes_))
    erase_locked(order_.begin());
  order_.push_back(Entry{id, std::move(stored), bytes});
  by_id_[id] = std::prev(order_.end());
  bytes_ += bytes;
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second->stored;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  erase_locked(it->second);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return order_.size();
}

void ResponseStore::erase_locked(std::list<Entry>::iterator it) {
  bytes_ -= it->bytes;
  by_id_.erase(it->id);
  order_.erase(it);
}

}  // namespace tf::server
