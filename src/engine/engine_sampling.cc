// Engine::Impl::sampling_params: a request's SamplingOptions (already range-checked
// by the server) over the model's generation_config.json defaults.
#include <algorithm>
#include <limits>

#include "engine/engine_impl.h"

namespace tf::engine {

Expected<SamplingParams> Engine::Impl::sampling_params(const GenerationRequest& r) const {
  const SamplingOptions& o = r.sampling;
  SamplingParams p;
  p.temperature = static_cast<float>(o.temperature.value_or(defaults.temperature));
  p.top_p = static_cast<float>(o.top_p.value_or(defaults.top_p));
  const int top_k = o.top_k.value_or(defaults.top_k);
  p.top_k = top_k < 0 ? 0 : top_k;
  p.min_p = static_cast<float>(o.min_p.value_or(defaults.min_p));
  p.presence_penalty = static_cast<float>(o.presence_penalty);
  p.frequency_penalty = static_cast<float>(o.frequency_penalty);
  p.repetition_penalty =
      static_cast<float>(o.repetition_penalty != 1.0 ? o.repetition_penalty : defaults.repetition_penalty);
  for (const auto& [id, bias] : o.logit_bias) p.logit_bias[id] = static_cast<float>(bias);
  p.seed = o.seed;
  p.n = r.n;
  p.logprobs = o.logprobs || o.top_logprobs > 0;
  p.top_logprobs = o.top_logprobs;
  p.stop = o.stop;
  p.stop_token_ids = o.stop_token_ids;
  p.include_stop_str_in_output = o.include_stop_str_in_output;
  p.ignore_eos = o.ignore_eos;
  p.max_tokens = static_cast<int32_t>(
      std::clamp<int64_t>(o.max_tokens, 1, std::numeric_limits<int32_t>::max()));
  p.min_tokens = std::min(o.min_tokens, p.max_tokens);
  if (Status s = p.validate(static_cast<int32_t>(text_vocab)); !s.is_ok()) return s;
  return p;
}

}  // namespace tf::engine
