// The Messages API (anthropic_messages.h): a Messages body becomes the equivalent chat
// request, and the HTTP layer answers with Anthropic's objects, stop reasons and errors.
#include <gtest/gtest.h>

#include "server/anthropic_messages.h"
#include "server_test_util.h"

namespace tf::server::testing {
namespace {

Json messages_body() {
  return Json::parse(R"({
    "model": "claude-sonnet-4-5", "max_tokens": 50, "system": [{"type": "text", "text": "Be brief."}],
    "stop_sequences": ["END", "STOP"], "temperature": 0.5, "top_k": 7,
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Use the tool.", "signature": "sig"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C"}]},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": true},
        {"type": "text", "text": "And tomorrow?"}]}],
    "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "thinking": {"type": "enabled", "budget_tokens": 1024}
  })");
}

TEST(ServerAnthropic, MessagesBecomeTheEquivalentChatRequest) {
  MessagesRequest r = parse_messages_request(messages_body());
  const Json& m = r.chat.chat.messages;
  ASSERT_EQ(m.size(), 6u) << m.dump();
  EXPECT_EQ(m[0], Json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[1]["role"], "user");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["reasoning_content"], "Use the tool.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], Json({{"city", "Paris"}}));
  EXPECT_EQ(m[3], Json({{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "18 C"}}));
  EXPECT_EQ(m[4]["content"], "Error: boom");
  EXPECT_EQ(m[5]["role"], "user");
  EXPECT_EQ(m[5]["content"][0]["text"], "And tomorrow?");
  EXPECT_EQ(r.chat.max_tokens, 50);
  EXPECT_EQ(r.chat.sampling.stop, (std::vector<std::string>{"END", "STOP"}));
  EXPECT_EQ(r.chat.sampling.temperature, 0.5);
  EXPECT_EQ(r.chat.sampling.top_k, 7);
  EXPECT_EQ(r.chat.tool_choice, "required");
  EXPECT_FALSE(r.chat.parallel_tool_calls);
  EXPECT_EQ(r.chat.chat.tools[0]["function"]["parameters"], Json({{"type", "object"}}));
  EXPECT_EQ(r.chat.reasoning_budget, 1024);
  EXPECT_TRUE(r.chat.thinking_enabled);
  EXPECT_TRUE(r.chat.chat.add_generation_prompt);
}

TEST(ServerAnthropic, ThinkingPrefillToolChoiceAndFormat) {
  Json b = {{"max_tokens", 10},
            {"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello,"}}}},
            {"thinking", {{"type", "disabled"}}}};
  MessagesRequest r = parse_messages_request(b);
  EXPECT_FALSE(r.chat.thinking_enabled);
  EXPECT_EQ(r.chat.chat.reasoning_effort, "none");
  EXPECT_TRUE(r.chat.chat.continue_final_message);  // Anthropic's prefill
  EXPECT_FALSE(r.chat.chat.add_generation_prompt);
  b["messages"].erase(1);
  b["thinking"] = {{"type", "adaptive"}};
  b["output_config"] = {{"effort", "low"}, {"format", {{"type", "json_schema"}, {"schema", {{"type", "object"}}}}}};
  b["stream"] = true;
  r = parse_messages_request(b);
  EXPECT_EQ(r.chat.chat.reasoning_effort, "low");
  EXPECT_EQ(r.chat.structured.kind, StructuredOutput::Kind::kJsonSchema);
  EXPECT_TRUE(r.chat.stream);
  b.erase("output_config");
  b["tools"] = {{{"name", "f"}, {"input_schema", {{"type", "object"}}}}};
  b["tool_choice"] = {{"type", "tool"}, {"name", "f"}};
  r = parse_messages_request(b);
  EXPECT_EQ(r.chat.tool_choice, "f");
  EXPECT_TRUE(r.chat.named_tool_choice);
  // count_tokens needs no max_tokens; create does.
  b.erase("max_tokens");
  EXPECT_NO_THROW(parse_messages_request(b, true));
  EXPECT_THROW(parse_messages_request(b), ApiError);
}

TEST(ServerAnthropic, RefusalsNameTheAnthropicField) {
  auto refused = [](Json b, const std::string& param) {
    try {
      parse_messages_request(b);
      ADD_FAILURE() << "accepted: " << b.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.http_status(), 400);
      EXPECT_EQ(e.param().value_or(""), param) << e.what();
    }
  };
  Json ok = {{"max_tokens", 5}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  Json b = ok;
  b["messages"][0]["content"] = {{{"type", "image"}, {"source", {{"type", "base64"}}}}};  // no media_type / data
  refused(b, "messages[0].content[0].source");
  b["messages"][0]["content"] = {{{"type", "image"}, {"source", {{"type", "url"}, {"url", "http://example.com/a.png"}}}}};
  refused(b, "messages[0].content[0].source.url");
  b["messages"][0]["content"] = {{{"type", "document"}, {"source", {{"type", "base64"}}}}};
  refused(b, "messages[0].content[0].type");
  b = ok;
  b["messages"].push_back({{"role", "assistant"}, {"content", {{{"type", "tool_use"}, {"id", "x"}, {"name", "f"}, {"input", "str"}}}}});
  refused(b, "messages[1].content[0].input");
  b = ok;
  b["messages"][0]["role"] = "tool";
  refused(b, "messages[0].role");
  b = ok;
  b["tools"] = {{{"type", "bash_20250124"}, {"name", "bash"}}};
  refused(b, "tools[0].type");
  b = ok;
  b["tool_choice"] = {{"type", "sometimes"}};
  refused(b, "tool_choice.type");
  b = ok;
  b["max_tokens"] = 0;
  refused(b, "max_tokens");
  b = ok;
  b["system"] = 5;
  refused(b, "system");
}

