// The bounded request head (server/bounded_http_server.h): HeadBoundedStream's limits over a
// socket pair, then the server over raw sockets: an endless header line and too many header
// fields are 431s, a trickled head a 408 at its deadline, a long request line a 414, each with
// an error object on a closed connection; keep-alive and pipelined requests still work, and
// stop() lets idle keep-alive connections go at once.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "server/bounded_http_server.h"
#include "server_test_util.h"

namespace tf::server::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Two connected stream sockets: [0] is the server's side, [1] the client's.
struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  void send(const std::string& s) const {
    ASSERT_EQ(::send(fd[1], s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  void close_client() {
    ::close(fd[1]);
    fd[1] = -1;
  }
};

HeadBoundedStream stream_of(const SocketPair& p, HeadLimits limits = {},
                            std::chrono::microseconds read_timeout = 2s) {
  return HeadBoundedStream(p.fd[0], {read_timeout, 2s}, limits);
}

// Reads what the stream gives until it ends (0) or fails (-1): the bytes, and that last result.
std::pair<std::string, ssize_t> read_all(HeadBoundedStream& s, size_t piece = 1) {
  std::string got;
  std::string buf(piece, '\0');
  for (;;) {
    const ssize_t n = s.read(buf.data(), piece);
    if (n <= 0) return {got, n};
    got.append(buf.data(), static_cast<size_t>(n));
  }
}

TEST(HeadBoundedStream, AHeadEndsAtItsByteLimitAndTheBodyIsNotLimited) {
  SocketPair p;
  auto s = stream_of(p, {.max_bytes = 100, .max_lines = 1000});
  p.send(std::string(300, 'a'));
  s.begin_head();
  auto [head, last] = read_all(s);
  EXPECT_EQ(head.size(), 100u);
  EXPECT_EQ(last, 0);  // the end of the stream, so that httplib answers
  EXPECT_EQ(s.refusal(), HeadRefusal::kTooLarge);
  EXPECT_EQ(head_refusal_on_this_thread(), HeadRefusal::kTooLarge);
  EXPECT_EQ(s.read(head.data(), 1), 0);  // and stays ended
  // After the head, a body reads on past the limit.
  s.begin_head();
  EXPECT_EQ(head_refusal_on_this_thread(), HeadRefusal::kNone);
  s.end_head();
  char buf[500];
  EXPECT_EQ(s.read(buf, sizeof buf), 200);
}

TEST(HeadBoundedStream, AHeadEndsAtItsLineLimit) {
  SocketPair p;
  auto s = stream_of(p, {.max_bytes = 1 << 20, .max_lines = 3});
  p.send("GET / HTTP/1.1\r\nA: b\r\nC: d\r\nE: f\r\n\r\n");
  s.begin_head();
  auto [head, last] = read_all(s);
  EXPECT_EQ(head, "GET / HTTP/1.1\r\nA: b\r\nC: d\r\n");
  EXPECT_EQ(last, 0);
  EXPECT_EQ(s.refusal(), HeadRefusal::kTooManyLines);
}

TEST(HeadBoundedStream, ATrickledHeadEndsAtItsDeadline) {
  SocketPair p;
  auto s = stream_of(p, {.deadline = 300ms}, /*read_timeout=*/1s);
  // A first byte, then the head starts (as the server's does) before the trickle thread: one
  // scheduled late on a loaded machine cannot leave the head without bytes or start it late.
  p.send("a");
  const auto t0 = Clock::now();
  s.begin_head();
  // 100 bytes 50 ms apart: each well within the read timeout, all of them >= 4.95 s.
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (int i = 1; i < 100 && !stop; ++i) {
      std::this_thread::sleep_for(50ms);
      if (::send(p.fd[1], "a", 1, MSG_NOSIGNAL) != 1) return;
    }
  });
  auto [head, last] = read_all(s);
  const auto took = Clock::now() - t0;
  stop = true;
  trickle.join();
  EXPECT_EQ(last, 0);
  EXPECT_EQ(s.refusal(), HeadRefusal::kTooSlow);
  // Ended at the deadline, long before the trickle ends (without one, the head would read all
  // 100 bytes and end only at the read timeout after them).
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 4s);
  EXPECT_GT(head.size(), 0u);
  EXPECT_LT(head.size(), 100u);
}

