// Request parsing into plain structs without HTTP: defaults, precedence rules and the
// Responses → chat mapping (api.md §1.1-§1.3, §3).
#include <gtest/gtest.h>

#include <functional>

#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/openai_requests.h"
#include "server/responses_reasoning.h"

namespace tf::server {
namespace {

Json chat() { return Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}; }

TEST(ServerParse, ChatDefaults) {
  ChatRequest r = parse_chat_request(chat());
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.tool_choice, "none");
  EXPECT_TRUE(r.thinking_enabled);
  EXPECT_FALSE(r.sampling.temperature.has_value());
  EXPECT_EQ(r.structured.kind, StructuredOutput::Kind::kNone);
}

TEST(ServerParse, ToolsDefaultToAutoAndNamedChoice) {
  Json b = chat();
  b["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}}}}};
  EXPECT_EQ(parse_chat_request(b).tool_choice, "auto");
  b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "f"}}}};
  ChatRequest r = parse_chat_request(b);
  EXPECT_EQ(r.tool_choice, "f");
  EXPECT_TRUE(r.named_tool_choice);
}

TEST(ServerParse, DeveloperRoleAndReasoningAlias) {
  Json b = {{"messages",
             {{{"role", "developer"}, {"content", "sys"}},
              {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}},
              {{"role", "assistant"}, {"content", nullptr}, {"reasoning", "r"},
               {"tool_calls", {{{"id", "c"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
              {{"role", "tool"}, {"tool_call_id", "c"}, {"content", "ok"}}}}};
  ChatRequest r = parse_chat_request(b);
  EXPECT_EQ(r.chat.messages[0]["role"], "system");
  EXPECT_EQ(r.chat.messages[2]["reasoning_content"], "r");
}

TEST(ServerParse, ReasoningEffortDrivesEnableThinking) {
  Json b = chat();
  b["reasoning_effort"] = "high";
  ChatRequest r = parse_chat_request(b);
  EXPECT_TRUE(r.thinking_enabled);
  EXPECT_EQ(r.chat.chat_template_kwargs["enable_thinking"], true);
  EXPECT_EQ(r.chat.reasoning_effort, "high");
  b["chat_template_kwargs"] = {{"enable_thinking", false}};
  EXPECT_FALSE(parse_chat_request(b).thinking_enabled);  // explicit kwargs win
}

TEST(ServerParse, StructuredOutputs) {
  Json b = chat();
  b["response_format"] = {{"type", "json_schema"},
                          {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}}}}}};
  ChatRequest r = parse_chat_request(b);
  EXPECT_EQ(r.structured.kind, StructuredOutput::Kind::kJsonSchema);
  EXPECT_EQ(r.structured.schema["type"], "object");
  b.erase("response_format");
  b["guided_json"] = "{\"type\": \"array\"}";
  EXPECT_EQ(parse_chat_request(b).structured.schema["type"], "array");
  b.erase("guided_json");
  b["structured_outputs"] = {{"regex", "[a-z]+"}};
  EXPECT_EQ(parse_chat_request(b).structured.pattern, "[a-z]+");
  b["structured_outputs"] = {{"grammar", "root ::= \"a\""}};
  EXPECT_EQ(parse_chat_request(b).structured.kind, StructuredOutput::Kind::kGrammar);
  b["response_format"] = {{"type", "json_object"}};
  EXPECT_THROW(parse_chat_request(b), ApiError);  // two constraints
}

// The parser takes what the sampler takes (0, 2], so the engine never refuses a value
// the parser let through (its 400 would name no field).
TEST(ServerParse, RepetitionPenaltyRangeIsTheSamplers) {
  Json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (double ok : {2.0, 1.0, 1e-6}) {
    b["repetition_penalty"] = ok;
    EXPECT_EQ(parse_chat_request(b).sampling.repetition_penalty, ok);
  }
  for (double bad : {2.000001, 100.0, 0.0, -1.0, 1e-300}) {
    b["repetition_penalty"] = bad;
    try {
      parse_chat_request(b);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param(), "repetition_penalty") << bad;
    }
  }
  EXPECT_EQ(kMaxRepetitionPenalty, 2.0);
}

