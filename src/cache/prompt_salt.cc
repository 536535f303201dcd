#include "cache/prompt_salt.h"

#include "core/fnv1a.h"

namespace tf {
namespace {

// SplitMix64's finalizer: spreads every bit of the salt's hash and the position over the key.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

void salt_prompt_tokens(std::span<int32_t> tokens, std::string_view salt) {
  if (salt.empty()) return;
  // Two hashes of the salt (the second seeded by the first), so salts must agree in 128 bits.
  const uint64_t a = fnv1a(salt);
  const uint64_t b = fnv1a(salt, mix64(a));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint64_t key = mix64(a + 0x9e3779b97f4a7c15ull * (i + 1)) ^ mix64(b ^ i);
    tokens[i] = static_cast<int32_t>(static_cast<uint32_t>(tokens[i]) ^ static_cast<uint32_t>(key));
  }
}

}  // namespace tf
