// See bounded_http_server.h.
#include "server/bounded_http_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "server/peer_socket.h"

namespace tf::server {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Bytes read from the socket at once: httplib asks for a head one byte at a time.
constexpr size_t kReadBufferBytes = 4096;
// How often a connection waiting for its next request looks whether the server stopped.
constexpr milliseconds kStopPollInterval{100};
// After a refused head: how long, and how many bytes, the client's rest is read and dropped
// before the socket is closed (see drain_before_close).
// Enough for a client still sending a large body on a fast link to finish and read the answer
// (with 1 MiB, a 17 MB body refused early met a reset instead of its 400); an endless sender is
// still cut off.
constexpr milliseconds kDrainTime{1000};
constexpr size_t kDrainBytes = size_t{32} << 20;

thread_local HeadRefusal t_head_refusal = HeadRefusal::kNone;
thread_local bool t_close_after_answer = false;

// poll() for `events` within `timeout` (rounded up to whole milliseconds); retried on EINTR.
// > 0: ready (or the socket failed: the next call says how), 0: timed out, < 0: error.
int wait_for(int sock, short events, std::chrono::microseconds timeout) {
  pollfd p{sock, events, 0};
  const auto ms = std::chrono::ceil<milliseconds>(std::max(timeout, std::chrono::microseconds(0)));
  const auto until = Clock::now() + ms;
  for (;;) {
    const auto left = std::chrono::ceil<milliseconds>(until - Clock::now());
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (r >= 0 || errno != EINTR) return r;
  }
}

// After a refused head the answer is written and the connection must close, but the client may
// still be sending: closing a socket with unread bytes sends a reset, and a client that gets it
// may lose the answer before reading it. So our side is shut for writing (the client sees the
// answer end) and what arrives is read and dropped until the client closes too, for at most
// kDrainTime and kDrainBytes (an endless sender is then cut off).
void drain_before_close(int sock) {
  ::shutdown(sock, SHUT_WR);
  const auto until = Clock::now() + kDrainTime;
  char buf[16384];
  for (size_t dropped = 0; dropped < kDrainBytes;) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now());
    if (left.count() <= 0 || wait_for(sock, POLLIN, left) <= 0) return;
    const ssize_t n = ::recv(sock, buf, sizeof(buf), 0);
    if (n <= 0 && !(n < 0 && errno == EINTR)) return;
    if (n > 0) dropped += static_cast<size_t>(n);
  }
}

}  // namespace

HeadRefusal head_refusal_on_this_thread() { return t_head_refusal; }

void close_connection_after_answer() { t_close_after_answer = true; }

HeadBoundedStream::HeadBoundedStream(int sock, Timeouts timeouts, HeadLimits limits)
    : sock_(sock), timeouts_(timeouts), limits_(limits), buffer_(kReadBufferBytes) {}

void HeadBoundedStream::begin_head() {
  in_head_ = true;
  head_bytes_ = 0;
  head_lines_ = 0;
  head_deadline_ = Clock::now() + limits_.deadline;
  refusal_ = HeadRefusal::kNone;
  t_head_refusal = HeadRefusal::kNone;
}

void HeadBoundedStream::end_head() {
  in_head_ = false;
  body_line_bytes_ = 0;
}

void HeadBoundedStream::refuse(HeadRefusal why) {
  refusal_ = why;
  t_head_refusal = why;
}

bool HeadBoundedStream::wait_readable() {
  if (!in_head_) return wait_for(sock_, POLLIN, timeouts_.read) > 0;
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(head_deadline_ - Clock::now());
  if (left.count() <= 0) {
    refuse(HeadRefusal::kTooSlow);
    return false;
  }
  const int ready = wait_for(sock_, POLLIN, std::min(left, timeouts_.read));
  if (ready == 0 && left <= timeouts_.read) refuse(HeadRefusal::kTooSlow);  // the deadline came first
  return ready > 0;
}

bool HeadBoundedStream::is_readable() const {
  return has_buffered() || wait_for(sock_, POLLIN, timeouts_.read) > 0;
}

