// Gloo communicator (see gloo_communicator.h).
//
// all_reduce_sum is an all-gather followed by a rank-order sum on every rank
// (rank_order_sum.h), in bounded chunks: results are bitwise identical on all
// ranks and equal to what the NCCL backend computes, at the cost of moving
// (world-1) x the data instead of Gloo's ring 2 (world-1)/world x; for the
// 2-4 ranks of tensor parallelism that is at most 1.5x.
//
// Dead ranks: Gloo's TCP pairs watch their sockets, so a peer that dies closes
// them and every waiting rank throws at once; a peer that hangs is caught by
// the per-operation timeout (CommOptions::op_timeout). Gloo throws; we turn
// every exception into kUnavailable and refuse further calls, because Gloo's
// pairs are closed after an error.
//
// Every collective starts with a small fixed-size exchange of what each rank is
// about to do (agree()): Gloo would abort the process on mismatched sizes, and
// this turns a broken "same call on every rank" contract into kInvalidArgument
// on every rank instead. It costs one small all-gather per call, acceptable for
// the CPU backend.
#include "comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <csignal>
#include <cstring>
#include <vector>

#include "comm/rank_order_sum.h"

namespace tf {
namespace {

using std::chrono::milliseconds;

// Gloo's store interface on top of our rendezvous; Gloo expects exceptions.
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  RendezvousStore(TcpRendezvous& rendezvous, milliseconds timeout, std::string prefix)
      : r_(rendezvous), timeout_(timeout), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status s = r_.set(prefix_ + key, std::string_view(data.data(), data.size()));
    if (!s.is_ok()) throw StatusError(s);
  }
  std::vector<char> get(const std::string& key) override {
    Expected<std::string> v = r_.get(prefix_ + key, timeout_);
    if (!v.has_value()) throw StatusError(v.status());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(prefix_ + k);
    Status s = r_.wait(prefixed, timeout.count() > 0 ? timeout : timeout_);
    if (!s.is_ok()) throw StatusError(s);
  }

 private:
  TcpRendezvous& r_;
  milliseconds timeout_;
  std::string prefix_;  // "gloo/" (+ the tag): this communicator's keys
};