// vLLM refuses min_tokens above the request's max_tokens (completions: its default of 16).
TEST(ServerParse, MinTokensAboveMaxTokensIsRefused) {
  Json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"min_tokens", 10}};
  EXPECT_EQ(parse_chat_request(chat).sampling.min_tokens, 10);  // no max_tokens: the room decides
  chat["max_tokens"] = 10;
  EXPECT_EQ(parse_chat_request(chat).sampling.min_tokens, 10);
  Json completion = {{"prompt", "hi"}, {"min_tokens", 16}};
  EXPECT_EQ(parse_completion_request(completion).sampling.min_tokens, 16);
  chat["max_completion_tokens"] = 9;
  completion["min_tokens"] = 17;
  for (const auto& parse : {std::function<void()>([&] { parse_chat_request(chat); }),
                            std::function<void()>([&] { parse_completion_request(completion); })}) {
    try {
      parse();
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param(), "min_tokens");
      EXPECT_NE(std::string(e.what()).find("must not exceed 'max_tokens'"), std::string::npos) << e.what();
    }
  }
}

// vLLM's repetition_detection, on chat and completions; what cannot be checked is a 400 naming it.
TEST(ServerParse, CacheSalt) {
  Json b = chat();
  EXPECT_EQ(parse_chat_request(b).cache_salt, "");
  b["cache_salt"] = "c2VjcmV0LXNhbHQ";
  EXPECT_EQ(parse_chat_request(b).cache_salt, "c2VjcmV0LXNhbHQ");
  EXPECT_EQ(parse_completion_request(Json{{"prompt", "hi"}, {"cache_salt", "x"}}).cache_salt, "x");
  for (const Json& bad :
       {Json(""), Json(5), Json::array({"a"}), Json(std::string(kMaxCacheSaltBytes + 1, 's'))}) {
    b["cache_salt"] = bad;
    try {
      parse_chat_request(b);
      ADD_FAILURE() << bad.dump().substr(0, 40) << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param().value_or(""), "cache_salt");
      EXPECT_EQ(e.http_status(), 400);
    }
  }
}

TEST(ServerParse, Priority) {
  Json b = chat();
  EXPECT_EQ(parse_chat_request(b).priority, 0);
  b["priority"] = -5;
  EXPECT_EQ(parse_chat_request(b).priority, -5);
  EXPECT_EQ(parse_completion_request(Json{{"prompt", "hi"}, {"priority", 9}}).priority, 9);
  // The reference engine's "background": after every request of an ordinary priority.
  b["priority"] = "background";
  EXPECT_EQ(parse_chat_request(b).priority, kBackgroundPriority);
  EXPECT_GT(kBackgroundPriority, 1000);
  for (const Json& bad : {Json("high"), Json("Background"), Json(1.5), Json(int64_t{1} << 40)}) {
    b["priority"] = bad;
    try {
      parse_chat_request(b);
      ADD_FAILURE() << bad.dump() << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param().value_or(""), "priority");
    }
  }
}

// The reference engine's `draft`: false decodes the request serially.
TEST(ServerParse, Draft) {
  Json b = chat();
  EXPECT_TRUE(parse_chat_request(b).drafts);
  b["draft"] = false;
  EXPECT_FALSE(parse_chat_request(b).drafts);
  EXPECT_FALSE(parse_completion_request(Json{{"prompt", "hi"}, {"draft", false}}).drafts);
  b["draft"] = "no";
  try {
    parse_chat_request(b);
    ADD_FAILURE() << "a string was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param().value_or(""), "draft");
  }
}

