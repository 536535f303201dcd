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
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace tf {

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
};

std::unique_ptr<Communicator> make_single_rank_communicator();

}  // namespace tf
