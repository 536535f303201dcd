// tensorfold check (src/check): reply assembly, schema judging, haystacks, reports, and the
// checks themselves against a fake server that gets things wrong in known ways.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "check/chat_reply.h"
#include "check/check_result.h"
#include "check/haystack.h"
#include "check/live_checks.h"
#include "check/schema_check.h"

namespace tf::check {
namespace {

Json J(const char* s) { return Json::parse(s); }

TEST(ChatReply, StreamedToolCallsAssembleLikeTheWholeReply) {
  ChatReply whole = *parse_chat_reply(J(R"({"choices":[{"index":0,"finish_reason":"tool_calls","message":{
      "content":null,"reasoning_content":"think","tool_calls":[{"id":"c1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]}}],
      "usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":8}}})"));
  EXPECT_EQ(whole.cached_tokens, 8);
  std::vector<Json> chunks = {
      J(R"({"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"thi"}}]})"),
      J(R"({"choices":[{"index":0,"delta":{"reasoning_content":"nk"}}]})"),
      J(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]})"),
      J(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": "}}]}}]})"),
      J(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]})"),
      J(R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})"),
      J(R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}})")};
  auto streamed = assemble_chat_stream(chunks);
  ASSERT_TRUE(streamed.has_value()) << streamed.status().message();
  EXPECT_EQ(reply_difference(*streamed, whole), "");
  EXPECT_EQ(streamed->tool_calls[0].id, "c1");
  EXPECT_EQ(streamed->completion_tokens, 5);

  chunks[4] = J(
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Lyon\"}"}}]}}]})");
  EXPECT_NE(reply_difference(*assemble_chat_stream(chunks), whole).find("tool call 0 arguments differs"),
            std::string::npos);
}

TEST(ChatReply, StreamsAStrictClientWouldRejectAreErrors) {
  auto no_index =
      assemble_chat_stream({J(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c1"}]}}]})")});
  ASSERT_FALSE(no_index.has_value());
  EXPECT_NE(no_index.status().message().find("without an integer index"), std::string::npos);
  auto new_id =
      assemble_chat_stream({J(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a"}]}}]})"),
                            J(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b"}]}}]})")});
  ASSERT_FALSE(new_id.has_value());
  EXPECT_NE(new_id.status().message().find("changed its id"), std::string::npos);
  auto skips =
      assemble_chat_stream({J(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"a"}]}}]})")});
  EXPECT_FALSE(skips.has_value());
  auto error = assemble_chat_stream({J(R"({"error":{"message":"boom","type":"server_error"}})")});
  ASSERT_FALSE(error.has_value());
  EXPECT_NE(error.status().message().find("boom"), std::string::npos);
  EXPECT_FALSE(parse_chat_reply(J(R"({"choices":[]})")).has_value());
}

TEST(SchemaCheck, JudgesTheKeywordsToolsUse) {
  Json schema = J(R"({"type":"object","properties":{"city":{"type":"string"},
      "unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1},
      "tags":{"type":"array","items":{"type":"string"}}},"required":["city","unit"],"additionalProperties":false})");
  EXPECT_TRUE(
      schema_violations(schema, J(R"({"city":"Paris","unit":"celsius","days":2,"tags":["a"]})")).empty());
  auto v = schema_violations(schema, J(R"({"unit":"kelvin","days":0,"tags":["a",3],"extra":1})"));
  std::string all;
  for (const auto& s : v) all += s + "\n";
  EXPECT_NE(all.find("\"city\" is missing"), std::string::npos) << all;
  EXPECT_NE(all.find("/unit: \"kelvin\" is not one of the enum"), std::string::npos) << all;
  EXPECT_NE(all.find("/days: 0 is below the minimum"), std::string::npos) << all;
  EXPECT_NE(all.find("/tags/1: 3 is not of type \"string\""), std::string::npos) << all;
  EXPECT_NE(all.find("\"extra\" is not allowed"), std::string::npos) << all;
  EXPECT_FALSE(schema_violations(schema, J("[1]")).empty());
  EXPECT_TRUE(schema_violations(J(R"({"type":["integer","null"]})"), J("null")).empty());
  EXPECT_TRUE(schema_violations(J(R"({"type":"integer"})"), J("3.0")).empty());
}

