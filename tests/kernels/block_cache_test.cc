// BlockCache (kernels/cuda/block_cache.h): the caching device allocator's free lists.
// Blocks are reused by size; while a side branch is open (a hold window) a freed
// block is held, never handed out, until the join caches it again; blocks cached
// before the window stay available (the side branch starts after their last users).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/block_cache.h"

namespace tf::cuda {
namespace {

void* fake(uintptr_t i) { return reinterpret_cast<void*>(i * 4096); }

TEST(BlockCache, TakeFitsAtMostTwiceTheSize) {
  BlockCache c;
  c.put(fake(1), 2048);
  size_t got = 0;
  EXPECT_EQ(c.take(512, got), nullptr);  // 2048 > 2 * 512: a small tensor must not pin it
  EXPECT_EQ(c.take(1024, got), fake(1));
  EXPECT_EQ(got, 2048u);
  EXPECT_EQ(c.cached_bytes(), 0u);
  EXPECT_EQ(c.take(1024, got), nullptr);  // handed out once
}

TEST(BlockCache, PicksTheSmallestFittingBlock) {
  BlockCache c;
  c.put(fake(1), 3072);
  c.put(fake(2), 2048);
  size_t got = 0;
  EXPECT_EQ(c.take(2048, got), fake(2));
  EXPECT_EQ(c.take(2048, got), fake(1));
  EXPECT_EQ(c.cached_bytes(), 0u);
}

TEST(BlockCache, BlocksFreedInAHoldWindowAreHeldUntilItEnds) {
  BlockCache c;
  c.put(fake(1), 1024);  // freed before the branch: safe for either branch
  c.begin_hold();
  EXPECT_TRUE(c.holding());
  c.put(fake(2), 1024);  // freed on one branch while the other may still run
  c.put(fake(3), 1024);
  EXPECT_EQ(c.held_bytes(), 2048u);
  EXPECT_EQ(c.cached_bytes(), 1024u);
  size_t got = 0;
  EXPECT_EQ(c.take(1024, got), fake(1));
  EXPECT_EQ(c.take(1024, got), nullptr) << "a held block was handed out before the join";
  c.end_hold();
  EXPECT_FALSE(c.holding());
  EXPECT_EQ(c.held_bytes(), 0u);
  EXPECT_EQ(c.cached_bytes(), 2048u);
  std::vector<void*> after{c.take(1024, got), c.take(1024, got)};
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, (std::vector<void*>{fake(2), fake(3)}));
}

TEST(BlockCache, ReleasingTheCacheKeepsHeldBlocks) {
  BlockCache c;
  c.put(fake(1), 1024);
  c.begin_hold();
  c.put(fake(2), 4096);
  const auto cached = c.take_cached();  // what a failed cudaMalloc returns to the driver
  ASSERT_EQ(cached.size(), 1u);
  EXPECT_EQ(cached.begin()->second, fake(1));
  EXPECT_EQ(c.held_bytes(), 4096u);
  c.end_hold();
  size_t got = 0;
  EXPECT_EQ(c.take(4096, got), fake(2));
}

TEST(BlockCache, TakeAllIncludesHeldBlocks) {
  BlockCache c;
  c.put(fake(1), 1024);
  c.begin_hold();
  c.put(fake(2), 1024);
  std::vector<void*> all = c.take_all();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<void*>{fake(1), fake(2)}));
  EXPECT_EQ(c.cached_bytes() + c.held_bytes(), 0u);
}

}  // namespace
}  // namespace tf::cuda
