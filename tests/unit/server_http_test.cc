// HTTP server against a scripted FakeEngine: JSON shapes, SSE framing, tokenization,
// health and metrics (api.md §1.4-§4).
#include <gtest/gtest.h>

#include <charconv>
#include <cstring>
#include <sstream>
#include <thread>

#include "server/metrics.h"
#include "server/openai_responses.h"
#include "server_test_util.h"

namespace tf::server::testing {
namespace {

Json post_json(httplib::Client& c, const std::string& path, const Json& body, int expect = 200) {
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res) << path;
  if (!res) return Json();
  EXPECT_EQ(res->status, expect) << path << " " << res->body;
  EXPECT_NE(res->get_header_value("Content-Type").find("application/json"), std::string::npos);
  return Json::parse(res->body);
}

Json chat_body(bool stream = false) {
  Json b = {{"model", "fake-model"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  if (stream) b["stream"] = true;
  return b;
}

TEST(ServerHttp, ModelsListAndRetrieve) {
  TestServer ts;
  auto c = ts.client();
  auto res = c.Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  Json j = Json::parse(res->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "fake-model");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_TRUE(j["data"][0]["created"].is_number_integer());
  EXPECT_TRUE(j["data"][0]["owned_by"].is_string());
  EXPECT_EQ(j["data"][0]["max_model_len"], 4096);
  res = c.Get("/v1/models/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  Json e = Json::parse(res->body);
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
  EXPECT_EQ(c.Get("/v1/models/fake-model")->status, 200);
}

// llama.cpp's /props: the window, slots, template and modalities.
TEST(ServerHttp, PropsLikeLlamaCpp) {
  TestServer ts;
  auto c = ts.client();
  auto res = c.Get("/props");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json p = Json::parse(res->body);
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], 4096);
  EXPECT_EQ(p["total_slots"], 4);
  EXPECT_EQ(p["model_path"], "/models/fake");
  EXPECT_EQ(p["model_alias"], "fake-model");
  EXPECT_EQ(p["chat_template"], ts.engine.model_info().chat_template);
  EXPECT_EQ(p["eos_token"], "<|endoftext|>");
  EXPECT_EQ(p["modalities"], Json({{"vision", false}, {"audio", false}}));
  EXPECT_TRUE(p["build_info"].get<std::string>().starts_with("tensorfold "));
}

TEST(ServerHttp, ChatNonStreamingShape) {
  TestServer ts;
  ts.engine.set_text_script("Let me think.", "Hello world", FinishReason::kStop);
  auto c = ts.client();
  Json j = post_json(c, "/v1/chat/completions", chat_body());
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_LE(std::abs(j["created"].get<int64_t>() - unix_now()), 300);
  ASSERT_EQ(j["choices"].size(), 1u);
  const Json& ch = j["choices"][0];
  EXPECT_EQ(ch["index"], 0);
  EXPECT_EQ(ch["finish_reason"], "stop");
  EXPECT_EQ(ch["message"]["role"], "assistant");
  EXPECT_EQ(ch["message"]["content"], "Hello world");
  EXPECT_EQ(ch["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(ch["message"]["reasoning"], "Let me think.");
  EXPECT_FALSE(ch["message"].contains("tool_calls"));
  const Json& u = j["usage"];
  std::string rendered = "user: hi\n";
  EXPECT_EQ(u["prompt_tokens"], rendered.size());
  EXPECT_EQ(u["completion_tokens"], 24);
  EXPECT_EQ(u["total_tokens"], u["prompt_tokens"].get<int>() + u["completion_tokens"].get<int>());
  EXPECT_EQ(u["completion_tokens_details"]["reasoning_tokens"], 13);
  // The engine got the rendered prompt and a max_tokens filling the window.
  ASSERT_EQ(ts.engine.requests.size(), 1u);
  EXPECT_EQ(ts.engine.requests[0].prompt_tokens.size(), rendered.size());
  EXPECT_EQ(ts.engine.requests[0].sampling.max_tokens, 4096 - static_cast<int64_t>(rendered.size()));
  EXPECT_TRUE(ts.engine.requests[0].parse_reasoning);
}

TEST(ServerHttp, ChatRequestFieldsReachEngine) {
  TestServer ts;
  auto c = ts.client();
  Json b = chat_body();
  b["temperature"] = 0.5;
  b["top_p"] = 0.9;
  b["top_k"] = 40;
  b["min_p"] = 0.05;
  b["seed"] = 7;
  b["stop"] = "world";
  b["max_tokens"] = 10;
  b["max_completion_tokens"] = 20;
  b["n"] = 3;
  b["logit_bias"] = {{"12", -5}};
  b["reasoning_effort"] = "none";
  b["guided_choice"] = {"yes", "no"};
  b["some_unknown_field"] = {{"x", 1}};
  Json j = post_json(c, "/v1/chat/completions", b);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  const GenerationRequest& g = ts.engine.requests.at(0);
  EXPECT_EQ(g.sampling.temperature, 0.5);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_EQ(g.sampling.seed, 7);
  EXPECT_EQ(g.sampling.max_tokens, 20);  // max_completion_tokens wins
  ASSERT_EQ(g.sampling.stop.size(), 1u);
  EXPECT_EQ(g.sampling.stop[0], "world");
  EXPECT_EQ(g.sampling.logit_bias.at(12), -5);
  EXPECT_EQ(g.n, 3);
  EXPECT_FALSE(g.thinking_enabled);
  EXPECT_EQ(g.structured.kind, StructuredOutput::Kind::kChoice);
  EXPECT_EQ(g.structured.choices.size(), 2u);
}

std::vector<Json> stream_chunks(httplib::Client& c, const std::string& path, const Json& body, std::string* raw = nullptr) {
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res);
  if (!res) return {};
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  if (raw) *raw = res->body;
  std::vector<Json> out;
  auto payloads = sse_payloads(res->body);
  EXPECT_FALSE(payloads.empty());
  for (size_t i = 0; i < payloads.size(); ++i) {
    if (payloads[i] == "[DONE]") {
      EXPECT_EQ(i + 1, payloads.size()) << "[DONE] must be last";
      continue;
    }
    out.push_back(Json::parse(payloads[i]));
  }
  return out;
}

TEST(ServerHttp, ChatStreamingFraming) {
  TestServer ts;
  ts.engine.set_text_script("Think.", "Hello world", FinishReason::kStop);
  auto c = ts.client();
  std::string raw;
  auto chunks = stream_chunks(c, "/v1/chat/completions", chat_body(true), &raw);
  EXPECT_NE(raw.find("data: [DONE]\n\n"), std::string::npos);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content, reasoning;
  int finishes = 0;
  bool content_started = false;
  for (const Json& ch : chunks) {
    EXPECT_EQ(ch["object"], "chat.completion.chunk");
    EXPECT_EQ(ch["id"], chunks[0]["id"]);
    EXPECT_EQ(ch["created"], chunks[0]["created"]);
    EXPECT_EQ(ch["model"], "fake-model");
    EXPECT_FALSE(ch.contains("error"));
    ASSERT_EQ(ch["choices"].size(), 1u);  // no usage chunk without include_usage
    EXPECT_FALSE(ch.contains("usage") && !ch["usage"].is_null());
    const Json& d = ch["choices"][0]["delta"];
    EXPECT_EQ(finishes, 0) << "nothing after the finish chunk";
    if (d.contains("reasoning_content")) {
      EXPECT_FALSE(content_started) << "reasoning after content";
      reasoning += d["reasoning_content"].get<std::string>();
    }
    if (d.contains("content") && !d["content"].get<std::string>().empty()) {
      content_started = true;
      content += d["content"].get<std::string>();
    }
    if (!ch["choices"][0]["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(ch["choices"][0]["finish_reason"], "stop");
    }
  }
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(content, "Hello world");
  EXPECT_EQ(reasoning, "Think.");
}

// token_sha256: the engine's digest of a choice's ids, on the choice (non-streamed) and on its
// finish chunk (streamed), chat and completions; absent when the engine gave none.
TEST(ServerHttp, TokenSha256OnFinishedChoices) {
  TestServer ts;
  const std::string digest(64, 'a');
  ts.engine.script.back().token_sha256 = digest;
  auto c = ts.client();
  Json j = post_json(c, "/v1/chat/completions", chat_body());
  EXPECT_EQ(j["choices"][0]["token_sha256"], digest);
  auto chunks = stream_chunks(c, "/v1/chat/completions", chat_body(true));
  ASSERT_FALSE(chunks.empty());
  int with_digest = 0;
  for (const Json& ch : chunks) {
    if (!ch["choices"][0].contains("token_sha256")) continue;
    ++with_digest;
    EXPECT_EQ(ch["choices"][0]["token_sha256"], digest);
    EXPECT_EQ(ch["choices"][0]["finish_reason"], "stop") << "only on the finish chunk";
  }
  EXPECT_EQ(with_digest, 1);
  Json comp = post_json(c, "/v1/completions", {{"model", "fake-model"}, {"prompt", "hi"}});
  EXPECT_EQ(comp["choices"][0]["token_sha256"], digest);
  ts.engine.script.back().token_sha256.clear();
  EXPECT_FALSE(post_json(c, "/v1/chat/completions", chat_body())["choices"][0].contains("token_sha256"));
}

TEST(ServerHttp, ChatStreamingIncludeUsage) {
  TestServer ts;
  auto c = ts.client();
  Json b = chat_body(true);
  b["stream_options"] = {{"include_usage", true}};
  auto chunks = stream_chunks(c, "/v1/chat/completions", b);
  ASSERT_FALSE(chunks.empty());
  const Json& last = chunks.back();
  EXPECT_TRUE(last["choices"].empty());
  Json plain = post_json(c, "/v1/chat/completions", chat_body());
  EXPECT_EQ(last["usage"], plain["usage"]);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) EXPECT_FALSE(chunks[i]["choices"].empty());
}

void set_tool_script(FakeEngine& e) {
  e.script.clear();
  GenerationEvent a;
  a.content = "Checking.";
  e.script.push_back(a);
  GenerationEvent t1;
  t1.tool_calls.push_back({0, "call_abc", "get_weather", ""});
  e.script.push_back(t1);
  GenerationEvent t2;
  t2.tool_calls.push_back({0, "", "", "{\"city\": \"Pa"});
  e.script.push_back(t2);
  GenerationEvent t3;
  t3.tool_calls.push_back({0, "", "", "ris\"}"});
  e.script.push_back(t3);
  GenerationEvent t4;
  t4.tool_calls.push_back({1, "call_def", "get_time", "{}"});  // a closed call without arguments, as parsed
  e.script.push_back(t4);
  GenerationEvent fin;
  fin.kind = GenerationEvent::Kind::kFinish;
  fin.finish_reason = FinishReason::kToolCalls;
  fin.completion_tokens = 9;
  e.script.push_back(fin);
}

Json tool_body() {
  Json b = chat_body();
  b["tools"] = {{{"type", "function"},
                 {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}},
                {{"type", "function"}, {"function", {{"name", "get_time"}}}}};
  return b;
}

TEST(ServerHttp, ToolCallsNonStreamingAndStreaming) {
  TestServer ts;
  set_tool_script(ts.engine);
  auto c = ts.client();
  Json j = post_json(c, "/v1/chat/completions", tool_body());
  const Json& m = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(m["content"], "Checking.");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_abc");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>())["city"], "Paris");
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], "{}");  // zero-argument call
  EXPECT_EQ(ts.engine.requests.at(0).tool_choice, "auto");

  Json sb = tool_body();
  sb["stream"] = true;
  auto chunks = stream_chunks(c, "/v1/chat/completions", sb);
  std::map<int, std::string> args;
  std::map<int, int> heads;
  for (const Json& ch : chunks) {
    const Json& d = ch["choices"][0]["delta"];
    if (!d.contains("tool_calls")) continue;
    for (const Json& t : d["tool_calls"]) {
      int idx = t["index"];
      if (t.contains("id")) {
        ++heads[idx];
        EXPECT_EQ(t["type"], "function");
        EXPECT_TRUE(t["function"].contains("name"));
      } else {
        EXPECT_FALSE(t["function"].contains("name"));
      }
      args[idx] += t["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(heads[0], 1);
  EXPECT_EQ(heads[1], 1);
  EXPECT_EQ(args[0], m["tool_calls"][0]["function"]["arguments"]);
  EXPECT_EQ(args[1], m["tool_calls"][1]["function"]["arguments"]);
}

// A call cut off by max_tokens right after its name has no arguments yet: the reply says so the
// same way streamed or not ("", finish_reason "length"), not "{}" (which reads as a complete call).
TEST(ServerHttp, ACallCutOffAfterItsNameKeepsEmptyArgumentsBothWays) {
  TestServer ts;
  ts.engine.script.clear();
  GenerationEvent head;
  head.tool_calls.push_back({0, "call_cut", "get_weather", ""});
  ts.engine.script.push_back(head);
  GenerationEvent fin;
  fin.kind = GenerationEvent::Kind::kFinish;
  fin.finish_reason = FinishReason::kLength;
  fin.completion_tokens = 4;
  ts.engine.script.push_back(fin);
  auto c = ts.client();
  Json j = post_json(c, "/v1/chat/completions", tool_body());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "");
  Json sb = tool_body();
  sb["stream"] = true;
  std::string streamed;
  for (const Json& ch : stream_chunks(c, "/v1/chat/completions", sb)) {
    const Json& d = ch["choices"][0]["delta"];
    if (d.contains("tool_calls"))
      for (const Json& t : d["tool_calls"]) streamed += t["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(streamed, "");
}

TEST(ServerHttp, EngineErrorMidStream) {
  TestServer ts;
  ts.engine.fail_after_first = true;
  auto c = ts.client();
  auto res = c.Post("/v1/chat/completions", chat_body(true).dump(), "application/json");
  ASSERT_TRUE(res);
  auto p = sse_payloads(res->body);
  ASSERT_GE(p.size(), 2u);
  EXPECT_EQ(p.back(), "[DONE]");
  Json err = Json::parse(p[p.size() - 2]);
  EXPECT_EQ(err["error"]["type"], "server_error");
  // Non-streaming: a 500 with an error object.
  auto r2 = c.Post("/v1/chat/completions", chat_body().dump(), "application/json");
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 500);
  EXPECT_TRUE(Json::parse(r2->body)["error"].is_object());
}

TEST(ServerHttp, Completions) {
  TestServer ts;
  auto c = ts.client();
  Json j = post_json(c, "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 5}});
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["text"], "Hello world");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_FALSE(ts.engine.requests.at(0).parse_reasoning);

  j = post_json(c, "/v1/completions", {{"prompt", {"ab", "cd"}}, {"n", 2}, {"echo", true}});
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["choices"][0]["text"], "abHello world");
  EXPECT_EQ(j["choices"][3]["text"], "cdHello world");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);

  j = post_json(c, "/v1/completions", {{"prompt", {104, 105}}, {"echo", true}});
  EXPECT_EQ(j["choices"][0]["text"], "hiHello world");

  std::string raw;
  auto chunks = stream_chunks(c, "/v1/completions",
                              {{"prompt", {"ab", "cd"}}, {"stream", true}, {"stream_options", {{"include_usage", true}}}},
                              &raw);
  std::map<int, std::string> text;
  for (const Json& ch : chunks)
    for (const Json& choice : ch["choices"]) text[choice["index"]] += choice["text"].get<std::string>();
  EXPECT_EQ(text[0], "Hello world");
  EXPECT_EQ(text[1], "Hello world");
  EXPECT_TRUE(chunks.back()["choices"].empty());
  EXPECT_EQ(chunks.back()["usage"]["prompt_tokens"], 4);
}

TEST(ServerHttp, ResponsesNonStreamingAndEvents) {
  TestServer ts;
  ts.engine.set_text_script("Hmm.", "Hi there", FinishReason::kStop);
  auto c = ts.client();
  Json j = post_json(c, "/v1/responses", {{"input", "hi"}, {"instructions", "be brief"}});
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["id"].get<std::string>().rfind("resp_", 0), 0u);
  ASSERT_EQ(j["output"].size(), 2u);
  EXPECT_EQ(j["output"][0]["type"], "reasoning");
  EXPECT_EQ(j["output"][1]["type"], "message");
  EXPECT_EQ(j["output"][1]["content"][0]["text"], "Hi there");
  EXPECT_EQ(j["usage"]["total_tokens"],
            j["usage"]["input_tokens"].get<int>() + j["usage"]["output_tokens"].get<int>());
  EXPECT_EQ(ts.engine.requests.at(0).prompt_tokens.size(), std::string("system: be brief\nuser: hi\n").size());

  auto res = c.Post("/v1/responses", Json{{"input", "hi"}, {"stream", true}}.dump(), "application/json");
  ASSERT_TRUE(res);
  auto payloads = sse_payloads(res->body);
  ASSERT_GE(payloads.size(), 4u);
  std::vector<std::string> types;
  int64_t seq = -1;
  for (const auto& p : payloads) {
    Json e = Json::parse(p);
    types.push_back(e["type"]);
    EXPECT_EQ(e["sequence_number"].get<int64_t>(), seq + 1);
    seq = e["sequence_number"];
  }
  EXPECT_EQ(types.front(), "response.created");
  EXPECT_EQ(types[1], "response.in_progress");
  EXPECT_EQ(types.back(), "response.completed");
  Json final_resp = Json::parse(payloads.back())["response"];
  EXPECT_EQ(final_resp["output"].size(), 2u);
  EXPECT_EQ(final_resp["output"][1]["content"][0]["text"], "Hi there");
  // Same items (minus the id) as the non-streaming object.
  EXPECT_EQ(final_resp["output"][1]["content"], j["output"][1]["content"]);

  ts.engine.set_text_script("", "cut", FinishReason::kLength);
  j = post_json(c, "/v1/responses", {{"input", "hi"}, {"max_output_tokens", 3}});
  EXPECT_EQ(j["status"], "incomplete");
  EXPECT_EQ(j["incomplete_details"]["reason"], "max_output_tokens");
}

TEST(ServerHttp, TokenizeDetokenize) {
  TestServer ts;
  auto c = ts.client();
  for (const char* path : {"/tokenize", "/v1/tokenize"}) {
    Json j = post_json(c, path, {{"prompt", "hey"}, {"return_token_strs", true}});
    EXPECT_EQ(j["count"], 3);
    EXPECT_EQ(j["max_model_len"], 4096);
    EXPECT_EQ(j["tokens"], Json({104, 101, 121}));
    EXPECT_EQ(j["token_strs"], Json({"h", "e", "y"}));
  }
  Json chat = post_json(c, "/tokenize", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  Json comp = post_json(c, "/v1/chat/completions", chat_body());
  EXPECT_EQ(chat["count"], comp["usage"]["prompt_tokens"]);
  for (const char* path : {"/detokenize", "/v1/detokenize"}) {
    Json j = post_json(c, path, {{"tokens", {104, 101, 121}}});
    EXPECT_EQ(j["prompt"], "hey");
  }
  Json e = post_json(c, "/detokenize", {{"tokens", {104, 100000}}}, 400);
  EXPECT_EQ(e["error"]["param"], "tokens");
}

TEST(ServerHttp, HealthFields) {
  TestServer ts;
  auto c = ts.client();
  auto res = c.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  Json h = Json::parse(res->body);
  for (const char* k : {"ok", "busy", "requests_running", "requests_waiting", "requests_total", "prompt_tokens_total",
                        "completion_tokens_total", "streams", "context_length", "pool_tokens", "pool_free_tokens"})
    EXPECT_TRUE(h.contains(k)) << k;
  EXPECT_EQ(h["ok"], true);
  EXPECT_EQ(h["streams"]["max"], 4);
  EXPECT_EQ(h["pool_tokens"], 10000);
  EXPECT_EQ(h["pool_free_tokens"], 10000);
  EXPECT_EQ(h["context_length"], 4096);
  EXPECT_EQ(h["device"], "cpu");
  EXPECT_EQ(h["kept_prompts"], 2);
  EXPECT_EQ(h["kept_prompt_tokens"], 512);
  EXPECT_EQ(h["kept_mix"],
            Json({{"prompt_end", 1}, {"system_block", 1}, {"shared_prefix", 0}, {"restored", 0}}));
  EXPECT_EQ(h["prompts_resumed_total"], 3);
  EXPECT_EQ(h["chats_continued"], 2);
  EXPECT_EQ(h["iteration_s"], 0.25);
  EXPECT_EQ(h["iteration_s_mean"], 0.125);
  EXPECT_EQ(h["cached_tokens_total"], 512);
  EXPECT_EQ(h["vision_patches_total"], 1200);
  EXPECT_EQ(h["vision_patches_skipped_total"], 300);
  EXPECT_EQ(h["device_memory"]["in_use_bytes"], 3 << 20);
  EXPECT_EQ(h["device_memory"]["held_bytes"], 5 << 20);
  EXPECT_EQ(h["device_memory"]["step_peak_bytes"], 1 << 20);
}

TEST(ServerHttp, MetricsExposition) {
  TestServer ts;
  auto c = ts.client();
  post_json(c, "/v1/chat/completions", chat_body());
  post_json(c, "/v1/chat/completions", Json{{"messages", 5}}, 400);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  EXPECT_EQ(check_exposition(res->body), "") << res->body;
  for (const char* needle :
       {"vllm:time_to_first_token_seconds_bucket", "vllm:num_requests_running{", "vllm:kv_cache_usage_perc{",
        "tensorfold:time_to_first_token_seconds_count",
        "tensorfold:http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1",
        "tensorfold:http_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1",
        "vllm:generation_tokens_total{model_name=\"fake-model\"} 11",
        "vllm:e2e_request_latency_seconds_count{model_name=\"fake-model\"} 1",
        "vllm:prefix_cache_queries_total{model_name=\"fake-model\"} 700",
        "vllm:prefix_cache_hits_total{model_name=\"fake-model\"} 512", "tensorfold:kept_prompts 2",
        "tensorfold:kept_prompt_tokens 512", "tensorfold:vision_patches_total 1200",
        "tensorfold:vision_patches_skipped_total 300", "tensorfold:device_memory_in_use_bytes 3145728",
        "tensorfold:step_memory_peak_bytes 1048576"})
    EXPECT_NE(res->body.find(needle), std::string::npos) << needle;
}

// Bucket bounds and sums print as the shortest text that reads back as the value, as
// Prometheus' clients print them: le="0.025", not le="0.025000000000000001".
TEST(ServerHttp, HistogramNumbersAreShortestRoundTrip) {
  Histogram h({1e-7, 0.001, 0.025, 0.1, 1, 2.5, 640});
  h.observe(0.1);
  h.observe(0.2);
  std::string out;
  h.write(out, "h", "model_name=\"m\"");
  for (const char* line : {"h_bucket{model_name=\"m\",le=\"0.001\"} 0\n", "h_bucket{model_name=\"m\",le=\"0.025\"} 0\n",
                           "h_bucket{model_name=\"m\",le=\"0.1\"} 1\n", "h_bucket{model_name=\"m\",le=\"1\"} 2\n",
                           "h_bucket{model_name=\"m\",le=\"2.5\"} 2\n", "h_bucket{model_name=\"m\",le=\"640\"} 2\n",
                           "h_bucket{model_name=\"m\",le=\"1e-07\"} 0\n", "h_bucket{model_name=\"m\",le=\"+Inf\"} 2\n",
                           "h_sum{model_name=\"m\"} 0.30000000000000004\n", "h_count{model_name=\"m\"} 2\n"})
    EXPECT_NE(out.find(line), std::string::npos) << line << "in\n" << out;

  TestServer ts;
  auto c = ts.client();
  post_json(c, "/v1/chat/completions", chat_body());
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("le=\"0.025\""), std::string::npos);
  EXPECT_NE(res->body.find("le=\"1\""), std::string::npos);
  // Every le label is the shortest text of its value.
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    size_t at = line.find("le=\"");
    if (at == std::string::npos) continue;
    std::string le = line.substr(at + 4, line.find('"', at + 4) - at - 4);
    if (le == "+Inf") continue;
    char shortest[32];
    auto end = std::to_chars(shortest, shortest + sizeof shortest, std::stod(le)).ptr;
    EXPECT_EQ(le, std::string(shortest, end)) << line;
  }
}