TEST(Haystack, NeedleSitsAtItsDepthAndFillerIsDeterministic) {
  EXPECT_EQ(filler_sentences(3, 50), filler_sentences(3, 50));
  EXPECT_NE(filler_sentences(3, 50), filler_sentences(4, 50));
  const Needle n = make_needle(1);
  ASSERT_EQ(n.code.size(), 5u);
  EXPECT_NE(n.sentence.find(n.code.substr(0, 1) + "-"), std::string::npos);
  for (double depth : {0.0, 0.1, 0.5, 0.9, 1.0}) {
    const std::string text = haystack_with_needle(11, 200, depth, n);
    const size_t at = text.find(n.sentence);
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(text.find(n.sentence, at + 1), std::string::npos);  // once
    EXPECT_NEAR(static_cast<double>(at) / static_cast<double>(text.size()), depth, 0.03) << depth;
  }
  EXPECT_TRUE(reply_has_code(
      "The code is " + std::string(1, n.code[0]) + "-" + n.code.substr(1, 2) + " " + n.code.substr(3) + ".",
      n.code));
  EXPECT_FALSE(reply_has_code("I do not know.", n.code));
  EXPECT_FALSE(reply_has_code(n.code.substr(0, 4), n.code));
}

TEST(CheckResult, InfoItemsAreNotJudgedAndErrorsFail) {
  CheckResult r;
  r.name = "x";
  r.note("figure", "3");
  r.expect("claim", true, "held");
  EXPECT_TRUE(r.passed());
  r.expect("other", false, "did not");
  EXPECT_FALSE(r.passed());
  CheckResult e;
  e.name = "y";
  e.error = "server went away";
  EXPECT_FALSE(e.passed());
  const std::string text = render_check_report({r, e});
  EXPECT_NE(text.find("x              FAIL"), std::string::npos) << text;
  EXPECT_NE(text.find("  FAIL  other: did not"), std::string::npos) << text;
  EXPECT_NE(text.find("ERROR server went away"), std::string::npos) << text;
  EXPECT_NE(text.find("0 of 2 checks passed"), std::string::npos) << text;
  Json j = check_report_json({r, e}, "http://h", "m");
  EXPECT_FALSE(j["passed"].get<bool>());
  EXPECT_EQ(j["checks"][0]["items"].size(), 3u);
  EXPECT_TRUE(j["checks"][0]["items"][0]["info"].get<bool>());
}

// A fake server: answers every chat request with the same reply, reports no reuse (or a
// given one), and streams tool calls optionally wrong.
class FakeServer {
 public:
  int64_t cached_tokens = 0;
  bool stream_other_city = false;
  bool empty_health = false;
  std::atomic<int> chats{0};

