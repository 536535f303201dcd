// Request bodies (server/request_body.h) and the prompt budget (PROMPT_BUDGET_MIB): the body
// limit holds for decoded (gzip) and chunked bodies too, a body larger than the budget is a 413
// naming it, bodies that do not fit wait for room while smaller ones go, and the server keeps
// serving throughout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "server/request_body.h"
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

// A large body the server refuses early (here: not the deflate data its Content-Encoding says) is
// read through and dropped while the client still sends it, so the client gets its 400 naming the
// encoding: with 1 MiB drained, a 17 MB body met a reset before the answer.
TEST(ServerBody, ABodyThatIsNotItsContentEncodingIs400AndArrives) {
  TestServer ts;
  auto c = ts.client();
  std::string garbage(17 << 20, 'x');
  for (size_t i = 0; i < garbage.size(); i += 7) garbage[i] = static_cast<char>(i * 131);
  auto res = c.Post(kChat, httplib::Headers{{"Content-Encoding", "deflate"}}, garbage, "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  expect_error(res, 400, "not valid Content-Encoding: deflate");
  EXPECT_EQ(ts.client().Post(kChat, chat_with("hi"), "application/json")->status, 200);
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
  // A body of unknown size is charged as it arrives: a small one fits, one that outgrows the
  // budget is refused when it does.
  auto chunked = ts.client();
  auto small = post_chunked(chunked, kChat, chat_with("hi"));
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 200) << small->body;
  auto grown = post_chunked(chunked, kChat, chat_with(std::string(100 << 10, 'a')));
  expect_error(grown, 413, "PROMPT_BUDGET_MIB");
  EXPECT_NE(grown->body.find("chunked or compressed"), std::string::npos) << grown->body;
  EXPECT_EQ(ts.client().Get("/health")->status, 200);
  EXPECT_EQ(Json::parse(ts.client().Get("/health")->body)["prompt_budget"]["held_bytes"], 0);
}

// ---------------------------------------------------------------- bodies of unknown size

int connect_raw(const TestServer& ts) {
  const int fd = testing::connect_loopback(ts.server->port(), 20);
  EXPECT_GE(fd, 0);
  return fd;
}

void send_all(int fd, const std::string& s) { ASSERT_EQ(testing::send_some(fd, s), s.size()); }

std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

constexpr const char* kChunkedTokenize =
    "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
    "Connection: close\r\n\r\n";

