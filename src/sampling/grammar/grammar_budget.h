// What one structured-output grammar may cost to build.
//
// Repetitions multiply a grammar's size: x{0,10000} compiles to 10,000 rules, and a
// schema's maxLength / maxItems / minItems or a regex's {m,n} become such repetitions.
// A request of a megabyte could otherwise ask for tens of gigabytes. So the compiler
// charges an estimate of the bytes of everything it builds (the parsed tree, rules,
// elements, character classes) against one budget, and the converters that write GBNF
// text (JSON schema, tool calls) bound that text by the same amount: past it the request
// is refused with "grammar too large: ...", a 400.
//
// The limit is per grammar, and a grammar lives as long as its request (queued
// requests included: MAX_QUEUED x this bounds them all). The largest grammars the tests
// build (tool sets, schemas with maxLength 10000 strings) take under 3 MiB.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "core/status.h"

namespace tf::grammar {

constexpr size_t kMaxGrammarBytes = size_t{32} << 20;

// The refusal: invalid_argument("grammar too large: " + what + ...), naming the limit.
Status grammar_too_large(const std::string& what);
// Whether `status` is such a refusal (callers that fall back on other errors must not).
bool is_grammar_too_large(const Status& status);

class GrammarBudget {
 public:
  explicit GrammarBudget(size_t limit = kMaxGrammarBytes) : limit_(limit) {}

  // Adds `bytes`; false once the total is over the limit (and from then on).
  [[nodiscard]] bool charge(size_t bytes) {
    used_ = bytes > limit_ - std::min(used_, limit_) ? limit_ + 1 : used_ + bytes;
    return used_ <= limit_;
  }
  size_t used() const { return used_; }
  size_t limit() const { return limit_; }

 private:
  size_t limit_;
  size_t used_ = 0;
};

}  // namespace tf::grammar