// Gloo writes with writev(): a peer that died would otherwise kill us with
// SIGPIPE instead of returning EPIPE. Only the default action is replaced.
void ignore_sigpipe_if_default() {
  struct sigaction current{};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, milliseconds op_timeout)
      : ctx_(std::move(context)), op_timeout_(op_timeout) {}

  int rank() const override { return ctx_->rank; }
  int world_size() const override { return ctx_->size; }
  const char* backend_name() const override { return "gloo"; }

  CommStats stats() const override { return stats_; }

  Status all_reduce_sum(Tensor& tensor) override {
    TF_RETURN_IF_ERROR(check_cpu(tensor, "all_reduce_sum"));
    Timed timed(stats_.all_reduce_seconds);
    ++stats_.all_reduce_calls;
    stats_.all_reduce_bytes += static_cast<int64_t>(tensor.nbytes());
    if (tensor.dtype() != DType::kF32 && tensor.dtype() != DType::kBF16) {
      return invalid_argument("gloo all_reduce_sum: " + tensor.describe() + ": only f32 and bf16 are supported");
    }
    TF_RETURN_IF_ERROR(agree(OpKind::kAllReduceSum, tensor.dtype(), tensor.numel(), -1));
    if (tensor.numel() == 0) return Status::ok();
    Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const size_t elem = work.element_size();
    const size_t n = static_cast<size_t>(work.numel());
    const size_t world = static_cast<size_t>(world_size());
    scratch_.resize(world * std::min(n, kChunkElements) * elem);
    auto* data = static_cast<uint8_t*>(work.raw());
    for (size_t start = 0; start < n; start += kChunkElements) {
      size_t len = std::min(kChunkElements, n - start);
      uint8_t* chunk = data + start * elem;
      TF_RETURN_IF_ERROR(gather_bytes("all_reduce_sum", chunk, len * elem, scratch_.data()));
      if (work.dtype() == DType::kF32) {
        rank_order_sum_f32(reinterpret_cast<const float*>(scratch_.data()), world_size(), len,
                           reinterpret_cast<float*>(chunk));
      } else {
        rank_order_sum_bf16(reinterpret_cast<const uint16_t*>(scratch_.data()), world_size(), len,
                            reinterpret_cast<uint16_t*>(chunk));
      }
    }
    if (work.raw() != tensor.raw()) tensor.copy_from(work);
    return Status::ok();
  }

  Status all_gather(const Tensor& input, Tensor& output) override {
    TF_RETURN_IF_ERROR(check_cpu(input, "all_gather"));
    TF_RETURN_IF_ERROR(check_cpu(output, "all_gather"));
    Timed timed(stats_.all_gather_seconds);
    ++stats_.all_gather_calls;
    if (output.dtype() != input.dtype() || output.numel() != input.numel() * world_size()) {
      return invalid_argument("gloo all_gather: output " + output.describe() + " does not hold " +
                              std::to_string(world_size()) + " x input " + input.describe());
    }
    TF_RETURN_IF_ERROR(agree(OpKind::kAllGather, input.dtype(), input.numel(), -1));
    if (input.numel() == 0) return Status::ok();
    Tensor in = input.is_contiguous() ? input : input.contiguous();
    Tensor out = output.is_contiguous() ? output : Tensor::empty(output.shape(), output.dtype());
    TF_RETURN_IF_ERROR(gather_bytes("all_gather", in.raw(), in.nbytes(), out.raw()));
    if (out.raw() != output.raw()) output.copy_from(out);
    return Status::ok();
  }

  Status broadcast(Tensor& tensor, int root) override {
    TF_RETURN_IF_ERROR(check_cpu(tensor, "broadcast"));
    if (root < 0 || root >= world_size()) {
      return invalid_argument("gloo broadcast: root " + std::to_string(root) + " outside 0.." +
                              std::to_string(world_size() - 1));
    }
    TF_RETURN_IF_ERROR(agree(OpKind::kBroadcast, tensor.dtype(), tensor.numel(), root));
    if (tensor.numel() == 0) return Status::ok();
    Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    TF_RETURN_IF_ERROR(guarded("broadcast", [&] {
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(static_cast<uint8_t*>(work.raw()), work.nbytes());
      opts.setRoot(root);
      opts.setTimeout(op_timeout_);
      gloo::broadcast(opts);
    }));
    if (work.raw() != tensor.raw()) tensor.copy_from(work);
    return Status::ok();
  }

  // The agreement exchange is itself a barrier: nobody returns before every
  // rank has sent its header.
  Status barrier() override { return agree(OpKind::kBarrier, DType::kU8, 0, -1); }

 private:
  // Per-rank elements per all-gather round of all_reduce_sum (bounds scratch_).
  static constexpr size_t kChunkElements = size_t{1} << 18;

  // Adds the scope's host time to a CommStats field.
  struct Timed {
    explicit Timed(double& sum) : sum_(sum), t0_(std::chrono::steady_clock::now()) {}
    ~Timed() { sum_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
    double& sum_;
    std::chrono::steady_clock::time_point t0_;
  };

  enum class OpKind : uint32_t { kAllReduceSum = 1, kAllGather, kBroadcast, kBarrier };
  static const char* op_name(OpKind op) {
    switch (op) {
      case OpKind::kAllReduceSum: return "all_reduce_sum";
      case OpKind::kAllGather: return "all_gather";
      case OpKind::kBroadcast: return "broadcast";
      case OpKind::kBarrier: return "barrier";
    }
    return "unknown";
  }
  // What one rank is about to do; every rank must be about to do the same.
  struct OpHeader {
    uint32_t op;
    uint32_t dtype;
    int64_t numel;
    int64_t root;
  };

  // Gloo aborts the whole process (an exception on its I/O thread) when ranks
  // post buffers of different sizes, so before every collective the ranks
  // all-gather a fixed-size header and compare. All ranks see the same headers,
  // so a disagreement fails everywhere alike, and the communicator stays usable.
  Status agree(OpKind op, DType dtype, int64_t numel, int root) {
    OpHeader mine{static_cast<uint32_t>(op), static_cast<uint32_t>(dtype), numel, root};
    std::vector<OpHeader> all(static_cast<size_t>(world_size()));
    TF_RETURN_IF_ERROR(gather_bytes(op_name(op), &mine, sizeof(mine), all.data()));
    bool same = true;
    for (const auto& h : all) {
      same = same && h.op == all[0].op && h.dtype == all[0].dtype && h.numel == all[0].numel && h.root == all[0].root;
    }
    if (same) return Status::ok();
    std::string detail;
    for (int r = 0; r < world_size(); ++r) {
      const OpHeader& h = all[static_cast<size_t>(r)];
      bool known = h.op >= 1 && h.op <= 4 && h.dtype <= static_cast<uint32_t>(DType::kBool);
      detail += (r ? "; rank " : "rank ") + std::to_string(r) + ": " +
                (known ? std::string(op_name(static_cast<OpKind>(h.op))) + " " +
                             dtype_name(static_cast<DType>(h.dtype)) + " x " + std::to_string(h.numel) +
                             (h.root >= 0 ? " root " + std::to_string(h.root) : "")
                       : std::string("garbage"));
    }
    return invalid_argument("gloo " + std::string(op_name(op)) + " on rank " + std::to_string(rank()) +
                            ": ranks called different collectives (" + detail + ")");
  }

  Status check_cpu(const Tensor& t, const char* op) const {
    if (!t.device().is_cpu()) return invalid_argument(std::string("gloo ") + op + ": " + t.describe() + " is not on the CPU");
    return Status::ok();
  }

  Status gather_bytes(const char* op, const void* in, size_t bytes, void* out) {
    return guarded(op, [&] {
      gloo::AllgatherOptions opts(ctx_);
      // Gloo only reads the input; its API takes a non-const pointer.
      opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
      opts.setOutput(static_cast<uint8_t*>(out), bytes * static_cast<size_t>(world_size()));
      opts.setTimeout(op_timeout_);
      gloo::allgather(opts);
    });
  }

  template <typename F>
  Status guarded(const char* op, F&& body) {
    std::string where = std::string("gloo ") + op + " on rank " + std::to_string(rank()) + " of " +
                        std::to_string(world_size());
    if (!broken_reason_.empty()) {
      return unavailable(where + ": communicator unusable after an earlier failure: " + broken_reason_);
    }
    std::string what;
    try {
      body();
      return Status::ok();
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "unknown exception";
    }
    broken_reason_ = what;
    return unavailable(where + " failed: a peer died or did not answer within " + format_duration(op_timeout_) +
                       ": " + what);
  }

  std::shared_ptr<gloo::Context> ctx_;
  milliseconds op_timeout_;
  std::string broken_reason_;
  std::vector<uint8_t> scratch_;
  CommStats stats_;
};

}  // namespace

