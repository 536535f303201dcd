// Log-probabilities of a logits row: the chosen token's and the top-n.
//
// logprob_i = l_i - logsumexp(l), the sum taken in double. Masked entries
// (-inf) have probability 0 and are never listed among the top-n (JSON cannot
// carry -inf). Ties order by token id so the list is reproducible.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tf {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

// logsumexp over the finite entries; -inf when there are none.
[[nodiscard]] double log_sum_exp(std::span<const float> logits);

// The n most likely tokens, most likely first; `lse` is log_sum_exp(logits)
// (passed in because the caller needs it for the chosen token as well).
[[nodiscard]] std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n, double lse);

}  // namespace tf
