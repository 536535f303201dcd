// CORS (CORS_ORIGINS, server/cors.h): the origin list, the headers a preflight may ask for, and
// through the HTTP server the preflight, the headers of JSON answers, errors (ours and
// httplib's) and streams; and keep-alive connections that outlast httplib's 5 requests.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/cors.h"
#include "server_test_util.h"

namespace tf::server {
namespace {

using testing::Json;
using testing::TestServer;

const std::string kChat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})";

TEST(CorsPolicy, StarAllowsAnyOriginWithAStar) {
  auto p = CorsPolicy::parse("*");
  ASSERT_TRUE(p) << p.status().to_string();
  EXPECT_TRUE(p->enabled());
  EXPECT_TRUE(p->any());
  EXPECT_EQ(p->allow_origin("https://evil.example"), "*");
  EXPECT_EQ(p->allow_origin(""), std::nullopt);  // no Origin: not a cross-origin request
}

TEST(CorsPolicy, EmptyIsOff) {
  for (const char* off : {"", " ", " , ,"}) {
    auto p = CorsPolicy::parse(off);
    ASSERT_TRUE(p) << p.status().to_string();
    EXPECT_FALSE(p->enabled()) << "'" << off << "'";
    EXPECT_EQ(p->allow_origin("http://localhost:3000"), std::nullopt);
  }
}

TEST(CorsPolicy, AListMatchesWholeOriginsCaseInsensitively) {
  auto p = CorsPolicy::parse(" http://localhost:3000 ,HTTPS://App.Example.com,,http://[::1]:8080");
  ASSERT_TRUE(p) << p.status().to_string();
  EXPECT_TRUE(p->enabled());
  EXPECT_FALSE(p->any());
  EXPECT_EQ(p->allow_origin("http://localhost:3000"), "http://localhost:3000");
  EXPECT_EQ(p->allow_origin("https://app.example.com"), "https://app.example.com");
  EXPECT_EQ(p->allow_origin("http://[::1]:8080"), "http://[::1]:8080");
  for (const char* other : {"http://localhost:30000", "http://localhost:300", "http://localhost",
                            "https://localhost:3000", "https://app.example.com.evil.example",
                            "https://evil-app.example.com", "null", "http://localhost:3000/"})
    EXPECT_EQ(p->allow_origin(other), std::nullopt) << other;
}

TEST(CorsPolicy, AStarInAListAllowsAny) {
  auto p = CorsPolicy::parse("http://localhost:3000, *");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->any());
  EXPECT_EQ(p->allow_origin("https://other.example"), "*");
}

TEST(CorsPolicy, EntriesThatAreNoOriginsAreRefusedNamingThem) {
  for (const char* bad : {"http://localhost:3000/", "https://a.example/app", "localhost:3000", "null",
                          "https://*.example.com", "http://", "://host", "http://a b", "ht tp://a"}) {
    auto p = CorsPolicy::parse(std::string("http://ok.example,") + bad);
    ASSERT_FALSE(p) << bad;
    EXPECT_NE(p.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << p.status().message();
  }
}

TEST(CorsAllowHeaders, APlainListOfNamesIsEchoed) {
  EXPECT_EQ(cors_allow_headers("authorization,content-type"), "authorization,content-type");
  EXPECT_EQ(cors_allow_headers(" x-stainless-os, x-stainless-lang ,openai-beta "),
            "x-stainless-os, x-stainless-lang ,openai-beta");
}

TEST(CorsAllowHeaders, AnythingElseGetsTheFixedList) {
  const std::string fixed = cors_allow_headers("");
  for (const char* name : {"Authorization", "Content-Type", "x-api-key", "anthropic-version", "OpenAI-Beta"})
    EXPECT_NE(fixed.find(name), std::string::npos) << name;
  for (const char* odd : {"a b", "a,,b", "a,", ",a", "a;b", "a\r\nSet-Cookie: x", "\"quoted\"", "a:b"})
    EXPECT_EQ(cors_allow_headers(odd), fixed) << odd;
  EXPECT_EQ(cors_allow_headers(std::string(5000, 'a')), fixed);
}

// ---------------------------------------------------------------- through the server

httplib::Headers preflight_headers(const std::string& origin, const std::string& requested = "") {
  httplib::Headers h{{"Origin", origin}, {"Access-Control-Request-Method", "POST"}};
  if (!requested.empty()) h.emplace("Access-Control-Request-Headers", requested);
  return h;
}

ServerOptions with_origins(const std::string& origins, const std::string& api_key = "") {
  ServerOptions o;
  o.cors_origins = origins;
  o.api_key = api_key;
  return o;
}

TEST(ServerCors, ByDefaultAPreflightFromAnyOriginIs204) {
  TestServer ts;
  auto c = ts.client();
  for (const char* path : {"/v1/chat/completions", "/v1/messages", "/no/such/path"}) {
    auto res = c.Options(
        path, preflight_headers("https://app.example", "authorization,content-type,x-stainless-os"));
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 204) << path;
    EXPECT_TRUE(res->body.empty());
    EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), "*");
    EXPECT_EQ(res->get_header_value("Access-Control-Allow-Methods"), "GET, POST, DELETE, OPTIONS");
    EXPECT_EQ(res->get_header_value("Access-Control-Allow-Headers"),
              "authorization,content-type,x-stainless-os");
    EXPECT_EQ(res->get_header_value("Access-Control-Max-Age"), "86400");
    EXPECT_FALSE(res->has_header("Vary"));  // the same answer for every origin
  }
  // Without Access-Control-Request-Headers: the fixed list.
  auto res = c.Options("/v1/chat/completions", preflight_headers("https://app.example"));
  ASSERT_TRUE(res);
  EXPECT_NE(res->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
}

