// grammar_budget.h: grammars whose size one request can multiply (repetitions, schema
// lengths, patterns, long names) are refused with "grammar too large" before they take
// the host's memory or time; the grammars real requests use still compile.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "sampling/grammar/grammar.h"
#include "sampling/grammar/grammar_budget.h"
#include "sampling/grammar/json_schema_gbnf.h"
#include "sampling/grammar/regex_gbnf.h"

namespace tf::grammar {
namespace {

void expect_too_large(const Status& status) {
  EXPECT_TRUE(is_grammar_too_large(status)) << status.to_string();
  EXPECT_NE(status.message().find("limit"), std::string::npos) << status.message();
}

void expect_too_large(const Expected<std::shared_ptr<const Grammar>>& compiled) {
  ASSERT_FALSE(compiled.has_value());
  expect_too_large(compiled.status());
}

std::string repeated(const std::string& piece, int times, const std::string& separator) {
  std::string out;
  for (int i = 0; i < times; ++i) out += (i ? separator : "") + piece;
  return out;
}

// Each "a"{0,10000} is 10,000 generated rules: 200 of them were ~2 million rules (a 1 MB
// body with 70,000 of them asked for tens of gigabytes).
TEST(GrammarBudget, ManyLargeRepetitionsAreRefused) {
  expect_too_large(compile_gbnf("root ::= " + repeated(R"("a"{0,10000})", 200, " ")));
  expect_too_large(compile_gbnf("root ::= " + repeated(R"("a"{10000,})", 2000, " | ")));
  // One repetition at the limit is fine, and so are many small ones.
  EXPECT_TRUE(compile_gbnf(R"(root ::= "a"{0,10000})").has_value());
  EXPECT_TRUE(compile_gbnf("root ::= " + repeated(R"("a"{0,100})", 200, " ")).has_value());
}

// Generated rules were named after their parent: a 20,000-byte rule name repeated {0,10000}
// wrote 10,000 names of 20 KB (200 MB).
TEST(GrammarBudget, GeneratedRuleNamesDoNotCopyLongNames) {
  const std::string name(20000, 'n');
  auto compiled = compile_gbnf("root ::= " + name + "\n" + name + R"( ::= "a"{0,10000})");
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  size_t longest = 0;
  for (size_t r = 0; r < (*compiled)->rule_names.size(); ++r)
    if (r != (*compiled)->root && (*compiled)->rule_names[r] != name)
      longest = std::max(longest, (*compiled)->rule_names[r].size());
  EXPECT_LE(longest, 80u);
  EXPECT_TRUE(grammar_matches(**compiled, std::string(10000, 'a')));
}

// A literal parsed into a tree node and a class per character: ~200 bytes each, so a
// 96 MiB body (the HTTP limit) asked for ~20 GB. Now a literal costs ~20 bytes a character.
TEST(GrammarBudget, HugeLiteralIsRefused) {
  expect_too_large(compile_gbnf("root ::= \"" + std::string(4 << 20, 'a') + "\""));
  auto compiled = compile_gbnf("root ::= \"" + std::string(1 << 20, 'a') + "\"");
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  EXPECT_EQ((*compiled)->classes.size(), 1u);  // one class for all the a's
}

// The regex converter allows a million items (a{0,9999} 99 times): a million rules.
TEST(GrammarBudget, RegexAlternationOfLargeRepetitionsIsRefused) {
  auto gbnf = regex_to_gbnf(repeated("a{0,9999}", 99, "|"));
  ASSERT_TRUE(gbnf.has_value()) << gbnf.status().message();
  expect_too_large(compile_gbnf(*gbnf));
}

TEST(GrammarBudget, SchemaLengthsAddUpAndAreRefused) {
  const std::string schema =
      R"({"anyOf": [)" + repeated(R"({"type": "string", "maxLength": 9999})", 200, ", ") + "]}";
  auto gbnf = json_schema_to_gbnf(schema);
  ASSERT_TRUE(gbnf.has_value()) << gbnf.status().message();
  expect_too_large(compile_gbnf(*gbnf));
  auto one = json_schema_to_gbnf(R"({"type": "array", "items": {"type": "string", "maxLength": 10000},
                                     "maxItems": 10000})");
  ASSERT_TRUE(one.has_value());
  EXPECT_TRUE(compile_gbnf(*one).has_value());
}

// Every pattern compiles within the budget, but each is written back as GBNF text: 100
// patterns of 10,000 rules each were 50 MB of text before the compiler saw any of it.
TEST(GrammarBudget, ManyLargePatternsAreRefusedWhileConverting) {
  std::string schema = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 100; ++i)
    schema += (i ? ", " : "") + std::string("\"p") + std::to_string(i) +
              R"(": {"type": "string", "pattern": "^a{0,9999}$"})";
  schema += "}}";
  auto gbnf = json_schema_to_gbnf(schema);
  ASSERT_FALSE(gbnf.has_value()) << "converted to " << gbnf->size() << " bytes";
  expect_too_large(gbnf.status());
}

