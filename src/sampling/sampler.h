// The sampler: one request row of host logits -> one token (+ logprobs).
//
// Exactness: the token is argmax_i(l'_i + G(seed, position, i)) where l' are
// the processed logits (logits_processors.h, in vLLM's order) and G is a
// Gumbel variate from a counter-based hash (counter_hash.h). This is an exact
// draw from softmax(l') over the tokens the filters kept, and it depends on
// nothing but this row, the seed and the absolute position: the same request
// gets the same token whichever batch it ran in, and whatever order the
// engine samples rows in. Greedy (temperature 0) is the argmax of the biased
// and penalised logits; ties go to the lowest id.
//
// `position` is the absolute index in the sequence of the token being chosen
// (prompt length + tokens generated so far), so a resumed or re-prefilled
// request draws the same numbers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "sampling/logprobs.h"
#include "sampling/sampling_params.h"
#include "sampling/token_history.h"

namespace tf {

struct SampleInput {
  std::span<const float> logits;            // the model's row, vocab-sized, unmodified
  const SamplingParams* params = nullptr;
  const TokenHistory* history = nullptr;    // null: no penalties
  uint64_t seed = 0;                        // the choice's seed (seed.h)
  int64_t position = 0;
  std::span<const int32_t> banned;          // ids forced to -inf (stop ids before min_tokens)
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;               // only when params->logprobs
  std::vector<TokenLogprob> top;      // params->top_logprobs entries
};

class Sampler {
 public:
  // Fails (never aborts) on a NaN logit, a missing params pointer or a row
  // where every token is masked.
  [[nodiscard]] Expected<SampledToken> sample(const SampleInput& in);

  // The processed row of the last call (for tests and debugging).
  std::span<const float> last_processed() const { return work_; }

 private:
  std::vector<float> work_;  // reused between calls: no per-token allocation
};

}  // namespace tf