TEST(HeadBoundedStream, ASilentHeadEndsAtTheDeadlineWhenItComesFirst) {
  SocketPair p;
  auto s = stream_of(p, {.deadline = 200ms}, /*read_timeout=*/5s);
  p.send("GET");
  s.begin_head();
  const auto t0 = Clock::now();
  auto [head, last] = read_all(s);
  EXPECT_EQ(head, "GET");
  EXPECT_EQ(last, 0);
  EXPECT_EQ(s.refusal(), HeadRefusal::kTooSlow);
  EXPECT_LT(Clock::now() - t0, 2s);
}

// httplib reads a chunked body's size lines one byte at a time into a growing string too.
TEST(HeadBoundedStream, ALineWithinABodyEndsAtTheByteLimit) {
  SocketPair p;
  auto s = stream_of(p, {.max_bytes = 100});
  p.send("GET / HTTP/1.1\r\n\r\n" + std::string(30, 'x') + "\r\n" + std::string(300, 'f'));
  s.begin_head();
  char head[18];
  EXPECT_EQ(s.read(head, sizeof head), 18);
  s.end_head();
  auto [line, last] = read_all(s);     // one byte at a time, as httplib reads a line
  EXPECT_EQ(line.size(), 32u + 100u);  // the short line, then 100 bytes of the endless one
  EXPECT_EQ(last, -1);
  EXPECT_TRUE(s.body_line_refused());
  EXPECT_EQ(s.refusal(), HeadRefusal::kNone);
}

// A chunk of data read in one piece is no line, however long.
TEST(HeadBoundedStream, BodyDataIsNotALine) {
  SocketPair p;
  auto s = stream_of(p, {.max_bytes = 100}, /*read_timeout=*/100ms);
  p.send(std::string(5000, 'd'));
  s.begin_head();
  s.end_head();
  auto [data, last] = read_all(s, 4096);
  EXPECT_EQ(data.size(), 5000u);
  EXPECT_FALSE(s.body_line_refused());
}

// The read timeout is not a refusal: the read fails, as httplib's own stream's does.
TEST(HeadBoundedStream, TheReadTimeoutFailsARead) {
  SocketPair p;
  auto s = stream_of(p, {}, /*read_timeout=*/100ms);
  char c;
  s.begin_head();
  EXPECT_EQ(s.read(&c, 1), -1);
  EXPECT_EQ(s.refusal(), HeadRefusal::kNone);
  s.end_head();
  EXPECT_EQ(s.read(&c, 1), -1);
}

// httplib's stream read ahead into a buffer of its own that each request dropped; this one
// keeps a pipelined request's bytes for the next.
TEST(HeadBoundedStream, BytesReadAheadStayForTheNextRequest) {
  SocketPair p;
  auto s = stream_of(p);
  p.send("one\ntwo\n");
  s.begin_head();
  char c = 0;
  std::string first;
  while (c != '\n' && s.read(&c, 1) == 1) first += c;
  EXPECT_EQ(first, "one\n");
  EXPECT_TRUE(s.has_buffered());
  s.begin_head();
  char buf[16];
  EXPECT_EQ(s.read(buf, sizeof buf), 4);
  EXPECT_EQ(std::string(buf, 4), "two\n");
  EXPECT_FALSE(s.has_buffered());
}

// generation_session notices a client gone through DataSink::is_writable.
TEST(HeadBoundedStream, IsWritableUntilThePeerCloses) {
  SocketPair p;
  auto s = stream_of(p);
  EXPECT_TRUE(s.is_writable());
  p.send("pipelined");  // bytes from the peer mean it is there
  EXPECT_TRUE(s.is_writable());
  EXPECT_EQ(s.write("hello", 5), 5);
  char buf[8];
  EXPECT_EQ(::recv(p.fd[1], buf, sizeof buf, 0), 5);
  p.close_client();
  char rest[16];
  EXPECT_EQ(s.read(rest, sizeof rest), 9);  // what it sent is still read
  EXPECT_FALSE(s.is_writable());
  EXPECT_LT(s.write("x", 1), 0);  // no SIGPIPE: the test would die of it
}