TEST(ServerParse, RepetitionDetection) {
  Json b = chat();
  b["repetition_detection"] = {{"max_pattern_size", 64}, {"min_count", 3}};
  RepetitionRule r = parse_chat_request(b).sampling.repetition_detection;
  EXPECT_TRUE(r.enabled());
  EXPECT_EQ(r.max_pattern, 64);
  EXPECT_EQ(r.min_pattern, 0);
  EXPECT_EQ(r.min_count, 3);
  Json c = {{"prompt", "hi"},
            {"repetition_detection", {{"max_pattern_size", 8}, {"min_pattern_size", 2}, {"min_count", 4}}}};
  EXPECT_EQ(parse_completion_request(c).sampling.repetition_detection.min_pattern, 2);
  EXPECT_FALSE(parse_chat_request(chat()).sampling.repetition_detection.enabled());
  const std::vector<std::pair<Json, std::string>> bad = {
      {Json(5), "repetition_detection"},
      {Json{{"max_pattern_size", 8}, {"min_count", 1}}, "repetition_detection"},
      {Json{{"max_pattern_size", 8}, {"min_pattern_size", 9}, {"min_count", 2}}, "repetition_detection"},
      {Json{{"max_pattern_size", RepetitionRule::kMaxPattern + 1}, {"min_count", 2}},
       "repetition_detection.max_pattern_size"},
      {Json{{"max_pattern_size", "8"}, {"min_count", 2}}, "repetition_detection.max_pattern_size"},
      {Json{{"max_pattern_size", 8}, {"min_count", -3}}, "repetition_detection.min_count"},
  };
  for (const auto& [value, param] : bad) {
    b["repetition_detection"] = value;
    try {
      parse_chat_request(b);
      ADD_FAILURE() << value.dump() << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param().value_or(""), param) << value.dump();
      EXPECT_EQ(e.http_status(), 400) << value.dump();
    }
  }
}

TEST(ServerParse, CompletionsPromptForms) {
  CompletionRequest r = parse_completion_request({{"prompt", {{1, 2}, {3}}}});
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.prompts[1]), std::vector<int32_t>({3}));
  EXPECT_EQ(*r.max_tokens, 16);  // OpenAI default
  r = parse_completion_request({{"prompt", "x"}, {"logprobs", 2}, {"max_tokens", 0}, {"echo", true}});
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_EQ(*r.max_tokens, 0);
}

// chat_template_kwargs may set any template variable but the conversation itself; a Responses
// request's `store` is a boolean (a string or object used to be stored anyway, and echoed back).
TEST(ServerParse, KwargsCannotReplaceTheMessagesAndStoreIsABoolean) {
  Json b = chat();
  b["chat_template_kwargs"] = {{"enable_thinking", false}, {"add_generation_prompt", false}, {"custom", 1}};
  EXPECT_EQ(parse_chat_request(b).chat.chat_template_kwargs["custom"], 1);
  b["chat_template_kwargs"]["messages"] = Json::array();
  try {
    parse_chat_request(b);
    ADD_FAILURE() << "chat_template_kwargs.messages was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param().value_or(""), "chat_template_kwargs.messages");
    EXPECT_EQ(e.http_status(), 400);
  }
  Json r = {{"input", "hi"}};
  EXPECT_NO_THROW(parse_responses_request(r));
  for (const Json& bad : {Json("no"), Json::object(), Json::array({false}), Json(0)}) {
    r["store"] = bad;
    try {
      parse_responses_request(r);
      ADD_FAILURE() << "store " << bad.dump() << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param().value_or(""), "store");
      EXPECT_EQ(e.http_status(), 400);
    }
  }
}

