// A compiled PCRE2 regular expression (UTF + UCP, JIT when available) that reports every
// non-overlapping match in a UTF-8 string. Hugging Face tokenizers write their patterns for the
// Oniguruma engine; PCRE2 accepts the same syntax for what they use (\p{..}, (?i:..), lookahead).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tf::text {

class Regex {
 public:
  // Compiles `pattern`; the error names the pattern and the offset PCRE2 complains about.
  static Expected<Regex> compile(std::string_view pattern);
  // A pattern that matches `literal` exactly.
  static Expected<Regex> literal(std::string_view literal);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Byte ranges [begin, end) of successive non-overlapping matches, left to right. An empty match
  // advances by one character, as in Rust's regex find_iter and JavaScript's matchAll.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  // `text` with every match replaced by `content` (taken literally).
  std::string replace_all(std::string_view text, std::string_view content) const;
  // True when the pattern matches somewhere in `text`.
  bool contains_match(std::string_view text) const { return !find_all(text).empty(); }

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  Regex() = default;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

}  // namespace tf::text
