// GBNF compilation and the matcher (src/sampling/grammar): sentences accepted and
// refused, byte-at-a-time input split inside UTF-8 characters, refusals naming the line.
#include <gtest/gtest.h>

#include <string>

#include "sampling/grammar/gbnf_writer.h"
#include "sampling/grammar/grammar.h"
#include "sampling/grammar/grammar_matcher.h"

namespace tf::grammar {
namespace {

std::shared_ptr<const Grammar> compile(const std::string& text) {
  auto g = compile_gbnf(text);
  EXPECT_TRUE(g.has_value()) << g.status().to_string();
  return g ? *g : nullptr;
}

TEST(GrammarGbnf, SequencesAlternativesAndRepetitions) {
  auto g = compile(R"(
    # a comment
    root ::= "a" digits* ("x" | "yz"){1,2} tail?
    digits ::= [0-9]+ | "-"
    tail ::= [^\n]
  )");
  ASSERT_TRUE(g);
  for (const char* ok : {"ax", "a12-x", "ayzx", "ayzxq", "axxx", "a-9-yz"}) EXPECT_TRUE(grammar_matches(*g, ok)) << ok;
  for (const char* bad : {"a", "x", "ayzyzyz", "a1x\n", "ax12", ""}) EXPECT_FALSE(grammar_matches(*g, bad)) << bad;
}

TEST(GrammarGbnf, BoundedRepeatsCountExactly) {
  auto g = compile(R"(root ::= "<" [a-c]{2,4} ">" "!"{3})");
  ASSERT_TRUE(g);
  EXPECT_FALSE(grammar_matches(*g, "<a>!!!"));
  EXPECT_TRUE(grammar_matches(*g, "<ab>!!!"));
  EXPECT_TRUE(grammar_matches(*g, "<abca>!!!"));
  EXPECT_FALSE(grammar_matches(*g, "<abcab>!!!"));
  EXPECT_FALSE(grammar_matches(*g, "<ab>!!"));
  EXPECT_FALSE(grammar_matches(*g, "<ab>!!!!"));
}

TEST(GrammarGbnf, EscapesAndUnicode) {
  auto g = compile(R"(root ::= "\"q\"\t" [à-ÿ]+ "\u2713" [\x41-\x43] "\\")");
  ASSERT_TRUE(g);
  EXPECT_TRUE(grammar_matches(*g, "\"q\"\téè✓B\\"));
  EXPECT_FALSE(grammar_matches(*g, "\"q\"\te✓B\\"));
  EXPECT_FALSE(grammar_matches(*g, "\"q\"\té✓D\\"));
}

TEST(GrammarGbnf, NestedRecursionThroughRules) {
  auto g = compile(R"(
    root ::= list
    list ::= "[" (item ("," item)*)? "]"
    item ::= [0-9]+ | list
  )");
  ASSERT_TRUE(g);
  for (const char* ok : {"[]", "[1]", "[1,[2,[]],33]", "[[[[[]]]]]"}) EXPECT_TRUE(grammar_matches(*g, ok)) << ok;
  for (const char* bad : {"[", "[1,]", "[[]", "[]]", "[1 2]"}) EXPECT_FALSE(grammar_matches(*g, bad)) << bad;
}

TEST(GrammarGbnf, ByteAtATimeAcrossUtf8Characters) {
  auto g = compile(R"(root ::= "é" [✓✗] "z")");
  ASSERT_TRUE(g);
  GrammarMatcher m(g);
  const std::string text = "é✓z";
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_FALSE(m.is_complete()) << i;
    ASSERT_TRUE(m.accept(text.substr(i, 1))) << "byte " << i;
  }
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.can_continue());
  // A lead byte that cannot start an allowed character is refused at once, and the
  // state is unchanged by a refused string.
  GrammarMatcher n(g);
  ASSERT_TRUE(n.accept("\xC3"));                // first byte of é
  EXPECT_FALSE(n.accept("\xA8"));               // è: C3 A8
  EXPECT_TRUE(n.accept("\xA9"));                // é
  EXPECT_FALSE(n.accept("\xE2\x9C\x94"));       // ✔ (U+2714) is neither ✓ nor ✗
  EXPECT_TRUE(n.accept("\xE2\x9C\x97" "z"));    // ✗ then z
  EXPECT_TRUE(n.is_complete());
  // A lead byte is only alive if some character it can start is allowed: F0 starts only
  // U+10000 and above (F0 80.. would be overlong), E0 80 cannot start any character.
  GrammarMatcher ascii(compile("root ::= [a-z]+ | [\u0100-\uFFFF]"));
  EXPECT_FALSE(ascii.accept("\xF0"));
  EXPECT_FALSE(ascii.accept("\xE0\x80"));
  EXPECT_TRUE(ascii.accept("\xE0\xA0"));  // U+0800..U+083F
  // ED A0..BF can only go on to surrogates, which are not text: such a prefix is dead even
  // under a class that admits everything, so a token mask never leads into it.
  GrammarMatcher wide(compile("root ::= [^<]*"));
  EXPECT_FALSE(GrammarMatcher(wide).accept("\xED\xA0"));
  EXPECT_FALSE(GrammarMatcher(wide).accept("\xED\xBF"));
  EXPECT_TRUE(GrammarMatcher(wide).accept("\xED\x9F"));          // U+D7C0..U+D7FF
  EXPECT_TRUE(GrammarMatcher(wide).accept("\xED\x9F\xBF"));      // U+D7FF
  GrammarMatcher astral(compile("root ::= [\U0001F600-\U0001F64F]"));
  EXPECT_TRUE(astral.accept("\xF0\x9F"));
  EXPECT_FALSE(GrammarMatcher(astral).accept("\x9A"));   // F0 9F 9A: U+1F680 and up
  EXPECT_FALSE(GrammarMatcher(astral).accept("\x99\x90"));  // U+1F650
  EXPECT_TRUE(astral.accept("\x99\x8F"));               // U+1F64F
  EXPECT_TRUE(astral.is_complete());
  // Bytes that are never text: a stray continuation, an invalid lead.
  GrammarMatcher any(compile("root ::= .*"));
  EXPECT_FALSE(any.accept("\x80"));
  EXPECT_FALSE(any.accept("\xFF"));
  EXPECT_FALSE(any.accept("\xC0\xAF"));  // overlong '/'
  EXPECT_TRUE(any.accept("ok ✓"));
}