TEST(ServerHttp, ExpositionCheckerCatchesErrors) {
  EXPECT_NE(check_exposition("x 1\n"), "");  // no TYPE
  EXPECT_NE(check_exposition("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                             "h_sum 1\nh_count 1\n"),
            "");  // not cumulative
  EXPECT_NE(check_exposition("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n"), "");
  EXPECT_EQ(check_exposition("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
                             "h_sum 1\nh_count 1\n"),
            "");
}

TEST(ServerHttp, ClientDisconnectCancelsEngineRequest) {
  TestServer ts;
  ts.engine.endless = true;
  ts.engine.delay = std::chrono::milliseconds(5);
  {
    auto c = ts.client();
    int received = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = chat_body(true).dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++received < 3; };
    c.send(req);
    EXPECT_GE(received, 3);
  }
  EXPECT_TRUE(ts.engine.wait_cancelled(std::chrono::seconds(5)));
  EXPECT_TRUE(ts.engine.wait_idle(std::chrono::seconds(5)));
  auto c = ts.client();
  auto h = Json::parse(c.Get("/health")->body);
  EXPECT_EQ(h["pool_free_tokens"], h["pool_tokens"]);
  ts.engine.endless = false;
  post_json(c, "/v1/chat/completions", chat_body());  // still serving
}

}  // namespace
}  // namespace tf::server::testing