// The status of the answer the server sends on `fd` (0: none).
int answer_status(int fd) {
  std::string got;
  char buf[4096];
  for (ssize_t n; got.find("\r\n") == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  return got.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(got.c_str() + 9) : 0;
}

Json budget_of(const TestServer& ts) {
  return Json::parse(ts.client().Get("/health")->body)["prompt_budget"];
}

// A chunked body used to be charged the whole body limit (96 MiB) up front: under the default
// budget (128 MiB) one slowly trickled body made every other chunked or compressed one wait
// 60 s for a 503. It holds one step (1 MiB) now, and others go beside it.
TEST(ServerBody, ATrickledChunkedBodyHoldsOnlyWhatArrived) {
  TestServer ts;
  int slow = connect_raw(ts);
  send_all(slow, std::string(kChunkedTokenize) + chunk(R"({"prompt":")"));
  const bool held = testing::eventually([&] { return budget_of(ts)["held_bytes"] == kBodyChargeStep; });
  EXPECT_TRUE(held) << budget_of(ts).dump();
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto c = ts.client();
    auto res = post_chunked(c, kChat, chat_with("hi"));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    auto gz = ts.client();
    gz.set_compress(true);
    EXPECT_EQ(gz.Post(kChat, chat_with("hi"), "application/json")->status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  }
  send_all(slow, chunk("hi\"}") + "0\r\n\r\n");
  EXPECT_EQ(answer_status(slow), 200);
  ::close(slow);
  EXPECT_EQ(budget_of(ts)["held_bytes"], 0);
}

// Announced bodies are charged as they arrive too: two clients that announced 95 and 33 MiB
// (the whole default budget together) and send slowly used to make every other request wait
// for room (60 s, then 503). They hold one step each now; an announced body larger than the
// budget is still refused before it is read.
TEST(ServerBody, TrickledAnnouncedBodiesHoldOnlyWhatArrived) {
  TestServer ts;
  auto announce = [&](int64_t length) {
    const int fd = connect_raw(ts);
    send_all(fd, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(length) + "\r\nConnection: close\r\n\r\n{\"prompt\":\"");
    return fd;
  };
  const int a = announce(95 << 20), b = announce(33 << 20);
  const bool held = testing::eventually([&] { return budget_of(ts)["held_bytes"] == 2 * kBodyChargeStep; });
  EXPECT_TRUE(held) << budget_of(ts).dump();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ts.client().Post(kChat, chat_with("hi"), "application/json")->status, 200);
  EXPECT_EQ(
      ts.client().Post("/tokenize", tokenize_with(std::string(3 << 20, 'a')), "application/json")->status,
      200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(budget_of(ts)["waiting"], 0);
  // The short body goes on to its end and is charged its length by then.
  const std::string rest = std::string((33 << 20) - 13, 'a') + "\"}";
  send_all(b, rest);
  EXPECT_EQ(answer_status(b), 200);
  ::close(b);
  ::close(a);
  const bool released = testing::eventually([&] { return budget_of(ts)["held_bytes"] == 0; });
  EXPECT_TRUE(released) << budget_of(ts).dump();
}

// A body must keep a pace (body_pace.h; here 1 s plus a second a KiB): one trickled a byte
// every 200 ms is answered 408 once it falls behind, its connection closed (the rest of it is
// not read), and its budget given back; a body at the pace, to a route or to no route, goes.
TEST(ServerBody, ABodyBehindItsPaceIs408AndItsConnectionCloses) {
  ServerOptions o;
  o.body_pace.grace = std::chrono::seconds(1);
  o.body_pace.min_rate = 1024;
  TestServer ts(o);
  for (const char* path : {"/tokenize", "/no/such/route"}) {
    const int fd = connect_raw(ts);
    send_all(fd,
             std::string("POST ") + path +
                 " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n");
    const auto t0 = std::chrono::steady_clock::now();
    std::string got;
    char buf[4096];
    for (int i = 0; i < 40 && got.find("\r\n\r\n") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      (void)::send(fd, "a", 1, MSG_NOSIGNAL);
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0;)
        got.append(buf, static_cast<size_t>(n));
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(got.rfind(path[1] == 't' ? "HTTP/1.1 408" : "HTTP/1.1 404", 0), 0u) << path << ": " << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
    if (path[1] == 't') {
      EXPECT_NE(got.find("arrived too slowly"), std::string::npos) << got;
    }
    EXPECT_GT(waited, 0.9) << path;
    EXPECT_LT(waited, 5.0) << path;  // soon after the 1 s grace (~1.4 s), long before the 8 s loop ends
    // The server closes its side: reads end (after the answer) within the drain.
    bool closed = false;
    for (int i = 0; i < 50 && !closed; ++i) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      closed = n == 0;
      if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(closed) << path;
    ::close(fd);
  }
  EXPECT_EQ(budget_of(ts)["held_bytes"], 0);
  // Bodies at the pace: a large one in one go, and a small one sent in two halves 200 ms apart
  // (well within the 1 s grace however late the sleep ends on a loaded machine).
  EXPECT_EQ(
      ts.client().Post("/tokenize", tokenize_with(std::string(2 << 20, 'a')), "application/json")->status,
      200);
  const int fd = connect_raw(ts);
  const std::string body = tokenize_with("hello");
  send_all(fd,
           "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
           "Content-Length: " +
               std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, 5));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  send_all(fd, body.substr(5));
  EXPECT_EQ(answer_status(fd), 200);
  ::close(fd);
}

TEST(ServerBody, AGzipBodyIsChargedAsItDecodes) {
  ServerOptions o;
  o.prompt_budget_bytes = 2 << 20;
  TestServer ts(o);
  auto c = ts.client();
  c.set_compress(true);
  auto fits = c.Post("/tokenize", tokenize_with(std::string(1500 << 10, 'a')), "application/json");
  ASSERT_TRUE(fits);
  EXPECT_EQ(fits->status, 200);
  expect_error(c.Post("/tokenize", tokenize_with(std::string(3 << 20, 'a')), "application/json"), 413,
               "PROMPT_BUDGET_MIB");
  EXPECT_EQ(budget_of(ts)["held_bytes"], 0);
}

// Two chunked bodies that each hold half the budget and need more: the first waits for room
// (the second still runs and could give some back); when the second asks too, nobody who could
// give bytes back runs, so the second is refused at once (503) rather than both waiting 60 s,
// and the first goes on with the room it gave back.
TEST(ServerBody, GrowingBodiesWaitingForEachOtherDoNotDeadlock) {
  ServerOptions o;
  o.prompt_budget_bytes = 2 << 20;
  TestServer ts(o);
  const std::string part(900 << 10, 'a');
  int a = connect_raw(ts), b = connect_raw(ts);
  send_all(a, std::string(kChunkedTokenize) + chunk(R"({"prompt":")" + part));
  send_all(b, std::string(kChunkedTokenize) + chunk(R"({"prompt":")" + part));
  const bool full = testing::eventually([&] { return budget_of(ts)["held_bytes"] == 2 << 20; });
  ASSERT_TRUE(full) << budget_of(ts).dump();
  send_all(a, chunk(part));  // a needs a second step: it waits
  const bool waiting = testing::eventually([&] { return budget_of(ts)["waiting"] == 1; });
  ASSERT_TRUE(waiting) << budget_of(ts).dump();
  const auto t0 = std::chrono::steady_clock::now();
  send_all(b, chunk(part) + chunk("\"}") + "0\r\n\r\n");
  EXPECT_EQ(answer_status(b), 503);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  send_all(a, chunk("\"}") + "0\r\n\r\n");
  EXPECT_EQ(answer_status(a), 200);
  ::close(a);
  ::close(b);
  EXPECT_EQ(budget_of(ts)["held_bytes"], 0);
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
  const bool seen = testing::eventually([&] { return waiting(); });
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