// ---------------------------------------------------------------- the server, raw sockets

int connect_to(const TestServer& ts) {
  const int fd = testing::connect_loopback(ts.server->port(), 10);
  EXPECT_GE(fd, 0);
  return fd;
}

// Everything the server sends until it closes the connection (or 10 s pass).
std::string read_until_closed(int fd) {
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, static_cast<size_t>(n));
  return got;
}

struct Answer {
  int status = 0;
  std::string headers;
  Json body;
};

Answer parse_answer(const std::string& reply) {
  Answer a;
  if (reply.rfind("HTTP/1.1 ", 0) == 0) a.status = std::atoi(reply.c_str() + 9);
  const size_t end = reply.find("\r\n\r\n");
  if (end == std::string::npos) return a;
  a.headers = reply.substr(0, end);
  a.body = Json::parse(reply.substr(end + 4), nullptr, false);
  return a;
}

void expect_error_answer(const Answer& a, int status, const std::string& message_part) {
  EXPECT_EQ(a.status, status) << a.headers;
  EXPECT_NE(a.headers.find("Connection: close"), std::string::npos) << a.headers;
  ASSERT_TRUE(a.body.is_object() && a.body["error"].is_object()) << a.headers;
  EXPECT_NE(a.body["error"]["message"].get<std::string>().find(message_part), std::string::npos)
      << a.body.dump();
}

TEST(ServerHead, AnEndlessHeaderLineIs431) {
  TestServer ts;
  int fd = connect_to(ts);
  // 64 MiB of one header line (more than the sockets' buffers): the server reads 64 KiB of it,
  // answers, drops what more arrives within the drain (1 s, 32 MiB) and closes.
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 << 20, 'a');
  EXPECT_LT(testing::send_some(fd, head), head.size());
  const Answer a = parse_answer(read_until_closed(fd));
  ::close(fd);
  expect_error_answer(a, 431, "64 KiB");
  EXPECT_EQ(a.body["error"]["code"], "request_header_fields_too_large");
  EXPECT_EQ(ts.client().Get("/health")->status, 200);
}

TEST(ServerHead, AHeaderLineJustPastTheLimitIs431AndTheClientReadsIt) {
  TestServer ts;
  int fd = connect_to(ts);
  // All of it sent, then the client only reads: the rest past 64 KiB is drained, not reset.
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(100000, 'a') +
      "\r\nContent-Length: 2\r\n\r\n{}";
  EXPECT_EQ(testing::send_some(fd, head), head.size());
  const Answer a = parse_answer(read_until_closed(fd));
  ::close(fd);
  expect_error_answer(a, 431, "request header fields too large");
}

TEST(ServerHead, TooManyHeaderFieldsAre431) {
  TestServer ts;
  int fd = connect_to(ts);
  std::string head = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 100000; ++i) head += "X-A: b\r\n";
  head += "\r\n";
  testing::send_some(fd, head);
  const Answer a = parse_answer(read_until_closed(fd));
  ::close(fd);
  expect_error_answer(a, 431, "more than 256 header fields");
  // 256 fields are fine.
  httplib::Headers fields;
  for (int i = 0; i < 250; ++i) fields.emplace("X-F" + std::to_string(i), "v");
  auto res = ts.client().Get("/health", fields);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(ServerHead, ARequestLinePast8KiBIs414) {
  TestServer ts;
  int fd = connect_to(ts);
  testing::send_some(fd, "GET /health?" + std::string(10000, 'q') + " HTTP/1.1\r\nHost: x\r\n\r\n");
  ::shutdown(fd, SHUT_WR);  // httplib keeps the connection after this 414 (it drops its headers)
  const Answer a = parse_answer(read_until_closed(fd));
  ::close(fd);
  EXPECT_EQ(a.status, 414);
  ASSERT_TRUE(a.body.is_object() && a.body["error"].is_object()) << a.headers;
  EXPECT_NE(a.body["error"]["message"].get<std::string>().find("8 KiB"), std::string::npos);
  // Past the head limit too: still the request line's own answer.
  fd = connect_to(ts);
  testing::send_some(fd, "GET /health?" + std::string(100000, 'q') + " HTTP/1.1\r\nHost: x\r\n\r\n");
  const Answer b = parse_answer(read_until_closed(fd));
  ::close(fd);
  expect_error_answer(b, 414, "64 KiB");
}

