// Where a request's sampling seed comes from.
//
// - A user seed (OpenAI `seed`, an int64) is used as its 64-bit pattern.
// - Without one, the seed is a hash of the prompt's token ids:
//   h = splitmix64(kPromptSeedSalt ^ len); for each token t: h = splitmix64(h ^ (uint32)t).
//   Identical prompts therefore give identical replies at any temperature,
//   and the length prefix keeps [] apart from prompts that hash to the salt.
// - Choice i of an `n` > 1 request uses choice_seed(seed, i): choice 0 keeps
//   the request seed (so n=1 and the first of n=4 agree), choice i > 0 gets
//   splitmix64(seed ^ splitmix64(i)), distinct from the others.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace tf {

[[nodiscard]] uint64_t seed_from_prompt(std::span<const int32_t> prompt_tokens);
[[nodiscard]] uint64_t request_seed(std::optional<int64_t> user_seed, std::span<const int32_t> prompt_tokens);
[[nodiscard]] uint64_t choice_seed(uint64_t request_seed, uint32_t choice_index);

}  // namespace tf
