// Tensor-parallel plumbing that needs no second rank (issue #7): which
// communicator the model's collectives use (bind_model_comm: NCCL only with CUDA
// tensors, never Gloo on the GPU), the GPU-count check of `--tp N --device cuda`
// (check_rank_gpus), and the model setup's weight dtype on the wire.
#include <gtest/gtest.h>

#include <string>

#include "engine/rank_launcher.h"
#include "engine/step_broadcast.h"
#include "engine/tp_follower.h"
#include "kernels/cpu/cpu_ops.h"

namespace tf::engine {
namespace {

// A communicator that only has a name and a place in a world.
class NamedComm final : public Communicator {
 public:
  NamedComm(const char* name, int rank, int world) : name_(name), rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const char* backend_name() const override { return name_; }
  Status all_reduce_sum(Tensor&) override { return internal_error("not for this test"); }
  Status all_gather(const Tensor&, Tensor&) override { return internal_error("not for this test"); }
  Status broadcast(Tensor&, int) override { return internal_error("not for this test"); }
  Status barrier() override { return internal_error("not for this test"); }

 private:
  const char* name_;
  int rank_, world_;
};

bool has(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

TEST(BindModelCommTest, CpuRanksUseTheHostChannelOrAGivenCpuCommunicator) {
  auto ops = make_cpu_ops();
  NamedComm gloo("gloo", 1, 2), other("gloo", 1, 2);
  auto self = bind_model_comm(gloo, nullptr, "cpu", *ops);
  ASSERT_TRUE(self.has_value()) << self.status().to_string();
  EXPECT_EQ(*self, &gloo);
  auto given = bind_model_comm(gloo, &other, "cpu", *ops);
  ASSERT_TRUE(given.has_value()) << given.status().to_string();
  EXPECT_EQ(*given, &other);
}

TEST(BindModelCommTest, NcclNeedsCudaTensors) {
  auto ops = make_cpu_ops();
  NamedComm gloo("gloo", 0, 2), nccl("nccl", 0, 2);
  auto r = bind_model_comm(gloo, &nccl, "cpu", *ops);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(has(r.status(), "NCCL communicator needs CUDA tensors")) << r.status().to_string();
}

TEST(BindModelCommTest, CudaRanksRefuseGlooForTheModel) {
  auto ops = make_cpu_ops();
  NamedComm gloo("gloo", 0, 4);
  auto r = bind_model_comm(gloo, nullptr, "cuda", *ops);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(has(r.status(), "--tp 4 with --device cuda")) << r.status().to_string();
  EXPECT_TRUE(has(r.status(), "need the NCCL communicator, not gloo")) << r.status().to_string();
}

TEST(BindModelCommTest, TheTwoCommunicatorsMustSpanTheSameRanks) {
  auto ops = make_cpu_ops();
  NamedComm host("gloo", 1, 2), wrong_rank("gloo", 0, 2), wrong_world("gloo", 1, 4);
  auto a = bind_model_comm(host, &wrong_rank, "cpu", *ops);
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.status().code(), StatusCode::kInternal);
  EXPECT_TRUE(has(a.status(), "rank 0 of 2, the host channel rank 1 of 2")) << a.status().to_string();
  auto b = bind_model_comm(host, &wrong_world, "cpu", *ops);
  ASSERT_FALSE(b.has_value());
  EXPECT_TRUE(has(b.status(), "rank 1 of 4")) << b.status().to_string();
}

#if !TF_HAVE_CUDA
TEST(BindModelCommTest, NcclOnCudaNeedsTheCudaBuild) {
  auto ops = make_cpu_ops();
  NamedComm gloo("gloo", 0, 2), nccl("nccl", 0, 2);
  auto r = bind_model_comm(gloo, &nccl, "cuda", *ops);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(has(r.status(), "built without CUDA")) << r.status().to_string();
}
#endif

TEST(CheckRankGpusTest, EnoughGpusPass) {
  EXPECT_TRUE(check_rank_gpus(1, 1, nullptr).is_ok());
  EXPECT_TRUE(check_rank_gpus(2, 2, "0,1").is_ok());
  EXPECT_TRUE(check_rank_gpus(2, 8, nullptr).is_ok());
  EXPECT_TRUE(check_rank_gpus(4, 4, nullptr).is_ok());
}

TEST(CheckRankGpusTest, TooFewGpusNameBothCountsAndTheVisibleList) {
  Status s = check_rank_gpus(4, 2, "2,3");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(has(s, "--tp 4 with --device cuda needs 4 GPUs (one per rank), but 2 are visible")) << s.to_string();
  EXPECT_TRUE(has(s, "CUDA_VISIBLE_DEVICES=2,3")) << s.to_string();
  EXPECT_TRUE(has(s, "lower --tp")) << s.to_string();

  Status one = check_rank_gpus(2, 1, nullptr);
  EXPECT_TRUE(has(one, "but 1 is visible (CUDA_VISIBLE_DEVICES is not set)")) << one.to_string();
}

TEST(CheckRankGpusTest, NoGpuAtAllCarriesTheDriversReason) {
  Status s = check_rank_gpus(2, 0, "", "no CUDA-capable device is detected");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(has(s, "but 0 are visible (CUDA_VISIBLE_DEVICES=): no CUDA-capable device is detected"))
      << s.to_string();
  EXPECT_EQ(check_rank_gpus(0, 4, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(TpModelSetupTest, SingleRankSendAcceptsBothWeightDtypes) {
  auto comm = make_single_rank_communicator();
  EXPECT_TRUE(send_model_setup(*comm, {64, 10, DType::kF8E4M3, DType::kBF16}).is_ok());
  EXPECT_TRUE(send_model_setup(*comm, {64, 10, DType::kF32, DType::kF32}).is_ok());
}

}  // namespace
}  // namespace tf::engine
