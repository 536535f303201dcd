// Pre-tokenizers: Split behaviours (expected splits are the examples of the Hugging Face
// tokenizers documentation for SplitDelimiterBehavior), Digits, Metaspace, and the GLM-5.3 regex.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "text/pre_tokenizer.h"
#include "text/regex.h"
#include "text/utf8.h"
#include "tokenizer_test_util.h"

namespace tf::text {
namespace {

using json = nlohmann::json;
using Pieces = std::vector<std::string>;

Pieces run(const json& config, const std::string& text, bool first = true) {
  Expected<std::unique_ptr<PreTokenizer>> p = make_pre_tokenizer(config);
  EXPECT_TRUE(p.has_value()) << p.status().to_string();
  if (!p) return {};
  Pieces pieces{text};
  (*p)->pre_tokenize(pieces, first);
  return pieces;
}

json split(const std::string& behavior, bool invert = false, const char* regex = "-") {
  return {{"type", "Split"}, {"pattern", {{"String", regex}}}, {"behavior", behavior}, {"invert", invert}};
}

TEST(SplitPreTokenizer, BehavioursFollowTransformersJs) {
  // transformers.js (the reference) only knows two behaviours: "Removed" drops the delimiters of a
  // Regex pattern (a String pattern is wrapped in a capturing group there, so split() keeps them),
  // and everything else isolates them. Expected values from transformers.js 3.7.2.
  const std::string s = "the-final--countdown";
  const json removed_regex = {{"type", "Split"}, {"pattern", {{"Regex", "-"}}}, {"behavior", "Removed"}, {"invert", false}};
  EXPECT_EQ(run(removed_regex, s), (Pieces{"the", "final", "countdown"}));
  for (const char* b : {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"}) {
    EXPECT_EQ(run(split(b), s), (Pieces{"the", "-", "final", "-", "-", "countdown"})) << b;
  }
}

TEST(SplitPreTokenizer, InvertKeepsOnlyTheMatches) {
  const json c = {{"type", "Split"}, {"pattern", {{"Regex", "\\p{L}+"}}}, {"behavior", "Removed"}, {"invert", true}};
  EXPECT_EQ(run(c, "ab, cd!ef"), (Pieces{"ab", "cd", "ef"}));
  EXPECT_EQ(run(split("Isolated", true), "a-b"), (Pieces{"-"}));
}

TEST(SplitPreTokenizer, PiecesAlwaysConcatenateToTheInput) {
  const std::string s = "--a--b-";
  for (const char* b : {"Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"}) {
    std::string joined;
    for (const std::string& p : run(split(b), s)) joined += p;
    EXPECT_EQ(joined, s) << b;
  }
}

TEST(SplitPreTokenizer, RejectsBadRegexAndBehaviour) {
  EXPECT_FALSE(make_pre_tokenizer(json{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}));
  EXPECT_FALSE(make_pre_tokenizer(split("Sideways")));
  Expected<std::unique_ptr<PreTokenizer>> u = make_pre_tokenizer(json{{"type", "UnicodeScripts"}});
  ASSERT_FALSE(u);
  EXPECT_EQ(u.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(u.status().message().find("UnicodeScripts"), std::string::npos);
  EXPECT_FALSE(make_pre_tokenizer(json{{"type", "Split"}}));  // no pattern: an error, not a crash
}

TEST(DigitsPreTokenizer, GroupsOrIsolatesAsciiDigits) {
  EXPECT_EQ(run(json{{"type", "Digits"}, {"individual_digits", false}}, "ab123c45"), (Pieces{"ab", "123", "c", "45"}));
  EXPECT_EQ(run(json{{"type", "Digits"}, {"individual_digits", true}}, "a12"), (Pieces{"a", "1", "2"}));
  // transformers.js uses \d, which is ASCII: an Arabic-Indic digit stays with the letters.
  EXPECT_EQ(run(json{{"type", "Digits"}, {"individual_digits", false}}, "ab123c\u0663" "45"),
            (Pieces{"ab", "123", "c\u0663", "45"}));
}

TEST(MetaspacePreTokenizer, ReplacesSpacesAndPrependsAsTheRustLibraryReadsTheScheme) {
  // No split (neither transformers.js version splits at the replacement).
  const json c = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}, {"prepend_scheme", "first"}, {"split", true}};
  EXPECT_EQ(run(c, "Hey friend", true), (Pieces{"\u2581Hey\u2581friend"}));
  EXPECT_EQ(run(c, "Hey friend", false), (Pieces{"Hey\u2581friend"}));
  const json always = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}, {"prepend_scheme", "always"}};
  EXPECT_EQ(run(always, "Hey friend  x", false), (Pieces{"\u2581Hey\u2581friend\u2581\u2581x"}));
  EXPECT_EQ(run(always, " x", false), (Pieces{"\u2581x"}));  // already starts with the replacement
  // Files of current `tokenizers` carry prepend_scheme alone: it applies (transformers.js 3 wanted
  // add_prefix_space too and lost the "\u2581" of every ALBERT / T5-style tokenizer saved that way).
  const json scheme_only = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(run(scheme_only, "Hey friend"), (Pieces{"\u2581Hey\u2581friend"}));
  EXPECT_EQ(run(json{{"type", "Metaspace"}, {"replacement", "\u2581"}}, "a"),
            (Pieces{"\u2581a"}));  // default: always
  // The legacy key alone: false means never, true always.
  EXPECT_EQ(run(json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}}, "a b"),
            (Pieces{"a\u2581b"}));
  EXPECT_EQ(
      run(json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}}, "a b", false),
      (Pieces{"\u2581a\u2581b"}));
  const json never = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}, {"prepend_scheme", "never"}};
  EXPECT_EQ(run(never, "a b"), (Pieces{"a\u2581b"}));
}

