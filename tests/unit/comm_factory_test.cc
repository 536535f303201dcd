// make_communicator: option validation and backend choice.
#include <gtest/gtest.h>

#include "comm/communicator.h"

namespace tf {
namespace {

TEST(MakeCommunicatorTest, SingleRankIsTheDefault) {
  auto c = make_communicator(CommOptions{});
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_STREQ((*c)->backend_name(), "single");
  EXPECT_EQ((*c)->world_size(), 1);
  Tensor t = Tensor::from_floats({2}, {1.5f, -2.0f});
  ASSERT_TRUE((*c)->all_reduce_sum(t).is_ok());
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1.5f, -2.0f}));
}

TEST(MakeCommunicatorTest, RejectsBadOptions) {
  CommOptions o;
  o.world_size = 2;
  auto single_of_two = make_communicator(o);
  EXPECT_EQ(single_of_two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(single_of_two.status().message().find("needs world_size 1"), std::string::npos);

  o.backend = CommBackend::kGloo;
  o.rank = 2;
  EXPECT_EQ(make_communicator(o).status().code(), StatusCode::kInvalidArgument);
  o.rank = -1;
  EXPECT_EQ(make_communicator(o).status().code(), StatusCode::kInvalidArgument);
  o.rank = 1;
  o.op_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(make_communicator(o).status().code(), StatusCode::kInvalidArgument);
  o.op_timeout = std::chrono::milliseconds(1000);
  o.rendezvous = "no-port-here";
  auto bad_address = make_communicator(o);
#if TF_HAVE_GLOO
  EXPECT_EQ(bad_address.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_address.status().message().find("no-port-here"), std::string::npos);
#else
  EXPECT_EQ(bad_address.status().code(), StatusCode::kUnimplemented);
#endif
}

TEST(MakeCommunicatorTest, NcclNeedsTheCudaBuild) {
  CommOptions o;
  o.backend = CommBackend::kNccl;
  o.rendezvous = "bad";
  auto c = make_communicator(o);
  ASSERT_FALSE(c.has_value());
#if TF_HAVE_CUDA
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);  // the address, checked first
#else
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("CUDA"), std::string::npos);
#endif
}

TEST(MakeCommunicatorTest, ParsesBackendNames) {
  EXPECT_EQ(*parse_comm_backend("single"), CommBackend::kSingle);
  EXPECT_EQ(*parse_comm_backend("gloo"), CommBackend::kGloo);
  EXPECT_EQ(*parse_comm_backend("nccl"), CommBackend::kNccl);
  auto bad = parse_comm_backend("mpi");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("'mpi'"), std::string::npos);
  EXPECT_STREQ(comm_backend_name(CommBackend::kGloo), "gloo");
}

TEST(MakeCommunicatorsTest, SeveralSingleRankCommunicators) {
  auto c = make_communicators(CommOptions{}, {CommBackend::kSingle, CommBackend::kSingle});
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  ASSERT_EQ(c->size(), 2u);
  EXPECT_NE((*c)[0].get(), (*c)[1].get());
  EXPECT_STREQ((*c)[1]->backend_name(), "single");
  const CommStats s = (*c)[0]->stats();  // the single rank measures nothing
  EXPECT_EQ(s.all_reduce_calls, 0);
  EXPECT_EQ(s.all_reduce_seconds, 0.0);
}

TEST(MakeCommunicatorsTest, RejectsAnEmptyListAndBadEntries) {
  auto none = make_communicators(CommOptions{}, {});
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  CommOptions o;
  o.world_size = 2;
  o.rank = 1;
  auto single_of_two = make_communicators(o, {CommBackend::kGloo, CommBackend::kSingle});
  EXPECT_EQ(single_of_two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(single_of_two.status().message().find("needs world_size 1"), std::string::npos);
  o.rank = 2;
  EXPECT_EQ(make_communicators(o, {CommBackend::kGloo}).status().code(), StatusCode::kInvalidArgument);
#if !TF_HAVE_CUDA
  // A backend that was not built is refused before any rendezvous.
  o.rank = 1;
  auto nccl = make_communicators(o, {CommBackend::kGloo, CommBackend::kNccl});
  EXPECT_EQ(nccl.status().code(), StatusCode::kUnimplemented);
#endif
}

}  // namespace
}  // namespace tf
