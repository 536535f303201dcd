// Per-request sampling parameters, with their validation.
//
// Field semantics follow the OpenAI API and vLLM's SamplingParams:
// - temperature 0 (below 1e-5) means greedy (argmax of the biased, penalised logits).
// - top_k 0 or -1 means off; top_p 1 and min_p 0 mean off.
// - presence/frequency penalties (OpenAI, -2..2) count generated tokens only;
//   repetition_penalty (transformers/vLLM, 1 = off) covers prompt + generated.
// - logit_bias maps a token id to a bias in [-100, 100] added to its logit.
// - logprobs: the chosen token's log-probability; top_logprobs (0..20) the
//   most likely alternatives. LogprobsMode says which distribution: kRaw (the
//   default, as vLLM's "raw_logprobs") is the model's unmodified softmax;
//   kProcessed is the distribution actually sampled from.
// - allowed_token_ids (vLLM): when set, only these ids may be sampled.
// - bad_words_ids (vLLM's bad_words, tokenized by the engine): a one-token word is never
//   sampled; a longer one's last token is banned where the reply ends with the rest.
// - stop strings end generation and are cut from the text unless
//   include_stop_str_in_output; stop_token_ids and the model's EOS ids
//   (unless ignore_eos) end it too, but only after min_tokens.
// The server maps JSON onto this struct; validate() repeats the range
// checks so that no caller can hand the sampler nonsense.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tf {

enum class LogprobsMode : uint8_t { kRaw, kProcessed };

inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr float kMaxLogitBias = 100.0f;
inline constexpr float kMaxRepetitionPenalty = 2.0f;  // repetition_penalty is in (0, 2]
inline constexpr float kGreedyBelowTemperature = 1e-5f;

struct SamplingParams {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::map<int32_t, float> logit_bias;
  std::optional<int64_t> seed;
  int32_t n = 1;

  bool logprobs = false;
  int32_t top_logprobs = 0;
  LogprobsMode logprobs_mode = LogprobsMode::kRaw;

  std::vector<int32_t> allowed_token_ids;           // sorted, distinct; empty: every id
  std::vector<std::vector<int32_t>> bad_words_ids;  // each non-empty
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;

  // vLLM's _SAMPLING_EPS: below it, dividing by the temperature could
  // overflow a float, and the distribution is a point mass anyway.
  bool greedy() const { return temperature < kGreedyBelowTemperature; }
  bool top_k_enabled() const { return top_k > 0; }

  // Checks every range; the message names the field (as the API spells it).
  // vocab_size bounds logit_bias and stop_token_ids keys.
  [[nodiscard]] Status validate(int32_t vocab_size) const;
};

// Largest `n` we accept (each choice is a separate stream).
inline constexpr int32_t kMaxChoices = 128;

}  // namespace tf