TEST(GrammarGbnf, RefusalsNameTheProblem) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto g = compile_gbnf(text);
    ASSERT_FALSE(g.has_value()) << text;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().message();
  };
  expect_error("item ::= \"a\"", "no 'root' rule");
  expect_error("root ::= missing", "rule 'missing' is used but never defined");
  expect_error("root ::= root \"a\" | \"b\"", "left-recursive");
  expect_error("root ::= a\na ::= b? root \"x\"\nb ::= \"\"", "left-recursive");
  expect_error("root ::= \"a\"\n\nroot ::= \"b\"", "defined twice");
  expect_error("root ::= \"a\n", "line 1: unterminated string literal");
  expect_error("root ::= \"a\"\nx ::= [b-a]", "line 2: character range out of order");
  expect_error("root ::= \"\\q\"", "unknown escape");
  expect_error("root ::= \"a\"{3,2}", "n < m");
  expect_error("root ::= * \"a\"", "unexpected character '*'");
  expect_error("root ::= (\"a\" | *)", "unexpected character '*'");
}

TEST(GrammarGbnf, LiteralQuotingRoundTrips) {
  const std::string text = "say \"hi\"\\\n\ttab\x01 ✓";
  auto g = compile("root ::= " + gbnf_literal(text));
  ASSERT_TRUE(g);
  EXPECT_TRUE(grammar_matches(*g, text));
  EXPECT_FALSE(grammar_matches(*g, text + " "));
}

}  // namespace
}  // namespace tf::grammar