  FakeServer() {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake","max_model_len":8192}]})", "application/json");
    });
    server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (empty_health) return;  // vLLM's: an empty 200
      res.set_content(R"({"ok":true,"streams":{"max":2,"decoding":0,"prefilling":0},"pool_tokens":4096,
                          "pool_free_tokens":4096,"requests_running":0,"requests_waiting":0})",
                      "application/json");
    });
    server_.Post("/tokenize", [](const httplib::Request& req, httplib::Response& res) {
      Json body = Json::parse(req.body);
      Json tokens = Json::array();
      for (size_t i = 0; i < body["prompt"].get<std::string>().size() / 4; ++i)
        tokens.push_back(100 + i % 50);
      res.set_content(Json{{"tokens", tokens}}.dump(), "application/json");
    });
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      ++chats;
      Json body = Json::parse(req.body);
      const std::string args = R"({"city": "Paris", "unit": "celsius"})";
      if (body.value("stream", false)) {
        std::string city = stream_other_city ? "Lyon" : "Paris";
        std::string sse =
            "data: " +
            Json{{"choices",
                  {{{"index", 0},
                    {"delta",
                     {{"tool_calls",
                       {{{"index", 0},
                         {"id", "c1"},
                         {"type", "function"},
                         {"function",
                          {{"name", "get_weather"},
                           {"arguments", "{\"city\": \"" + city + "\", \"unit\": \"celsius\"}"}}}}}}}}}}}}
                .dump() +
            "\n\ndata: " +
            Json{{"choices", {{{"index", 0}, {"delta", Json::object()}, {"finish_reason", "tool_calls"}}}}}
                .dump() +
            "\n\ndata: [DONE]\n\n";
        res.set_content(sse, "text/event-stream");
        return;
      }
      Json message = {{"role", "assistant"}, {"content", "Paris is 18 C."}};
      std::string finish = "stop";
      if (body.contains("tools") && !(body.contains("messages") && body["messages"].size() > 1)) {
        const bool time = body.contains("tool_choice") && body["tool_choice"].is_object();
        message = {{"role", "assistant"},
                   {"content", nullptr},
                   {"tool_calls",
                    {{{"id", "c1"},
                      {"type", "function"},
                      {"function",
                       {{"name", time ? "get_time" : "get_weather"},
                        {"arguments", time ? R"({"timezone": "Asia/Tokyo"})" : args}}}}}}};
        finish = "tool_calls";
      }
      Json reply = {{"choices", {{{"index", 0}, {"message", message}, {"finish_reason", finish}}}},
                    {"usage",
                     {{"prompt_tokens", 1000},
                      {"completion_tokens", 6},
                      {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}}}};
      res.set_content(reply.dump(), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

std::vector<CheckResult> run(FakeServer& fake, const std::vector<std::string>& names) {
  CheckOptions o;
  o.url = fake.url();
  o.timeout_s = 10;
  auto ctx = CheckContext::connect(o);
  EXPECT_TRUE(ctx.has_value()) << ctx.status().message();
  EXPECT_EQ(ctx->facts().streams_max, 2);
  EXPECT_EQ(ctx->facts().context_length, 8192);
  auto results = run_live_checks(*ctx, names, nullptr);
  EXPECT_TRUE(results.has_value()) << results.status().message();
  return *results;
}

const CheckItem* item(const CheckResult& r, const std::string& prefix) {
  for (const CheckItem& i : r.items)
    if (i.what.rfind(prefix, 0) == 0) return &i;
  return nullptr;
}

TEST(LiveChecks, PromptReuseFailsWhenNothingResumes) {
  FakeServer fake;
  auto results = run(fake, {"prompt_reuse"});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].passed()) << render_check_report(results);
  const CheckItem* repeat = item(results[0], "a repeated prompt resumes");
  ASSERT_NE(repeat, nullptr) << render_check_report(results);
  EXPECT_FALSE(repeat->ok);
  EXPECT_NE(repeat->detail.find("0 of 1,000"), std::string::npos) << repeat->detail;
  EXPECT_TRUE(item(results[0], "the resumed reply equals")->ok);  // the fake always says the same

  fake.cached_tokens = 950;  // now every prompt "resumes" 95 %
  results = run(fake, {"prompt_reuse"});
  EXPECT_TRUE(results[0].passed()) << render_check_report(results);
}

TEST(LiveChecks, ToolCheckCatchesAStreamThatDiffersFromTheWholeReply) {
  FakeServer fake;
  auto results = run(fake, {"toolcheck"});
  EXPECT_TRUE(results[0].passed()) << render_check_report(results);
  fake.stream_other_city = true;
  results = run(fake, {"toolcheck"});
  EXPECT_FALSE(results[0].passed());
  const CheckItem* streamed = item(results[0], "the streamed reply equals");
  ASSERT_NE(streamed, nullptr);
  EXPECT_FALSE(streamed->ok);
  EXPECT_NE(streamed->detail.find("arguments differs"), std::string::npos) << streamed->detail;
}

TEST(LiveChecks, UnknownNamesAndUnreachableServersAreErrors) {
  FakeServer fake;
  CheckOptions o;
  o.url = fake.url();
  auto ctx = CheckContext::connect(o);
  ASSERT_TRUE(ctx.has_value());
  auto r = run_live_checks(*ctx, {"needle", "nope"}, nullptr);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("no check named 'nope'"), std::string::npos);
  EXPECT_EQ(fake.chats.load(), 0);  // nothing ran
  o.url = "http://127.0.0.1:1";
  EXPECT_FALSE(CheckContext::connect(o).has_value());
}

TEST(LiveChecks, AServerWithoutOurHealthFieldsIsStillChecked) {
  FakeServer fake;
  fake.empty_health = true;
  CheckOptions o;
  o.url = fake.url();
  auto ctx = CheckContext::connect(o);
  ASSERT_TRUE(ctx.has_value()) << ctx.status().message();
  EXPECT_FALSE(ctx->facts().health);
  EXPECT_EQ(ctx->facts().streams_max, 1);
  EXPECT_EQ(ctx->facts().context_length, 8192);  // from /v1/models
  auto results = run_live_checks(*ctx, {"prompt_reuse"}, nullptr);
  ASSERT_TRUE(results.has_value());
  EXPECT_EQ((*results)[0].error, "");
}

}  // namespace
}  // namespace tf::check
