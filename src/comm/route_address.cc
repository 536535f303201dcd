// local_address_toward / interface_with_address (see route_address.h).
#include "comm/route_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tf {
namespace {

// The numeric form of an IPv4/IPv6 socket address ("192.0.2.1", "fe80::1").
std::string numeric(const sockaddr* a, socklen_t len) {
  char host[NI_MAXHOST] = {0};
  if (::getnameinfo(a, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  std::string out = host;
  // Link-local IPv6 addresses come back as "fe80::1%eth0": the zone is not part of the address.
  if (const size_t pct = out.find('%'); pct != std::string::npos) out.resize(pct);
  return out;
}

}  // namespace

Expected<std::string> local_address_toward(const std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int gai = ::getaddrinfo(peer.c_str(), "9", &hints, &res); gai != 0) {
    return unavailable("cannot resolve '" + peer + "': " + gai_strerror(gai));
  }
  std::string last_error = "no address";
  std::string found;
  for (addrinfo* a = res; a != nullptr && found.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    // connect() on a datagram socket only picks the route and the source address.
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      sockaddr_storage local{};
      socklen_t len = sizeof local;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
        found = numeric(reinterpret_cast<sockaddr*>(&local), len);
      }
    } else {
      last_error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (found.empty()) return unavailable("no route from this machine to '" + peer + "': " + last_error);
  return found;
}

Expected<std::string> interface_with_address(const std::string& address) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return unavailable(std::string("getifaddrs: ") + std::strerror(errno));
  std::string name;
  for (ifaddrs* i = list; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (numeric(i->ifa_addr, len) == address) name = i->ifa_name;
  }
  ::freeifaddrs(list);
  if (name.empty()) return not_found("no network interface of this machine has the address " + address);
  return name;
}

bool is_loopback_address(const std::string& address) {
  if (address == "localhost" || address == "::1") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

}  // namespace tf
