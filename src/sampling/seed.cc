// See seed.h for what each seed covers.
#include "sampling/seed.h"

#include "sampling/counter_hash.h"

namespace tf {

namespace {
constexpr uint64_t kPromptSeedSalt = 0x74656E736F72666Full;  // "tensorfo"
}  // namespace

uint64_t seed_from_prompt(std::span<const int32_t> prompt_tokens) {
  uint64_t h = splitmix64(kPromptSeedSalt ^ static_cast<uint64_t>(prompt_tokens.size()));
  for (int32_t t : prompt_tokens) h = splitmix64(h ^ static_cast<uint32_t>(t));
  return h;
}

uint64_t request_seed(std::optional<int64_t> user_seed, std::span<const int32_t> prompt_tokens) {
  if (user_seed) return static_cast<uint64_t>(*user_seed);
  return seed_from_prompt(prompt_tokens);
}

uint64_t choice_seed(uint64_t request_seed, uint32_t choice_index) {
  if (choice_index == 0) return request_seed;
  return splitmix64(request_seed ^ splitmix64(choice_index));
}

}  // namespace tf
