// One choice of one request: everything the engine needs to turn that
// sequence's logits row into its next token and to know when it ends.
//
// It owns the per-choice state: the choice's seed (seed.h), the token
// history for penalties, the stop rules, and the absolute position
// (prompt length + tokens generated), which is what the random draw is keyed
// on. The Sampler (scratch memory) is passed in, so the engine keeps one per
// worker thread instead of one per sequence.
// Stop strings are matched on text, which needs the tokenizer: the engine
// feeds the detokenized pieces to a StopStringMatcher beside this.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "kernels/api/sample_rows.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "sampling/stop_conditions.h"
#include "sampling/token_history.h"

namespace tf {

struct SequenceStep {
  SampledToken sampled;
  FinishReason finish = FinishReason::kNone;
};

class SequenceSampler {
 public:
  // params must have passed validate(); prompt is the full prompt's token ids.
  SequenceSampler(const SamplingParams& params, std::span<const int32_t> prompt, std::span<const int32_t> eos_ids,
                  uint32_t choice_index);

  // Samples the next token from this sequence's row and records it. After a
  // finish other than kNone, further calls fail.
  [[nodiscard]] Expected<SequenceStep> step(std::span<const float> logits, Sampler& sampler);

  // The device sampler's parameters for the next token (device_row.h), or nullopt
  // when only the host sampler can choose it (bias, penalties, banned ids now, ...).
  [[nodiscard]] std::optional<SampleRowParams> device_params(int32_t vocab_limit) const;
  // Records a token the device sampler chose (a kOk result for device_params()),
  // exactly as step() records its own.
  [[nodiscard]] Expected<SequenceStep> accept(const SampleRowResult& device_result);

  uint64_t seed() const { return seed_; }
  int64_t position() const { return prompt_len_ + history_.generated_count(); }
  int32_t generated() const { return history_.generated_count(); }
  bool finished() const { return finish_ != FinishReason::kNone; }
  FinishReason finish_reason() const { return finish_; }

 private:
  SamplingParams params_;
  int64_t prompt_len_;
  uint64_t seed_;
  TokenHistory history_;
  StopConditions stop_;
  // Bad words: the reply's tokens (a word's last token is banned where they end with the
  // rest of it), and the ids banned at the next token (stop ids + bad words' last tokens).
  std::vector<int32_t> reply_;
  mutable std::vector<int32_t> banned_;
  std::span<const int32_t> banned_now() const;
  FinishReason finish_ = FinishReason::kNone;
};

}  // namespace tf