Expected<std::unique_ptr<Communicator>> make_gloo_communicator(TcpRendezvous& rendezvous, const CommOptions& options,
                                                               std::string_view tag) {
  ignore_sigpipe_if_default();
  std::string where = "gloo: rank " + std::to_string(rendezvous.rank()) + " of " +
                      std::to_string(rendezvous.world_size());
  std::shared_ptr<gloo::rendezvous::Context> context;
  try {
    gloo::transport::tcp::attr attr;
    // The address this rank used to reach rank 0 is one the others can reach.
    attr.hostname = rendezvous.local_address();
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(rendezvous.rank(), rendezvous.world_size());
    context->setTimeout(options.timeout);
    RendezvousStore store(rendezvous, options.timeout, "gloo/" + std::string(tag));
    context->connectFullMesh(store, device);
  } catch (const StatusError& e) {
    return e.status().with_context(where + ": connecting the full mesh");
  } catch (const std::exception& e) {
    return unavailable(where + ": connecting the full mesh to " + rendezvous.server_name() + " failed: " + e.what());
  }
  context->setTimeout(options.op_timeout);
  // Every rank is connected before anyone drops the rendezvous.
  TF_RETURN_IF_ERROR(rendezvous.barrier("gloo connected" + std::string(tag)));
  return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(std::move(context), options.op_timeout));
}

}  // namespace tf
