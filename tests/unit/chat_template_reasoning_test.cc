// ReasoningParser: the rules of /work/shared/spec/api.md §6 ("Reasoning parser"), and the same
// result however the text is cut into deltas (one byte, a few bytes, random bursts).
#include <gtest/gtest.h>

#include <random>

#include "text/reasoning_parser.h"

namespace {

using tf::ReasoningParser;

struct Split {
  std::string reasoning;
  std::string content;
};

// Feeds `text` in pieces of the given sizes (cycled) and checks each delta ends on a UTF-8 boundary.
Split stream(const std::string& text, bool open, const std::vector<size_t>& sizes) {
  ReasoningParser p(open);
  Split s;
  size_t pos = 0, k = 0;
  auto take = [&](const tf::ReasoningDelta& d) {
    EXPECT_EQ(tf::incomplete_utf8_suffix(d.reasoning), 0u);
    EXPECT_EQ(tf::incomplete_utf8_suffix(d.content), 0u);
    s.reasoning += d.reasoning;
    s.content += d.content;
  };
  while (pos < text.size()) {
    size_t n = std::min(sizes[k++ % sizes.size()], text.size() - pos);
    take(p.feed(std::string_view(text).substr(pos, n)));
    pos += n;
  }
  take(p.finish());
  return s;
}

TEST(ReasoningParser, PromptOpenedThink) {
  auto r = ReasoningParser::parse("Let me think.</think>The answer is 4.", true);
  EXPECT_EQ(r.reasoning, "Let me think.");
  EXPECT_EQ(r.content, "The answer is 4.");
}

TEST(ReasoningParser, LengthCutMidReasoningIsAllReasoning) {
  auto r = ReasoningParser::parse("still thinking about", true);
  EXPECT_EQ(r.reasoning, "still thinking about");
  EXPECT_FALSE(r.content.has_value());
}

TEST(ReasoningParser, RepeatedOpeningTagIsDropped) {
  auto r = ReasoningParser::parse("<think>abc</think>x", true);
  EXPECT_EQ(r.reasoning, "abc");
  EXPECT_EQ(r.content, "x");
}

TEST(ReasoningParser, ThinkingOffIsAllContent) {
  auto r = ReasoningParser::parse("Just the answer, with </think> inside.", false);
  EXPECT_FALSE(r.reasoning.has_value());
  EXPECT_EQ(r.content, "Just the answer, with </think> inside.");
}

TEST(ReasoningParser, OutputThatOpensThinkItself) {
  auto r = ReasoningParser::parse("\n<think>plan</think>done", false);
  EXPECT_EQ(r.reasoning, "plan");
  EXPECT_EQ(r.content, "done");
}

TEST(ReasoningParser, EmptyReasoningAndBlankContentAreNull) {
  auto r = ReasoningParser::parse("</think>\n  ", true);
  EXPECT_FALSE(r.reasoning.has_value());
  EXPECT_FALSE(r.content.has_value());
}

TEST(ReasoningParser, ToolCallEndsReasoningAndStaysContent) {
  auto r = ReasoningParser::parse(
      "I'll call it<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", true);
  EXPECT_EQ(r.reasoning, "I'll call it");
  EXPECT_EQ(r.content, "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>");
}

TEST(ReasoningParser, PartialEndTagIsHeldBack) {
  ReasoningParser p(true);
  auto a = p.feed("abc</thi");
  EXPECT_EQ(a.reasoning, "abc");
  EXPECT_EQ(a.content, "");
  EXPECT_TRUE(p.in_reasoning());
  auto b = p.feed("nk>x");
  EXPECT_EQ(b.reasoning, "");
  EXPECT_EQ(b.content, "x");
  EXPECT_TRUE(p.reasoning_ended());
  // A '<' that turns out not to start a tag is released.
  ReasoningParser q(true);
  EXPECT_EQ(q.feed("a<").reasoning, "a");
  EXPECT_EQ(q.feed("b").reasoning, "<b");
  EXPECT_EQ(q.finish().reasoning, "");
  ReasoningParser f(true);
  EXPECT_EQ(f.feed("x</th").reasoning, "x");
  EXPECT_EQ(f.finish().reasoning, "</th");
}

TEST(ReasoningParser, SameResultForEverySplit) {
  const std::vector<std::pair<std::string, bool>> texts = {
      {"Grüße 🇨🇭 denken…</think>Antwort: 你好", true},
      {"<think>a</think>b</think>c", true},
      {"  <think>x\n</think>\n\ny", false},
      {"plain answer <think>not reasoning</think>", false},
      {"r<tool_call>get<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>", true},
      {"<thin", false},
      {"</thin", true},
      {"", true},
  };
  std::mt19937 rng(1234);
  for (const auto& [text, open] : texts) {
    SCOPED_TRACE(text);
    auto whole = ReasoningParser::parse(text, open);
    std::vector<std::vector<size_t>> splits = {{1}, {2}, {3}, {5, 1}, {text.size() + 1}};
    for (int r = 0; r < 20; ++r) {
      std::vector<size_t> sizes;
      for (int i = 0; i < 8; ++i) sizes.push_back(1 + rng() % 7);
      splits.push_back(sizes);
    }
    for (const auto& sizes : splits) {
      Split s = stream(text, open, sizes);
      EXPECT_EQ(s.reasoning, whole.reasoning.value_or(""));
      std::string content = whole.content.value_or("");
      if (!whole.content) {  // blank content is reported as null but still streamed as text
        EXPECT_TRUE(s.content.find_first_not_of(" \n\t\r") == std::string::npos);
      } else {
        EXPECT_EQ(s.content, content);
      }
    }
  }
}

TEST(ReasoningParser, HelperFunctions) {
  EXPECT_EQ(tf::partial_tag_suffix("abc</th", "</think>"), 4u);
  EXPECT_EQ(tf::partial_tag_suffix("abc", "</think>"), 0u);
  EXPECT_EQ(tf::partial_tag_suffix("<", "<tool_call>"), 1u);
  EXPECT_EQ(tf::incomplete_utf8_suffix("a\xC3"), 1u);
  EXPECT_EQ(tf::incomplete_utf8_suffix("a\xC3\xBC"), 0u);
  EXPECT_EQ(tf::incomplete_utf8_suffix("\xF0\x9F\x87"), 3u);
  EXPECT_EQ(tf::incomplete_utf8_suffix(""), 0u);
}

}  // namespace