TEST(ServerCors, AnOptionsThatIsNoPreflightIsStill404) {
  TestServer ts;
  auto res = ts.client().Options("/v1/chat/completions");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_NE(res->body.find("no route for OPTIONS"), std::string::npos) << res->body;
  EXPECT_FALSE(res->has_header("Access-Control-Allow-Origin"));
}

TEST(ServerCors, AListedOriginIsEchoedAndOthersGetNoCorsHeaders) {
  TestServer ts(with_origins("http://localhost:3000,https://chat.example"));
  auto c = ts.client();
  auto ok = c.Options("/v1/chat/completions", preflight_headers("https://chat.example", "content-type"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 204);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "https://chat.example");
  EXPECT_EQ(ok->get_header_value("Vary"), "Origin");
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Headers"), "content-type");

  auto refused = c.Options("/v1/chat/completions", preflight_headers("https://evil.example", "content-type"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);
  EXPECT_FALSE(refused->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(refused->has_header("Access-Control-Allow-Methods"));
  EXPECT_EQ(refused->get_header_value("Vary"), "Origin");
  const Json err = Json::parse(refused->body);
  EXPECT_EQ(err["error"]["code"], "origin_not_allowed");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("https://evil.example"), std::string::npos);

  // The real requests: the listed origin's answer carries the headers, another's does not.
  auto mine =
      c.Post("/v1/chat/completions", {{"Origin", "http://localhost:3000"}}, kChat, "application/json");
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->status, 200);
  EXPECT_EQ(mine->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(mine->get_header_value("Vary"), "Origin");
  auto theirs =
      c.Post("/v1/chat/completions", {{"Origin", "http://localhost:3001"}}, kChat, "application/json");
  ASSERT_TRUE(theirs);
  EXPECT_EQ(theirs->status, 200);  // served: a browser keeps the answer from the page
  EXPECT_FALSE(theirs->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(theirs->has_header("Access-Control-Expose-Headers"));
}

TEST(ServerCors, OffMeansNoPreflightAndNoHeaders) {
  TestServer ts(with_origins(""));
  auto c = ts.client();
  auto pre = c.Options("/v1/chat/completions", preflight_headers("https://app.example"));
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 404);
  EXPECT_FALSE(pre->has_header("Access-Control-Allow-Origin"));
  auto res = c.Get("/v1/models", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_FALSE(res->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(res->has_header("Vary"));
}

TEST(ServerCors, ABadOriginListStopsTheServerFromStarting) {
  testing::FakeEngine engine;
  ServerOptions o = with_origins("http://localhost:3000/");
  o.host = "127.0.0.1";
  o.port = 0;
  HttpServer server(engine, o);
  const Status s = server.bind();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("trailing slash"), std::string::npos) << s.message();
}

TEST(ServerCors, JsonAnswersCarryTheOriginAndExposeTheirHeaders) {
  TestServer ts;
  auto c = ts.client();
  auto res = c.Get("/v1/models", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(res->get_header_value("Access-Control-Expose-Headers"), "x-request-id, Retry-After");
  EXPECT_TRUE(res->has_header("x-request-id"));
  EXPECT_EQ(res->get_header_value_count("Access-Control-Allow-Origin"), 1u);
  // Not a cross-origin request (no Origin): no CORS headers.
  auto plain = c.Get("/v1/models");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->has_header("Access-Control-Allow-Origin"));
}

TEST(ServerCors, ErrorAnswersCarryTheOriginToo) {
  TestServer ts(with_origins("*", "sk-test"));
  auto c = ts.client();
  const httplib::Headers origin{{"Origin", "https://app.example"}};
  // httplib's own 404 (no route), through the error handler.
  auto none = c.Post("/v1/nothing", origin, "{}", "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  EXPECT_EQ(none->get_header_value("Access-Control-Allow-Origin"), "*");
  auto get_none = c.Get("/nothing", origin);
  ASSERT_TRUE(get_none);
  EXPECT_EQ(get_none->status, 404);
  EXPECT_EQ(get_none->get_header_value("Access-Control-Allow-Origin"), "*");
  // Ours: 401 without the key, readable by the page so that it can say so.
  auto no_key = c.Post("/v1/chat/completions", origin, kChat, "application/json");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  EXPECT_EQ(no_key->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(Json::parse(no_key->body)["error"]["code"], "invalid_api_key");
  // The preflight needs no key (browsers never send one on it)...
  auto pre = c.Options("/v1/chat/completions",
                       preflight_headers("https://app.example", "authorization,content-type"));
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization,content-type");
  // ...and the request that follows it presents the key.
  httplib::Headers keyed = origin;
  keyed.emplace("Authorization", "Bearer sk-test");
  auto ok = c.Post("/v1/chat/completions", keyed, kChat, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "*");
}

TEST(ServerCors, StreamedAnswersCarryTheOrigin) {
  TestServer ts(with_origins("http://localhost:3000"));
  auto res = ts.client().Post("/v1/chat/completions", {{"Origin", "http://localhost:3000"}},
                              R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true})",
                              "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(res->get_header_value("Access-Control-Expose-Headers"), "x-request-id, Retry-After");
  const auto events = testing::sse_payloads(res->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
}

// ---------------------------------------------------------------- keep-alive

int connect_to(const TestServer& ts) {
  const int fd = testing::connect_loopback(ts.server->port(), 10);
  EXPECT_GE(fd, 0);
  return fd;
}

// One answer's head and body (by its Content-Length) from `fd`; `pending` keeps bytes read past it.
std::string read_answer(int fd, std::string& pending) {
  char buf[4096];
  auto fill = [&] {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) pending.append(buf, static_cast<size_t>(n));
    return n > 0;
  };
  size_t end;
  while ((end = pending.find("\r\n\r\n")) == std::string::npos)
    if (!fill()) return "";
  const std::string head = pending.substr(0, end + 4);
  size_t length = 0;
  const size_t at = head.find("Content-Length: ");
  if (at != std::string::npos) length = std::stoul(head.substr(at + 16));
  while (pending.size() < end + 4 + length)
    if (!fill()) return "";
  std::string answer = pending.substr(0, end + 4 + length);
  pending.erase(0, end + 4 + length);
  return answer;
}

// httplib closed a kept-alive connection after 5 requests (Keep-Alive: max=5).
TEST(ServerKeepAlive, TwentyRequestsGoOverOneConnection) {
  TestServer ts;
  int fd = connect_to(ts);
  std::string pending;
  for (int i = 0; i < 20; ++i) {
    const std::string req = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size())) << i;
    const std::string answer = read_answer(fd, pending);
    ASSERT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << "request " << i << ": " << answer.substr(0, 300);
    EXPECT_EQ(answer.find("Connection: close"), std::string::npos) << i;
    if (i == 0) {
      EXPECT_NE(answer.find("Keep-Alive: timeout=5, max=1000"), std::string::npos) << answer;
    }
  }
  ::close(fd);
}

}  // namespace
}  // namespace tf::server
