// make_communicator(s): validates CommOptions, runs the TCP rendezvous and hands
// it to the chosen backend(s). The rendezvous lives only for the bootstrap.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "comm/communicator.h"
#include "comm/route_address.h"
#include "comm/tcp_rendezvous.h"
#include "core/logging.h"
#if TF_HAVE_GLOO
#include "comm/gloo_communicator.h"
#endif
#if TF_HAVE_CUDA
#include "comm/nccl_communicator.h"
#endif

namespace tf {

const char* comm_backend_name(CommBackend backend) {
  switch (backend) {
    case CommBackend::kSingle: return "single";
    case CommBackend::kGloo: return "gloo";
    case CommBackend::kNccl: return "nccl";
  }
  return "unknown";
}

Expected<CommBackend> parse_comm_backend(std::string_view name) {
  for (CommBackend b : {CommBackend::kSingle, CommBackend::kGloo, CommBackend::kNccl}) {
    if (name == comm_backend_name(b)) return b;
  }
  return invalid_argument("communicator backend '" + std::string(name) + "' is not one of single, gloo, nccl");
}

namespace {

Status check_options(const CommOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument("communicator: rank " + std::to_string(options.rank) + " of world_size " +
                            std::to_string(options.world_size) + " is invalid");
  }
  if (options.timeout.count() <= 0 || options.op_timeout.count() <= 0) {
    return invalid_argument("communicator: timeout and op_timeout must be positive");
  }
  return Status::ok();
}

Status check_backend(CommBackend backend, const CommOptions& options) {
  if (backend == CommBackend::kSingle && options.world_size != 1) {
    return invalid_argument("communicator: backend 'single' needs world_size 1, not " +
                            std::to_string(options.world_size) + " (use gloo or nccl)");
  }
#if !TF_HAVE_GLOO
  if (backend == CommBackend::kGloo) {
    return unimplemented("communicator: backend 'gloo' was not built (install libgloo-dev and reconfigure)");
  }
#endif
#if !TF_HAVE_CUDA
  if (backend == CommBackend::kNccl) {
    return unimplemented("communicator: backend 'nccl' needs the CUDA build (configure with -DTF_CUDA=ON)");
  }
#endif
  return Status::ok();
}

// One backend over an established rendezvous; `tag` keeps its keys apart from
// those of the other communicators built over the same rendezvous.
Expected<std::unique_ptr<Communicator>> connect_backend(CommBackend backend, TcpRendezvous& rendezvous,
                                                        const CommOptions& options, const std::string& tag) {
  (void)rendezvous;
  (void)tag;
  if (backend == CommBackend::kSingle) return make_single_rank_communicator();
#if TF_HAVE_GLOO
  if (backend == CommBackend::kGloo) return make_gloo_communicator(rendezvous, options, tag);
#endif
#if TF_HAVE_CUDA
  if (backend == CommBackend::kNccl) return make_nccl_communicator(rendezvous, options, tag);
#endif
  (void)options;
  return internal_error(std::string("communicator: unhandled backend ") + comm_backend_name(backend));
}

// Ranks on several machines: NCCL's bootstrap and socket transport would pick the
// first interface that is up, which may be another network than the one the
// ranks reach each other over. Pin them to the interface of this rank's
// rendezvous connection (as Gloo binds to its address), unless the user chose one.
void pin_nccl_interface(const std::string& local_address) {
  if (is_loopback_address(local_address) || std::getenv("NCCL_SOCKET_IFNAME") != nullptr) return;
  auto name = interface_with_address(local_address);
  if (!name) {
    TF_LOG_WARN("NCCL: {} (NCCL picks its interface itself)", name.status().message());
    return;
  }
  TF_LOG_INFO("NCCL: sockets on {} ({}, the interface toward rank 0)", *name, local_address);
  ::setenv("NCCL_SOCKET_IFNAME", ("=" + *name).c_str(), 1);  // "=": exactly this interface
}

}  // namespace

Expected<std::vector<std::unique_ptr<Communicator>>> make_communicators(const CommOptions& options,
                                                                        const std::vector<CommBackend>& backends) {
  TF_RETURN_IF_ERROR(check_options(options));
  if (backends.empty()) return invalid_argument("communicator: no backend requested");
  bool all_single = true;
  for (CommBackend b : backends) {
    TF_RETURN_IF_ERROR(check_backend(b, options));
    all_single = all_single && b == CommBackend::kSingle;
  }
  std::vector<std::unique_ptr<Communicator>> out;
  if (all_single) {
    for (size_t i = 0; i < backends.size(); ++i) out.push_back(make_single_rank_communicator());
    return out;
  }
  TF_ASSIGN_OR_RETURN(HostPort address, parse_host_port(options.rendezvous));
  RendezvousOptions r;
  r.host = address.host;
  r.port = address.port;
  r.rank = options.rank;
  r.world_size = options.world_size;
  r.timeout = options.timeout;
  r.on_listening = options.on_listening;
  TF_ASSIGN_OR_RETURN(std::unique_ptr<TcpRendezvous> rendezvous, TcpRendezvous::connect(r));
  if (std::find(backends.begin(), backends.end(), CommBackend::kNccl) != backends.end()) {
    pin_nccl_interface(rendezvous->local_address());
  }
  // Each communicator's keys and barriers have their own names ("gloo/...",
  // "nccl/1/..."), so they bootstrap one after the other over the same rendezvous.
  for (size_t i = 0; i < backends.size(); ++i) {
    const std::string tag = i == 0 ? std::string() : std::to_string(i) + "/";
    TF_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, connect_backend(backends[i], *rendezvous, options, tag));
    out.push_back(std::move(c));
  }
  return out;
}

Expected<std::unique_ptr<Communicator>> make_communicator(const CommOptions& options) {
  TF_RETURN_IF_ERROR(check_options(options));
  TF_RETURN_IF_ERROR(check_backend(options.backend, options));
  TF_ASSIGN_OR_RETURN(auto all, make_communicators(options, {options.backend}));
  return std::move(all.front());
}

}  // namespace tf
