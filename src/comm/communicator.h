// Communicator: the collectives tensor parallelism needs, behind one interface.
//
// Implementations: single rank (no-op), Gloo over TCP for CPU ranks in several
// processes, NCCL for CUDA ranks. All are bootstrapped by the TCP rendezvous
// (tcp_rendezvous.h), which needs only the rank-0 host:port.
// Every call is collective: all ranks call it in the same order with tensors of
// the same shape and dtype. A rank that dies makes the others' calls fail with
// kUnavailable within seconds (timeouts), never hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace tf {

// What a communicator's collectives cost so far (cumulative since creation).
// NCCL times each call on the device (CUDA events around the enqueued work, read
// once the call completed, so timing adds no synchronisation); Gloo times on the
// host. A collective's time includes waiting for the slowest rank to arrive.
// Collectives captured into CUDA graphs (NCCL) run at every replay, unseen: they
// are counted once, when captured, in the *_captured fields, not in the others.
struct CommStats {
  int64_t all_reduce_calls = 0;
  int64_t all_reduce_bytes = 0;  // per rank, the tensor's bytes
  double all_reduce_seconds = 0.0;
  int64_t all_gather_calls = 0;
  double all_gather_seconds = 0.0;
  int64_t all_reduce_captured = 0;
  int64_t all_gather_captured = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* backend_name() const = 0;

  // In place: every rank ends with the elementwise sum over ranks (f32 or bf16).
  virtual Status all_reduce_sum(Tensor& tensor) = 0;
  // output holds world_size() copies of input's shape, stacked along dim 0, rank order.
  virtual Status all_gather(const Tensor& input, Tensor& output) = 0;
  // In place: every rank ends with root's tensor.
  virtual Status broadcast(Tensor& tensor, int root) = 0;
  virtual Status barrier() = 0;
  // Waits until every collective issued so far has completed (a backend whose
  // all_reduce_sum is deferred, NCCL, otherwise returns before the device is done),
  // within the op timeout: also how the replay of a CUDA graph holding collectives
  // is watched (a dead peer fails it with kUnavailable instead of hanging).
  // all_reduce_sum and all_gather may be captured into a CUDA graph on the NCCL
  // backend (they only enqueue then); broadcast, barrier and flush may not.
  virtual Status flush() { return Status::ok(); }
  // Cumulative cost of the calls so far (zeros where a backend does not measure).
  virtual CommStats stats() const { return {}; }
};

std::unique_ptr<Communicator> make_single_rank_communicator();

enum class CommBackend : uint8_t {
  kSingle,  // world of one, no rendezvous
  kGloo,    // CPU tensors, several processes over TCP
  kNccl,    // CUDA tensors, one GPU per rank (CUDA builds only)
};
const char* comm_backend_name(CommBackend backend);
// "single", "gloo", "nccl".
Expected<CommBackend> parse_comm_backend(std::string_view name);

struct CommOptions {
  CommBackend backend = CommBackend::kSingle;
  int rank = 0;
  int world_size = 1;
  // "host:port" of rank 0 (not used by kSingle). Rank 0 listens there; port 0
  // lets rank 0 pick a free port, announced through on_listening.
  std::string rendezvous = "127.0.0.1:29500";
  // Every rank must join (and the transport connect) within this time.
  std::chrono::milliseconds timeout{60000};
  // One collective's bound: a peer that died or hangs makes the call fail with
  // kUnavailable after at most this long (a dead peer's closed socket is usually
  // noticed at once). A rank that waits in a collective for longer than this on
  // purpose (a follower waiting for rank 0's next step) needs a larger value.
  std::chrono::milliseconds op_timeout{8000};
  // NCCL: the CUDA device of this rank; -1 picks rank % visible devices.
  int cuda_device = -1;
  // Rank 0 only: called with the port once the rendezvous listens.
  std::function<void(int port)> on_listening;
};

// Builds the communicator chosen by options.backend; blocks until every rank
// joined and the transport is connected, or fails (kUnavailable on timeouts,
// kInvalidArgument on bad options, kUnimplemented for a backend not built).
Expected<std::unique_ptr<Communicator>> make_communicator(const CommOptions& options);

// Several communicators over the same ranks from one rendezvous (one port): one
// per entry of `backends`, in that order, e.g. {kGloo, kNccl} for tensor-parallel
// CUDA serving (step commands on the host channel, the model's collectives on
// the GPUs). options.backend is ignored; kSingle entries need world_size 1.
Expected<std::vector<std::unique_ptr<Communicator>>> make_communicators(const CommOptions& options,
                                                                        const std::vector<CommBackend>& backends);

}  // namespace tf
