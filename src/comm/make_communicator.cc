// make_communicator: validates CommOptions, runs the TCP rendezvous and hands
// it to the chosen backend. The rendezvous lives only for the bootstrap.
#include <string>

#include "comm/communicator.h"
#include "comm/tcp_rendezvous.h"
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

Expected<std::unique_ptr<Communicator>> make_communicator(const CommOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument("communicator: rank " + std::to_string(options.rank) + " of world_size " +
                            std::to_string(options.world_size) + " is invalid");
  }
  if (options.timeout.count() <= 0 || options.op_timeout.count() <= 0) {
    return invalid_argument("communicator: timeout and op_timeout must be positive");
  }
  if (options.backend == CommBackend::kSingle) {
    if (options.world_size != 1) {
      return invalid_argument("communicator: backend 'single' needs world_size 1, not " +
                              std::to_string(options.world_size) + " (use gloo or nccl)");
    }
    return make_single_rank_communicator();
  }
#if !TF_HAVE_GLOO
  if (options.backend == CommBackend::kGloo) {
    return unimplemented("communicator: backend 'gloo' was not built (install libgloo-dev and reconfigure)");
  }
#endif
#if !TF_HAVE_CUDA
  if (options.backend == CommBackend::kNccl) {
    return unimplemented("communicator: backend 'nccl' needs the CUDA build (configure with -DTF_CUDA=ON)");
  }
#endif
  TF_ASSIGN_OR_RETURN(HostPort address, parse_host_port(options.rendezvous));
  RendezvousOptions r;
  r.host = address.host;
  r.port = address.port;
  r.rank = options.rank;
  r.world_size = options.world_size;
  r.timeout = options.timeout;
  r.on_listening = options.on_listening;
  TF_ASSIGN_OR_RETURN(std::unique_ptr<TcpRendezvous> rendezvous, TcpRendezvous::connect(r));
#if TF_HAVE_GLOO
  if (options.backend == CommBackend::kGloo) return make_gloo_communicator(*rendezvous, options);
#endif
#if TF_HAVE_CUDA
  if (options.backend == CommBackend::kNccl) return make_nccl_communicator(*rendezvous, options);
#endif
  return internal_error("communicator: unhandled backend");
}

}  // namespace tf
