// The world of one: every collective is the identity.
#include "comm/communicator.h"

namespace tf {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* backend_name() const override { return "single"; }
  Status all_reduce_sum(Tensor&) override { return Status::ok(); }
  Status all_gather(const Tensor& input, Tensor& output) override {
    if (output.numel() != input.numel() || output.dtype() != input.dtype()) {
      return invalid_argument("all_gather: output " + output.describe() + " does not fit input " + input.describe());
    }
    output.copy_from(input.reshape(output.shape()));
    return Status::ok();
  }
  Status broadcast(Tensor&, int root) override {
    return root == 0 ? Status::ok() : invalid_argument("broadcast: root " + std::to_string(root) + " of 1 rank");
  }
  Status barrier() override { return Status::ok(); }
};

}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator() { return std::make_unique<SingleRankCommunicator>(); }

}  // namespace tf