namespace tf::server::testing {
namespace {

TEST(ServerHttp, ConcurrentStreamsAllFinishWithSameText) {
  TestServer ts;
  ts.engine.delay = std::chrono::milliseconds(2);
  std::vector<std::thread> threads;
  std::vector<std::string> texts(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      auto c = ts.client();
      auto res = c.Post("/v1/chat/completions", chat_body(true).dump(), "application/json");
      if (!res) return;
      for (const auto& p : sse_payloads(res->body)) {
        if (p == "[DONE]") continue;
        Json j = Json::parse(p);
        const Json& d = j["choices"][0]["delta"];
        if (d.contains("content")) texts[i] += d["content"].get<std::string>();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& t : texts) EXPECT_EQ(t, "Hello world");
  EXPECT_EQ(ts.engine.requests.size(), 8u);
}

TEST(ServerHttp, LogprobsShapes) {
  TestServer ts;
  ts.engine.script.clear();
  for (const char* tok : {"He", "llo"}) {
    GenerationEvent ev;
    ev.content = tok;
    TokenLogprob lp{tok, -0.5, std::vector<uint8_t>(tok, tok + std::strlen(tok)), {}};
    lp.top = {{tok, -0.5, {}}, {"x", -2.0, {120}}};
    ev.logprobs.push_back(lp);
    ts.engine.script.push_back(ev);
  }
  GenerationEvent fin;
  fin.kind = GenerationEvent::Kind::kFinish;
  fin.completion_tokens = 2;
  ts.engine.script.push_back(fin);
  auto c = ts.client();
  Json b = chat_body();
  b["logprobs"] = true;
  b["top_logprobs"] = 2;
  Json j = post_json(c, "/v1/chat/completions", b);
  const Json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "He");
  EXPECT_LE(content[0]["logprob"].get<double>(), 0.0);
  EXPECT_EQ(content[0]["bytes"], Json({72, 101}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_GE(content[0]["top_logprobs"][0]["logprob"].get<double>(), content[0]["top_logprobs"][1]["logprob"].get<double>());
  EXPECT_EQ(ts.engine.requests.back().sampling.top_logprobs, 2);
  // Without logprobs requested the field is null.
  EXPECT_TRUE(post_json(c, "/v1/chat/completions", chat_body())["choices"][0]["logprobs"].is_null());

  j = post_json(c, "/v1/completions", {{"prompt", "ab"}, {"logprobs", 2}, {"echo", true}});
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 2u);
  EXPECT_EQ(lp["token_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp["text_offset"], Json({2, 4}));  // after the echoed prompt
  EXPECT_EQ(j["choices"][0]["text"], "abHello");
}

}  // namespace
}  // namespace tf::server::testing
