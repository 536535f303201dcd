// Incremental recognition of a Grammar (grammar.h), one UTF-8 byte string at a time.
//
// The state is the set of parse stacks the text so far allows (a nondeterministic
// pushdown automaton, as llama.cpp's grammar sampler): a stack lists, innermost last,
// the elements still to match in each open alternative. A stack's top is always a
// character class, or the stack is empty (root finished). Consuming a code point keeps
// the stacks whose top matches it, steps past that element and expands rule
// references at the new top (one stack per alternative), then drops duplicates.
// Bytes that end inside a UTF-8 sequence are kept pending; such a state is alive while
// some stack's top admits a code point that begins with those bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/grammar/grammar.h"

namespace tf::grammar {

// Above this many stacks a state counts as dead (a grammar this ambiguous is refused
// while decoding rather than let one request eat the host).
constexpr size_t kMaxStacks = 4096;
// Above this many stack elements a step counts as dead too, counting those of the new state
// and those copied while expanding rules into it: a stack grows with the text's nesting
// (4,096 stacks 20,000 deep were 330 MB per state, copied at every byte), and expanding a
// chain of rules that each start with the next copies the growing stack at every link
// (10,000 links: 200 MB). A step in JSON nested 256 deep takes a few thousand.
constexpr size_t kMaxStateElements = size_t{1} << 20;
// Rules a character may sit under, each starting with the next (a deeper chain counts as past
// the limits above).
constexpr int kMaxExpansionDepth = 10000;
// Those limits as an error message says them.
inline std::string matcher_limits_text() {
  return "more than " + std::to_string(kMaxStacks) + " parses open at once, or rules nested more than " +
         std::to_string(kMaxExpansionDepth) + " deep";
}

struct MatchState {
  std::vector<std::vector<uint32_t>> stacks;  // sorted, unique; element indices
  std::string pending;                         // an incomplete UTF-8 sequence (0-3 bytes)
  bool operator==(const MatchState&) const = default;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Consumes `bytes` when the grammar allows them; false (state unchanged) otherwise.
  bool accept(std::string_view bytes);
  // The sentence may end here (a finished root, nothing pending).
  bool is_complete() const { return complete(state_); }
  // Some continuation by at least one more character exists.
  bool can_continue() const { return alive_with_chars(state_); }

  const MatchState& state() const { return state_; }
  const Grammar& grammar() const { return *grammar_; }

  // The state after one more byte; false when the byte is not allowed. Adds to `*work` (when
  // given) the stack elements the step copied (at most about kMaxStateElements). Sets
  // `*over_limit` (when given) when the step failed on the limits above, not on the grammar.
  bool step_byte(const MatchState& from, uint8_t byte, MatchState& to, size_t* work = nullptr,
                 bool* over_limit = nullptr) const;
  // The start state was over those limits (it is then dead): compile_gbnf refuses such grammars.
  bool start_over_limit() const { return start_over_limit_; }
  static bool complete(const MatchState& s);
  bool alive_with_chars(const MatchState& s) const;
  // A compact key of a state (equal keys = equal states), for mask caches.
  static std::string key(const MatchState& s);

 private:
  // `elements` counts what `out` holds and what was copied; expansion stops past kMaxStacks or
  // kMaxStateElements (a chain of rules deeper than kMaxExpansionDepth counts as past them).
  void expand(std::vector<uint32_t> stack, std::vector<std::vector<uint32_t>>& out, int depth,
              size_t& elements) const;
  static bool over_limits(const std::vector<std::vector<uint32_t>>& stacks, size_t elements) {
    return stacks.size() > kMaxStacks || elements > kMaxStateElements;
  }
  bool step_code_point(const MatchState& from, uint32_t cp, MatchState& to, size_t* work,
                       bool* over_limit) const;
  bool pending_feasible(const MatchState& s) const;

  std::shared_ptr<const Grammar> grammar_;
  MatchState state_;
  bool start_over_limit_ = false;
};

}  // namespace tf::grammar
