#include "sampling/token_history.h"

#include <algorithm>

namespace tf {

TokenHistory::TokenHistory(std::span<const int32_t> prompt_tokens)
    : prompt_distinct_(prompt_tokens.begin(), prompt_tokens.end()) {
  std::sort(prompt_distinct_.begin(), prompt_distinct_.end());
  prompt_distinct_.erase(std::unique(prompt_distinct_.begin(), prompt_distinct_.end()), prompt_distinct_.end());
}

void TokenHistory::append_generated(int32_t token) {
  ++generated_counts_[token];
  ++generated_count_;
}

bool TokenHistory::in_prompt(int32_t token) const {
  return std::binary_search(prompt_distinct_.begin(), prompt_distinct_.end(), token);
}

}  // namespace tf
