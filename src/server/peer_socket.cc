// See peer_socket.h.
#include "server/peer_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <netinet/in.h>

namespace tf::server {

namespace {

// Numeric host and port of an address, formatted as httplib formats remote_addr.
bool numeric_address(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  char buf[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0)
    return false;
  host = buf;
  if (addr.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return false;
  }
  return true;
}

}  // namespace

int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0 || local_port <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t llen = sizeof(local), plen = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    if (local.ss_family != AF_INET && local.ss_family != AF_INET6) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;  // listener
    std::string lhost, phost;
    int lport = 0, pport = 0;
    if (!numeric_address(local, llen, lhost, lport) || !numeric_address(peer, plen, phost, pport)) continue;
    if (lport == local_port && pport == remote_port && phost == remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool peer_connected(int fd) {
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return true;
  if (n == 0) return false;  // orderly shutdown by the peer
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

bool socket_address(int fd, bool peer, std::string& host, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int got = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                       : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return got == 0 && numeric_address(addr, len, host, port);
}

std::function<bool()> connection_alive_check(const std::string& remote_addr, int remote_port, int local_port) {
  int fd = find_connection_socket(remote_addr, remote_port, local_port);
  if (fd < 0) return {};
  return [fd] { return peer_connected(fd); };
}

}  // namespace tf::server
