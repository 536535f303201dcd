// Deterministic prompts of exactly N tokens.
//
// Design: plain English-like prose from a fixed word list, tokenized by the
// model's own tokenizer (engine tokenize() offline, POST /tokenize over HTTP) and
// cut to exactly N ids. Real words keep special tokens (EOS, <think>, roles) out of
// the prompt, which random ids would not. Each prompt starts with its own request
// number and seed, so no two prompts share a prefix and a prefix cache cannot turn
// a prefill benchmark into a cache-hit benchmark. The same (seed, index, N) always
// gives the same ids for the same tokenizer.
// When no tokenizer is reachable, `fallback_prompt_ids` draws ids from a given range.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tf::bench {

// Text -> token ids without special tokens (the prompt goes in as raw ids).
using TokenizeFn = std::function<Expected<std::vector<int32_t>>(const std::string&)>;

// `words` words of deterministic prose for (seed, index); starts "Request <index> (seed <seed>):".
std::string synthetic_text(uint64_t seed, int index, int64_t words);

// Exactly `tokens` ids for prompt `index`: tokenizes growing synthetic texts until
// they are long enough, then truncates. Fails when the tokenizer fails or returns
// nothing for non-empty text.
Expected<std::vector<int32_t>> synthesize_prompt(const TokenizeFn& tokenize, uint64_t seed, int index, int64_t tokens);

// `count` prompts (indices first_index..first_index+count-1) of `tokens` ids each.
Expected<std::vector<std::vector<int32_t>>> synthesize_prompts(const TokenizeFn& tokenize, uint64_t seed,
                                                               int first_index, int count, int64_t tokens);

// Deterministic ids in [lo, hi) for (seed, index), when no tokenizer is available.
std::vector<int32_t> fallback_prompt_ids(uint64_t seed, int index, int64_t tokens, int32_t lo, int32_t hi);

}  // namespace tf::bench
