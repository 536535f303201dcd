#include "sampling/stop_conditions.h"

#include <algorithm>

namespace tf {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kNone: break;
  }
  return "";
}

StopConditions::StopConditions(const SamplingParams& params, std::span<const int32_t> eos_ids)
    : stop_ids_(params.stop_token_ids), min_tokens_(params.min_tokens), max_tokens_(params.max_tokens) {
  if (!params.ignore_eos) stop_ids_.insert(stop_ids_.end(), eos_ids.begin(), eos_ids.end());
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

std::span<const int32_t> StopConditions::banned(int32_t generated_count) const {
  if (generated_count >= min_tokens_) return {};
  return stop_ids_;
}

bool StopConditions::is_stop_token(int32_t token) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), token);
}

FinishReason StopConditions::after_token(int32_t token, int32_t generated_count) const {
  // The token was sampled with generated_count - 1 tokens before it; stop ids
  // count only where they were not banned (see banned()).
  if (is_stop_token(token) && generated_count - 1 >= min_tokens_) return FinishReason::kStop;
  if (generated_count >= max_tokens_) return FinishReason::kLength;
  return FinishReason::kNone;
}

}  // namespace tf
