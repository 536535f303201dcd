// TcpRendezvous, the client side (see tcp_rendezvous.h). Requests are
// synchronous, one at a time per connection; the server answers waits itself
// when their deadline passes, and the client keeps its own, longer deadline on
// every reply in case the server itself is gone.
#include "comm/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "comm/rendezvous_server.h"
#include "comm/rendezvous_wire.h"

namespace tf {

using namespace rendezvous_wire;  // Clock, milliseconds, Op, framing helpers

namespace {

// Reads exactly n bytes before the deadline. Error text on failure.
Status recv_exact(int fd, char* out, size_t n, Clock::time_point deadline, const std::string& peer) {
  while (n > 0) {
    pollfd p{fd, POLLIN, 0};
    int rv = ::poll(&p, 1, remaining_ms(deadline));
    if (rv < 0 && errno == EINTR) continue;
    if (rv < 0) return unavailable("rendezvous " + peer + ": poll: " + errno_text(errno));
    if (rv == 0) return unavailable("rendezvous " + peer + ": no reply from rank 0's server in time");
    ssize_t got = ::recv(fd, out, n, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got < 0) return unavailable("rendezvous " + peer + ": recv: " + errno_text(errno));
    if (got == 0) return unavailable("rendezvous " + peer + ": rank 0 closed the connection (did it exit?)");
    out += got;
    n -= static_cast<size_t>(got);
  }
  return Status::ok();
}

std::string numeric_host(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST] = {0};
  if (::getnameinfo(addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

// Ranks named by keys "<prefix><rank>" in `missing`, as "rank 2" or "ranks 1, 2".
std::string ranks_phrase(const std::vector<std::string>& missing, const std::string& prefix) {
  std::string list;
  int count = 0;
  for (const auto& k : missing) {
    if (k.compare(0, prefix.size(), prefix) != 0) continue;
    if (count++) list += ", ";
    list += k.substr(prefix.size());
  }
  return (count == 1 ? "rank " : "ranks ") + list;
}

}  // namespace

std::string format_duration(milliseconds d) {
  int64_t ms = d.count();
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

Expected<HostPort> parse_host_port(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("rendezvous address '" + std::string(text) + "': " + why +
                            " (expected host:port, e.g. 10.0.0.1:29500 or [::1]:29500)");
  };
  HostPort out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("unterminated [IPv6] address or no port");
    }
    out.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    out.host = std::string(text.substr(0, colon));
    if (out.host.find(':') != std::string::npos) return bad("IPv6 addresses need brackets");
    port_text = text.substr(colon + 1);
  }
  if (out.host.empty()) return bad("empty host");
  if (port_text.empty() || port_text.size() > 5) return bad("bad port");
  int port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9') return bad("bad port");
    port = port * 10 + (c - '0');
  }
  if (port > 65535) return bad("port above 65535");
  out.port = port;
  return out;
}

namespace {

// Connects to host:port, retrying refused connections until the deadline
// (rank 0 may start last). Returns the fd or the last error.
Expected<int> connect_with_retry(const std::string& host, int port, Clock::time_point deadline,
                                 milliseconds timeout) {
  std::string where = host + ":" + std::to_string(port);
  std::string last_error = "timed out";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string port_text = std::to_string(port);
    int gai = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("cannot resolve host: ") + gai_strerror(gai);
    } else {
      for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
          last_error = "socket: " + errno_text(errno);
          continue;
        }
        int rv = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (rv != 0 && errno == EINPROGRESS) {
          pollfd p{fd, POLLOUT, 0};
          rv = ::poll(&p, 1, std::min(remaining_ms(deadline), 5000));
          int err = ETIMEDOUT;
          socklen_t len = sizeof(err);
          if (rv > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          rv = err == 0 ? 0 : -1;
          errno = err;
        }
        if (rv == 0) {
          ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          ::freeaddrinfo(res);
          return fd;
        }
        last_error = errno_text(errno);
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    if (Clock::now() + milliseconds(100) >= deadline) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  return unavailable("rendezvous: could not reach rank 0 at " + where + " within " + format_duration(timeout) +
                     " (last error: " + last_error + ")");
}

}  // namespace