// Rule names follow the schema's path: 100 levels of 2,000-byte property names made names
// of up to 200 KB, each written twice.
TEST(GrammarBudget, SchemaRuleNamesStayShortInDeepSchemas) {
  const std::string key(2000, 'k');
  std::string schema = R"({"type": "string"})";
  for (int i = 0; i < 100; ++i)
    schema = R"({"type": "object", "properties": {")" + key + R"(": )" + schema + "}}";
  auto gbnf = json_schema_to_gbnf(schema);
  ASSERT_TRUE(gbnf.has_value()) << gbnf.status().message();
  EXPECT_LT(gbnf->size(), size_t{1} << 20);
  size_t line_start = 0, longest_name = 0;
  while (line_start < gbnf->size()) {
    const size_t end = gbnf->find(" ::= ", line_start);
    if (end == std::string::npos) break;
    longest_name = std::max(longest_name, end - line_start);
    line_start = gbnf->find('\n', end) + 1;
  }
  EXPECT_LE(longest_name, 80u);
  EXPECT_TRUE(compile_gbnf(*gbnf).has_value());
}

// Property names that differ only in punctuation share a rule-name base: each new rule
// tried every suffix taken before it (20,000 properties took minutes).
TEST(GrammarBudget, ManyPropertiesWithTheSameRuleNameConvertInLinearTime) {
  const std::string punctuation = "!#$%&()*+,.:;<=>?";
  std::string schema = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 20000; ++i) {
    std::string key = "k";
    for (int v = i, d = 0; d < 4; ++d, v /= static_cast<int>(punctuation.size()))
      key += punctuation[static_cast<size_t>(v) % punctuation.size()];
    schema += (i ? ", \"" : "\"") + key + R"(": {"type": "integer"})";
  }
  schema += "}}";
  const auto start = std::chrono::steady_clock::now();
  auto gbnf = json_schema_to_gbnf(schema);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(gbnf.has_value()) << gbnf.status().message();
  EXPECT_LT(seconds, 5.0);
}

// Which rules derive "" was a fixpoint of passes over every rule, one pass per link of a
// chain of nullable rules listed first to last: 50,000 of them took seconds. Linear now;
// the chain still counts as nullable (the left recursion through it is found).
TEST(GrammarBudget, LongChainsOfNullableRulesCompileInLinearTime) {
  std::string chain;
  for (int i = 0; i < 80000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  chain += "r80000 ::= \"\"\n";
  const auto start = std::chrono::steady_clock::now();
  auto compiled = compile_gbnf("root ::= \"x\" r0\n" + chain);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  EXPECT_LT(seconds, 2.0);
  auto recursive = compile_gbnf("root ::= r0 root \"x\" | \"y\"\n" + chain);
  ASSERT_FALSE(recursive.has_value());
  EXPECT_NE(recursive.status().message().find("left-recursive"), std::string::npos)
      << recursive.status().message();
}

}  // namespace
}  // namespace tf::grammar
