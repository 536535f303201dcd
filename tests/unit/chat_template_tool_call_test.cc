// GlmToolCallParser: GLM's <tool_call> format (api.md §6 "Tool parser"), schema typing, and streaming
// that gives the non-streaming result for every split. The round-trip test renders calls with the
// official GLM-5.3-Flash template and parses them back.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "text/chat_template.h"
#include "text/tool_call_parser.h"

namespace {

using nlohmann::json;
using tf::GlmToolCallParser;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "note": {"type": ["string", "null"]},
      "code": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
      "query": {"type": "string"}, "filters": {"type": "object"}, "limit": {"type": "number"},
      "safe": {"type": "boolean"}}}}},
  {"type": "function", "name": "flat_tool", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}
])");

struct Streamed {
  std::string content;
  std::vector<std::string> names;
  std::vector<std::string> arguments;
};

Streamed stream(const std::string& text, const std::vector<size_t>& sizes) {
  GlmToolCallParser p(kTools);
  Streamed s;
  auto take = [&](const tf::ToolParserDelta& d) {
    s.content += d.content;
    for (const auto& c : d.calls) {
      if (s.names.size() <= c.index) {
        s.names.resize(c.index + 1);
        s.arguments.resize(c.index + 1);
      }
      if (c.name) {
        EXPECT_TRUE(s.names[c.index].empty()) << "name sent twice for call " << c.index;
        s.names[c.index] = *c.name;
      }
      EXPECT_FALSE(s.names[c.index].empty()) << "arguments before the name";
      s.arguments[c.index] += c.arguments;
    }
  };
  size_t pos = 0, k = 0;
  while (pos < text.size()) {
    size_t n = std::min(sizes[k++ % sizes.size()], text.size() - pos);
    take(p.feed(std::string_view(text).substr(pos, n)));
    pos += n;
  }
  take(p.finish());
  return s;
}

TEST(GlmToolCallParser, SpecExample) {
  GlmToolCallParser p(kTools);
  auto r = p.parse(
      "Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
      "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>");
  EXPECT_EQ(r.content, "Checking.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "Paris", "days": 2})");
}

TEST(GlmToolCallParser, SchemaTyping) {
  GlmToolCallParser p(kTools);
  auto r = p.parse(
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value> 42 </arg_value><arg_key>days</arg_key>"
      "<arg_value> 3 </arg_value><arg_key>note</arg_key><arg_value>null</arg_value><arg_key>code</arg_key>"
      "<arg_value>007</arg_value></tool_call>"
      "<tool_call>search<arg_key>query</arg_key><arg_value>ß \"q\"\n</arg_value><arg_key>filters</arg_key>"
      "<arg_value>{\"year\":2024,\"tags\":[\"a\",\"ü\"]}</arg_value><arg_key>limit</arg_key><arg_value>2.50</"
      "arg_value>"
      "<arg_key>safe</arg_key><arg_value>True</arg_value><arg_key>extra</arg_key><arg_value>not "
      "json</arg_value>"
      "</tool_call>");
  EXPECT_FALSE(r.content.has_value());
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city": " 42 ", "days": 3, "note": "null", "code": "007"})");
  EXPECT_EQ(r.calls[1].arguments,
            "{\"query\": \"ß \\\"q\\\"\\n\", \"filters\": {\"year\": 2024, \"tags\": [\"a\", \"ü\"]}, "
            "\"limit\": 2.5, "
            "\"safe\": true, \"extra\": \"not json\"}");
}

// Non-string values are written as vLLM's parser writes them, json.dumps(json.loads(value)): Python
// keeps integers of any size exact, so an id the model wrote reaches the client digit for digit (it
// used to come back as 1.2345678901234568e+29); a repeated key keeps its first place, its last value.
TEST(GlmToolCallParser, IntegersOfAnySizeStayExact) {
  GlmToolCallParser p(kTools);
  auto r = p.parse(
      "<tool_call>search<arg_key>limit</arg_key><arg_value>123456789012345678901234567890</arg_value>"
      "<arg_key>filters</arg_key><arg_value>{\"ids\": [18446744073709551615, -9223372036854775809, "
      "9223372036854775808, -0, 1.0, 1E2], \"a\": 1, \"b\": 0, \"a\": 2}</arg_value></tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments,
            R"({"limit": 123456789012345678901234567890, "filters": {"ids": [18446744073709551615, )"
            R"(-9223372036854775809, 9223372036854775808, 0, 1.0, 100.0], "a": 2, "b": 0}})");
}

TEST(GlmToolCallParser, FormatsAndEdgeCases) {
  GlmToolCallParser p(kTools);
  // Zero arguments, GLM-4.5 newlines, flat (Responses-shape) tools, unknown tools.
  auto r = p.parse(
      "<tool_call>get_time</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
      "<arg_value>Oslo</arg_value>\n</tool_call><tool_call>flat_tool<arg_key>text</arg_key>"
      "<arg_value>7</arg_value></tool_call><tool_call>mystery<arg_key>n</arg_key><arg_value>[1,2]"
      "</arg_value></tool_call>");
  ASSERT_EQ(r.calls.size(), 4u);
  EXPECT_EQ(r.calls[0].name, "get_time");
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.calls[1].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(r.calls[2].arguments, R"({"text": "7"})");
  EXPECT_EQ(r.calls[3].arguments, R"({"n": [1, 2]})");
  // No call, or a call cut off before </tool_call>: no calls; the content stops at <tool_call>.
  auto none = p.parse("just text");
  EXPECT_EQ(none.content, "just text");
  EXPECT_TRUE(none.calls.empty());
  auto cut = p.parse("x <tool_call>get_weather<arg_key>city</arg_key><arg_value>Par");
  EXPECT_EQ(cut.content, "x ");
  EXPECT_TRUE(cut.calls.empty());
}

