// Noticing that the client of a non-streaming request went away.
//
// A non-streaming handler waits for the whole generation without writing, and
// cpp-httplib 0.11 neither reads the connection while a handler runs nor gives the
// handler its socket. So the socket is found from the addresses httplib reports (a
// one-time scan of /proc/self/fd, Linux), and a peer's FIN is seen by peeking it. The
// handler's thread owns the connection until it returns, so the descriptor stays valid
// for as long as the check is used.
#pragma once

#include <functional>
#include <string>

namespace tf::server {

// The descriptor of this process's TCP socket connected from remote_addr:remote_port
// to local_port, or -1 when there is none (or the platform has no /proc/self/fd).
int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port);

// False once the peer closed its side or the connection failed; true while it is open
// (including when it already sent more bytes, e.g. a pipelined request).
bool peer_connected(int fd);

// A liveness check for the connection, or an empty function when its socket is not found.
std::function<bool()> connection_alive_check(const std::string& remote_addr, int remote_port, int local_port);

// The numeric host and port of a socket's peer (`peer`) or its own address, as httplib
// formats remote_addr and local_addr; false when the socket has none.
bool socket_address(int fd, bool peer, std::string& host, int& port);

}  // namespace tf::server
