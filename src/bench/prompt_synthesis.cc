// See prompt_synthesis.h.
#include "bench/prompt_synthesis.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace tf::bench {

namespace {

// splitmix64: a tiny, well-mixed deterministic generator (no <random> engine
// whose output could differ between standard libraries).
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr std::array<const char*, 64> kWords = {
    "the",     "model",   "reads",    "a",        "long",     "document", "about",   "rivers",
    "and",     "mountain", "weather", "while",    "engineers", "measure", "how",     "quickly",
    "each",    "token",   "arrives",  "from",     "server",   "under",    "steady",  "load",
    "with",    "several", "clients",  "sending",  "requests", "at",       "once",    "every",
    "answer",  "should",  "stay",     "correct",  "even",     "when",     "memory",  "fills",
    "slowly",  "because", "caches",   "keep",     "earlier",  "pages",    "for",     "later",
    "reuse",   "new",     "prompts",  "cover",    "history",  "science",  "music",   "cooking",
    "travel",  "through", "quiet",    "villages", "near",     "the",      "northern", "coast"};

}  // namespace

std::string synthetic_text(uint64_t seed, int index, int64_t words) {
  std::string out = "Request " + std::to_string(index) + " (seed " + std::to_string(seed) + "):";
  uint64_t state = seed * 0x100000001B3ull + static_cast<uint64_t>(index) + 1;
  int64_t in_sentence = 0;
  int64_t sentence_len = 8;
  for (int64_t w = 0; w < words; ++w) {
    std::string word = kWords[next_random(state) % kWords.size()];
    if (in_sentence == 0) {
      word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      sentence_len = 8 + static_cast<int64_t>(next_random(state) % 9);
    }
    out += ' ';
    out += word;
    if (++in_sentence == sentence_len) {
      out += '.';
      in_sentence = 0;
    }
  }
  return out;
}

Expected<std::vector<int32_t>> synthesize_prompt(const TokenizeFn& tokenize, uint64_t seed, int index,
                                                 int64_t tokens) {
  if (tokens < 1) return invalid_argument("prompt synthesis: prompt_tokens must be >= 1");
  // Most words are one token or more, so `tokens` words is usually enough;
  // grow by the observed ratio otherwise.
  int64_t words = tokens;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string text = synthetic_text(seed, index, words);
    auto ids = tokenize(text);
    if (!ids) return ids.status().with_context("prompt synthesis: tokenizing a " + std::to_string(text.size()) + "-byte prompt");
    if (ids->empty())
      return internal_error("prompt synthesis: the tokenizer returned no tokens for a " +
                            std::to_string(text.size()) + "-byte prompt");
    if (static_cast<int64_t>(ids->size()) >= tokens) {
      ids->resize(static_cast<size_t>(tokens));
      return std::move(*ids);
    }
    double per_word = static_cast<double>(ids->size()) / static_cast<double>(words + 3);
    int64_t needed = static_cast<int64_t>(static_cast<double>(tokens) / std::max(per_word, 1e-3) * 1.1) + 16;
    words = std::max(words * 2, needed);
  }
  return internal_error("prompt synthesis: the tokenizer gives too few tokens to reach " + std::to_string(tokens));
}

Expected<std::vector<std::vector<int32_t>>> synthesize_prompts(const TokenizeFn& tokenize, uint64_t seed,
                                                               int first_index, int count, int64_t tokens) {
  std::vector<std::vector<int32_t>> out;
  out.reserve(static_cast<size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i) {
    TF_ASSIGN_OR_RETURN(auto ids, synthesize_prompt(tokenize, seed, first_index + i, tokens));
    out.push_back(std::move(ids));
  }
  return out;
}

std::vector<int32_t> fallback_prompt_ids(uint64_t seed, int index, int64_t tokens, int32_t lo, int32_t hi) {
  std::vector<int32_t> out;
  if (tokens <= 0) return out;
  if (hi <= lo) hi = lo + 1;
  uint64_t state = seed * 0x100000001B3ull + static_cast<uint64_t>(index) + 1;
  uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo);
  out.reserve(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) out.push_back(lo + static_cast<int32_t>(next_random(state) % span));
  return out;
}

}  // namespace tf::bench