TEST(GlmToolCallParser, StreamingEmitsNameOnceThenGrowingStrings) {
  GlmToolCallParser p(kTools);
  auto a = p.feed("Sure. <tool_c");
  EXPECT_EQ(a.content, "Sure. ");
  EXPECT_TRUE(a.calls.empty());
  auto b = p.feed("all>get_weather<arg_key>ci");
  ASSERT_EQ(b.calls.size(), 1u);
  EXPECT_EQ(b.calls[0].name, "get_weather");
  EXPECT_EQ(b.calls[0].arguments, "");
  auto c = p.feed("ty</arg_key><arg_value>Pa");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_FALSE(c.calls[0].name.has_value());
  EXPECT_EQ(c.calls[0].arguments, R"({"city": "Pa)");
  auto d = p.feed("ris</arg_value><arg_key>days</arg_key><arg_value>1");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, R"(ris")");  // the integer is held until complete
  auto e = p.feed("0</arg_value></tool_call>");
  ASSERT_EQ(e.calls.size(), 1u);
  EXPECT_EQ(e.calls[0].arguments, R"(, "days": 10})");
  EXPECT_EQ(p.completed_calls(), 1u);
  EXPECT_TRUE(p.finish().calls.empty());
}

TEST(GlmToolCallParser, StreamingEqualsNonStreamingForEverySplit) {
  const std::vector<std::string> texts = {
      "Let me check 🌦️.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Zürich "
      "</arg_value><arg_key>days"
      "</arg_key><arg_value>3</arg_value></tool_call><tool_call>get_time</tool_call>",
      "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>a</arg_value</arg_value>\n<arg_key>filters</"
      "arg_key>"
      "\n<arg_value>{\"k\": [1, {\"x\": null}]}</arg_value>\n</tool_call>",
      "<tool_call>flat_tool<arg_key>text</arg_key><arg_value><tool_call> nested-looking "
      "</arg_value></tool_call>",
      "no calls at all, but a < sign and <tool",
  };
  std::mt19937 rng(99);
  for (const auto& text : texts) {
    SCOPED_TRACE(text);
    GlmToolCallParser p(kTools);
    auto whole = p.parse(text);
    std::vector<std::vector<size_t>> splits = {{1}, {2}, {3}, {7}, {text.size()}};
    for (int r = 0; r < 30; ++r) {
      std::vector<size_t> sizes;
      for (int i = 0; i < 6; ++i) sizes.push_back(1 + rng() % 9);
      splits.push_back(sizes);
    }
    for (const auto& sizes : splits) {
      Streamed s = stream(text, sizes);
      EXPECT_EQ(s.content, whole.content.value_or(whole.calls.empty() ? text : ""));
      ASSERT_EQ(s.names.size(), whole.calls.size());
      for (size_t i = 0; i < whole.calls.size(); ++i) {
        EXPECT_EQ(s.names[i], whole.calls[i].name);
        EXPECT_EQ(s.arguments[i], whole.calls[i].arguments);
        EXPECT_FALSE(json::parse(s.arguments[i], nullptr, false).is_discarded());
      }
    }
  }
}

// Calls written by the official template parse back to the arguments they were rendered from.
TEST(GlmToolCallParser, RoundTripThroughTheGlmTemplate) {
  const std::string dir = std::string(TF_TEST_DATA_DIR) + "/chat-templates/";
  auto glm = tf::ChatTemplate::load(dir + "zai-org-GLM-5.3-Flash.jinja",
                                    dir + "zai-org-GLM-5.3-Flash.tokenizer_config.json");
  ASSERT_TRUE(glm.has_value()) << glm.status().to_string();
  json args1 = {{"query", "cats \"cute\"\n"},
                {"filters", {{"year", 2024}, {"tags", {"a", "ß"}}}},
                {"limit", 2.5},
                {"safe", true}};
  json args2 = {{"city", "Paris"}, {"days", 2}};
  tf::ChatTemplateRequest r;
  r.add_generation_prompt = false;
  r.tools = nlohmann::ordered_json::parse(kTools.dump());
  r.messages = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", "go"}},
       {{"role", "assistant"},
        {"content", ""},
        {"tool_calls",
         {{{"id", "a"},
           {"type", "function"},
           {"function", {{"name", "search"}, {"arguments", args1.dump()}}}},
          {{"id", "b"},
           {"type", "function"},
           {"function", {{"name", "get_weather"}, {"arguments", args2.dump()}}}}}}}});
  auto prompt = glm->render(r);
  ASSERT_TRUE(prompt.has_value()) << prompt.status().to_string();
  size_t start = prompt->text.rfind("<think></think>");
  ASSERT_NE(start, std::string::npos);
  GlmToolCallParser p(kTools);
  auto parsed = p.parse(prompt->text.substr(start + 15));
  ASSERT_EQ(parsed.calls.size(), 2u) << prompt->text;
  EXPECT_EQ(parsed.calls[0].name, "search");
  EXPECT_EQ(json::parse(parsed.calls[0].arguments), args1);
  EXPECT_EQ(parsed.calls[1].name, "get_weather");
  EXPECT_EQ(json::parse(parsed.calls[1].arguments), args2);
}

}  // namespace
