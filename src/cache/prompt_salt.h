// vLLM's cache_salt: prompts reuse each other's states only under the same salt. A client
// that shares the server with others salts its prompts with a secret, so that another
// client cannot learn from `cached_tokens` (or a faster first token) that some prompt was
// sent before: a prompt matches a kept state only when its tokens and its salt are equal.
//
// The salt is folded into the tokens that prompt reuse compares (the engine's reuse
// prompt), one 32-bit key per position from the salt: a bijection at each position, so
// matching under one salt stays exact, and one salt's prompts line up with another's (or
// an unsalted prompt's) only by chance, the odds of a 2^-32 coincidence at every token
// of a prefill chunk. Kept states on the device, the system block's state and the prompt
// store's files all follow, as they key on the reuse prompt.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace tf {

// Mixes `salt` into `tokens` in place (an empty salt leaves them as they are).
void salt_prompt_tokens(std::span<int32_t> tokens, std::string_view salt);

}  // namespace tf
