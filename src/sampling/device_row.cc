// See device_row.h: the eligibility rule mirrors what Sampler::sample applies.
#include "sampling/device_row.h"

#include <algorithm>
#include <cmath>

namespace tf {

std::optional<SampleRowParams> device_row_params(const SamplingParams& p, uint64_t seed, int64_t position,
                                                 std::span<const int32_t> banned, int32_t vocab_limit) {
  if (!p.logit_bias.empty() || !banned.empty() || !p.allowed_token_ids.empty()) return std::nullopt;
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) return std::nullopt;
  if (p.logprobs && (p.logprobs_mode != LogprobsMode::kRaw || p.top_logprobs > kSampleRowsMaxTopLogprobs))
    return std::nullopt;
  SampleRowParams d;
  d.greedy = p.greedy();
  d.temperature = p.temperature;
  // The host computes max + std::log(min_p) in f32 (apply_min_p): the same log, here.
  if (p.min_p > 0.0f) d.log_min_p = std::log(p.min_p);
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.seed = seed;
  d.position = position;
  d.vocab_limit = vocab_limit;
  d.logprob = p.logprobs;
  d.top_logprobs = p.logprobs ? std::max(p.top_logprobs, 0) : 0;
  return d;
}

SampledToken sampled_token_of(const SampleRowResult& r, const SamplingParams& p) {
  SampledToken out;
  out.token = r.token;
  if (!p.logprobs) return out;
  out.logprob = r.logprob;
  const int32_t n = std::clamp(r.top_count, 0, kSampleRowsMaxTopLogprobs);
  out.top.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) out.top.push_back({r.top_tokens[i], r.top_values[i]});
  return out;
}

}  // namespace tf