TEST(ServerHead, ATrickledHeadIs408AtTheHeadTimeout) {
  ServerOptions o;
  o.head_timeout_s = 1;
  TestServer ts(o);
  int fd = connect_to(ts);
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: abcdefghijklmnopqrstuvwxyz\r\n\r\n";
  const auto t0 = Clock::now();
  std::thread trickle([&] {
    for (char c : head) {
      if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(100ms);  // each byte well within the 30 s read timeout
    }
  });
  const Answer a = parse_answer(read_until_closed(fd));
  const auto took = Clock::now() - t0;
  ::shutdown(fd, SHUT_RDWR);
  trickle.join();
  ::close(fd);
  expect_error_answer(a, 408, "within 1 s");
  EXPECT_GE(took, 900ms);
  EXPECT_LT(took, 5s);  // at the 1 s timeout (1.14 s seen), well before the whole head (6.9 s)
  EXPECT_EQ(ts.client().Get("/health")->status, 200);
}

TEST(ServerHead, AnEndlessChunkSizeLineIs400AndCloses) {
  TestServer ts;
  int fd = connect_to(ts);
  const std::string head =
      "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: "
      "chunked\r\n\r\n";
  EXPECT_LT(testing::send_some(fd, head + std::string(64 << 20, 'f')), head.size() + (64 << 20));
  const Answer a = parse_answer(read_until_closed(fd));
  ::close(fd);
  EXPECT_EQ(a.status, 400) << a.headers;
  ASSERT_TRUE(a.body.is_object() && a.body["error"].is_object()) << a.headers;
  EXPECT_NE(a.body["error"]["message"].get<std::string>().find("could not be read"), std::string::npos);
  EXPECT_EQ(Json::parse(ts.client().Get("/health")->body)["prompt_budget"]["held_bytes"], 0);
}

TEST(ServerHead, KeepAliveAndPipelinedRequestsWork) {
  TestServer ts;
  int fd = connect_to(ts);
  // Three requests in one write (the second and third are read ahead with the first).
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  testing::send_some(fd, get + get + "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string reply = read_until_closed(fd);
  ::close(fd);
  size_t answers = 0;
  for (size_t at = reply.find("HTTP/1.1 200"); at != std::string::npos;
       at = reply.find("HTTP/1.1 200", at + 1))
    ++answers;
  EXPECT_EQ(answers, 3u) << reply.substr(0, 500);
  EXPECT_NE(reply.find("\"object\":\"list\""), std::string::npos);
  // httplib's client on one kept-alive connection.
  auto c = ts.client();
  c.set_keep_alive(true);
  for (int i = 0; i < 4; ++i) {
    auto res = c.Post("/v1/chat/completions",
                      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
}

// httplib's loop looked whether the server stopped only between requests: an idle kept-alive
// connection held stop() for the keep-alive timeout (5 s).
TEST(ServerHead, StopLetsIdleKeepAliveConnectionsGo) {
  auto ts = std::make_unique<TestServer>();
  int fd = connect_to(*ts);
  testing::send_some(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  char buf[4096];
  ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);  // answered; the connection stays open
  const auto t0 = Clock::now();
  ts.reset();
  EXPECT_LT(Clock::now() - t0, 2s);
  ::close(fd);
}

}  // namespace
}  // namespace tf::server::testing