TEST(ServerAnthropic, HttpMessageStopSequenceCountTokensAndErrors) {
  ServerOptions o;
  o.api_key = "secret";
  TestServer ts(o);
  ts.engine.set_text_script("Hmm.", "Sunny", FinishReason::kStop);
  ts.engine.script.back().stop_string = "END";
  auto c = ts.client();
  const Json body = {{"model", "any-name"}, {"max_tokens", 20}, {"stop_sequences", {"END"}},
                     {"messages", {{{"role", "user"}, {"content", "Weather?"}}}}};
  httplib::Headers key = {{"x-api-key", "secret"}, {"anthropic-version", "2023-06-01"}};
  auto res = c.Post("/v1/messages", key, body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json m = Json::parse(res->body);
  EXPECT_EQ(m["model"], "fake-model");
  EXPECT_EQ(m["content"], Json::parse(R"([{"type":"thinking","thinking":"Hmm.","signature":""},{"type":"text","text":"Sunny"}])"));
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "END");
  EXPECT_EQ(ts.engine.requests.at(0).sampling.stop, (std::vector<std::string>{"END"}));

  Json count = body;
  count.erase("max_tokens");
  res = c.Post("/v1/messages/count_tokens", key, count.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(Json::parse(res->body)["input_tokens"], m["usage"]["input_tokens"]);

  // A wrong key: Anthropic's authentication_error here, OpenAI's error object elsewhere.
  res = c.Post("/v1/messages", {{"x-api-key", "wrong"}}, body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(Json::parse(res->body)["error"]["type"], "authentication_error");
  res = c.Post("/v1/chat/completions", {{"x-api-key", "wrong"}}, "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "invalid_api_key");

  // A full queue is overloaded_error (529) with Retry-After; streams say so before any event.
  ts.engine.queue_full = true;
  res = c.Post("/v1/messages", key, body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 529);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  const Json overloaded = {{"type", "error"},
                           {"error", {{"type", "overloaded_error"}, {"message", "the request queue is full (fake)"}}}};
  EXPECT_EQ(Json::parse(res->body), overloaded);
}

// max_tokens past the window is clamped to it; a reply that reaches it says so.
TEST(ServerAnthropic, MaxTokensPastTheWindowStopsAtTheWindow) {
  TestServer ts;
  ts.engine.set_text_script("", "long answer", FinishReason::kLength);
  auto c = ts.client();
  const Json body = {{"max_tokens", 100000}, {"messages", {{{"role", "user"}, {"content", "Go on."}}}}};
  auto res = c.Post("/v1/messages", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json m = Json::parse(res->body);
  EXPECT_EQ(m["stop_reason"], "model_context_window_exceeded");
  const int64_t prompt = m["usage"]["input_tokens"].get<int64_t>() + m["usage"]["cache_read_input_tokens"].get<int64_t>();
  EXPECT_EQ(ts.engine.requests.at(0).sampling.max_tokens, ts.engine.context_length - prompt);
  // Within the window, a length stop is max_tokens as usual.
  Json small = body;
  small["max_tokens"] = 20;
  res = c.Post("/v1/messages", small.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(Json::parse(res->body)["stop_reason"], "max_tokens");
  // A prompt that fills the window is still a 400.
  Json huge = body;
  huge["messages"][0]["content"] = std::string(static_cast<size_t>(ts.engine.context_length) + 10, 'x');
  res = c.Post("/v1/messages", huge.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(Json::parse(res->body)["error"]["type"], "invalid_request_error");
}

TEST(ServerAnthropic, StreamEventsAndAnEngineErrorMidStream) {
  TestServer ts;
  ts.engine.set_text_script("ab", "cd", FinishReason::kLength);
  auto c = ts.client();
  Json body = {{"max_tokens", 4}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "x"}}}}};
  auto res = c.Post("/v1/messages", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  std::vector<std::string> types;
  for (const std::string& p : sse_payloads(res->body)) types.push_back(Json::parse(p)["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                             "content_block_stop", "content_block_start", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"}));
  const auto payloads = sse_payloads(res->body);
  Json delta = Json::parse(payloads[payloads.size() - 2]);
  EXPECT_EQ(delta["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(delta["usage"]["output_tokens"], 4);

  ts.engine.fail_after_first = true;
  res = c.Post("/v1/messages", body.dump(), "application/json");
  ASSERT_TRUE(res);
  const auto events = sse_payloads(res->body);
  ASSERT_FALSE(events.empty());
  Json last = Json::parse(events.back());
  EXPECT_EQ(last["type"], "error");
  EXPECT_EQ(last["error"]["type"], "api_error");
}

}  // namespace
}  // namespace tf::server::testing
