// Range checks for SamplingParams; ranges from the OpenAI API reference and
// vLLM's SamplingParams._verify_args.
#include "sampling/sampling_params.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace tf {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

Status field_error(const char* field, const std::string& what) {
  return invalid_argument(std::string("'") + field + "' " + what);
}

// A stop string is matched on UTF-8 text and must start on a character.
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

}  // namespace

Status SamplingParams::validate(int32_t vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 2.0f) {
    return field_error("temperature", "must be in [0, 2], got " + num(temperature));
  }
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f) {
    return field_error("top_p", "must be in (0, 1], got " + num(top_p));
  }
  if (top_k < -1) return field_error("top_k", "must be -1, 0 (off) or positive, got " + std::to_string(top_k));
  if (!std::isfinite(min_p) || min_p < 0.0f || min_p > 1.0f) {
    return field_error("min_p", "must be in [0, 1], got " + num(min_p));
  }
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f) {
    return field_error("presence_penalty", "must be in [-2, 2], got " + num(presence_penalty));
  }
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f) {
    return field_error("frequency_penalty", "must be in [-2, 2], got " + num(frequency_penalty));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f || repetition_penalty > kMaxRepetitionPenalty) {
    return field_error("repetition_penalty", "must be in (0, 2], got " + num(repetition_penalty));
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || token >= vocab_size) {
      return field_error("logit_bias", "token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                                           std::to_string(vocab_size) + ")");
    }
    if (!std::isfinite(bias) || bias < -kMaxLogitBias || bias > kMaxLogitBias) {
      return field_error("logit_bias", "bias for token " + std::to_string(token) + " must be in [-100, 100], got " +
                                           num(bias));
    }
  }
  if (n < 1 || n > kMaxChoices) {
    return field_error("n", "must be in [1, " + std::to_string(kMaxChoices) + "], got " + std::to_string(n));
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return field_error("top_logprobs", "must be in [0, 20], got " + std::to_string(top_logprobs));
  }
  if (top_logprobs > 0 && !logprobs) return field_error("top_logprobs", "requires 'logprobs' to be true");
  for (const auto& s : stop) {
    if (s.empty()) return field_error("stop", "must not contain an empty string");
    if (!valid_utf8(s)) return field_error("stop", "must be valid UTF-8");
  }
  for (int32_t t : stop_token_ids) {
    if (t < 0 || t >= vocab_size) {
      return field_error("stop_token_ids", "token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                               std::to_string(vocab_size) + ")");
    }
  }
  for (int32_t t : allowed_token_ids) {
    if (t < 0 || t >= vocab_size) {
      return field_error("allowed_token_ids", "token id " + std::to_string(t) +
                                                  " is outside the vocabulary [0, " +
                                                  std::to_string(vocab_size) + ")");
    }
  }
  for (const auto& word : bad_words_ids) {
    if (word.empty()) return field_error("bad_words", "must not contain a word of no tokens");
    for (int32_t t : word)
      if (t < 0 || t >= vocab_size)
        return field_error("bad_words", "token id " + std::to_string(t) + " is outside the vocabulary");
  }
  if (max_tokens < 0) return field_error("max_tokens", "must be >= 0, got " + std::to_string(max_tokens));
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return field_error("min_tokens", "must be in [0, max_tokens], got " + std::to_string(min_tokens));
  }
  return Status::ok();
}

}  // namespace tf
