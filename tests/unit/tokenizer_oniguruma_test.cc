// Tokenizer regexes are Oniguruma patterns (Ruby syntax); Regex::Syntax::kOniguruma must match
// what Oniguruma matches where PCRE2 would not (text/oniguruma_pattern.h).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "text/oniguruma_pattern.h"
#include "text/regex.h"

namespace tf::text {
namespace {

std::vector<std::string> matches(const std::string& pattern, const std::string& text) {
  Expected<Regex> re = Regex::compile(pattern, Regex::Syntax::kOniguruma);
  EXPECT_TRUE(re.has_value()) << re.status().to_string();
  std::vector<std::string> out;
  if (!re) return out;
  for (const auto& [b, e] : re->find_all(text)) out.push_back(text.substr(b, e - b));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(OnigurumaPattern, WhitespaceIsOnigurumasNotPcre2s) {
  // U+180E is format (Cf) since Unicode 6.3: not \s for Oniguruma, though PCRE2's \h lists it.
  EXPECT_EQ(matches(R"(\s+)", "a\u180e b\u0085c\u2028d\ufeffe"), (Pieces{" ", "\u0085", "\u2028"}));
  EXPECT_EQ(matches(R"(\S+)", "a\u180e b"), (Pieces{"a\u180e", "b"}));
  // Inside classes, negated or not.
  EXPECT_EQ(matches(R"([^\s\p{L}]+)", "\u180e'  x"), (Pieces{"\u180e'"}));
  EXPECT_EQ(matches(R"([\S]+)", "\u180e\t"), (Pieces{"\u180e"}));
  EXPECT_EQ(matches(R"([\s]+)", "\u180e\t\u3000"), (Pieces{"\t\u3000"}));
  // The contraction after U+180E stays with the punctuation run, as the Rust tokenizers split it.
  const std::string glm =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(matches(glm, "\u180e's"), (Pieces{"\u180e'", "s"}));
  EXPECT_EQ(matches(glm, " \u180e's"), (Pieces{" \u180e'", "s"}));
}

TEST(OnigurumaPattern, WordDigitAndHexClasses) {
  // \w: letters, marks, numbers and connector punctuation.
  EXPECT_EQ(matches(R"(\w+)", "e\u0301\u00b2\u203fx-y"), (Pieces{"e\u0301\u00b2\u203fx", "y"}));
  EXPECT_EQ(matches(R"(\W+)", "a\u0301-+b"), (Pieces{"-+"}));
  EXPECT_EQ(matches(R"([\w]+)", "\u0903a!"), (Pieces{"\u0903a"}));
  // \b follows that \w: no boundary between a letter and its combining mark.
  EXPECT_EQ(matches(R"(\b\w+\b)", "caf\u00e9\u0301 x"), (Pieces{"caf\u00e9\u0301", "x"}));
  // \h is a hex digit in Oniguruma (horizontal space in PCRE2).
  EXPECT_EQ(matches(R"(\h+)", "0x1fG a"), (Pieces{"0", "1f", "a"}));
  EXPECT_EQ(matches(R"(\H+)", "12gz34"), (Pieces{"gz"}));
  EXPECT_EQ(matches(R"([\H]+)", "12g 34"), (Pieces{"g "}));
}

TEST(OnigurumaPattern, EscapesAnchorsAndOptions) {
  EXPECT_EQ(matches(R"(\u00e9+)", "c\u00e9\u00e9"), (Pieces{"\u00e9\u00e9"}));
  // ^ and $ are line anchors in Ruby syntax.
  EXPECT_EQ(matches(R"(^\w)", "ab\ncd"), (Pieces{"a", "c"}));
  EXPECT_EQ(matches(R"(\w$)", "ab\ncd"), (Pieces{"b", "d"}));
  // (?m) is Ruby's dot-matches-newline; '.' alone excludes \n only.
  EXPECT_EQ(matches(R"((?m:a.b))", "a\nb"), (Pieces{"a\nb"}));
  EXPECT_EQ(matches(R"(a.b)", "a\nb a\rb"), (Pieces{"a\rb"}));
  // Quoted text and POSIX classes pass through untouched.
  EXPECT_EQ(pcre2_from_oniguruma(R"(\Q\s\E[[:alpha:]\s])"), R"(\Q\s\E[[:alpha:]\t-\r\x{85}\p{Z}])");
  EXPECT_EQ(matches(R"(\Q\s\E)", "a\\sb"), (Pieces{"\\s"}));
  // A leading ']' in a class is literal; the class still ends at the next one.
  EXPECT_EQ(matches(R"([]\s]+)", "a] \u180e"), (Pieces{"] "}));
}

TEST(OnigurumaPattern, Pcre2SyntaxIsLeftAlone) {
  // The Jinja engine's classes keep PCRE2's meaning.
  Expected<Regex> re = Regex::compile(R"(\s)");
  ASSERT_TRUE(re.has_value());
  EXPECT_TRUE(re->contains_match("\u180e"));
  // A broken pattern names what it was rewritten to.
  Expected<Regex> bad = Regex::compile(R"(\s(+)", Regex::Syntax::kOniguruma);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().to_string().find("rewritten for PCRE2"), std::string::npos)
      << bad.status().to_string();
}

}  // namespace
}  // namespace tf::text
