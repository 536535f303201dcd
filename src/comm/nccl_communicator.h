// NCCL communicator: collectives between CUDA ranks (one GPU per process),
// bootstrapped by exchanging the ncclUniqueId over the TcpRendezvous.
//
// Only built with CUDA (TF_HAVE_CUDA). Tensors must be contiguous and live on
// this rank's device. Every call enqueues on the communicator's stream (its own
// non-blocking stream unless set_stream() names another) and returns once the
// work has completed: it polls the stream and ncclCommGetAsyncError, and a call
// that does not finish within CommOptions::op_timeout aborts the communicator
// (ncclCommAbort also stops NCCL kernels spinning on a dead peer) and returns
// kUnavailable. After that the communicator refuses further calls.
// Unlike the Gloo backend, ranks do not check that they agree on each call
// (it would cost a round trip per collective): ranks that disagree hang until
// the timeout aborts the communicator.
// The stream is not synchronised with whoever produced the inputs: run the
// collectives on the producer's stream (set_stream) or synchronise first.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/tcp_rendezvous.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace tf {

class NcclCommunicator : public Communicator {
 public:
  // The stream collectives run on (nullptr: the communicator's own stream).
  virtual void set_stream(CUstream_st* stream) = 0;
  virtual int cuda_device() const = 0;
};

// All ranks call it together; the rendezvous is needed only during this call.
// Sets NCCL_NVLS_ENABLE=0 in the environment unless it is already set.
Expected<std::unique_ptr<Communicator>> make_nccl_communicator(TcpRendezvous& rendezvous, const CommOptions& options);

}  // namespace tf
