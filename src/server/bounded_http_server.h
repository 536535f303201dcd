// cpp-httplib's server with a bounded request head (request line and header lines).
//
// httplib 0.11 reads the head one byte at a time into a string that grows without end, and
// checks a line's length only once the whole line is in: a client sending one endless header
// line grew the server by as many bytes as it sent (500 MB sent, +510 MB RSS), and nothing
// bounded the number of header lines. Each read waits at most the read timeout, so a client
// trickling one byte every few seconds kept a head open, and a worker held, for ever.
//
// BoundedHttpServer runs httplib's keep-alive loop itself (process_and_close_socket, which
// httplib lets a subclass replace) over its own socket stream, HeadBoundedStream. From the
// start of each request until httplib has parsed its headers, the stream hands httplib at most
// HeadLimits::max_bytes bytes and max_lines lines, and nothing once the head has taken longer
// than HeadLimits::deadline since its first byte: past a limit a read finds the end of the
// stream, so httplib answers with an error (400; 414 for a request line) that the server's
// error handler turns into 431 or 408 by head_refusal_on_this_thread(). The connection is then
// closed, after a short bounded drain so that the client can read the answer. httplib reads the
// size line of each chunk of a chunked body the same way: a line within a body is held to
// max_bytes too (the read fails; the body is a 400 and the connection closes).
//
// Everything else is httplib's: routing, bodies, keep-alive counts and timeouts, the task
// queue (new_task_queue), socket options.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tf::server {

// The most bytes of a request line and its header lines, CRLFs and the blank line included
// (nginx's large_client_header_buffers allow 32 KiB; Node's 16 KiB).
constexpr size_t kHeadMaxBytes = size_t{64} << 10;
// The most lines of a head: the request line, the header fields and the blank line. Each field
// costs httplib a map node besides its text (~100 bytes): 64 KiB of four-byte fields were 16k.
constexpr size_t kHeadMaxLines = 258;
// How long a head may take to arrive from its first byte (a slow-loris trickling one byte per
// read timeout never ends otherwise).
constexpr std::chrono::milliseconds kHeadDeadline = std::chrono::seconds(30);

struct HeadLimits {
  size_t max_bytes = kHeadMaxBytes;
  size_t max_lines = kHeadMaxLines;
  std::chrono::milliseconds deadline = kHeadDeadline;
};

// Why a head was cut short.
enum class HeadRefusal { kNone, kTooLarge, kTooManyLines, kTooSlow };

// The refusal of the head of the request that this thread is serving (kNone when it was read
// whole): for httplib's error handler, which gets only the request and the response.
HeadRefusal head_refusal_on_this_thread();

// Asks the connection this thread is serving to close once its current answer is written (a
// route that left the rest of a request's body unread: request_body.h abandoned()), after the
// same bounded drain as a refused head. The route should send `Connection: close` too.
void close_connection_after_answer();

// A connection's socket as httplib's Stream, for the whole connection (bytes read ahead of one
// request stay for the next). Reads are buffered (httplib reads a head one byte at a time) and
// wait for data at most the read timeout; writes wait for room at most the write timeout and
// never raise SIGPIPE. Between begin_head() and end_head() the head limits apply.
class HeadBoundedStream : public httplib::Stream {
 public:
  struct Timeouts {
    std::chrono::microseconds read{std::chrono::seconds(5)};
    std::chrono::microseconds write{std::chrono::seconds(5)};
  };
  HeadBoundedStream(int sock, Timeouts timeouts, HeadLimits limits);

  // A request's head starts: its bytes, lines and time are counted from here.
  void begin_head();
  // The head was read whole: the body and the answer are not limited.
  void end_head();
  HeadRefusal refusal() const { return refusal_; }
  // Whether a line within a body (a chunk's size line) ran past max_bytes and was refused.
  bool body_line_refused() const { return body_line_refused_; }
  // Whether bytes read ahead wait in the buffer (the next request's, pipelined).
  bool has_buffered() const { return buffer_begin_ < buffer_end_; }

  bool is_readable() const override;
  // Room to write within the write timeout, and the peer has not closed the connection.
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return sock_; }

 private:
  void refuse(HeadRefusal why);
  // Waits for bytes to read: false on the read timeout, an error, or (in a head) the deadline.
  bool wait_readable();

  const int sock_;
  const Timeouts timeouts_;
  const HeadLimits limits_;
  std::vector<char> buffer_;
  size_t buffer_begin_ = 0, buffer_end_ = 0;
  bool in_head_ = false;
  size_t head_bytes_ = 0, head_lines_ = 0;
  std::chrono::steady_clock::time_point head_deadline_;
  HeadRefusal refusal_ = HeadRefusal::kNone;
  size_t body_line_bytes_ = 0;  // single-byte reads since a '\n' in a body: a line being read
  bool body_line_refused_ = false;
};

class BoundedHttpServer : public httplib::Server {
 public:
  explicit BoundedHttpServer(HeadLimits limits = {}) : limits_(limits) {}

 private:
  // httplib's keep-alive loop over a HeadBoundedStream: up to keep_alive_max_count_ requests,
  // each once the socket is readable within the keep-alive timeout while the server runs.
  bool process_and_close_socket(int sock) override;
  // Waits for the next request's first byte: false after the keep-alive timeout, on an error,
  // or once stop() closed the listening socket (idle connections are let go within ~100 ms).
  bool wait_for_request(const HeadBoundedStream& stream) const;

  const HeadLimits limits_;
};

}  // namespace tf::server
