// Gloo communicator: collectives between CPU ranks in separate processes (or
// machines) over Gloo's TCP transport, bootstrapped by the TcpRendezvous.
//
// Only built when libgloo-dev is found (TF_HAVE_GLOO). Use make_communicator()
// (communicator.h) rather than this header directly.
#pragma once

#include <memory>
#include <string_view>

#include "comm/communicator.h"
#include "comm/tcp_rendezvous.h"

namespace tf {

// Connects the full mesh through `rendezvous` (all ranks call it together).
// The rendezvous is only needed during this call. `tag` keeps the keys of
// several communicators built over one rendezvous apart (make_communicators).
Expected<std::unique_ptr<Communicator>> make_gloo_communicator(TcpRendezvous& rendezvous, const CommOptions& options,
                                                               std::string_view tag = {});

}  // namespace tf
