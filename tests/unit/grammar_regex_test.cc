// regex_to_gbnf / choice_to_gbnf: the GBNF they emit, compiled by the grammar core,
// accepts exactly the strings the regex fully matches. For ASCII patterns the
// expectation comes from std::regex_match (ECMAScript), an independent engine; UTF-8
// and the Python-only syntax are checked by hand.
#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "sampling/grammar/grammar.h"
#include "sampling/grammar/regex_gbnf.h"

namespace tf::grammar {
namespace {

// The regex compiled through GBNF; fails the test (and returns null) on any error.
std::shared_ptr<const Grammar> regex_grammar(const std::string& pattern) {
  Expected<std::string> gbnf = regex_to_gbnf(pattern);
  EXPECT_TRUE(gbnf.has_value()) << pattern << ": " << gbnf.status().message();
  if (!gbnf.has_value()) return nullptr;
  auto grammar = compile_gbnf(*gbnf);
  EXPECT_TRUE(grammar.has_value()) << pattern << " -> " << *gbnf << grammar.status().message();
  if (!grammar.has_value()) return nullptr;
  return *grammar;
}

struct Case {
  std::string pattern;
  std::vector<std::string> texts;
};

// Each pattern is checked on every text against std::regex_match; each row must hold
// at least one text that matches and one that does not, so that the row can fail.
const std::vector<Case>& ascii_cases() {
  static const std::vector<Case> cases = {
      {"abc", {"abc", "ab", "abcd", "", "abd"}},
      {"a.c", {"abc", "a-c", "a\nc", "ac", "abbc"}},
      {"ab|cd", {"ab", "cd", "abd", "acd", "abcd", ""}},
      {"a(b|c)d", {"abd", "acd", "ab", "cd", "abcd"}},
      {"a|b|", {"a", "b", "", "ab"}},
      {"x(|y)z", {"xz", "xyz", "xyyz"}},
      {"a*", {"", "a", "aaaa", "ab"}},
      {"a+b?", {"a", "ab", "aab", "b", "abb"}},
      {"(ab)+", {"ab", "abab", "aba", ""}},
      {"a{3}", {"aaa", "aa", "aaaa"}},
      {"a{2,4}", {"a", "aa", "aaa", "aaaa", "aaaaa"}},
      {"a{2,}", {"a", "aa", "aaaaaaa"}},
      {"a{0,1}b{1,1}", {"b", "ab", "aab", "a"}},
      {"(a|bc){2,3}", {"abc", "bcbc", "aaa", "a", "abcabc", "aaaa"}},
      {"(a*)*", {"", "a", "aaa", "b"}},
      {"(a*)*b", {"b", "aab", "aa", "aaba"}},
      {"(a?)*", {"", "aaa", "ab"}},
      {"(a?b?)+", {"", "a", "ab", "ba", "abba", "abc"}},
      {"(a*|b)*c", {"c", "abbac", "ab", "bbc", "ca"}},
      {"((a?)(b?))*c", {"c", "abc", "bac", "aabbc", "cc"}},
      {"(a{0,2}){2,3}", {"", "aaaaaa", "aaaaaaa", "a"}},
      {"(a?b?){2}", {"", "abab", "aba", "bb", "ababa", "ba"}},
      {"(a*b?){0,2}c", {"c", "aabaac", "abababc", "bbc", "bbbc"}},
      {"(x?(ab)?){1,2}", {"", "xabxab", "abab", "xx", "xabxabx", "ababab"}},
      {"(a+)+b", {"ab", "aaaab", "b", "aaaa"}},
      {"((ab)*c)*", {"", "c", "abc", "ababcc", "ab", "abcab"}},
      {"()*a", {"a", "", "aa"}},
      {"(x|y*)+z", {"z", "xyyxz", "xyy", "zz"}},
      {"a*?b+?c??", {"b", "aabbc", "c", "abcc"}},
      {"a{2,3}?", {"aa", "aaa", "a"}},
      {"[abc]+", {"abcba", "abd", ""}},
      {"[a-f0-9]+", {"deadbeef09", "g", "DEAD"}},
      {"[-a]+", {"-a-", "a", "b", "-b"}},
      {"[a-]+", {"a-", "--", "b"}},
      {"[a\\-z]+", {"a-z", "b", "z"}},
      {"[^abc]", {"d", "a", "", "dd"}},
      {"[^-]+", {"abc", "a-c"}},
      {"[^\\d]+", {"abc", "a1c", "-_ "}},
      {"[\\D]+", {"x y", "x1"}},
      {"[^\\D]+", {"0123", "01a"}},
      {"[\\d\\s]+", {"1 2\t3", "1a"}},
      {"[^\\d\\s]+", {"ab-", "a b", "a1"}},
      {"[\\W\\d]+", {"1-2 !", "a", "1_"}},
      {"[^\\W]+", {"ab_9", "a b"}},
      {"\\w+\\s\\W", {"ab_9 !", "ab  !", "ab a"}},
      {"\\S+", {"abc", "a c", ""}},
      {"[.]+", {"...", "a"}},
      {"[\\]\\[]+", {"[]][", "a"}},
      {"[\\^a]+", {"^a^", "b"}},
      {"[a^]+", {"^a", "b"}},
      {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\/\\^\\$\\-", {".*+?()[]{}|\\/^$-", "a*+?()[]{}|\\/^$-"}},
      {"\\x41\\u0042\\t", {"AB\t", "AB ", "ab\t"}},
      {"\\n\\r\\f\\v", {"\n\r\f\v", "\n\r\f"}},
      {"^abc$", {"abc", "xabc", "abcx"}},
      {"^(a|b)$", {"a", "b", "ab"}},
      {"\"[^\"]*\"", {"\"hi there\"", "\"a\"b\"", "\"\""}},
      // Phone numbers, dates, e-mail-like and number patterns.
      {"\\d{3}-\\d{4}", {"555-1234", "5551234", "555-123", "55a-1234"}},
      {"(\\+1 )?\\(\\d{3}\\) \\d{3}-\\d{4}",
       {"(555) 123-4567", "+1 (555) 123-4567", "+2 (555) 123-4567", "(555)123-4567"}},
      {"\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])",
       {"2024-02-29", "2024-13-01", "2024-00-10", "2024-12-31", "2024-12-32", "24-12-01"}},
      {"([01]\\d|2[0-3]):[0-5]\\d", {"23:59", "24:00", "09:05", "9:05"}},
      {"[\\w.+-]+@[\\w-]+(\\.[\\w-]+)+", {"a.b+c@example.co.uk", "a@b", "@b.c", "a@b.c", "a b@c.d"}},
      {"-?(0|[1-9]\\d*)(\\.\\d+)?([eE][+-]?\\d+)?", {"0", "-12.5e+3", "012", "1.", "3.14", "1e5", "-"}},
      {"(\\d{1,3}\\.){3}\\d{1,3}", {"192.168.0.1", "1.2.3", "1234.1.1.1", "1.2.3.4"}},
      {"(true|false|null)", {"true", "false", "nul", "truefalse"}},
      {"[A-Z][a-z]+( [A-Z][a-z]+)*", {"Ada Lovelace", "Ada lovelace", "Ada", "ada"}},
  };
  return cases;
}

TEST(GrammarRegexTest, AgreesWithStdRegexOnAsciiPatterns) {
  int checked = 0;
  for (const Case& c : ascii_cases()) {
    SCOPED_TRACE(c.pattern);
    std::regex reference(c.pattern, std::regex::ECMAScript);
    auto grammar = regex_grammar(c.pattern);
    ASSERT_NE(grammar, nullptr);
    int matching = 0;
    for (const std::string& text : c.texts) {
      bool expected = std::regex_match(text, reference);
      matching += expected ? 1 : 0;
      EXPECT_EQ(grammar_matches(*grammar, text), expected)
          << "text '" << text << "', gbnf: " << *regex_to_gbnf(c.pattern);
      ++checked;
    }
    EXPECT_GT(matching, 0) << "row needs a matching text";
    EXPECT_LT(matching, static_cast<int>(c.texts.size())) << "row needs a non-matching text";
  }
  EXPECT_GT(checked, 200);
}

// Random small patterns over {a, b} (groups, classes, alternation, every quantifier,
// nullable bodies under repetition) against every string over {a, b, c} up to length 4.
std::string random_pattern(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  static const char* const kAtoms[] = {"a", "b", ".", "[ab]", "[^a]", "\\w", "[^\\d]"};
  static const char* const kQuantifiers[] = {"", "", "*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "*?"};
  std::string out;
  int items = 1 + pick(3);
  for (int i = 0; i < items; ++i) {
    std::string atom =
        depth > 0 && pick(3) == 0 ? "(" + random_pattern(rng, depth - 1) + ")" : kAtoms[pick(7)];
    out += atom + kQuantifiers[pick(10)];
  }
  if (depth > 0 && pick(3) == 0) out += "|" + random_pattern(rng, depth - 1);
  return out;
}

TEST(GrammarRegexTest, AgreesWithStdRegexOnRandomPatterns) {
  std::vector<std::string> texts{""};
  for (size_t i = 0; i < texts.size() && texts[i].size() < 4; ++i) {
    for (char c : {'a', 'b', 'c'}) texts.push_back(texts[i] + c);
  }
  std::mt19937 rng(20240611);
  int disagreements = 0;
  for (int n = 0; n < 300 && disagreements < 5; ++n) {
    std::string pattern = random_pattern(rng, 2);
    SCOPED_TRACE(pattern);
    std::regex reference(pattern, std::regex::ECMAScript);
    auto grammar = regex_grammar(pattern);
    ASSERT_NE(grammar, nullptr);
    for (const std::string& text : texts) {
      bool expected = std::regex_match(text, reference);
      if (grammar_matches(*grammar, text) == expected) continue;
      ++disagreements;
      ADD_FAILURE() << "text '" << text << "': std::regex says " << expected
                    << ", gbnf: " << *regex_to_gbnf(pattern);
    }
  }
}

void expect_matches(const std::string& pattern, const std::vector<std::string>& yes,
                    const std::vector<std::string>& no) {
  SCOPED_TRACE(pattern);
  auto grammar = regex_grammar(pattern);
  ASSERT_NE(grammar, nullptr);
  for (const std::string& text : yes) EXPECT_TRUE(grammar_matches(*grammar, text)) << "'" << text << "'";
  for (const std::string& text : no) EXPECT_FALSE(grammar_matches(*grammar, text)) << "'" << text << "'";
}

TEST(GrammarRegexTest, Utf8LiteralsClassesAndEscapes) {
  expect_matches("[à-ÿ]+", {"éè", "àÿ"}, {"e", "éxè", "Ā", ""});
  expect_matches("café|naïve", {"café", "naïve"}, {"cafe", "caf", "naive"});
  expect_matches("日本+語", {"日本語", "日本本本語"}, {"日語", "日本"});
  expect_matches(".{2}", {"éé", "ab", "日😀"}, {"é", "ééé", "a\n"});  // code points, not bytes
  expect_matches("[^a]", {"é", "😀", "b"}, {"a", "éé"});
  expect_matches("[^é]+", {"abc", "e"}, {"é", "aé"});
  expect_matches("\\u00e9\\u{1F600}\\x41", {"é😀A"}, {"e😀A", "é😀"});
  expect_matches("\\uD83D\\uDE00", {"😀"}, {"\xed\xa0\xbd"});  // a surrogate pair is one code point
  expect_matches("[\\u0400-\\u04FF]+", {"Привет"}, {"Hello", "При vet"});
  expect_matches("\\s", {" ", "\t", "\u00a0", "\u3000"}, {"a", ""});
  expect_matches("\\S\\W", {"é!", "a日"}, {" !", "ab"});  // \w is ASCII: 日 is \W
  expect_matches("[\\D]", {"é"}, {"5"});
}

TEST(GrammarRegexTest, PythonOnlySyntax) {
  expect_matches("(?P<year>\\d{4})-(?<month>\\d\\d)", {"2024-05"}, {"2024-5", "24-05"});
  expect_matches("(?:ab)+", {"abab"}, {"aba"});
  expect_matches("x{,3}", {"", "xxx"}, {"xxxx"});                  // Python: {,m} is {0,m}
  expect_matches("[]a]+", {"]a]"}, {"b"});                         // Python: "]" first is a literal
  expect_matches("{\"a\": \\d}", {"{\"a\": 1}"}, {"{\"a\": x}"});  // "{" that starts no quantifier
  expect_matches("a{x}|}", {"a{x}", "}"}, {"a"});
  expect_matches("[\\b]", {"\b"}, {"b"});  // backspace inside a class
}

TEST(GrammarRegexTest, LargeBoundedRepeats) {
  auto grammar = regex_grammar("[0-9]{1,10000}");
  ASSERT_NE(grammar, nullptr);
  EXPECT_TRUE(grammar_matches(*grammar, std::string(10000, '7')));
  EXPECT_FALSE(grammar_matches(*grammar, std::string(10001, '7')));
  EXPECT_FALSE(grammar_matches(*grammar, ""));
  expect_matches("a{500}b{0,700}", {std::string(500, 'a') + std::string(700, 'b'), std::string(500, 'a')},
                 {std::string(499, 'a'), std::string(500, 'a') + std::string(701, 'b')});
}

TEST(GrammarRegexTest, NamesTheStartRuleAfterThePrefix) {
  Expected<std::string> rules = regex_to_gbnf("[a-z]+", "str-pattern_1");
  ASSERT_TRUE(rules.has_value()) << rules.status().message();
  EXPECT_EQ(rules->rfind("str-pattern_1 ::= ", 0), 0u) << *rules;
  auto grammar = compile_gbnf("root ::= \"<\" str-pattern_1 \">\"\n" + *rules);
  ASSERT_TRUE(grammar.has_value()) << grammar.status().message();
  EXPECT_TRUE(grammar_matches(**grammar, "<abc>"));
  EXPECT_FALSE(grammar_matches(**grammar, "<>"));

  Expected<std::string> bad = regex_to_gbnf("a", "bad name");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

struct Refused {
  std::string pattern;
  std::string what;  // a word the message must hold
  size_t offset;
};

TEST(GrammarRegexTest, RefusesUnsupportedFeaturesNamingTheOffset) {
  const std::vector<Refused> cases = {
      {"(a)\\1", "backreference", 3},
      {"(?P<x>a)(?P=x)", "backreference", 8},
      {"(?<x>a)\\k<x>", "backreference", 7},
      {"a(?=b)", "lookahead", 1},
      {"a(?!b)", "lookahead", 1},
      {"(?<=a)b", "lookbehind", 0},
      {"(?<!a)b", "lookbehind", 0},
      {"foo\\b", "word boundary", 3},
      {"\\Bfoo", "word boundary", 0},
      {"a^b", "anchor", 1},
      {"a$b", "anchor", 1},
      {"(^a)", "anchor", 1},
      {"\\Aa", "anchor", 0},
      {"(?i)abc", "inline flags", 0},
      {"a(?s:b)", "inline flags", 1},
      {"ab(c", "unbalanced '('", 2},
      {"ab)c", "unbalanced ')'", 2},
      {"a[bc", "unbalanced '['", 1},
      {"[^]", "unbalanced '['", 0},
      {"*a", "nothing to repeat", 0},
      {"a|+b", "nothing to repeat", 2},
      {"(?:{2})", "nothing to repeat", 3},
      {"^*", "nothing to repeat", 1},
      {"a**", "another quantifier", 2},
      {"a{2}{3}", "another quantifier", 4},
      {"a*+", "possessive", 2},
      {"ab{3,2}", "n > m", 2},
      {"a{1,10001}", "above 10000", 1},
      {"a{10001}", "above 10000", 1},
      {"(a{10000}){200}", "more than", 10},
      {"[z-a]", "bad character range", 1},
      {"[\\d-z]", "bad character range", 1},
      {"x\\q", "unknown escape", 1},
      {"\\p{L}", "property", 0},
      {"ab\\", "lone backslash", 2},
      {"\\uD800", "surrogate", 0},
      {"\\x4", "hex", 0},
      {"\\u{110000}", "U+10FFFF", 0},
      {"\\01", "octal", 0},
      {std::string(201, '(') + std::string(201, ')'), "nested deeper", 200},
  };
  for (const Refused& c : cases) {
    SCOPED_TRACE(c.pattern);
    Expected<std::string> rules = regex_to_gbnf(c.pattern);
    ASSERT_FALSE(rules.has_value()) << *rules;
    EXPECT_EQ(rules.status().code(), StatusCode::kInvalidArgument);
    const std::string& message = rules.status().message();
    EXPECT_EQ(message.rfind("regex: ", 0), 0u) << message;
    EXPECT_NE(message.find(c.what), std::string::npos) << message;
    EXPECT_NE(message.find("at offset " + std::to_string(c.offset)), std::string::npos) << message;
  }
  Expected<std::string> not_utf8 = regex_to_gbnf("ab\xff");
  ASSERT_FALSE(not_utf8.has_value());
  EXPECT_NE(not_utf8.status().message().find("invalid UTF-8 at byte offset 2"), std::string::npos);
}

TEST(GrammarRegexTest, OffsetsCountCodePoints) {
  Expected<std::string> rules = regex_to_gbnf("éé\\1");
  ASSERT_FALSE(rules.has_value());
  EXPECT_NE(rules.status().message().find("at offset 2"), std::string::npos) << rules.status().message();
}

std::shared_ptr<const Grammar> choice_grammar(const std::vector<std::string>& choices) {
  std::string gbnf = choice_to_gbnf(choices);
  auto grammar = compile_gbnf(gbnf);
  EXPECT_TRUE(grammar.has_value()) << gbnf << grammar.status().message();
  return grammar.has_value() ? *grammar : nullptr;
}

TEST(GrammarRegexTest, ChoiceIsExactlyOneOfTheStrings) {
  const std::vector<std::string> choices = {"yes",      "yes!",      "say \"hi\"",       "back\\slash",
                                            "日本語 😀", "tab\there", "[not] a | class*", "yes"};
  auto grammar = choice_grammar(choices);
  ASSERT_NE(grammar, nullptr);
  for (const std::string& c : choices) EXPECT_TRUE(grammar_matches(*grammar, c)) << c;
  for (const char* text : {"", "ye", "yes!!", "yesyes!", "say \"hi", "say hi", "back\\\\slash", "backslash",
                           "日本語", "tab\\there", "n", "[not] a ", "yes\n"}) {
    EXPECT_FALSE(grammar_matches(*grammar, text)) << text;
  }
}

TEST(GrammarRegexTest, ChoiceEdgeCases) {
  auto with_empty = choice_grammar({"", "a"});
  ASSERT_NE(with_empty, nullptr);
  EXPECT_TRUE(grammar_matches(*with_empty, ""));
  EXPECT_TRUE(grammar_matches(*with_empty, "a"));
  EXPECT_FALSE(grammar_matches(*with_empty, "aa"));

  auto none = choice_grammar({});
  ASSERT_NE(none, nullptr);
  EXPECT_FALSE(grammar_matches(*none, ""));
  EXPECT_FALSE(grammar_matches(*none, "a"));
}

}  // namespace
}  // namespace tf::grammar
