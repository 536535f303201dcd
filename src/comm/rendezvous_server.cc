// RendezvousServer (see rendezvous_server.h; wire format in rendezvous_wire.h).
#include "comm/rendezvous_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "comm/rendezvous_wire.h"

namespace tf {

using namespace rendezvous_wire;

Expected<std::unique_ptr<RendezvousServer>> RendezvousServer::start(const std::string& host, int port, int world_size,
                                                                   milliseconds grace) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  int gai = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
  if (gai != 0) {
    return unavailable("rendezvous: rank 0 cannot resolve its own address '" + host + "': " + gai_strerror(gai));
  }
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = "socket: " + errno_text(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      last_error = errno_text(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    return unavailable("rendezvous: rank 0 cannot listen on " + host + ":" + port_text + ": " + last_error +
                       " (the rendezvous host must be an address of rank 0's machine, and the port free)");
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  int actual_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    return unavailable("rendezvous: eventfd: " + errno_text(errno));
  }
  auto server = std::unique_ptr<RendezvousServer>(new RendezvousServer(fd, wake, actual_port, world_size, grace));
  server->thread_ = std::thread([s = server.get()] { s->run(); });
  return server;
}

RendezvousServer::~RendezvousServer() {
  stop_deadline_ = Clock::now() + grace_;
  stopping_.store(true);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  for (auto& c : conns_) ::close(c.fd);
  ::close(listen_fd_);
  ::close(wake_fd_);
}

RendezvousServer::RendezvousServer(int listen_fd, int wake_fd, int port, int world_size, milliseconds grace)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), world_size_(world_size), grace_(grace),
      joined_(static_cast<size_t>(world_size), false) {}

void RendezvousServer::run() {
  std::vector<pollfd> fds;
  while (true) {
    Clock::time_point now = Clock::now();
    if (stopping_.load()) {
      bool any_rank = std::any_of(conns_.begin(), conns_.end(), [](const Conn& c) { return c.rank >= 0; });
      if (!any_rank || now >= stop_deadline_) return;
    }
    int timeout = 1000;
    for (const auto& c : conns_) {
      if (c.waiting) timeout = std::min(timeout, remaining_ms(c.wait_deadline));
    }
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& c : conns_) fds.push_back({c.fd, POLLIN, 0});
    int rv = ::poll(fds.data(), fds.size(), std::max(timeout, 1));
    if (rv < 0 && errno != EINTR) return;
    if (rv > 0) {
      if (fds[0].revents) {
        uint64_t v;
        [[maybe_unused]] ssize_t n = ::read(wake_fd_, &v, sizeof(v));
      }
      // Read existing connections first: accept() may grow conns_.
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents) read_from(conns_[i - 2]);
      }
      if (fds[1].revents & POLLIN) accept_new();
    }
    std::erase_if(conns_, [this](const Conn& c) {
      if (c.dead && c.rank >= 0 && !c.left && died_.empty()) {
        died_ = "rank " + std::to_string(c.rank) + " disconnected from the rendezvous without leaving (did it die?)";
      }
      if (c.dead) ::close(c.fd);
      return c.dead;
    });
    expire_waits(Clock::now());
  }
}

void RendezvousServer::accept_new() {
  int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  // A client that stops reading must not stall the server forever.
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Conn c;
  c.fd = fd;
  conns_.push_back(std::move(c));
}

void RendezvousServer::read_from(Conn& c) {
  char buf[65536];
  ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (n <= 0) {
    c.dead = true;
    return;
  }
  c.in.append(buf, static_cast<size_t>(n));
  while (!c.dead && c.in.size() >= 4) {
    size_t len = read_u32(c.in.data());
    if (len > kMaxFrameBytes) {
      c.dead = true;  // garbage or a hostile client
      return;
    }
    if (c.in.size() < 4 + len) return;
    std::string payload = c.in.substr(4, len);
    c.in.erase(0, 4 + len);
    if (c.waiting || !handle(c, payload)) c.dead = true;  // one request at a time
  }
}

void RendezvousServer::reply(Conn& c, const std::string& payload) {
  if (!send_all(c.fd, framed(payload))) c.dead = true;
}

void RendezvousServer::reply_error(Conn& c, const std::string& text) {
  std::string r = message(Op::kError);
  put_str(r, text);
  reply(c, r);
}

// False: malformed request; the connection is dropped.
bool RendezvousServer::handle(Conn& c, std::string_view payload) {
  Reader in(payload);
  auto op = static_cast<Op>(in.u8());
  if (op != Op::kHello && c.rank < 0) return false;
  switch (op) {
    case Op::kHello: {
      int rank = static_cast<int>(in.u32());
      int world = static_cast<int>(in.u32());
      if (!in.at_end() || c.rank >= 0) return false;
      if (world != world_size_) {
        reply_error(c, "rank " + std::to_string(rank) + " says world_size " + std::to_string(world) +
                           " but rank 0 has " + std::to_string(world_size_));
      } else if (rank < 0 || rank >= world_size_) {
        reply_error(c, "rank " + std::to_string(rank) + " is outside 0.." + std::to_string(world_size_ - 1));
      } else if (joined_[static_cast<size_t>(rank)]) {
        reply_error(c, "rank " + std::to_string(rank) + " joined twice (two processes given the same rank?)");
      } else {
        joined_[static_cast<size_t>(rank)] = true;
        c.rank = rank;
        kv_[join_key(rank)] = "";
        reply(c, message(Op::kOk));
      }
      return true;
    }
    case Op::kSet: {
      std::string key(in.str(kMaxKeyBytes));
      std::string value(in.str(kMaxFrameBytes));
      if (!in.at_end()) return false;
      kv_[std::move(key)] = std::move(value);
      reply(c, message(Op::kOk));
      return true;
    }
    case Op::kGet: {
      std::string key(in.str(kMaxKeyBytes));
      if (!in.at_end()) return false;
      auto it = kv_.find(key);
      if (it == kv_.end()) {
        reply(c, message(Op::kMissing));
      } else {
        std::string r = message(Op::kValue);
        put_str(r, it->second);
        reply(c, r);
      }
      return true;
    }
    case Op::kBye:
      if (!in.at_end()) return false;
      c.left = true;
      return true;
    case Op::kWait: {
      uint32_t timeout_ms = in.u32();
      uint32_t count = in.u32();
      if (!in.ok() || count > kMaxWaitKeys) return false;
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < count; ++i) keys.emplace_back(in.str(kMaxKeyBytes));
      if (!in.at_end()) return false;
      c.waiting = true;
      c.wait_keys = std::move(keys);
      c.wait_deadline = Clock::now() + milliseconds(timeout_ms);
      return true;  // answered by expire_waits, possibly right away
    }
    default:
      return false;
  }
}

// Answers every parked wait whose keys all exist or whose deadline passed.
void RendezvousServer::expire_waits(Clock::time_point now) {
  for (auto& c : conns_) {
    if (!c.waiting || c.dead) continue;
    std::vector<std::string> missing;
    for (const auto& k : c.wait_keys) {
      if (!kv_.count(k)) missing.push_back(k);
    }
    if (missing.empty()) {
      c.waiting = false;
      reply(c, message(Op::kOk));
    } else if (!died_.empty()) {
      c.waiting = false;
      reply_error(c, died_);
    } else if (now >= c.wait_deadline) {
      c.waiting = false;
      std::string r = message(Op::kTimeout);
      put_u32(r, static_cast<uint32_t>(missing.size()));
      for (const auto& k : missing) put_str(r, k);
      reply(c, r);
    }
  }
}

}  // namespace tf
