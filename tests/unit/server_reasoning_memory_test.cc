// ReasoningMemory (src/server/reasoning_memory.h): a reply's reasoning comes back to the same
// conversation only, whatever whitespace or argument spacing the client changed.
#include <gtest/gtest.h>

#include "server/reasoning_memory.h"

namespace tf::server {
namespace {

Json conversation() {
  return Json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Weather in Oslo?"}}});
}

Json reply(const Json& content, const std::string& reasoning, Json calls = nullptr) {
  Json m = {{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.is_null()) m["tool_calls"] = std::move(calls);
  return m;
}

Json call(const std::string& name, const std::string& args) {
  return Json::array(
      {{{"id", "call_1"}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}}});
}

// The conversation, then `sent` as the client sends the reply back, then a new user turn.
Json next_turn(Json sent) {
  Json m = conversation();
  m.push_back(std::move(sent));
  m.push_back({{"role", "user"}, {"content", "Thanks."}});
  return m;
}

void remember(ReasoningMemory& memory, const Json& reply_message, const std::string& salt = "") {
  Json m = conversation();
  m.push_back(reply_message);
  memory.remember(m, salt);
}

TEST(ReasoningMemory, GivesBackDroppedReasoningToTheSameConversation) {
  ReasoningMemory memory(1 << 20);
  remember(memory, reply("It is sunny.", "The user asks about Oslo."));
  EXPECT_EQ(memory.entries(), 1);
  for (const Json& sent :
       {reply("It is sunny.", ""), reply("  It is sunny.\n", ""),
        Json{{"role", "assistant"}, {"content", "It is sunny."}, {"reasoning_content", nullptr}},
        Json{{"role", "assistant"}, {"content", "It is sunny."}, {"reasoning_content", ""}},
        Json{{"role", "assistant"},
             {"content", Json::array({{{"type", "text"}, {"text", "It is sunny."}}})}}}) {
    Json m = next_turn(sent);
    EXPECT_EQ(memory.restore(m, ""), 1) << sent.dump();
    EXPECT_EQ(m[2]["reasoning_content"], "The user asks about Oslo.");
    EXPECT_EQ(m[3]["content"], "Thanks.");
  }
}

TEST(ReasoningMemory, LeavesOtherConversationsAndGivenReasoningAlone) {
  ReasoningMemory memory(1 << 20);
  remember(memory, reply("It is sunny.", "The user asks about Oslo."), "alice");
  Json other_salt = next_turn(reply("It is sunny.", ""));
  EXPECT_EQ(memory.restore(other_salt, "bob"), 0);
  EXPECT_EQ(memory.restore(other_salt, ""), 0);
  EXPECT_FALSE(other_salt[2].contains("reasoning_content"));
  Json other_text = next_turn(reply("It is rainy.", ""));
  EXPECT_EQ(memory.restore(other_text, "alice"), 0);
  Json other_before = next_turn(reply("It is sunny.", ""));
  other_before[1]["content"] = "Weather in Bergen?";
  EXPECT_EQ(memory.restore(other_before, "alice"), 0);
  Json own = next_turn(reply("It is sunny.", "My own."));
  EXPECT_EQ(memory.restore(own, "alice"), 0);
  EXPECT_EQ(own[2]["reasoning_content"], "My own.");
  Json alias = next_turn({{"role", "assistant"}, {"content", "It is sunny."}, {"reasoning", "Alias."}});
  EXPECT_EQ(memory.restore(alias, "alice"), 0);
  Json inline_think = next_turn(reply("<think>Inline.</think>It is sunny.", ""));
  EXPECT_EQ(memory.restore(inline_think, "alice"), 0);
  Json same = next_turn(reply("It is sunny.", ""));
  EXPECT_EQ(memory.restore(same, "alice"), 1);
}

TEST(ReasoningMemory, ToolCallsMatchByNameAndArgumentsAsRendered) {
  ReasoningMemory memory(1 << 20);
  remember(memory, reply(nullptr, "Call the tool.", call("weather", R"({"city": "Oslo", "days": 2})")));
  Json respaced = next_turn(reply("", "", call("weather", R"({"city":"Oslo","days":2})")));
  EXPECT_EQ(memory.restore(respaced, ""), 1);
  EXPECT_EQ(respaced[2]["reasoning_content"], "Call the tool.");
  Json as_object = next_turn(reply(nullptr, "", call("weather", "")));
  as_object[2]["tool_calls"][0]["function"]["arguments"] = Json{{"city", "Oslo"}, {"days", 2}};
  EXPECT_EQ(memory.restore(as_object, ""), 1);
  Json other_args = next_turn(reply(nullptr, "", call("weather", R"({"city": "Bergen", "days": 2})")));
  EXPECT_EQ(memory.restore(other_args, ""), 0);
  Json other_name = next_turn(reply(nullptr, "", call("forecast", R"({"city": "Oslo", "days": 2})")));
  EXPECT_EQ(memory.restore(other_name, ""), 0);
  Json no_call = next_turn(reply(nullptr, ""));
  EXPECT_EQ(memory.restore(no_call, ""), 0);
}

// A chat of three turns whose client drops every reasoning: each reply is keyed by what came
// before it without reasoning, so both come back.
TEST(ReasoningMemory, EveryEarlierTurnComesBack) {
  ReasoningMemory memory(1 << 20);
  remember(memory, reply("It is sunny.", "First thought."));
  Json turn2 = next_turn(reply("It is sunny.", ""));
  ASSERT_EQ(memory.restore(turn2, ""), 1);
  turn2.push_back(reply("You're welcome.", "Second thought."));
  memory.remember(turn2, "");
  Json turn3 = next_turn(reply("It is sunny.", ""));
  turn3.push_back(reply("You're welcome.", ""));
  turn3.push_back({{"role", "user"}, {"content", "Bye."}});
  EXPECT_EQ(memory.restore(turn3, ""), 2);
  EXPECT_EQ(turn3[2]["reasoning_content"], "First thought.");
  EXPECT_EQ(turn3[4]["reasoning_content"], "Second thought.");
}

TEST(ReasoningMemory, StaysWithinItsBoundOldestFirst) {
  ReasoningMemory memory(1000);
  for (int i = 0; i < 6; ++i)
    remember(memory, reply("Reply " + std::to_string(i), std::string(200, 'a' + i)));
  EXPECT_LE(memory.bytes(), 1000);
  EXPECT_LT(memory.entries(), 6);
  Json newest = next_turn(reply("Reply 5", ""));
  EXPECT_EQ(memory.restore(newest, ""), 1);
  Json oldest = next_turn(reply("Reply 0", ""));
  EXPECT_EQ(memory.restore(oldest, ""), 0);
  // Reasoning larger than the whole bound is not kept; a memory of 0 bytes keeps nothing.
  remember(memory, reply("Huge", std::string(5000, 'z')));
  Json huge = next_turn(reply("Huge", ""));
  EXPECT_EQ(memory.restore(huge, ""), 0);
  ReasoningMemory off(0);
  remember(off, reply("It is sunny.", "Thought."));
  Json m = next_turn(reply("It is sunny.", ""));
  EXPECT_EQ(off.restore(m, ""), 0);
  EXPECT_EQ(off.entries(), 0);
}

}  // namespace
}  // namespace tf::server
