// NCCL communicator: collectives between CUDA ranks (one GPU per process),
// bootstrapped by exchanging the ncclUniqueId over the TcpRendezvous.
//
// Only built with CUDA (TF_HAVE_CUDA). Tensors must be contiguous and live on
// this rank's device. Every call enqueues on the communicator's stream (its own
// non-blocking stream unless set_stream() names another). all_reduce_sum returns
// at once (deferred: the stream orders it before whatever reads the tensor next,
// so a step's host work runs ahead of the device instead of waiting for each
// collective); all_gather, broadcast and barrier return once the stream's work,
// earlier all-reduces included, has completed. A watchdog thread follows the
// deferred all-reduces: one that does not finish within CommOptions::op_timeout,
// or an NCCL error, aborts the communicator (ncclCommAbort also stops NCCL kernels
// spinning on a dead peer, which frees a host blocked behind them in a CUDA call),
// and every later call returns kUnavailable.
// Unlike the Gloo backend, ranks do not check that they agree on each call
// (it would cost a round trip per collective): ranks that disagree hang until
// the timeout aborts the communicator.
// The stream is not synchronised with whoever produced the inputs: run the
// collectives on the producer's stream (set_stream) or synchronise first.
// CUDA graphs: while the stream is being captured, all_reduce_sum and all_gather
// are recorded into the graph (nothing else happens: no event, no watchdog entry),
// broadcast, barrier and flush fail (kUnimplemented); every rank must capture and
// replay the same sequence. A replay's collectives are watched by the flush() that
// follows it. The communicator must outlive the graphs that captured it (NCCL's
// teardown waits for them).
// At two ranks an f32 all_reduce_sum is one ncclAllReduce (x0 + x1 is the rank-order
// sum bit for bit); TF_NCCL_ALL_REDUCE=gather keeps the all-gather + sum kernel.
// abort() may be called from any thread (e.g. a launcher that saw a peer exit):
// the call in progress, if any, fails within milliseconds instead of waiting out
// its timeout, and so does every later call.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "comm/communicator.h"
#include "comm/tcp_rendezvous.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace tf {

class NcclCommunicator : public Communicator {
 public:
  // The stream collectives run on (nullptr: the communicator's own stream).
  virtual void set_stream(CUstream_st* stream) = 0;
  virtual int cuda_device() const = 0;
  // Thread-safe: makes the current and every later call fail with kUnavailable
  // naming `why` (the communicator is torn down by the thread that uses it).
  virtual void abort(const std::string& why) = 0;
};

// CUDA devices this process sees (after CUDA_VISIBLE_DEVICES); 0 when there is no
// driver or no device (the error text is then in *why, when given).
int visible_cuda_devices(std::string* why = nullptr);

// All ranks call it together; the rendezvous is needed only during this call.
// Sets NCCL_NVLS_ENABLE=0 in the environment unless it is already set. `tag`
// keeps the keys of several communicators over one rendezvous apart.
Expected<std::unique_ptr<Communicator>> make_nccl_communicator(TcpRendezvous& rendezvous, const CommOptions& options,
                                                               std::string_view tag = {});

}  // namespace tf