TEST(ServerParse, ResponsesMapOntoChat) {
  Json b = {{"input",
             {{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "hi"}}}}},
              {{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", "{}"}},
              {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "42"}}}},
            {"instructions", "be brief"},
            {"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}}}},
            {"tool_choice", "required"},
            {"max_output_tokens", 7},
            {"reasoning", {{"effort", "none"}}},
            {"text", {{"format", {{"type", "json_schema"}, {"name", "s"}, {"schema", {{"type", "object"}}}}}}}};
  ResponsesRequest r = parse_responses_request(b);
  const Json& m = r.chat.chat.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(r.chat.chat.tools[0]["function"]["name"], "f");
  EXPECT_EQ(r.chat.tool_choice, "required");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_FALSE(r.chat.thinking_enabled);
  EXPECT_EQ(r.structured.kind, StructuredOutput::Kind::kJsonSchema);
  EXPECT_EQ(r.echo["instructions"], "be brief");
  // A flat named tool_choice maps onto the chat form; with a format it is a 400 (api.md §1.2).
  b["tool_choice"] = {{"type", "function"}, {"name", "f"}};
  EXPECT_THROW(parse_responses_request(b), ApiError);
  b.erase("text");
  EXPECT_EQ(parse_responses_request(b).chat.tool_choice, "f");
  // The chat extensions a Responses body may carry too: the thinking budget under either name.
  EXPECT_FALSE(parse_responses_request(b).chat.reasoning_budget);
  b["thinking_budget"] = 300;
  EXPECT_EQ(parse_responses_request(b).chat.reasoning_budget, 300);
  b.erase("thinking_budget");
  b["thinking_token_budget"] = 40;
  EXPECT_EQ(parse_responses_request(b).chat.reasoning_budget, 40);
  b["thinking_token_budget"] = -3;
  EXPECT_THROW(parse_responses_request(b), ApiError);
}

// Reasoning items sent back go to the assistant turn after them (its message, or the function
// calls that follow it), as chat's reasoning_content; a reply's message and function calls
// stay one assistant turn; reasoning followed by no assistant item is a turn of its own; the
// text comes from reasoning_text parts, else the summary, else this server's encrypted_content
// (another provider's is no text; a damaged one of ours is a 400).
TEST(ServerParse, ResponsesReasoningItemsReachTheirTurns) {
  const std::string sealed = reasoning_encrypted_content("sealed thought");
  EXPECT_EQ(sealed.rfind("tfr1:", 0), 0u);
  Json b = {{"input",
             {{{"role", "user"}, {"content", "q1"}},
              {{"type", "reasoning"},
               {"id", "rs_1"},
               {"summary", Json::array()},
               {"content", {{{"type", "reasoning_text"}, {"text", "think 1"}}}}},
              {{"type", "message"},
               {"role", "assistant"},
               {"content", {{{"type", "output_text"}, {"text", "a1"}}}}},
              {{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", "{}"}},
              {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "42"}},
              {{"type", "reasoning"}, {"summary", {{{"type", "summary_text"}, {"text", "sum"}}}}},
              {{"type", "function_call"}, {"call_id", "c2"}, {"name", "f"}, {"arguments", "{}"}},
              {{"type", "function_call_output"}, {"call_id", "c2"}, {"output", "43"}},
              {{"type", "reasoning"}, {"summary", Json::array()}, {"encrypted_content", sealed}},
              {{"type", "reasoning"}, {"summary", Json::array()}, {"encrypted_content", "gAAAAB-not-ours"}},
              {{"role", "user"}, {"content", "q2"}},
              {{"type", "reasoning"}, {"summary", Json::array()}, {"encrypted_content", "gAAAAB-not-ours"}},
              {{"type", "message"}, {"role", "assistant"}, {"content", "a2"}}}}};
  const Json m = parse_responses_request(b).chat.chat.messages;
  ASSERT_EQ(m.size(), 8u) << m.dump();
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["reasoning_content"], "think 1");
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "c1");  // the reply's message and call: one turn
  EXPECT_EQ(m[2]["role"], "tool");
  EXPECT_EQ(m[3]["reasoning_content"], "sum");
  EXPECT_EQ(m[3]["tool_calls"][0]["id"], "c2");
  EXPECT_EQ(m[5]["role"], "assistant");  // reasoning alone before the user's turn
  EXPECT_EQ(m[5]["reasoning_content"], "sealed thought");
  EXPECT_EQ(m[5]["content"], "");
  EXPECT_EQ(m[6]["role"], "user");
  EXPECT_FALSE(m[7].contains("reasoning_content"));  // another provider's encrypted_content
  // A damaged encrypted_content of ours names the item.
  Json bad = {{"input", {{{"type", "reasoning"}, {"encrypted_content", "tfr1:%%%"}}}}};
  try {
    parse_responses_request(bad);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param().value_or(""), "input[0].encrypted_content");
  }
  EXPECT_FALSE(parse_responses_request(b).sealed_reasoning);
  b["include"] = {"reasoning.encrypted_content"};
  EXPECT_TRUE(parse_responses_request(b).sealed_reasoning);
}

