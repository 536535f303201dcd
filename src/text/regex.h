// A compiled PCRE2 regular expression (UTF + UCP, JIT when available) that reports every
// non-overlapping match in a UTF-8 string, one at a time (RegexMatches) or as a list (find_all).
// Hugging Face tokenizers write their patterns for the Oniguruma engine (Ruby syntax): compile them
// with Syntax::kOniguruma, which rewrites the escapes PCRE2 reads differently
// (text/oniguruma_pattern.h) and makes ^ and $ line anchors, as they are there.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tf::text {

class RegexMatches;

class Regex {
 public:
  enum class Syntax {
    kPcre2,      // PCRE2's own meaning (the Jinja engine's character classes)
    kOniguruma,  // a tokenizer.json pattern, matched as the Rust `tokenizers` matches it
  };
  // Compiles `pattern`; the error names the pattern and the offset PCRE2 complains about.
  static Expected<Regex> compile(std::string_view pattern, Syntax syntax = Syntax::kPcre2);
  // A pattern that matches `literal` exactly.
  static Expected<Regex> literal(std::string_view literal);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Byte ranges [begin, end) of successive non-overlapping non-empty matches, left to right. An
  // empty match advances by one character, as in Rust's regex find_iter and JavaScript's matchAll.
  // The list costs 16 bytes per match: walk RegexMatches instead where the text may be large.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  // `text` with every match replaced by `content` (taken literally).
  std::string replace_all(std::string_view text, std::string_view content) const;
  // True when the pattern matches somewhere in `text`.
  bool contains_match(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  friend class RegexMatches;
  struct Impl;
  Regex() = default;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

// The matches find_all() lists, found one at a time, so that walking the matches of a long text
// holds no list. `re` and `text` must outlive the cursor.
class RegexMatches {
 public:
  RegexMatches(const Regex& re, std::string_view text);
  RegexMatches(const RegexMatches&) = delete;
  RegexMatches& operator=(const RegexMatches&) = delete;
  ~RegexMatches();

  // Sets [begin, end) to the next non-empty match and returns true, or returns false at the end.
  bool next(size_t& begin, size_t& end);

 private:
  const Regex::Impl* re_;
  std::string_view text_;
  void* match_data_ = nullptr;  // pcre2_match_data*, created on the first next()
  size_t start_ = 0;
  bool done_ = false;
};

}  // namespace tf::text
