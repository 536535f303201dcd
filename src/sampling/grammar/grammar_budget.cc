// See grammar_budget.h.
#include "sampling/grammar/grammar_budget.h"

namespace tf::grammar {

namespace {
constexpr const char* kPrefix = "grammar too large: ";
}  // namespace

Status grammar_too_large(const std::string& what) {
  return invalid_argument(
      std::string(kPrefix) + what + " (the limit is " + std::to_string(kMaxGrammarBytes >> 20) +
      " MiB per grammar; repetition counts such as {m,n}, maxLength, maxItems and minItems "
      "multiply a grammar's size)");
}

bool is_grammar_too_large(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument && status.message().find(kPrefix) != std::string::npos;
}

}  // namespace tf::grammar
