// The tool-call grammar (engine/tool_call_grammar.h): which texts it accepts, checked with
// the grammar matcher, and that what it accepts parses (text/tool_call_parser.h) into the
// calls it spells.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine/tool_call_grammar.h"
#include "sampling/grammar/gbnf_writer.h"
#include "sampling/grammar/grammar.h"
#include "sampling/grammar/grammar_budget.h"
#include "sampling/grammar/grammar_matcher.h"
#include "text/tool_call_parser.h"

namespace tf::engine {
namespace {

using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "units": {"enum": ["c", "f"]}, "note": {"type": ["string", "null"]},
                   "odd": {"type": "integer", "multipleOf": 3},
                   "mode": {"type": "string", "enum": ["fast", "a<b"]}, "tag": {"type": "string", "const": "x"}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
  {"type": "function", "function": {"name": "free", "description": "no parameters at all"}}
])");

std::shared_ptr<const grammar::Grammar> compiled(const ToolCallGrammarOptions& o) {
  auto text = tool_call_gbnf(kTools, o);
  EXPECT_TRUE(text.has_value()) << text.status().to_string();
  if (!text) return nullptr;
  auto g = grammar::compile_gbnf(*text);
  EXPECT_TRUE(g.has_value()) << g.status().to_string() << "\n" << *text;
  return g ? *g : nullptr;
}

// Whether the whole text is a sentence of the grammar.
bool accepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::GrammarMatcher m(g);
  return m.accept(text) && m.is_complete();
}

const std::string kWeather =
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris <b> </arg_val</arg_value>"
    "<arg_key>days</arg_key><arg_value>3</arg_value><arg_key>units</arg_key><arg_value>\"f\"</arg_value>"
    "</tool_call>";

TEST(ToolCallGrammar, RequiredAcceptsCallsOfTheDeclaredFunctions) {
  auto g = compiled({});
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(g, kWeather));
  EXPECT_TRUE(accepts(g, kWeather + "\n<tool_call>get_time</tool_call>"));  // parallel calls
  EXPECT_FALSE(accepts(g, "\n" + kWeather));                                 // the answer starts with a call
  EXPECT_TRUE(accepts(g, "<tool_call>get_time\n</tool_call>"));                   // GLM-4.5 layout
  EXPECT_TRUE(accepts(g, "<tool_call>free<arg_key>any key</arg_key><arg_value>x</arg_value></tool_call>"));
  // A string parameter takes raw text, a JSON one a JSON value (the schema's enum, integer).
  const std::string city = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value>";
  EXPECT_TRUE(accepts(g, city + "<arg_key>note</arg_key><arg_value></arg_value></tool_call>"));
  // A schema json_schema_gbnf refuses (multipleOf) still takes a JSON value.
  EXPECT_TRUE(accepts(g, city + "<arg_key>odd</arg_key><arg_value>[1]</arg_value></tool_call>"));
  // A string parameter that lists its values takes one of them, written raw.
  EXPECT_TRUE(accepts(g, city + "<arg_key>mode</arg_key><arg_value>a<b</arg_value></tool_call>"));
  EXPECT_TRUE(accepts(g, city + "<arg_key>mode</arg_key><arg_value>fast</arg_value>"
                                 "<arg_key>tag</arg_key><arg_value>x</arg_value></tool_call>"));
  EXPECT_FALSE(accepts(g, city + "<arg_key>mode</arg_key><arg_value>\"fast\"</arg_value></tool_call>"));
  EXPECT_FALSE(accepts(g, city + "<arg_key>mode</arg_key><arg_value>slow</arg_value></tool_call>"));
  EXPECT_FALSE(accepts(g, city + "<arg_key>tag</arg_key><arg_value>y</arg_value></tool_call>"));
  // Parameters come in declaration order, each at most once, the required ones always.
  EXPECT_FALSE(accepts(g, "<tool_call>get_weather<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"));
  EXPECT_FALSE(accepts(g, city + "<arg_key>units</arg_key><arg_value>\"c\"</arg_value>"
                                 "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"));
  EXPECT_FALSE(accepts(g, city + "<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"));

  EXPECT_FALSE(accepts(g, ""));                                                        // no call
  EXPECT_FALSE(accepts(g, "Sure! " + kWeather));                                       // text first
  EXPECT_FALSE(accepts(g, "<tool_call>get_wether</tool_call>"));                       // unknown function
  EXPECT_FALSE(accepts(g, city + "<arg_key>town</arg_key><arg_value>x</arg_value></tool_call>"));
  EXPECT_FALSE(accepts(g, city + "<arg_key>days</arg_key><arg_value>three</arg_value></tool_call>"));
  EXPECT_FALSE(accepts(g, city + "<arg_key>units</arg_key><arg_value>\"k\"</arg_value></tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>get_time<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>"));
  EXPECT_FALSE(accepts(g, kWeather.substr(0, kWeather.size() - 1)));                   // unfinished
  EXPECT_FALSE(accepts(g, kWeather + " done"));                                        // text after
}

