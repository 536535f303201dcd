#include "sampling/sequence_sampler.h"

#include <string>

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

}  // namespace tf
