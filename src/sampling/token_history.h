// The tokens a request has seen, in the form the penalties need.
//
// Presence/frequency penalties (OpenAI) count only generated tokens;
// repetition penalty (transformers, vLLM) applies once to every distinct
// token of prompt + generated. Both are sparse: a request touches a few
// thousand ids out of a vocabulary of ~150k, so we keep the distinct prompt
// ids sorted and the generated counts in a map, never a vocab-sized array.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tf {

class TokenHistory {
 public:
  TokenHistory() = default;
  explicit TokenHistory(std::span<const int32_t> prompt_tokens);

  void append_generated(int32_t token);

  int32_t generated_count() const { return generated_count_; }
  bool in_prompt(int32_t token) const;
  // Distinct prompt ids, ascending.
  const std::vector<int32_t>& prompt_distinct() const { return prompt_distinct_; }
  // Generated id -> occurrences.
  const std::unordered_map<int32_t, int32_t>& generated_counts() const { return generated_counts_; }

 private:
  std::vector<int32_t> prompt_distinct_;
  std::unordered_map<int32_t, int32_t> generated_counts_;
  int32_t generated_count_ = 0;
};

}  // namespace tf
