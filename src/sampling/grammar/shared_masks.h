// The token masks of one request's choices, shared by them. Its choices start in the same
// state and meet the same states again (inside a JSON string, between members), so each
// mask is computed once, not once per choice; and a state too costly to mask refuses the
// whole request, so n choices cannot each spend token_mask.h's work budget on it (n = 64
// choices of a hostile grammar stalled the engine's steps 64 times as long).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tf::grammar {

class SharedMasks {
 public:
  using Mask = std::shared_ptr<const std::vector<uint8_t>>;

  // Keeps the `capacity` most recently used masks (at least the request's choices: each
  // prepares its mask before the step samples it).
  explicit SharedMasks(size_t capacity = 16) : capacity_(capacity) {}

  // The mask of the state with this key (GrammarMatcher::key), or null.
  Mask find(const std::string& key);
  void put(const std::string& key, Mask mask);
  // A mask was refused (too much work): every later mask of the request is refused too.
  void refuse();
  bool refused() const;
  // Masks put so far (tests).
  uint64_t computed() const;

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, Mask>> cache_;  // most recent first
  std::unordered_map<std::string, decltype(cache_)::iterator> index_;
  bool refused_ = false;
  uint64_t computed_ = 0;
};

}  // namespace tf::grammar