// Expected values below: transformers.js 3.7.2 on the same input.
TEST(BertPreTokenizer, DropsWhitespaceAndIsolatesEachPunctuationCharacter) {
  EXPECT_EQ(run(json{{"type", "BertPreTokenizer"}}, "  Hello, world!! \u6771\u4eac can't\u00a0x "),
            (Pieces{"Hello", ",", "world", "!", "!", "\u6771\u4eac", "can", "'", "t", "x"}));
  EXPECT_EQ(run(json{{"type", "BertPreTokenizer"}}, " \t\n "), (Pieces{}));
}

TEST(PunctuationPreTokenizer, KeepsRunsOfPunctuationAndOfTheRest) {
  EXPECT_EQ(run(json{{"type", "Punctuation"}, {"behavior", "Isolated"}}, "Hey,, you... ok\u00bf "),
            (Pieces{"Hey", ",,", " you", "...", " ok", "\u00bf", " "}));
}

TEST(WhitespacePreTokenizer, AsciiWordsAndRunsOfTheRest) {
  EXPECT_EQ(run(json{{"type", "Whitespace"}}, "caf\u00e9, d\u00e9j\u00e0-vu  x_1"),
            (Pieces{"caf", "\u00e9,", "d", "\u00e9", "j", "\u00e0-", "vu", "x_1"}));
  EXPECT_EQ(run(json{{"type", "WhitespaceSplit"}}, " a\u00a0b\tc\u3000d "), (Pieces{"a", "b", "c", "d"}));
}

TEST(ReplacePreTokenizer, ReplacesWithoutSplitting) {
  EXPECT_EQ(run(json{{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "_"}}, "a b  c"), (Pieces{"a_b__c"}));
  EXPECT_FALSE(make_pre_tokenizer(json{{"type", "Replace"}, {"pattern", 3}, {"content", "_"}}));
}

TEST(ByteLevelPreTokenizer, MapsBytesToPrintableCharacters) {
  const json c = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  // GPT-2: a space becomes U+0120 'Ġ', a newline U+010A 'Ċ'.
  EXPECT_EQ(run(c, "Hello world\n"), (Pieces{"\u0120Hello", "\u0120world", "\u010A"}));
  for (int b = 0; b < 256; ++b) {
    const std::string enc = byte_level_encode(std::string(1, static_cast<char>(b)));
    const std::vector<char32_t> cps = to_code_points(enc);
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(byte_level_decode_char(cps[0]), b);
  }
}

TEST(GlmPreTokenizer, RegexCompilesAndSplitsAsSpecified) {
  Expected<Regex> re = Regex::compile(testing::kGlmPattern);
  ASSERT_TRUE(re.has_value()) << re.status().to_string();
  const json c = {{"type", "Split"}, {"pattern", {{"Regex", testing::kGlmPattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  // From the spec: unlike Qwen3.5, combining marks are not folded into letter runs.
  EXPECT_EQ(run(c, "cafe\u0301"), (Pieces{"cafe", "\u0301"}));
  // \p{N}{1,3}: digit runs are cut into groups of at most three.
  EXPECT_EQ(run(c, "12345"), (Pieces{"123", "45"}));
  // Case-insensitive contractions.
  EXPECT_EQ(run(c, "I'M"), (Pieces{"I", "'M"}));
  EXPECT_EQ(run(c, "Hello world"), (Pieces{"Hello", " world"}));
  // Trailing whitespace before a word stays with the whitespace run, minus the last space.
  EXPECT_EQ(run(c, "a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(run(c, "x\n\n  y"), (Pieces{"x", "\n\n", " ", " y"}));
  // A whole tokenizer built on it round-trips arbitrary text.
  auto tok = testing::build(testing::byte_level_tokenizer({{"H", "e"}, {"He", "l"}}));
  const std::string s = "Hello 世界! cafe\u0301 123456 \t\n 👨‍👩‍👧";
  EXPECT_EQ(tok->decode(tok->encode(s)), s);
  EXPECT_EQ(tok->encode("Hel")[0], 257);
}

TEST(GlmPreTokenizer, LongWhitespaceRunsSplitLikeShortOnes) {
  // Long runs exhaust the JIT stack; the interpreter fallback must give the same pieces.
  const json c = {{"type", "Split"}, {"pattern", {{"Regex", testing::kGlmPattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  for (size_t n : {3u, 1000u, 200000u}) {
    const Pieces p = run(c, std::string(n, ' ') + "x" + std::string(n, '\n') + "y");
    ASSERT_EQ(p.size(), 4u) << n;
    EXPECT_EQ(p[0], std::string(n - 1, ' '));
    EXPECT_EQ(p[1], " x");
    EXPECT_EQ(p[2], std::string(n, '\n'));
    EXPECT_EQ(p[3], "y");
  }
}

}  // namespace
}  // namespace tf::text
