// See token_mask.h.
#include "sampling/grammar/token_mask.h"

#include <algorithm>
#include <numeric>

namespace tf::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty()) order_.push_back(static_cast<int32_t>(i));
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  lcp_.assign(order_.size(), 0);
  for (size_t i = 1; i < order_.size(); ++i) {
    const std::string& a = bytes_[static_cast<size_t>(order_[i - 1])];
    const std::string& b = bytes_[static_cast<size_t>(order_[i])];
    const size_t n = std::min(a.size(), b.size());
    size_t k = 0;
    while (k < n && a[k] == b[k]) ++k;
    lcp_[i] = static_cast<uint32_t>(k);
  }
}

void fill_token_mask(const GrammarMatcher& matcher, const TokenVocabulary& vocab, std::vector<uint8_t>& allowed) {
  allowed.assign(vocab.size(), 0);
  // states[d]: the state after the current token's first d bytes (states[0] = now).
  std::vector<MatchState> states(1, matcher.state());
  size_t dead_at = SIZE_MAX;  // the previous token died on its byte dead_at
  for (size_t i = 0; i < vocab.order_.size(); ++i) {
    const int32_t id = vocab.order_[i];
    const std::string& b = vocab.bytes_[static_cast<size_t>(id)];
    const size_t shared = vocab.lcp_[i];
    if (dead_at != SIZE_MAX && shared > dead_at) continue;  // same dead byte at the same place
    dead_at = SIZE_MAX;
    size_t depth = std::min(shared, states.size() - 1);
    states.resize(depth + 1);
    for (; depth < b.size(); ++depth) {
      MatchState next;
      if (!matcher.step_byte(states[depth], static_cast<uint8_t>(b[depth]), next)) break;
      states.push_back(std::move(next));
    }
    if (depth == b.size()) {
      allowed[static_cast<size_t>(id)] = 1;
    } else {
      dead_at = depth;
    }
  }
}

}  // namespace tf::grammar