Expected<std::unique_ptr<TcpRendezvous>> TcpRendezvous::connect(const RendezvousOptions& options) {
  if (options.world_size < 1) {
    return invalid_argument("rendezvous: world_size " + std::to_string(options.world_size) + " must be >= 1");
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument("rendezvous: rank " + std::to_string(options.rank) + " is outside 0.." +
                            std::to_string(options.world_size - 1));
  }
  if (options.port < 0 || options.port > 65535 || (options.port == 0 && options.rank != 0)) {
    return invalid_argument("rendezvous: port " + std::to_string(options.port) +
                            " is invalid (only rank 0 may ask for port 0)");
  }
  if (options.timeout.count() <= 0) return invalid_argument("rendezvous: timeout must be positive");
  Clock::time_point deadline = Clock::now() + options.timeout;

  std::unique_ptr<RendezvousServer> server;
  int port = options.port;
  if (options.rank == 0) {
    milliseconds grace = std::min<milliseconds>(options.timeout, milliseconds(10000));
    TF_ASSIGN_OR_RETURN(server, RendezvousServer::start(options.host, options.port, options.world_size, grace));
    port = server->port();
    if (options.on_listening) options.on_listening(port);
  }
  TF_ASSIGN_OR_RETURN(int fd, connect_with_retry(options.host, port, deadline, options.timeout));
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  std::string local_address = numeric_host(reinterpret_cast<sockaddr*>(&local), len);

  std::unique_ptr<TcpRendezvous> r(new TcpRendezvous(options, fd, port, local_address, std::move(server)));
  TF_RETURN_IF_ERROR(r->join());
  return r;
}

TcpRendezvous::TcpRendezvous(RendezvousOptions options, int fd, int port, std::string local_address,
                             std::unique_ptr<RendezvousServer> server)
    : options_(std::move(options)), fd_(fd), port_(port), local_address_(std::move(local_address)),
      server_(std::move(server)) {}

TcpRendezvous::~TcpRendezvous() {
  // Leave first: rank 0's server waits for every rank to leave, and a rank
  // that closes without a bye counts as dead.
  if (fd_ >= 0) {
    if (!broken_) send_all(fd_, framed(message(Op::kBye)));
    ::close(fd_);
  }
  server_.reset();
}

std::string TcpRendezvous::server_name() const {
  bool v6 = options_.host.find(':') != std::string::npos;
  return (v6 ? "[" + options_.host + "]" : options_.host) + ":" + std::to_string(port_);
}

Status TcpRendezvous::round_trip(const std::string& request, milliseconds reply_timeout, std::string* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string who = "rank " + std::to_string(rank()) + " -> " + server_name();
  if (broken_) return unavailable("rendezvous " + who + ": connection lost after an earlier error");
  if (!send_all(fd_, framed(request))) {
    broken_ = true;
    return unavailable("rendezvous " + who + ": send failed: " + errno_text(errno) + " (did rank 0 exit?)");
  }
  Clock::time_point deadline = Clock::now() + reply_timeout;
  char header[4];
  Status s = recv_exact(fd_, header, 4, deadline, who);
  if (s.is_ok()) {
    size_t n = read_u32(header);
    if (n == 0 || n > kMaxFrameBytes) {
      s = unavailable("rendezvous " + who + ": malformed reply");
    } else {
      reply->assign(n, '\0');
      s = recv_exact(fd_, reply->data(), n, deadline, who);
    }
  }
  if (!s.is_ok()) broken_ = true;  // the stream is out of sync from here on
  return s;
}

Status TcpRendezvous::join() {
  std::string hello = message(Op::kHello);
  put_u32(hello, static_cast<uint32_t>(options_.rank));
  put_u32(hello, static_cast<uint32_t>(options_.world_size));
  std::string reply;
  TF_RETURN_IF_ERROR(round_trip(hello, options_.timeout + kReplySlack, &reply));
  Reader in(reply);
  auto op = static_cast<Op>(in.u8());
  if (op == Op::kError) {
    return invalid_argument("rendezvous at " + server_name() + ": " + std::string(in.str(kMaxFrameBytes)));
  }
  if (op != Op::kOk) return unavailable("rendezvous at " + server_name() + ": unexpected reply to hello");
  std::vector<std::string> keys;
  for (int r = 0; r < options_.world_size; ++r) keys.push_back(join_key(r));
  Status s = wait(keys, options_.timeout);
  if (!s.is_ok() && s.code() == StatusCode::kUnavailable && s.message().find("tf/joined/") != std::string::npos) {
    // Re-word "missing keys" as the ranks that never came.
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (s.message().find("'" + k + "'") != std::string::npos) missing.push_back(k);
    }
    return unavailable("rendezvous at " + server_name() + ": " + ranks_phrase(missing, "tf/joined/") +
                       " did not join within " + format_duration(options_.timeout) + " (world_size " +
                       std::to_string(options_.world_size) + ")");
  }
  return s;
}

