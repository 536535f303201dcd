// PromptIndex (src/cache/prompt_index.h): exact longest-prefix matches under a limit, the
// shared prefix with any kept prompt, least-recently-used order.
#include "cache/prompt_index.h"

#include <gtest/gtest.h>

#include <vector>

#include "cache/prompt_salt.h"

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

namespace tf {
namespace {

std::vector<int32_t> salted(std::vector<int32_t> tokens, std::string_view salt) {
  salt_prompt_tokens(tokens, salt);
  return tokens;
}

TEST(PromptSalt, NoSaltLeavesTheTokensAndASaltIsDeterministic) {
  const std::vector<int32_t> prompt = {1, 2, 3, 154879, 0};
  EXPECT_EQ(salted(prompt, ""), prompt);
  EXPECT_EQ(salted(prompt, "team-a"), salted(prompt, "team-a"));
  EXPECT_NE(salted(prompt, "team-a"), prompt);
}

TEST(PromptSalt, MatchingStaysExactWithinASaltAndFailsAcrossSalts) {
  // A bijection at each position: prompts that differ in one token still differ there, and
  // share exactly their common prefix, under the same salt.
  const std::vector<int32_t> a = {10, 20, 30, 40, 50, 60};
  std::vector<int32_t> b = a;
  b[3] = 41;
  const auto sa = salted(a, "s"), sb = salted(b, "s");
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(sa[i] == sb[i], a[i] == b[i]) << i;

  PromptIndex index;
  index.add(1, salted(a, "alice"));
  auto hit = index.longest_prefix(salted(a, "alice"), 6);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 6);
  EXPECT_FALSE(index.longest_prefix(salted(a, "mallory"), 6).has_value());
  EXPECT_FALSE(index.longest_prefix(a, 6).has_value());
  EXPECT_EQ(index.shared_prefix(salted(a, "alicf")), 0);
  EXPECT_EQ(index.shared_prefix(a), 0);
}

TEST(PromptSalt, EverySaltGivesItsOwnKeysAtEveryPosition) {
  // The same token repeated: the keys differ from position to position, and between salts
  // that differ in one character (any agreement would be a 2^-32 coincidence).
  const std::vector<int32_t> same(4096, 7);
  const auto x = salted(same, "salt-0"), y = salted(same, "salt-1");
  int equal_across = 0, equal_along = 0;
  for (size_t i = 0; i < same.size(); ++i) {
    equal_across += x[i] == y[i];
    if (i > 0) equal_along += x[i] == x[i - 1];
  }
  EXPECT_EQ(equal_across, 0);
  EXPECT_EQ(equal_along, 0);
}

}  // namespace
}  // namespace tf
