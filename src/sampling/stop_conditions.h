// Token-level stop rules: EOS and stop_token_ids, max_tokens, min_tokens.
//
// vLLM semantics: before min_tokens tokens are generated, EOS and
// stop_token_ids are banned (the sampler masks them, so they cannot end the
// request early); the token that hits a stop id is generated (counted in
// usage) but not shown as text; reaching max_tokens gives finish_reason
// "length". A stop string (stop_string_matcher.h) is checked on the text.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampling_params.h"

namespace tf {

enum class FinishReason : uint8_t { kNone, kStop, kLength };

const char* finish_reason_name(FinishReason r);  // "stop", "length", or "" for kNone

class StopConditions {
 public:
  // eos_ids: the model's end tokens (generation_config.json eos_token_id),
  // ignored when params.ignore_eos.
  StopConditions(const SamplingParams& params, std::span<const int32_t> eos_ids);

  // Ids to mask given how many tokens were generated so far (empty once
  // min_tokens is reached).
  [[nodiscard]] std::span<const int32_t> banned(int32_t generated_count) const;

  // After `token` was generated as the generated_count-th token (1-based).
  [[nodiscard]] FinishReason after_token(int32_t token, int32_t generated_count) const;

  bool is_stop_token(int32_t token) const;

 private:
  std::vector<int32_t> stop_ids_;  // sorted, distinct
  int32_t min_tokens_ = 0;
  int32_t max_tokens_ = 0;
};

}  // namespace tf