bool HeadBoundedStream::is_writable() const {
  if (wait_for(sock_, POLLOUT, timeouts_.write) <= 0) return false;
  // As httplib's is_socket_alive: the peer closed when its side reads as ended (or failed).
  // Bytes it sent (a pipelined request) mean it is there.
  if (wait_for(sock_, POLLIN, std::chrono::microseconds(0)) == 0) return true;
  char c;
  ssize_t n;
  do {
    n = ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

// In a head, a refused read returns 0 (the end of the stream) rather than an error: httplib
// then answers (400 for a header line cut short, 414 for a request line past its 8 KiB, 400 for
// a shorter one) where an error would close a request line's connection without a word.
ssize_t HeadBoundedStream::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  if (in_head_) {
    if (refusal_ != HeadRefusal::kNone) return 0;
    if (head_bytes_ >= limits_.max_bytes) {
      refuse(HeadRefusal::kTooLarge);
      return 0;
    }
    if (head_lines_ >= limits_.max_lines) {
      refuse(HeadRefusal::kTooManyLines);
      return 0;
    }
    size = std::min(size, limits_.max_bytes - head_bytes_);
  } else if (size == 1 && body_line_bytes_ >= limits_.max_bytes) {
    // httplib reads a line one byte at a time, and a chunk's data in larger pieces (one byte
    // only for a chunk of one, which a CRLF follows): a run of single bytes without a newline
    // is a line, here an endless chunk-size line.
    body_line_refused_ = true;
    return -1;
  }
  if (!has_buffered()) {
    if (!wait_readable()) return in_head_ && refusal_ != HeadRefusal::kNone ? 0 : -1;
    // A large read (a body's) goes straight into the caller's buffer.
    const bool direct = !in_head_ && size >= buffer_.size();
    ssize_t n;
    do {
      n = ::recv(sock_, direct ? ptr : buffer_.data(), direct ? size : buffer_.size(), 0);
    } while (n < 0 && errno == EINTR);
    if (direct && n > 0) body_line_bytes_ = 0;
    if (n <= 0 || direct) return n;
    buffer_begin_ = 0;
    buffer_end_ = static_cast<size_t>(n);
  }
  const size_t n = std::min(size, buffer_end_ - buffer_begin_);
  std::memcpy(ptr, buffer_.data() + buffer_begin_, n);
  buffer_begin_ += n;
  if (in_head_) {
    head_bytes_ += n;
    head_lines_ += static_cast<size_t>(std::count(ptr, ptr + n, '\n'));
  } else {
    body_line_bytes_ = size == 1 && *ptr != '\n' ? body_line_bytes_ + 1 : 0;
  }
  return static_cast<ssize_t>(n);
}

ssize_t HeadBoundedStream::write(const char* ptr, size_t size) {
  if (wait_for(sock_, POLLOUT, timeouts_.write) <= 0) return -1;
  ssize_t n;
  do {
    n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

void HeadBoundedStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  socket_address(sock_, /*peer=*/true, ip, port);
}

void HeadBoundedStream::get_local_ip_and_port(std::string& ip, int& port) const {
  socket_address(sock_, /*peer=*/false, ip, port);
}

bool BoundedHttpServer::wait_for_request(const HeadBoundedStream& stream) const {
  if (stream.has_buffered()) return true;
  const auto until = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
  while (svr_sock_ != INVALID_SOCKET) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    const int r =
        wait_for(stream.socket(), POLLIN, std::min<std::chrono::microseconds>(left, kStopPollInterval));
    if (r != 0) return r > 0;
  }
  return false;
}

bool BoundedHttpServer::process_and_close_socket(int sock) {
  using std::chrono::microseconds;
  using std::chrono::seconds;
  const HeadBoundedStream::Timeouts timeouts{seconds(read_timeout_sec_) + microseconds(read_timeout_usec_),
                                             seconds(write_timeout_sec_) + microseconds(write_timeout_usec_)};
  HeadBoundedStream stream(sock, timeouts, limits_);
  bool ok = false;
  for (size_t left = keep_alive_max_count_;
       left > 0 && svr_sock_ != INVALID_SOCKET && wait_for_request(stream); --left) {
    bool connection_closed = false;
    t_close_after_answer = false;
    stream.begin_head();
    // httplib calls setup_request right after it parsed the headers.
    ok = process_request(stream, /*close_connection=*/left == 1, connection_closed,
                         [&stream](httplib::Request&) { stream.end_head(); });
    if (stream.refusal() != HeadRefusal::kNone || stream.body_line_refused() || t_close_after_answer) {
      drain_before_close(sock);
      break;
    }
    if (!ok || connection_closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace tf::server
