// Request bodies (server/request_body.h) and the prompt budget (PROMPT_BUDGET_MIB): the body
// limit holds for decoded (gzip) and chunked bodies too, a body larger than the budget is a 413
// naming it, bodies that do not fit wait for room while smaller ones go, and the server keeps
// serving throughout.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "server_test_util.h"

namespace tf::server::testing {
namespace {

constexpr const char* kChat = "/v1/chat/completions";

std::string chat_with(const std::string& content) {
  return R"({"messages":[{"role":"user","content":")" + content + R"("}],"max_tokens":2})";
}
std::string tokenize_with(const std::string& prompt) { return R"({"prompt":")" + prompt + R"("})"; }

// A chunked POST (httplib sends a body of unknown length chunked).
httplib::Result post_chunked(httplib::Client& c, const char* path, const std::string& body) {
  return c.Post(
      path,
      [&body](size_t offset, httplib::DataSink& sink) {
        if (offset < body.size())
          sink.write(body.data() + offset, std::min<size_t>(body.size() - offset, 64 << 10));
        if (offset + (64 << 10) >= body.size()) sink.done();
        return true;
      },
      "application/json");
}

void expect_error(const httplib::Result& res, int status, const std::string& message_part) {
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, status) << res->body.substr(0, 300);
  Json j = Json::parse(res->body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j["error"].is_object()) << res->body.substr(0, 300);
  EXPECT_NE(j["error"]["message"].get<std::string>().find(message_part), std::string::npos) << res->body;
}

// httplib 0.11 checks the limit against Content-Length only: a gzip body decoded into any size.
TEST(ServerBody, GzipBodyDecodedPastTheLimitIs413) {
  ServerOptions o;
  o.max_body_bytes = 1 << 20;
  TestServer ts(o);
  auto c = ts.client();
  c.set_compress(true);  // gzip, Content-Encoding: gzip
  expect_error(c.Post(kChat, chat_with(std::string(3 << 20, 'a')), "application/json"), 413, "1 MiB");
  EXPECT_EQ(c.Post(kChat, chat_with("hi"), "application/json")->status, 200);  // a small gzip body is read
  auto plain = ts.client();
  EXPECT_EQ(plain.Post(kChat, chat_with("hi"), "application/json")->status, 200);
}

TEST(ServerBody, ChunkedBodyPastTheLimitIs413) {
  ServerOptions o;
  o.max_body_bytes = 1 << 20;
  TestServer ts(o);
  auto c = ts.client();
  expect_error(post_chunked(c, kChat, chat_with(std::string(2 << 20, 'a'))), 413, "1 MiB");
  auto again = ts.client();
  auto res = post_chunked(again, kChat, chat_with("hi"));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST(ServerBody, BodyLargerThanThePromptBudgetIs413NamingIt) {
  ServerOptions o;
  o.prompt_budget_bytes = 64 << 10;
  TestServer ts(o);
  auto c = ts.client();
  auto res = c.Post(kChat, chat_with(std::string(100 << 10, 'a')), "application/json");
  expect_error(res, 413, "PROMPT_BUDGET_MIB");
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "request_too_large");
  EXPECT_EQ(c.Post(kChat, chat_with("hi"), "application/json")->status, 200);
  // A body of unknown size counts as the body limit (96 MiB), more than this budget.
  auto chunked = ts.client();
  expect_error(post_chunked(chunked, kChat, chat_with("hi")), 413, "PROMPT_BUDGET_MIB");
  EXPECT_EQ(ts.client().Get("/health")->status, 200);
}

// Two bodies of 600 KB do not fit a budget of 1 MiB together: the second waits until the
// first's prompt is tokenized, while a small request beside them is answered at once.
TEST(ServerBody, ABodyWaitsForRoomWhileSmallerOnesGo) {
  ServerOptions o;
  o.prompt_budget_bytes = 1 << 20;
  TestServer ts(o);
  struct Reopen {
    FakeEngine& e;
    ~Reopen() { e.open_tokenize_gate(); }
  } reopen{ts.engine};
  ts.engine.close_tokenize_gate();
  const std::string big = tokenize_with(std::string(600 << 10, 'a'));
  std::atomic<int> first{0}, second{0};
  std::thread a([&] {
    auto c = ts.client();
    auto r = c.Post("/tokenize", big, "application/json");
    first = r ? r->status : -1;
  });
  ASSERT_TRUE(ts.engine.wait_at_gate(1, std::chrono::seconds(10)));  // holds 600 KB, tokenizing
  std::thread b([&] {
    auto c = ts.client();
    auto r = c.Post("/tokenize", big, "application/json");
    second = r ? r->status : -1;
  });
  auto waiting = [&] {
    auto h = ts.client().Get("/health");
    return h && Json::parse(h->body)["prompt_budget"]["waiting"] == 1;
  };
  bool seen = false;
  for (int i = 0; i < 500 && !(seen = waiting()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(seen);
  Json h = Json::parse(ts.client().Get("/health")->body)["prompt_budget"];
  EXPECT_EQ(h["bytes"], 1 << 20);
  EXPECT_EQ(h["held_bytes"], static_cast<int64_t>(big.size()));
  // A small chat fits beside the first body: answered while the second body waits.
  auto small = ts.client().Post(kChat, chat_with("hi"), "application/json");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 200);
  EXPECT_EQ(second, 0);
  ts.engine.open_tokenize_gate();
  a.join();
  b.join();
  EXPECT_EQ(first, 200);
  EXPECT_EQ(second, 200);
  EXPECT_EQ(Json::parse(ts.client().Get("/health")->body)["prompt_budget"]["held_bytes"], 0);
}

TEST(ServerBody, MultipartBodyIs400AndTheConnectionStaysUsable) {
  TestServer ts;
  auto c = ts.client();
  httplib::MultipartFormDataItems items = {{"messages", "x", "", ""}};
  auto res = c.Post(kChat, items);
  expect_error(res, 400, "multipart/form-data");
  EXPECT_EQ(c.Post(kChat, chat_with("hi"), "application/json")->status, 200);
}

// Any other path is a 404 with an error object; a body sent there is dropped, not decoded whole.
TEST(ServerBody, UnknownPathsWithBodiesAre404) {
  ServerOptions o;
  o.max_body_bytes = 1 << 20;
  TestServer ts(o);
  auto c = ts.client();
  c.set_compress(true);
  for (const char* path : {"/v1/nothing", "/v1/chat/completions/x"}) {
    expect_error(c.Post(path, chat_with(std::string(3 << 20, 'a')), "application/json"), 404, "no route");
    expect_error(c.Put(path, chat_with("hi"), "application/json"), 404, "no route");
  }
  expect_error(c.Delete("/v1/responses/resp_none", chat_with(std::string(3 << 20, 'a')), "application/json"),
               404, "not found");
  EXPECT_EQ(c.Post(kChat, chat_with("hi"), "application/json")->status, 200);
}

// The answer of /tokenize, written as text, is what the Json value's dump was.
TEST(ServerBody, TokenizeAnswerIsPlainJson) {
  TestServer ts;
  auto c = ts.client();
  auto res = c.Post("/tokenize", R"({"prompt":"a\"b","return_token_strs":true})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, R"({"count":3,"max_model_len":4096,"tokens":[97,34,98],"token_strs":["a","\"","b"]})");
  res = c.Post("/tokenize", R"({"prompt":"a"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, R"({"count":1,"max_model_len":4096,"tokens":[97],"token_strs":null})");
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
}

}  // namespace
}  // namespace tf::server::testing
