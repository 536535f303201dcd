// NCCL communicator (see nccl_communicator.h).
//
// The communicator is created non-blocking (ncclConfig_t::blocking = 0): init
// and every enqueue may return ncclInProgress, and we poll
// ncclCommGetAsyncError with a deadline instead of blocking inside NCCL, which
// could hang forever on a peer that never arrives. Collectives run on a stream
// that we poll (cudaStreamQuery) together with the async error; a dead peer
// either surfaces as an NCCL error (network transports notice closed sockets)
// or as a kernel that never finishes (NVLink/P2P peers), which the deadline
// catches. ncclCommAbort then tears the communicator down, kernels included.
//
// all_reduce_sum is an all-gather plus a rank-order sum kernel, like the Gloo
// backend (see rank_order_sum.h): identical bits on every rank and backend.
// Except for two ranks and f32: there every element of an NCCL sum is one IEEE
// addition of the two ranks' values, whatever NCCL's algorithm (ring, tree; NVLS is
// off), and a + b == b + a bit for bit, so ncclAllReduce already gives x0 + x1, the
// rank-order sum, on both ranks, in one call without the scratch round trip
// (comm_nccl_check --graph checks the bits). bf16 keeps the gather: NCCL's bf16
// addition rounds once, the rank-order sum twice (f32, then bf16).
// TF_NCCL_ALL_REDUCE=gather forces the gather path everywhere (to compare).
//
// Capture-aware: while the stream is being captured into a CUDA graph (the
// decode-step graphs, step_graphs.h), all_reduce_sum and all_gather only enqueue
// (no events, no ring slot, no host wait: they run at every replay, out of the
// watchdog's sight), and the calls that must wait for the device (broadcast,
// barrier, flush) fail so that the capture fails. Whoever replays such a graph
// watches the replay as a whole with flush(): its deadline (op_timeout) and
// abort() cover the captured collectives as they cover a deferred all-reduce.
#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <cstring>
#include <memory>
#include <thread>

#include "comm/nccl_rank_order_sum.h"

