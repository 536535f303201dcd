// The cache pool and window are sized once from a memory budget (memory_plan.h),
// and the paged budget never hands out more pages than the pool has.
#include <gtest/gtest.h>

#include "engine/memory_plan.h"
#include "engine/paged_cache_budget.h"

namespace tf {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

MemoryPlanInput base() {
  MemoryPlanInput in;
  in.available_bytes = 10 * kGiB;
  in.reserve_bytes = 2 * kGiB;
  in.weight_bytes = 4 * kGiB;
  in.cache_bytes_per_token = 1024;
  in.state_bytes_per_stream = 64 << 20;
  in.parallel = 4;
  in.context = 4096;
  in.model_max_context = 1 << 20;
  in.page_size = 64;
  return in;
}

TEST(MemoryPlan, PoolIsParallelWindowsWhenMemoryAllows) {
  auto plan = plan_memory(base());
  ASSERT_TRUE(plan.has_value()) << plan.status().to_string();
  EXPECT_EQ(plan->context, 4096);
  EXPECT_EQ(plan->pool_tokens, 4 * 4096);
  EXPECT_EQ(plan->num_pages, 4 * 4096 / 64);
  EXPECT_TRUE(plan->notes.empty());
}

TEST(MemoryPlan, ContextZeroIsTheLargestThatFits) {
  MemoryPlanInput in = base();
  in.context = 0;
  auto plan = plan_memory(in);
  ASSERT_TRUE(plan.has_value());
  // (10 - 2 - 4) GiB - 4 x 64 MiB = 3.75 GiB at 1 KiB per token = 3,932,160 tokens; the model allows 1M.
  EXPECT_EQ(plan->context, 1 << 20);
  EXPECT_EQ(plan->pool_tokens, 3932160);  // all that fits: less than 4 full windows
  in.model_max_context = 1 << 23;
  plan = plan_memory(in);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->context, 3932160);
  EXPECT_EQ(plan->pool_tokens, 3932160);
}

TEST(MemoryPlan, WindowBeyondThePoolIsLoweredAndSaid) {
  MemoryPlanInput in = base();
  in.context = 1 << 20;
  in.pool_cap_bytes = 256 << 20;  // KV_POOL_GIB 0.25: 262,144 tokens
  auto plan = plan_memory(in);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->context, 262144);
  EXPECT_EQ(plan->pool_tokens, 262144);
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_NE(plan->notes[0].find("does not fit"), std::string::npos);
}

TEST(MemoryPlan, NoRoomIsAClearError) {
  MemoryPlanInput in = base();
  in.reserve_bytes = 7 * kGiB;
  auto plan = plan_memory(in);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("MEMORY_RESERVE_GIB"), std::string::npos);
  in = base();
  in.context = -1;
  EXPECT_FALSE(plan_memory(in).has_value());
}

TEST(PagedCacheBudget, ReservesWholePagesAndReleasesOnce) {
  PagedCacheBudget b(10, 64);
  EXPECT_EQ(b.capacity_tokens(), 640);
  auto h1 = b.reserve(65);  // 2 pages
  ASSERT_TRUE(h1.has_value());
  EXPECT_EQ(b.free_tokens(), 512);
  EXPECT_TRUE(b.can_admit(512));
  EXPECT_FALSE(b.can_admit(513));
  EXPECT_FALSE(b.reserve(513).has_value());
  auto h2 = b.reserve(512);
  ASSERT_TRUE(h2.has_value());
  EXPECT_EQ(b.free_tokens(), 0);
  b.release(*h1);
  b.release(*h1);  // a second release is a no-op
  EXPECT_EQ(b.free_tokens(), 128);
  b.release(*h2);
  EXPECT_EQ(b.free_tokens(), 640);
  EXPECT_EQ(b.live_reservations(), 0u);
}

}  // namespace
}  // namespace tf