// Media URLs: data: always; https:// only when the server fetches them (VISION_URLS), in all
// three APIs; other schemes never. A refusal names the part and, when off, the setting.
TEST(ServerParse, HttpsMediaUrlsOnlyWhenTheServerFetchesThem) {
  auto with_url = [](const char* text, const std::string& url) {
    std::string body = text;
    body.replace(body.find("URL"), 3, url);
    return Json::parse(body);
  };
  auto chat = [&](const std::string& url) {
    return with_url(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"URL"}}]}]})", url);
  };
  auto responses = [&](const std::string& url) {
    return with_url(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"URL"}]}]})", url);
  };
  auto anthropic = [&](const std::string& url) {
    return with_url(
        R"({"max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"URL"}}]}]})",
        url);
  };
  const std::string https = "https://example.com/a.png";
  const MediaUrlPolicy on{true};
  EXPECT_EQ(parse_chat_request(chat(https), on).chat.messages[0]["content"][0]["image_url"]["url"], https);
  EXPECT_EQ(parse_responses_request(responses(https), on).chat.chat.messages[0]["content"][0]["image_url"]["url"], https);
  EXPECT_EQ(parse_messages_request(anthropic(https), false, on).chat.chat.messages[0]["content"][0]["image_url"]["url"], https);
  auto refused = [](auto&& parse, const std::string& param, const std::string& says) {
    try {
      parse();
      ADD_FAILURE() << param << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.http_status(), 400);
      EXPECT_EQ(e.param().value_or(""), param);
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  const std::string off_says = "(https:// URLs too when the server runs with VISION_URLS=1)";
  refused([&] { parse_chat_request(chat(https)); }, "messages[0].content[0]", off_says);
  refused([&] { parse_responses_request(responses(https)); }, "input[0].content[0]", off_says);
  refused([&] { parse_messages_request(anthropic(https)); }, "messages[0].content[0].source.url", off_says);
  refused([&] { parse_chat_request(chat("http://example.com/a.png"), on); }, "messages[0].content[0]",
          "only data: URLs and https:// URLs are accepted for images");
  refused([&] { parse_chat_request(chat("file:///etc/passwd"), on); }, "messages[0].content[0]", "only data: URLs");
}

TEST(ServerParse, ErrorObjectShape) {
  try {
    parse_chat_request({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"n", 0}});
    FAIL() << "expected ApiError";
  } catch (const ApiError& e) {
    Json j = e.to_json();
    EXPECT_EQ(e.http_status(), 400);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"], "n");
    EXPECT_TRUE(j["error"]["code"].is_null());
  }
  EXPECT_EQ(api_error_from_status(resource_exhausted("full")).http_status(), 429);
  EXPECT_EQ(api_error_from_status(unavailable("down")).http_status(), 503);
  EXPECT_EQ(api_error_from_status(internal_error("x")).http_status(), 500);
  EXPECT_EQ(context_length_exceeded(10, 8, 5).to_json()["error"]["code"], "context_length_exceeded");
}

}  // namespace
}  // namespace tf::server