namespace tf {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string text = ncclGetErrorString(r);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

// Polls `done`, yielding for the first `spin` (a replayed decode step ends within a
// few ms, and a 100 us sleep would add up to that much to every step), then with
// short sleeps, until it says stop or the deadline passes.
template <typename Done>
bool poll_until(Clock::time_point deadline, Done done, milliseconds spin = milliseconds(0)) {
  const Clock::time_point spin_until = Clock::now() + spin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (i < 200 || now < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

// Waits while the communicator state is ncclInProgress. Returns the final state.
ncclResult_t wait_not_in_progress(ncclComm_t comm, Clock::time_point deadline) {
  ncclResult_t state = ncclInProgress;
  poll_until(deadline, [&] {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
    return state != ncclInProgress;
  });
  return state;
}

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(ncclComm_t comm, cudaStream_t own_stream, int rank, int world, int device,
                       milliseconds op_timeout, milliseconds first_op_timeout)
      : comm_(comm), own_stream_(own_stream), stream_(own_stream), rank_(rank), world_(world), device_(device),
        op_timeout_(op_timeout), first_op_timeout_(first_op_timeout) {
    for (InFlight& f : ring_) {
      // Timing events (cudaEventDefault keeps timing on); without them stats() stays zero
      // but completion is still watched through `done`.
      if (cudaEventCreate(&f.t0) != cudaSuccess || cudaEventCreate(&f.done) != cudaSuccess) {
        cudaGetLastError();
        timing_ = false;
      }
    }
    if (cudaEventCreate(&t0_) != cudaSuccess || cudaEventCreate(&t1_) != cudaSuccess) {
      cudaGetLastError();
      t0_ = t1_ = nullptr;
    }
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicatorImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    if (aborter_.joinable()) {
      // The abort finishes once the graphs that captured the communicator are gone
      // (normally destroyed before it); a graph still alive must not hang the exit.
      poll_until(Clock::now() + milliseconds(1000), [&] { return abort_done_->load(); });
      if (abort_done_->load()) {
        aborter_.join();
      } else {
        aborter_.detach();
      }
    }
    cudaSetDevice(device_);
    if (comm_ != nullptr) {
      // Flush pending work; a peer that is gone cannot hang us here either.
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) r = wait_not_in_progress(comm_, Clock::now() + op_timeout_);
      if (r == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    for (InFlight& f : ring_) {
      if (f.t0 != nullptr) cudaEventDestroy(f.t0);
      if (f.done != nullptr) cudaEventDestroy(f.done);
    }
    if (t0_ != nullptr) cudaEventDestroy(t0_);
    if (t1_ != nullptr) cudaEventDestroy(t1_);
    if (own_stream_ != nullptr) cudaStreamDestroy(own_stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const char* backend_name() const override { return "nccl"; }
  int cuda_device() const override { return device_; }
  void set_stream(CUstream_st* stream) override { stream_ = stream != nullptr ? stream : own_stream_; }
  CommStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  // The scratch of all_reduce_sum, allocated before any capture (a cudaMalloc inside
  // one would invalidate it).
  Status prepare() {
    std::lock_guard<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(usable_locked("prepare"));
    return reserve_scratch_locked();
  }

  void abort(const std::string& why) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (abort_why_.empty()) abort_why_ = why.empty() ? std::string("aborted") : why;
      abort_requested_ = true;
    }
    cv_.notify_all();
  }

  // Deferred: enqueued on the stream, then returns without waiting (the stream
  // orders it before whatever reads the tensor). The watchdog thread follows its
  // completion, and the next blocking call (all_gather, broadcast, barrier) waits.
  Status all_reduce_sum(Tensor& tensor) override {
    TF_RETURN_IF_ERROR(check_tensor(tensor, "all_reduce_sum"));
    if (tensor.dtype() != DType::kF32 && tensor.dtype() != DType::kBF16) {
      return invalid_argument("nccl all_reduce_sum: " + tensor.describe() + ": only f32 and bf16 are supported");
    }
    const size_t n = static_cast<size_t>(tensor.numel());
    if (n == 0) return Status::ok();
    if (capturing()) {
      // Recorded into the graph being captured: it runs at every replay, watched
      // through the replay's flush() instead of the ring.
      std::lock_guard<std::mutex> lock(mu_);
      TF_RETURN_IF_ERROR(usable_locked("all_reduce_sum"));
      if (scratch_ == nullptr) return internal_error(where("all_reduce_sum") + ": captured before prepare()");
      TF_RETURN_IF_ERROR(enqueue_sum_locked(tensor));
      ++stats_.all_reduce_captured;
      return Status::ok();
    }
    const size_t elem = tensor.element_size();
    TF_RETURN_IF_ERROR(wait_for_ring_slot("all_reduce_sum"));
    std::unique_lock<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(usable_locked("all_reduce_sum"));
    TF_RETURN_IF_ERROR(reserve_scratch_locked());
    InFlight& slot = ring_[static_cast<size_t>(enqueued_ % kRing)];
    if (timing_) record(slot.t0);
    TF_RETURN_IF_ERROR(enqueue_sum_locked(tensor));
    if (cudaEventRecord(slot.done, stream_) != cudaSuccess) {
      cudaGetLastError();
      return fail_locked("all_reduce_sum", "cannot record the completion event");
    }
    slot.bytes = static_cast<int64_t>(n * elem);
    slot.enqueued_at = Clock::now();
    ++enqueued_;
    lock.unlock();
    cv_.notify_all();
    return Status::ok();
  }

  Status all_gather(const Tensor& input, Tensor& output) override {
    TF_RETURN_IF_ERROR(check_tensor(input, "all_gather"));
    TF_RETURN_IF_ERROR(check_tensor(output, "all_gather"));
    if (output.dtype() != input.dtype() || output.numel() != input.numel() * world_) {
      return invalid_argument("nccl all_gather: output " + output.describe() + " does not hold " +
                              std::to_string(world_) + " x input " + input.describe());
    }
    if (input.numel() == 0) return Status::ok();
    if (capturing()) {
      // Into the graph being captured: no timing events, no wait (see all_reduce_sum).
      std::lock_guard<std::mutex> lock(mu_);
      TF_RETURN_IF_ERROR(usable_locked("all_gather"));
      TF_RETURN_IF_ERROR(enqueued_locked(
          "all_gather", ncclAllGather(input.raw(), output.raw(), input.nbytes(), ncclUint8, comm_, stream_)));
      ++stats_.all_gather_captured;
      return Status::ok();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      TF_RETURN_IF_ERROR(usable_locked("all_gather"));
      record(t0_);
      TF_RETURN_IF_ERROR(enqueued_locked(
          "all_gather", ncclAllGather(input.raw(), output.raw(), input.nbytes(), ncclUint8, comm_, stream_)));
      record(t1_);
    }
    TF_RETURN_IF_ERROR(wait("all_gather"));
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.all_gather_calls;
    stats_.all_gather_seconds += elapsed_s(t0_, t1_);
    return Status::ok();
  }

  Status broadcast(Tensor& tensor, int root) override {
    TF_RETURN_IF_ERROR(check_tensor(tensor, "broadcast"));
    if (root < 0 || root >= world_) {
      return invalid_argument("nccl broadcast: root " + std::to_string(root) + " outside 0.." + std::to_string(world_ - 1));
    }
    if (tensor.numel() == 0) return Status::ok();
    TF_RETURN_IF_ERROR(refuse_in_capture("broadcast"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      TF_RETURN_IF_ERROR(usable_locked("broadcast"));
      TF_RETURN_IF_ERROR(enqueued_locked(
          "broadcast", ncclBroadcast(tensor.raw(), tensor.raw(), tensor.nbytes(), ncclUint8, root, comm_, stream_)));
    }
    return wait("broadcast");
  }

  // Also the watch of a replayed graph's collectives: waits for everything on the
  // stream, bounded by op_timeout; a dead or hung peer aborts the communicator.
  Status flush() override {
    TF_RETURN_IF_ERROR(refuse_in_capture("flush"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      TF_RETURN_IF_ERROR(usable_locked("flush"));
    }
    return wait("flush");
  }

  Status barrier() override {
    // NCCL has no barrier: a one-element all-reduce that everyone must join.
    TF_RETURN_IF_ERROR(refuse_in_capture("barrier"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      TF_RETURN_IF_ERROR(usable_locked("barrier"));
      TF_RETURN_IF_ERROR(reserve_scratch_locked());
      TF_RETURN_IF_ERROR(
          enqueued_locked("barrier", ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_)));
    }
    return wait("barrier");
  }

 private:
  // Per-rank elements per all-gather round of all_reduce_sum (bounds scratch_).
  static constexpr size_t kChunkElements = size_t{1} << 22;
  // Deferred all-reduces the host may run ahead of the device.
  static constexpr int64_t kRing = 256;
  // How long wait() yields before it sleeps between looks (see poll_until).
  static constexpr milliseconds kSpin{20};

  struct InFlight {
    cudaEvent_t t0 = nullptr, done = nullptr;
    int64_t bytes = 0;
    Clock::time_point enqueued_at;
  };

  std::string where(const char* op) const {
    return std::string("nccl ") + op + " on rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
           " (cuda:" + std::to_string(device_) + ")";
  }

  Status check_tensor(const Tensor& t, const char* op) const {
    if (t.device() != Device::cuda(device_)) {
      return invalid_argument(where(op) + ": " + t.describe() + " is not on this rank's device");
    }
    if (!t.is_contiguous()) return invalid_argument(where(op) + ": " + t.describe() + " is not contiguous");
    return Status::ok();
  }

  // Whether stream_ is being captured into a CUDA graph (by this thread: the
  // backend captures in cudaStreamCaptureModeThreadLocal). An invalidated capture
  // counts too: no host wait may be added to it either.
  bool capturing() const {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_, &st) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return st != cudaStreamCaptureStatusNone;
  }
  Status refuse_in_capture(const char* op) const {
    if (!capturing()) return Status::ok();
    return unimplemented(where(op) + ": cannot be captured into a CUDA graph (it waits for the device)");
  }

  // The all-gather + rank-order sum rounds of all_reduce_sum (chunked by the scratch).
  Status enqueue_sum_locked(Tensor& tensor) {
    const size_t n = static_cast<size_t>(tensor.numel());
    const bool bf16 = tensor.dtype() == DType::kBF16;
    const size_t elem = tensor.element_size();
    auto* data = static_cast<uint8_t*>(tensor.raw());
    if (world_ == 2 && !bf16 && !force_gather_) {
      // x0 + x1 == x1 + x0: NCCL's own sum is the rank-order sum (see the top).
      return enqueued_locked("all_reduce_sum",
                             ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_));
    }
    for (size_t start = 0; start < n; start += kChunkElements) {
      size_t len = std::min(kChunkElements, n - start);
      void* part = data + start * elem;
      TF_RETURN_IF_ERROR(enqueued_locked("all_reduce_sum", ncclAllGather(part, scratch_, len,
                                                                         bf16 ? ncclBfloat16 : ncclFloat32, comm_,
                                                                         stream_)));
      cudaError_t e = launch_rank_order_sum(scratch_, world_, len, part, bf16, stream_);
      if (e != cudaSuccess) return internal_error(where("all_reduce_sum") + ": sum kernel: " + cudaGetErrorString(e));
    }
    return Status::ok();
  }

  // Timing: events recorded on stream_ around the enqueued work; read only once the
  // work is known to be complete, so reading them never blocks.
  void record(cudaEvent_t e) {
    if (e != nullptr && cudaEventRecord(e, stream_) != cudaSuccess) cudaGetLastError();
  }
  static double elapsed_s(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    if (a == nullptr || b == nullptr || cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
      cudaGetLastError();
      return 0.0;
    }
    return ms / 1000.0;
  }

  Status usable_locked(const char* op) {
    if (comm_ != nullptr && abort_requested_) return fail_locked(op, abort_why_);
    if (comm_ == nullptr) return unavailable(where(op) + ": communicator aborted after an earlier failure: " + broken_);
    if (cudaSetDevice(device_) != cudaSuccess) return internal_error(where(op) + ": cudaSetDevice failed");
    return Status::ok();
  }

  // One scratch buffer for every call, sized once (world x chunk x 4 bytes), so it
  // is never freed while deferred all-reduces may still read it.
  Status reserve_scratch_locked() {
    if (scratch_ != nullptr) return Status::ok();
    const size_t bytes = static_cast<size_t>(world_) * kChunkElements * sizeof(float);
    if (cudaMalloc(&scratch_, bytes) != cudaSuccess) {
      cudaGetLastError();
      scratch_ = nullptr;
      return resource_exhausted("nccl: cannot allocate " + std::to_string(bytes) + " bytes of scratch on cuda:" +
                                std::to_string(device_));
    }
    return Status::ok();
  }

  // Tears the communicator down (kernels spinning on a dead peer included); every
  // later call fails naming `why`. On a thread of its own: ncclCommAbort raises the
  // abort flags first (kernels spinning on a dead peer stop at once), but then waits
  // until every CUDA graph that captured the communicator is destroyed (NCCL's
  // persistent plans), and those graphs belong to the model, destroyed only later.
  void abort_comm_locked(const std::string& why) {
    if (comm_ == nullptr) return;
    broken_ = why;
    ncclComm_t comm = comm_;
    comm_ = nullptr;
    if (aborter_.joinable()) return;  // (one communicator, one abort)
    // No CUDA call before ncclCommAbort on that thread: raising the flags takes no
    // CUDA lock, so a kernel spinning on a dead peer stops even while another thread
    // sits in a CUDA call that waits for it (NCCL sets the device itself afterwards).
    std::shared_ptr<std::atomic<bool>> done = abort_done_;
    aborter_ = std::thread([comm, done] {
      ncclCommAbort(comm);
      done->store(true);
    });
  }
  Status fail_locked(const char* op, const std::string& why) {
    abort_comm_locked(why);
    return unavailable(where(op) + " failed: " + why + "; communicator aborted");
  }

  // An NCCL call on a non-blocking communicator: ncclInProgress means "still
  // being enqueued"; wait for that before the next NCCL call.
  Status enqueued_locked(const char* op, ncclResult_t r) {
    if (r == ncclInProgress) r = wait_not_in_progress(comm_, Clock::now() + current_timeout());
    if (r == ncclInProgress) return fail_locked(op, "enqueueing did not finish within " + format_duration(current_timeout()));
    if (r != ncclSuccess) return fail_locked(op, nccl_text(r, comm_));
    return Status::ok();
  }

  milliseconds current_timeout() const { return first_op_done_ ? op_timeout_ : first_op_timeout_; }

  // The host may run at most kRing deferred all-reduces ahead of the device.
  Status wait_for_ring_slot(const char* op) {
    std::unique_lock<std::mutex> lock(mu_);
    while (enqueued_ - completed_ >= kRing) {
      if (comm_ == nullptr || abort_requested_) return usable_locked(op);
      cv_.wait_for(lock, milliseconds(1));
    }
    return Status::ok();
  }

  // Waits for the stream, watching NCCL's async error and the deadline; the lock is
  // taken only around each look, so the watchdog can act meanwhile.
  Status wait(const char* op) {
    milliseconds timeout = current_timeout();
    cudaError_t stream_state = cudaErrorNotReady;
    ncclResult_t nccl_state = ncclSuccess;
    std::string stopped;
    bool finished = poll_until(
        Clock::now() + timeout,
        [&] {
          std::lock_guard<std::mutex> lock(mu_);
          if (abort_requested_ || comm_ == nullptr) return true;
          stream_state = cudaStreamQuery(stream_);
          if (stream_state != cudaErrorNotReady) return true;
          if (ncclCommGetAsyncError(comm_, &nccl_state) != ncclSuccess) nccl_state = ncclInternalError;
          return nccl_state != ncclSuccess && nccl_state != ncclInProgress;
        },
        kSpin);
    std::lock_guard<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(usable_locked(op));
    if (!finished) return fail_locked(op, "not finished within " + format_duration(timeout) + " (a peer died or hangs)");
    if (nccl_state != ncclSuccess && nccl_state != ncclInProgress) return fail_locked(op, nccl_text(nccl_state, comm_));
    if (stream_state != cudaSuccess) return fail_locked(op, std::string("CUDA error: ") + cudaGetErrorString(stream_state));
    first_op_done_ = true;
    return Status::ok();
  }

  // The watchdog: follows the deferred all-reduces in order. The oldest unfinished one
  // must finish within the op timeout of becoming the oldest (or of being enqueued);
  // a peer that died (NCCL's async error), a deadline passed or abort() tears the
  // communicator down here, which also frees a host thread blocked in a CUDA call
  // behind a collective that would never end.
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    Clock::time_point oldest_since = Clock::now();
    while (!stop_) {
      if (comm_ != nullptr && abort_requested_) abort_comm_locked(abort_why_);
      if (comm_ == nullptr || completed_ == enqueued_) {
        if (comm_ == nullptr) completed_ = enqueued_;  // aborted: nothing will finish
        cv_.wait_for(lock, milliseconds(50));
        oldest_since = Clock::now();
        continue;
      }
      InFlight& oldest = ring_[static_cast<size_t>(completed_ % kRing)];
      cudaError_t q = cudaEventQuery(oldest.done);
      if (q == cudaSuccess) {
        if (timing_) stats_.all_reduce_seconds += elapsed_s(oldest.t0, oldest.done);
        ++stats_.all_reduce_calls;
        stats_.all_reduce_bytes += oldest.bytes;
        ++completed_;
        first_op_done_ = true;
        oldest_since = Clock::now();
        cv_.notify_all();
        continue;
      }
      if (q != cudaErrorNotReady) {
        cudaGetLastError();
        abort_comm_locked(std::string("CUDA error in all_reduce_sum: ") + cudaGetErrorString(q));
        continue;
      }
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
      if (state != ncclSuccess && state != ncclInProgress) {
        abort_comm_locked("all_reduce_sum: " + nccl_text(state, comm_));
        continue;
      }
      const Clock::time_point since = std::max(oldest_since, oldest.enqueued_at);
      if (Clock::now() - since > current_timeout()) {
        abort_comm_locked("all_reduce_sum not finished within " + format_duration(current_timeout()) +
                          " (a peer died or hangs)");
        continue;
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      lock.lock();
    }
  }

  mutable std::mutex mu_;  // guards comm_ and every NCCL call, the ring and stats_
  std::condition_variable cv_;
  ncclComm_t comm_;
  cudaStream_t own_stream_;
  cudaStream_t stream_;
  int rank_;
  int world_;
  int device_;
  milliseconds op_timeout_;
  milliseconds first_op_timeout_;  // the first call also sets up NCCL's connections
  std::atomic<bool> first_op_done_{false};
  void* scratch_ = nullptr;
  std::string broken_;
  cudaEvent_t t0_ = nullptr;
  cudaEvent_t t1_ = nullptr;
  InFlight ring_[kRing];
  bool timing_ = true;
  // TF_NCCL_ALL_REDUCE=gather: the all-gather + rank-order sum kernel at two ranks too.
  const bool force_gather_ = [] {
    const char* v = std::getenv("TF_NCCL_ALL_REDUCE");
    return v != nullptr && std::string(v) == "gather";
  }();
  int64_t enqueued_ = 0, completed_ = 0;
  CommStats stats_;
  bool abort_requested_ = false;
  std::string abort_why_;
  bool stop_ = false;
  std::thread watchdog_;
  std::thread aborter_;  // runs ncclCommAbort (abort_comm_locked)
  std::shared_ptr<std::atomic<bool>> abort_done_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

int visible_cuda_devices(std::string* why) {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = cudaGetErrorString(e);
    cudaGetLastError();
    return 0;
  }
  return devices;
}

Expected<std::unique_ptr<Communicator>> make_nccl_communicator(TcpRendezvous& rendezvous, const CommOptions& options,
                                                               std::string_view tag) {
  // NVLink multicast (NVLS) can wedge shared GPUs; off unless the user decided otherwise.
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  const int rank = rendezvous.rank();
  const int world = rendezvous.world_size();
  const std::string who = "nccl: rank " + std::to_string(rank) + " of " + std::to_string(world);

  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    return unavailable(who + ": no CUDA device (" + std::string(cudaGetErrorString(e)) + ")");
  }
  int device = options.cuda_device >= 0 ? options.cuda_device : rank % devices;
  if (device >= devices) {
    return invalid_argument(who + ": cuda_device " + std::to_string(device) + " but only " + std::to_string(devices) +
                            " visible");
  }
  if ((e = cudaSetDevice(device)) != cudaSuccess) {
    return unavailable(who + ": cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(e));
  }

  const std::string id_key = "nccl/" + std::string(tag) + "unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return unavailable(who + ": ncclGetUniqueId: " + nccl_text(r, nullptr));
    TF_RETURN_IF_ERROR(rendezvous.set(id_key, std::string_view(id.internal, sizeof(id.internal))));
  } else {
    TF_ASSIGN_OR_RETURN(std::string bytes, rendezvous.get(id_key));
    if (bytes.size() != sizeof(id.internal)) return unavailable(who + ": malformed ncclUniqueId from rank 0");
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  if (r == ncclInProgress) r = wait_not_in_progress(comm, Clock::now() + options.timeout);
  if (r != ncclSuccess) {
    std::string why = r == ncclInProgress ? "did not finish within " + format_duration(options.timeout) +
                                                " (a rank missing or dead?)"
                                          : nccl_text(r, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return unavailable(who + ": ncclCommInitRankConfig on cuda:" + std::to_string(device) + " " + why);
  }
  cudaStream_t stream = nullptr;
  if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) {
    ncclCommAbort(comm);
    return unavailable(who + ": cudaStreamCreate: " + cudaGetErrorString(e));
  }
  auto result = std::make_unique<NcclCommunicatorImpl>(comm, stream, rank, world, device, options.op_timeout,
                                                       std::max(options.op_timeout, options.timeout));
  if (Status s = result->prepare(); !s.is_ok()) return s.with_context(who);
  TF_RETURN_IF_ERROR(rendezvous.barrier("nccl connected" + std::string(tag)));
  return std::unique_ptr<Communicator>(std::move(result));
}

}  // namespace tf
