// Logits processors: each rewrites one request's logits (a host f32 row) in
// place. A token a filter removes becomes -infinity.
//
// Order (sampler.cc applies them so; it matches vLLM v1's Sampler):
//   1. logit_bias            (added to the raw logits)
//   2. banned tokens         (EOS / stop ids before min_tokens, bad words' last tokens,
//                            ids outside allowed_token_ids: -> -inf)
//   3. penalties             repetition, then frequency, then presence
//   4. temperature           (skipped when greedy: argmax needs no scaling)
//   5. min_p                 keep p_i >= min_p * p_max
//   6. top_k                 keep the k largest (ties at the k-th value kept)
//   7. top_p                 keep the smallest most-likely set with mass >= p
// transformers applies min_p after top_k/top_p instead; vLLM's order is the
// one a served model's users see, so we follow it.
// Every filter is defined by a threshold on the logit value, so ties are kept
// together and the result never depends on the order of equal entries.
#pragma once

#include <cstdint>
#include <map>
#include <span>

#include "sampling/token_history.h"

namespace tf {

void apply_logit_bias(std::span<float> logits, const std::map<int32_t, float>& bias);
void mask_tokens(std::span<float> logits, std::span<const int32_t> tokens);
// Every id not in `allowed` (sorted) -> -inf; an empty list allows all.
void keep_only_tokens(std::span<float> logits, std::span<const int32_t> allowed);

// Repetition (transformers): for every distinct token of prompt + generated,
// a positive logit is divided by `repetition`, a negative one multiplied.
// Frequency/presence (OpenAI): logit -= frequency * count + presence * (count > 0),
// over generated tokens only.
void apply_penalties(std::span<float> logits, const TokenHistory& history, float presence, float frequency,
                     float repetition);

void apply_temperature(std::span<float> logits, float temperature);
void apply_min_p(std::span<float> logits, float min_p);
void apply_top_k(std::span<float> logits, int32_t top_k);
void apply_top_p(std::span<float> logits, float top_p);

}  // namespace tf
