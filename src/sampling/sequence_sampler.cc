#include "sampling/sequence_sampler.h"

#include <string>

#include "sampling/device_row.h"
#include "sampling/seed.h"

namespace tf {

SequenceSampler::SequenceSampler(const SamplingParams& params, std::span<const int32_t> prompt,
                                 std::span<const int32_t> eos_ids, uint32_t choice_index)
    : params_(params),
      prompt_len_(static_cast<int64_t>(prompt.size())),
      seed_(choice_seed(request_seed(params.seed, prompt), choice_index)),
      history_(prompt),
      stop_(params, eos_ids) {}

Expected<SequenceStep> SequenceSampler::step(std::span<const float> logits, Sampler& sampler) {
  if (finished()) {
    return internal_error(std::string("sequence sampler: step after the sequence finished (") +
                          finish_reason_name(finish_) + ")");
  }
  const SampleInput in{logits, &params_, &history_, seed_, position(), stop_.banned(generated())};
  TF_ASSIGN_OR_RETURN(SampledToken sampled, sampler.sample(in));
  history_.append_generated(sampled.token);
  finish_ = stop_.after_token(sampled.token, generated());
  return SequenceStep{std::move(sampled), finish_};
}

std::optional<SampleRowParams> SequenceSampler::device_params(int32_t vocab_limit) const {
  if (finished()) return std::nullopt;
  return device_row_params(params_, seed_, position(), stop_.banned(generated()), vocab_limit);
}

Expected<SequenceStep> SequenceSampler::accept(const SampleRowResult& device_result) {
  if (finished()) {
    return internal_error(std::string("sequence sampler: device token after the sequence finished (") +
                          finish_reason_name(finish_) + ")");
  }
  if (device_result.status != SampleRowStatus::kOk || device_result.token < 0) {
    return internal_error("sequence sampler: the device sampler gave no token at position " +
                          std::to_string(position()));
  }
  SampledToken sampled = sampled_token_of(device_result, params_);
  history_.append_generated(sampled.token);
  finish_ = stop_.after_token(sampled.token, generated());
  return SequenceStep{std::move(sampled), finish_};
}

}  // namespace tf
