// Hostile and malformed requests: each gets a 4xx OpenAI error object (never 5xx),
// and the server keeps serving afterwards (issue 5, "Errors").
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "server_test_util.h"

namespace tf::server::testing {
namespace {

struct Case {
  const char* path;
  std::string body;
  int status;
  const char* param;  // nullptr: not checked
};

std::string chat(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"hi"}])" + (extra.empty() ? "" : "," + extra) + "}";
}

std::vector<Case> cases() {
  const char* C = "/v1/chat/completions";
  const char* P = "/v1/completions";
  const char* R = "/v1/responses";
  std::vector<Case> v = {
      {C, "", 400, "body"},
      {C, "{", 400, "body"},
      {C, "not json", 400, "body"},
      {C, "[]", 400, "body"},
      {C, "null", 400, "body"},
      {C, "42", 400, "body"},
      {C, "\"str\"", 400, "body"},
      {C, "{}", 400, "messages"},
      {C, R"({"messages":"hi"})", 400, "messages"},
      {C, R"({"messages":[]})", 400, "messages"},
      {C, R"({"messages":[1]})", 400, "messages[0]"},
      {C, R"({"messages":[{"content":"x"}]})", 400, "messages[0].role"},
      {C, R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0].role"},
      {C, R"({"messages":[{"role":"user","content":5}]})", 400, "messages[0].content"},
      {C, R"({"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AA","format":"wav"}}]}]})", 400, "messages[0].content[0].type"},
      {C, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://example.com/a.png"}}]}]})", 400, "messages[0].content[0]"},
      {C, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", 400, "messages[0].content[0].image_url.url"},
      {C, R"({"messages":[{"role":"user","content":[{"type":"bogus"}]}]})", 400, "messages[0].content[0].type"},
      {C, R"({"messages":[{"role":"user"}]})", 400, "messages[0].content"},
      {C, chat(R"("max_tokens":-1)"), 400, "max_tokens"},
      {C, chat(R"("max_tokens":0)"), 400, "max_tokens"},
      {C, chat(R"("max_tokens":"ten")"), 400, "max_tokens"},
      {C, chat(R"("max_tokens":1.5)"), 400, "max_tokens"},
      {C, chat(R"("max_tokens":1e300)"), 400, "max_tokens"},
      {C, chat(R"("max_tokens":99999999999999999999999999)"), 400, "max_tokens"},
      {C, chat(R"("max_completion_tokens":-5)"), 400, "max_completion_tokens"},
      {C, chat(R"("temperature":3)"), 400, "temperature"},
      {C, chat(R"("temperature":-0.1)"), 400, "temperature"},
      {C, chat(R"("temperature":"hot")"), 400, "temperature"},
      {C, chat(R"("top_p":0)"), 400, "top_p"},
      {C, chat(R"("top_p":1.5)"), 400, "top_p"},
      {C, chat(R"("top_k":-2)"), 400, "top_k"},
      {C, chat(R"("min_p":2)"), 400, "min_p"},
      {C, chat(R"("n":0)"), 400, "n"},
      {C, chat(R"("n":100000)"), 400, "n"},
      {C, chat(R"("n":-1)"), 400, "n"},
      {C, chat(R"("presence_penalty":5)"), 400, "presence_penalty"},
      {C, chat(R"("frequency_penalty":-3)"), 400, "frequency_penalty"},
      // The sampler's range is (0, 2]: beyond it the engine refused with param null.
      {C, chat(R"("repetition_penalty":2.5)"), 400, "repetition_penalty"},
      {C, chat(R"("repetition_penalty":100)"), 400, "repetition_penalty"},
      {C, chat(R"("repetition_penalty":0)"), 400, "repetition_penalty"},
      {C, chat(R"("repetition_penalty":1e-50)"), 400, "repetition_penalty"},
      {P, R"({"prompt":"x","repetition_penalty":3})", 400, "repetition_penalty"},
      {C, chat(R"("seed":"abc")"), 400, "seed"},
      {C, chat(R"("seed":1e40)"), 400, "seed"},
      {C, chat(R"("stop":5)"), 400, "stop"},
      {C, chat(R"("stop":["a",1])"), 400, "stop"},
      {C, chat(R"("stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"])"), 400, "stop"},
      // Searched for at every token: 16 of a megabyte cost 2 ms a token on the engine's thread.
      {C, chat(R"("stop":[")" + std::string(4097, 'a') + R"("])"), 400, "stop"},
      {P, R"({"prompt":"x","stop":")" + std::string(1 << 20, 'a') + R"("})", 400, "stop"},
      {C, chat(R"("logit_bias":{"abc":1})"), 400, "logit_bias"},
      {C, chat(R"("logit_bias":{"5":1000})"), 400, "logit_bias"},
      {C, chat(R"("logit_bias":[1])"), 400, "logit_bias"},
      {C, chat(R"("top_logprobs":3)"), 400, "top_logprobs"},
      {C, chat(R"("logprobs":true,"top_logprobs":50)"), 400, "top_logprobs"},
      {C, chat(R"("stream":"yes")"), 400, "stream"},
      {C, chat(R"("stream_options":{"include_usage":true})"), 400, "stream_options"},
      {C, chat(R"("tools":[])"), 400, "tools"},
      {C, chat(R"("tools":{})"), 400, "tools"},
      {C, chat(R"("tools":[{"type":"function"}])"), 400, "tools[0].function"},
      {C, chat(R"("tool_choice":"required")"), 400, "tool_choice"},
      {C, chat(R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})"), 400, "tool_choice"},
      {C, chat(R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes")"), 400, "tool_choice"},
      {C, chat(R"("response_format":{"type":"json_schema"})"), 400, "response_format.json_schema"},
      {C, chat(R"("response_format":{"type":"xml"})"), 400, "response_format.type"},
      {C, chat(R"("response_format":"json")"), 400, "response_format"},
      {C, chat(R"("guided_json":{"type":"object"},"guided_regex":"a+")"), 400, "structured_outputs"},
      {C, chat(R"("reasoning_effort":"extreme")"), 400, "reasoning_effort"},
      {C, chat(R"("functions":[{"name":"f"}])"), 400, "functions"},
      {C, chat(R"("audio":{"voice":"x"})"), 400, "audio"},
      {C, chat(R"("add_generation_prompt":true,"continue_final_message":true)"), 400, "continue_final_message"},
      {C, chat(R"("chat_template_kwargs":[1])"), 400, "chat_template_kwargs"},
      {C, chat(R"("model":"other-model")"), 404, "model"},
      {C, chat(R"("max_tokens":5000)"), 400, "messages"},
      {C, std::string(300, '[') + std::string(300, ']'), 400, "body"},
      {C, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, nullptr},
      {P, "{}", 400, "prompt"},
      {P, R"({"prompt":""})", 400, "prompt"},
      {P, R"({"prompt":[]})", 400, "prompt"},
      {P, R"({"prompt":[-1]})", 400, "prompt"},
      {P, R"({"prompt":[1,"a"]})", 400, "prompt"},
      {P, R"({"prompt":{"a":1}})", 400, "prompt"},
      {P, R"({"prompt":"x","suffix":"y"})", 400, "suffix"},
      {P, R"({"prompt":"x","logprobs":30})", 400, "logprobs"},
      {P, R"({"prompt":"x","best_of":0})", 400, "best_of"},
      {P, R"({"prompt":"x","max_tokens":100000})", 400, "messages"},
      {P, R"({"prompt":[999999]})", 400, "prompt"},
      {R, "{}", 400, "input"},
      {R, R"({"input":5})", 400, "input"},
      {R, R"({"input":[{"type":"message"}]})", 400, "input[0].role"},
      {R, R"({"input":[{"type":"weird"}]})", 400, "input[0].type"},
      {R, R"({"input":"hi","previous_response_id":"resp_x"})", 404, "previous_response_id"},
      {R, R"({"input":"hi","max_output_tokens":-3})", 400, "max_output_tokens"},
      {"/tokenize", "{}", 400, "prompt"},
      {"/tokenize", R"({"prompt":7})", 400, "prompt"},
      {"/detokenize", "{}", 400, "tokens"},
      {"/detokenize", R"({"tokens":["a"]})", 400, "tokens"},
      {"/v1/nonexistent", "{}", 404, nullptr},
  };
  return v;
}

TEST(ServerHostile, TableOfBadRequests) {
  TestServer ts;
  auto c = ts.client();
  auto all = cases();
  EXPECT_GE(all.size(), 50u);
  for (const Case& k : all) {
    auto res = c.Post(k.path, k.body, "application/json");
    ASSERT_TRUE(res) << k.path << " " << k.body.substr(0, 80);
    EXPECT_EQ(res->status, k.status) << k.path << " " << k.body.substr(0, 120) << " -> " << res->body;
    EXPECT_NE(res->get_header_value("Content-Type").find("application/json"), std::string::npos);
    Json j = Json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << res->body;
    ASSERT_TRUE(j["error"].is_object()) << res->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_TRUE(j["error"].contains("code"));
    if (k.param) {
      EXPECT_EQ(j["error"]["param"], k.param) << k.body.substr(0, 120);
    }
  }
  // Still serving.
  auto ok = c.Post("/v1/chat/completions", chat(""), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(ServerHostile, ContextLengthExceededIs400WithCode) {
  TestServer ts;
  auto c = ts.client();
  auto res = c.Post("/v1/chat/completions", chat(R"("max_tokens":5000)"), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  Json j = Json::parse(res->body);
  EXPECT_EQ(j["error"]["code"], "context_length_exceeded");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("maximum context length is 4096"), std::string::npos);
  EXPECT_TRUE(ts.engine.requests.empty());  // never reached the engine
}

TEST(ServerHostile, QueueFullIs429) {
  TestServer ts;
  ts.engine.queue_full = true;
  auto c = ts.client();
  auto res = c.Post("/v1/chat/completions", chat(""), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  EXPECT_FALSE(res->get_header_value("Retry-After").empty());
  EXPECT_EQ(Json::parse(res->body)["error"]["type"], "rate_limit_exceeded");
}

TEST(ServerHostile, BodyTooLargeIs413) {
  ServerOptions o;
  o.max_body_bytes = 1 << 20;
  TestServer ts(o);
  auto c = ts.client();
  std::string big = chat("\"pad\":\"" + std::string(2 << 20, 'a') + "\"");
  auto res = c.Post("/v1/chat/completions", big, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  Json j = Json::parse(res->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << res->body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_EQ(c.Post("/v1/chat/completions", chat(""), "application/json")->status, 200);
}

TEST(ServerHostile, DefaultBodyLimitIs96MiB) {
  ServerOptions o;
  EXPECT_EQ(o.max_body_bytes, size_t{96} << 20);
}

TEST(ServerHostile, ApiKeyEnforcedWhenConfigured) {
  ServerOptions o;
  o.api_key = "secret";
  TestServer ts(o);
  auto c = ts.client();
  auto res = c.Post("/v1/chat/completions", chat(""), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "invalid_api_key");
  c.set_bearer_token_auth("secret");
  EXPECT_EQ(c.Post("/v1/chat/completions", chat(""), "application/json")->status, 200);
}

TEST(ServerHostile, SlowPartialBodyDoesNotBlockOthers) {
  ServerOptions o;
  o.read_timeout_s = 1;
  TestServer ts(o);
  // A raw socket that promises a body and never sends it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(ts.server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"mess";
  ASSERT_EQ(::send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  auto c = ts.client();
  auto res = c.Post("/v1/chat/completions", chat(""), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  ::close(fd);
}

}  // namespace
}  // namespace tf::server::testing

namespace tf::server::testing {
namespace {

// Every field of a rich valid request replaced by values of every JSON type: the answer
// is a 2xx or a 4xx with an error object, never a 5xx, and the server keeps serving.
TEST(ServerHostile, FieldTypeMutationsNeverGive5xx) {
  TestServer ts;
  auto c = ts.client();
  Json base = Json::parse(R"({"model":"fake-model","messages":[{"role":"user","content":"hi"}],
    "temperature":0.5,"top_p":0.9,"top_k":5,"min_p":0.1,"seed":3,"n":1,"stop":["x"],"max_tokens":5,
    "max_completion_tokens":5,"presence_penalty":0,"frequency_penalty":0,"repetition_penalty":1,
    "logit_bias":{"1":1},"logprobs":true,"top_logprobs":1,"stream":false,"response_format":{"type":"text"},
    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto",
    "parallel_tool_calls":true,"reasoning_effort":"low","chat_template_kwargs":{},"guided_regex":"a"})");
  const std::vector<Json> values = {nullptr, true, -1, 0, 1e308, -1e308, 18446744073709551615ULL,
                                    INT64_MIN, "x", std::string(1000, 'z'), Json::array(),
                                    Json::array({1, "a"}), Json::object(), Json{{"a", Json::array()}}};
  int count = 0;
  for (auto it = base.begin(); it != base.end(); ++it) {
    for (const Json& v : values) {
      Json b = base;
      b[it.key()] = v;
      auto res = c.Post("/v1/chat/completions", b.dump(), "application/json");
      ASSERT_TRUE(res) << it.key() << "=" << v.dump();
      EXPECT_LT(res->status, 500) << it.key() << "=" << v.dump() << " -> " << res->body;
      if (res->status >= 400) {
        Json j = Json::parse(res->body, nullptr, false);
        EXPECT_TRUE(j.is_object() && j["error"].is_object()) << res->body;
      }
      ++count;
      // The same mutations on the messages' first entry.
      Json m = base;
      m["messages"][0]["content"] = v;
      res = c.Post("/v1/chat/completions", m.dump(), "application/json");
      ASSERT_TRUE(res);
      EXPECT_LT(res->status, 500) << "content=" << v.dump();
    }
  }
  EXPECT_GT(count, 300);
  EXPECT_EQ(c.Post("/v1/chat/completions", base.dump(), "application/json")->status, 200);
}

}  // namespace
}  // namespace tf::server::testing

namespace tf::server::testing {
namespace {

// The default 96 MiB limit: a 97 MiB body gets 413 with an error object (httplib
// discards the body, then answers), and the server keeps serving.
TEST(ServerHostile, Body97MiBGets413) {
  TestServer ts;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(ts.server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(size_t{97} << 20) + "\r\n\r\n{";
  ASSERT_EQ(::send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  std::string chunk(1 << 20, ' ');
  size_t left = (size_t{97} << 20) - 1;
  while (left > 0) {
    ssize_t n = ::send(fd, chunk.data(), std::min(left, chunk.size()), MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer and close before the end
    left -= static_cast<size_t>(n);
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) {
    reply.append(buf, static_cast<size_t>(n));
    if (reply.find("}}") != std::string::npos) break;
  }
  ::close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply;
  size_t body = reply.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  Json j = Json::parse(reply.substr(body + 4), nullptr, false);
  ASSERT_TRUE(j.is_object()) << reply;
  EXPECT_NE(j["error"]["message"].get<std::string>().find("96 MiB"), std::string::npos);
  EXPECT_EQ(ts.client().Post("/v1/chat/completions", chat(""), "application/json")->status, 200);
}

}  // namespace
}  // namespace tf::server::testing

namespace tf::server::testing {
namespace {

std::string repeat_join(const std::string& piece, int times, const std::string& separator) {
  std::string out;
  for (int i = 0; i < times; ++i) out += (i ? separator : "") + piece;
  return out;
}

// A grammar the engine refuses (a bad one, or one past the grammar budget, which a request
// of a few kilobytes could otherwise make tens of gigabytes) is a 400 naming the field it
// came from; the server keeps serving.
TEST(ServerHostile, GrammarRefusalsNameTheField) {
  TestServer ts;
  auto c = ts.client();
  const Json msgs = Json::parse(R"([{"role":"user","content":"hi"}])");
  const Json huge_schema =
      Json::parse(R"({"anyOf":[)" + repeat_join(R"({"type":"string","maxLength":9999})", 200, ",") + "]}");
  const Json pattern_param = {{"type", "object"},
                              {"properties", {{"s", {{"type", "string"}, {"pattern", "^a{0,9999}$"}}}}}};
  Json tools = Json::array();
  for (int i = 0; i < 60; ++i)
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", "f" + std::to_string(i)},
                       {"parameters", {{"type", "object"}, {"properties", {{"x", pattern_param}}}}}}}});
  struct GrammarCase {
    const char* path;
    Json body;
    const char* param;
    const char* message;  // part of the error message
  };
  const std::vector<GrammarCase> cases = {
      {"/v1/chat/completions",
       {{"messages", msgs}, {"guided_grammar", "root ::= " + repeat_join(R"("a"{0,10000})", 200, " ")}},
       "guided_grammar",
       "grammar too large"},
      {"/v1/chat/completions",
       {{"messages", msgs}, {"guided_grammar", "root ::= nothing"}},
       "guided_grammar",
       "nothing"},
      {"/v1/chat/completions", {{"messages", msgs}, {"guided_regex", "(a"}}, "guided_regex", "regex"},
      {"/v1/chat/completions",
       {{"messages", msgs}, {"structured_outputs", {{"regex", repeat_join("a{0,9999}", 99, "|")}}}},
       "structured_outputs.regex",
       "grammar too large"},
      {"/v1/chat/completions",
       {{"messages", msgs},
        {"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", huge_schema}}}}}},
       "response_format",
       "grammar too large"},
      {"/v1/chat/completions",
       {{"messages", msgs}, {"guided_json", {{"type", "integer"}, {"multipleOf", 3}}}},
       "guided_json",
       "multipleOf"},
      {"/v1/completions",
       {{"prompt", "hi"}, {"guided_json", huge_schema}},
       "guided_json",
       "grammar too large"},
      {"/v1/responses",
       {{"input", "hi"},
        {"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", huge_schema}}}}}},
       "text.format",
       "grammar too large"},
      {"/v1/chat/completions",
       {{"messages", msgs}, {"tools", tools}, {"tool_choice", "required"}},
       "tools",
       "grammar too large"},
  };
  for (const GrammarCase& k : cases) {
    auto res = c.Post(k.path, k.body.dump(), "application/json");
    ASSERT_TRUE(res) << k.path;
    EXPECT_EQ(res->status, 400) << k.path << " " << k.param << " -> " << res->body.substr(0, 300);
    Json j = Json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j["error"].is_object()) << res->body.substr(0, 300);
    EXPECT_EQ(j["error"]["param"], k.param) << res->body.substr(0, 300);
    EXPECT_NE(j["error"]["message"].get<std::string>().find(k.message), std::string::npos)
        << res->body.substr(0, 300);
  }
  auto ok =
      c.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"guided_regex":"a+"})",
             "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace
}  // namespace tf::server::testing