Status TcpRendezvous::set(const std::string& key, std::string_view value) {
  if (key.size() > kMaxKeyBytes) return invalid_argument("rendezvous: key longer than 4096 bytes");
  if (value.size() + key.size() + 16 > kMaxFrameBytes) {
    return invalid_argument("rendezvous: value of key '" + key + "' is larger than 64 MiB");
  }
  std::string req = message(Op::kSet);
  put_str(req, key);
  put_str(req, value);
  std::string reply;
  TF_RETURN_IF_ERROR(round_trip(req, options_.timeout + kReplySlack, &reply));
  if (reply.empty() || static_cast<Op>(reply[0]) != Op::kOk) {
    return unavailable("rendezvous: unexpected reply to set '" + key + "'");
  }
  return Status::ok();
}

Status TcpRendezvous::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  for (const auto& k : keys) {
    if (k.size() > kMaxKeyBytes) return invalid_argument("rendezvous: key longer than 4096 bytes");
  }
  if (keys.size() > kMaxWaitKeys) return invalid_argument("rendezvous: too many keys in one wait");
  timeout = std::clamp<milliseconds>(timeout, milliseconds(0), milliseconds(1u << 30));
  std::string req = message(Op::kWait);
  put_u32(req, static_cast<uint32_t>(timeout.count()));
  put_u32(req, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) put_str(req, k);
  std::string reply;
  TF_RETURN_IF_ERROR(round_trip(req, timeout + kReplySlack, &reply));
  Reader in(reply);
  auto op = static_cast<Op>(in.u8());
  if (op == Op::kOk) return Status::ok();
  if (op == Op::kError) return unavailable("rendezvous at " + server_name() + ": " + std::string(in.str(kMaxFrameBytes)));
  if (op != Op::kTimeout) return unavailable("rendezvous: unexpected reply to wait");
  uint32_t n = in.u32();
  std::string list;
  for (uint32_t i = 0; i < n && in.ok(); ++i) {
    if (i) list += ", ";
    list += "'" + std::string(in.str(kMaxKeyBytes)) + "'";
  }
  return unavailable("rendezvous at " + server_name() + ": rank " + std::to_string(rank()) + " timed out after " +
                     format_duration(timeout) + " waiting for key" + (n == 1 ? " " : "s ") + list);
}

Expected<std::string> TcpRendezvous::get(const std::string& key) { return get(key, options_.timeout); }

Expected<std::string> TcpRendezvous::get(const std::string& key, milliseconds timeout) {
  TF_RETURN_IF_ERROR(wait({key}, timeout));
  std::string req = message(Op::kGet);
  put_str(req, key);
  std::string reply;
  TF_RETURN_IF_ERROR(round_trip(req, options_.timeout + kReplySlack, &reply));
  Reader in(reply);
  if (static_cast<Op>(in.u8()) != Op::kValue) return unavailable("rendezvous: key '" + key + "' vanished");
  std::string value(in.str(kMaxFrameBytes));
  if (!in.at_end()) return unavailable("rendezvous: malformed value for key '" + key + "'");
  return value;
}

Status TcpRendezvous::barrier(const std::string& name) { return barrier(name, options_.timeout); }

Status TcpRendezvous::barrier(const std::string& name, milliseconds timeout) {
  int n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = barrier_count_++;
  }
  std::string prefix = "tf/barrier/" + std::to_string(n) + "/" + name + "/";
  TF_RETURN_IF_ERROR(set(prefix + std::to_string(rank()), ""));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size(); ++r) keys.push_back(prefix + std::to_string(r));
  Status s = wait(keys, timeout);
  if (s.is_ok() || s.code() != StatusCode::kUnavailable || s.message().find(prefix) == std::string::npos) return s;
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (s.message().find("'" + k + "'") != std::string::npos) missing.push_back(k);
  }
  return unavailable("rendezvous at " + server_name() + ": barrier '" + name + "': " + ranks_phrase(missing, prefix) +
                     " did not arrive within " + format_duration(timeout));
}

}  // namespace tf
