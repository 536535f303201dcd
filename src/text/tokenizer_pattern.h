// The "pattern" object of tokenizer.json's Split and Replace components: {"Regex": "..."}, an
// Oniguruma pattern (matched as the Rust library matches it, text/oniguruma_pattern.h), or
// {"String": "..."}, a literal. The one place that knows which syntax those patterns are in.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "text/regex.h"

namespace tf::text {

inline Expected<Regex> compile_tokenizer_pattern(const nlohmann::json& pattern) {
  if (pattern.contains("Regex")) {
    return Regex::compile(pattern.at("Regex").get<std::string>(), Regex::Syntax::kOniguruma);
  }
  return Regex::literal(pattern.at("String").get<std::string>());
}

}  // namespace tf::text
