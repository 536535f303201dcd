// Which local address and network interface this machine uses to reach a peer.
// Ranks on several machines must bind their sockets (Gloo, NCCL's bootstrap) to
// the interface of the link between the machines (system.md: FABRIC_PEER, a
// ConnectX port with its own subnet), not to whatever interface comes first.
#pragma once

#include <string>

#include "core/status.h"

namespace tf {

// The local IP address the kernel's routing picks for traffic to `peer` (a
// numeric address or a host name): the address a UDP socket connected there is
// bound to. Nothing is sent. kUnavailable names the peer when it does not
// resolve or has no route.
Expected<std::string> local_address_toward(const std::string& peer);

// The network interface that holds `address` ("lo", "enp1s0f0np0");
// kNotFound when no interface of this machine has it.
Expected<std::string> interface_with_address(const std::string& address);

// 127.0.0.0/8, ::1 and "localhost": an address that never leaves this machine.
bool is_loopback_address(const std::string& address);

}  // namespace tf
