// Which tokens a grammar allows next: every token's bytes run through the matcher
// from its current state.
//
// The vocabulary is kept sorted by bytes, with each token's common prefix with the one
// before it, so the walk shares work the way a trie would: the states of the first
// `lcp` bytes are reused, and when a byte kills the state every following token that
// shares it is skipped without a look. Tokens with no bytes (special and added tokens:
// end of text, reasoning and tool-call markers) are never allowed by the grammar; the
// caller decides about end tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sampling/grammar/grammar_matcher.h"

namespace tf::grammar {

class TokenVocabulary {
 public:
  // token_bytes[id]: the bytes token id stands for; "" = never produced under a grammar.
  explicit TokenVocabulary(std::vector<std::string> token_bytes);

  size_t size() const { return bytes_.size(); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

 private:
  friend bool fill_token_mask(const GrammarMatcher&, const TokenVocabulary&, std::vector<uint8_t>&, uint64_t);
  std::vector<std::string> bytes_;
  std::vector<int32_t> order_;  // ids with bytes, sorted by their bytes
  std::vector<uint32_t> lcp_;   // lcp_[i]: common prefix length of order_[i - 1] and order_[i]
};

// Work allowed for one mask, in parse stacks stepped (a JSON mask of a 150k vocabulary
// takes a few million): a grammar so ambiguous that one mask would take seconds is
// refused instead of stalling every request that shares the engine's step.
constexpr uint64_t kMaxMaskWork = 40'000'000;
// The same for text nested deep (a stack grows with the nesting) and long chains of rules:
// stack elements the steps copy (GrammarMatcher::step_byte's work; a JSON mask, a few times
// its stacks stepped).
constexpr uint64_t kMaxMaskCopied = 400'000'000;
// Memory one mask's walk may keep in the states it meets (a state is its stacks, stored
// twice: as stacks and as a key). A JSON mask keeps well under a megabyte; a walk through
// 4,096 token prefixes that each leave a distinct 20,000-deep stack kept 650 MB.
constexpr uint64_t kMaxMaskStateBytes = uint64_t{64} << 20;

// allowed[id] = 1 when the matcher accepts token id's bytes next, else 0 (size = vocabulary).
// False when the mask would cost more than max_work or keep more than kMaxMaskStateBytes, or
// a token's bytes reach a state past the matcher's limits (grammar_matcher.h): allowed is then
// incomplete.
[[nodiscard]] bool fill_token_mask(const GrammarMatcher& matcher, const TokenVocabulary& vocab,
                                   std::vector<uint8_t>& allowed, uint64_t max_work = kMaxMaskWork);

}  // namespace tf::grammar
