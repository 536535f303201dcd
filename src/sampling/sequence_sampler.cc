#include "sampling/sequence_sampler.h"

#include <algorithm>
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
  const SampleInput in{logits, &params_, &history_, seed_, position(), banned_now()};
  TF_ASSIGN_OR_RETURN(SampledToken sampled, sampler.sample(in));
  history_.append_generated(sampled.token);
  if (!params_.bad_words_ids.empty()) reply_.push_back(sampled.token);
  finish_ = stop_.after_token(sampled.token, generated());
  return SequenceStep{std::move(sampled), finish_};
}

std::span<const int32_t> SequenceSampler::banned_now() const {
  const std::span<const int32_t> stop_ids = stop_.banned(generated());
  if (params_.bad_words_ids.empty()) return stop_ids;
  banned_.assign(stop_ids.begin(), stop_ids.end());
  for (const auto& word : params_.bad_words_ids) {
    const size_t rest = word.size() - 1;  // the tokens before the banned one
    if (rest > reply_.size()) continue;
    if (std::equal(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(rest),
                   reply_.end() - static_cast<std::ptrdiff_t>(rest)))
      banned_.push_back(word.back());
  }
  return banned_;
}

std::optional<SampleRowParams> SequenceSampler::device_params(int32_t vocab_limit) const {
  if (finished()) return std::nullopt;
  return device_row_params(params_, seed_, position(), banned_now(), vocab_limit);
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
  if (!params_.bad_words_ids.empty()) reply_.push_back(sampled.token);
  finish_ = stop_.after_token(sampled.token, generated());
  return SequenceStep{std::move(sampled), finish_};
}

}  // namespace tf
