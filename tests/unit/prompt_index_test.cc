// PromptIndex (src/cache/prompt_index.h): exact longest-prefix matches under a limit, the
// shared prefix with any kept prompt, least-recently-used order.
#include "cache/prompt_index.h"

#include <gtest/gtest.h>

#include <vector>

namespace tf {
namespace {

TEST(PromptIndex, LongestKeptPrefixUnderTheLimit) {
  PromptIndex index;
  index.add(1, {1, 2, 3, 4});
  index.add(2, {1, 2, 3, 4, 5, 6, 7, 8});
  index.add(3, {1, 2, 9, 9});
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto hit = index.longest_prefix(prompt, 8);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->id, 2u);
  EXPECT_EQ(hit->tokens, 8);
  // The last prompt token must run: a kept prompt as long as the limit allows, not longer.
  hit = index.longest_prefix(prompt, 7);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->id, 1u);
  EXPECT_FALSE(index.longest_prefix(std::vector<int32_t>{1, 2, 3}, 3).has_value());
  // One differing token anywhere rules an entry out.
  EXPECT_FALSE(index.longest_prefix(std::vector<int32_t>{1, 2, 3, 5, 5, 6, 7, 8, 9}, 8).has_value());
  EXPECT_FALSE(index.longest_prefix(std::vector<int32_t>{0, 2, 3, 4, 5}, 4).has_value());
}

TEST(PromptIndex, SharedPrefixFindAndTotals) {
  PromptIndex index;
  EXPECT_EQ(index.shared_prefix(std::vector<int32_t>{1, 2}), 0);
  index.add(1, {1, 2, 3, 4});
  index.add(2, {1, 2, 7});
  EXPECT_EQ(index.shared_prefix(std::vector<int32_t>{1, 2, 3, 9}), 3);
  EXPECT_EQ(index.shared_prefix(std::vector<int32_t>{1, 2, 7, 7, 7}), 3);
  EXPECT_EQ(index.shared_prefix(std::vector<int32_t>{1}), 1);
  EXPECT_EQ(index.shared_prefix(std::vector<int32_t>{5}), 0);
  EXPECT_EQ(index.find(std::vector<int32_t>{1, 2, 7}), std::optional<uint64_t>(2));
  EXPECT_FALSE(index.find(std::vector<int32_t>{1, 2}).has_value());
  EXPECT_EQ(index.tokens(1), 4);
  EXPECT_EQ(index.tokens(9), 0);
  EXPECT_EQ(index.total_tokens(), 7);
  index.remove(1);
  EXPECT_EQ(index.size(), 1u);
  EXPECT_EQ(index.total_tokens(), 3);
}

TEST(PromptIndex, LeastRecentlyUsedGoesFirst) {
  PromptIndex index;
  EXPECT_FALSE(index.least_recent().has_value());
  index.add(1, {1});
  index.add(2, {2});
  index.add(3, {3});
  EXPECT_EQ(index.least_recent(), std::optional<uint64_t>(1));
  ASSERT_TRUE(index.longest_prefix(std::vector<int32_t>{1, 5}, 1).has_value());  // 1 used now
  EXPECT_EQ(index.least_recent(), std::optional<uint64_t>(2));
  ASSERT_TRUE(index.find(std::vector<int32_t>{2}).has_value());
  EXPECT_EQ(index.least_recent(), std::optional<uint64_t>(3));
  index.remove(3);
  EXPECT_EQ(index.least_recent(), std::optional<uint64_t>(1));
}

}  // namespace
}  // namespace tf