TEST(ToolCallGrammar, OneCallWhenNamedOrNotParallel) {
  ToolCallGrammarOptions named;
  named.function = "get_time";
  auto g = compiled(named);
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(g, "<tool_call>get_time</tool_call>"));
  EXPECT_FALSE(accepts(g, kWeather));
  EXPECT_FALSE(accepts(g, "<tool_call>get_time</tool_call><tool_call>get_time</tool_call>"));
  // Nothing may follow the named call: the answer is over once it is closed.
  grammar::GrammarMatcher m(g);
  ASSERT_TRUE(m.accept("<tool_call>get_time</tool_call>"));
  EXPECT_FALSE(m.can_continue());

  ToolCallGrammarOptions single;
  single.parallel = false;
  auto s = compiled(single);
  ASSERT_TRUE(s);
  EXPECT_TRUE(accepts(s, kWeather));
  EXPECT_FALSE(accepts(s, kWeather + kWeather));
}

TEST(ToolCallGrammar, AcceptedTextParsesIntoTheCalls) {
  auto g = compiled({});
  ASSERT_TRUE(g);
  const std::string text = kWeather + "<tool_call>get_time</tool_call>";
  ASSERT_TRUE(accepts(g, text));
  GlmToolCallParser parser(kTools);
  ToolCallParseResult r = parser.parse(text);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(r.calls[0].arguments), json::parse(R"({"city": "Paris <b> </arg_val", "days": 3, "units": "f"})"));
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_FALSE(r.content.has_value());
}

TEST(ToolCallGrammar, RefusesWhatCannotBeCalled) {
  ToolCallGrammarOptions named;
  named.function = "nope";
  auto missing = tool_call_gbnf(kTools, named);
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
  EXPECT_FALSE(tool_call_gbnf(json::array(), {}).has_value());
  EXPECT_FALSE(tool_call_gbnf(json(), {}).has_value());
  EXPECT_FALSE(tool_call_gbnf(json::parse(R"([{"type": "function", "function": {}}])"), {}).has_value());
}

// A parameter schema the grammar cannot enforce (here multipleOf) takes any JSON value, unless the
// function is strict: then the call grammar is refused, naming the parameter and the keyword.
TEST(ToolCallGrammar, AStrictFunctionsUnenforceableSchemaIsRefused) {
  const json loose =
      json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer", "multipleOf": 7}}, "required": ["a"]}}}])");
  EXPECT_TRUE(tool_call_gbnf(loose, {}).has_value());
  json strict = loose;
  strict[0]["function"]["strict"] = true;
  auto refused = tool_call_gbnf(strict, {});
  ASSERT_FALSE(refused.has_value());
  const std::string m = refused.status().message();
  EXPECT_EQ(m.rfind("'tools': ", 0), 0u) << m;
  EXPECT_NE(m.find("'a'"), std::string::npos) << m;
  EXPECT_NE(m.find("multipleOf"), std::string::npos) << m;
}

// Each tool's schema converts within the grammar budget (grammar_budget.h), but 60 of them
// made 50 MB of grammar text; and a schema past the budget silently took any JSON value.
TEST(ToolCallGrammar, ToolSetsPastTheGrammarBudgetAreRefused) {
  const json pattern_param = {{"type", "object"},
                              {"properties", {{"s", {{"type", "string"}, {"pattern", "^a{0,9999}$"}}}}}};
  const auto tool = [](const std::string& name, const json& properties) {
    return json{
        {"type", "function"},
        {"function", {{"name", name}, {"parameters", {{"type", "object"}, {"properties", properties}}}}}};
  };
  json many = json::array();
  for (int i = 0; i < 60; ++i) many.push_back(tool("f" + std::to_string(i), {{"x", pattern_param}}));
  auto text = tool_call_gbnf(many, {});
  ASSERT_FALSE(text.has_value()) << text->size() << " bytes";
  EXPECT_TRUE(grammar::is_grammar_too_large(text.status())) << text.status().message();

  json properties = json::object();
  for (int i = 0; i < 100; ++i) properties["p" + std::to_string(i)] = pattern_param;
  auto one = tool_call_gbnf(
      json::array({tool("big", {{"x", {{"type", "object"}, {"properties", properties}}}})}), {});
  ASSERT_FALSE(one.has_value()) << one->size() << " bytes";
  EXPECT_TRUE(grammar::is_grammar_too_large(one.status())) << one.status().message();

  // A few such tools are fine.
  many.erase(many.begin() + 3, many.end());
  auto few = tool_call_gbnf(many, {});
  ASSERT_TRUE(few.has_value()) << few.status().message();
  EXPECT_TRUE(grammar::compile_gbnf(*few).has_value());
}

TEST(GbnfWriter, PrefixRulesRenamesRulesOnly) {
  const std::string g = "root ::= item-list \"root\" [a-z{] x{2,3} # root comment\nitem-list ::= \"\\\"q\" | [\\]root]\nx ::= \"x\"\n";
  const std::string p = grammar::prefix_gbnf_rules(g, "p-");
  EXPECT_EQ(p, "p-root ::= p-item-list \"root\" [a-z{] p-x{2,3} # root comment\np-item-list ::= \"\\\"q\" | [\\]root]\np-x ::= \"x\"\n");
  auto compiled = grammar::compile_gbnf(p + "root ::= p-root\n");
  EXPECT_TRUE(compiled.has_value()) << compiled.status().to_string();
}

}  // namespace
}  // namespace tf::engine
