// The loop detector (sampling/repetition_detector.h) against a direct reading of its rule,
// vLLM's repetition_detection check, at every token of random replies with loops planted in
// them; and the rule's range checks.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <vector>

#include "sampling/repetition_detector.h"

namespace tf {
namespace {

// The shortest block length whose min_count copies end `t` and cover min_tokens, by
// comparing the copies themselves.
std::optional<int32_t> reference(const std::vector<int32_t>& t, const RepetitionRule& r) {
  const int32_t lo = std::max(r.min_pattern, 1);
  if (!r.enabled()) return std::nullopt;
  const auto n = static_cast<int64_t>(t.size());
  for (int32_t p = lo; p <= r.max_pattern; ++p) {
    if (static_cast<int64_t>(p) * r.min_count > n) break;
    bool copies = true;
    for (int64_t k = 1; k <= p && copies; ++k)
      for (int32_t m = 1; m < r.min_count && copies; ++m) copies = t[n - k] == t[n - (p * m + k)];
    if (!copies) continue;
    // The periodic tail's length: how far back every token equals the one p before it.
    int64_t start = n - p;
    while (start > 0 && t[start - 1] == t[start - 1 + p]) --start;
    if (n - start >= r.min_tokens) return p;
  }
  return std::nullopt;
}

// Random text over a small alphabet, with blocks repeated a random number of times here and there.
std::vector<int32_t> reply(std::mt19937& rng, int64_t length, int alphabet) {
  std::vector<int32_t> t;
  std::uniform_int_distribution<int> tok(0, alphabet - 1), coin(0, 5), block_len(1, 12), copies(1, 6);
  while (static_cast<int64_t>(t.size()) < length) {
    if (coin(rng) == 0 && !t.empty()) {
      const int p = std::min<int>(block_len(rng), static_cast<int>(t.size()));
      const int c = copies(rng);
      for (int i = 0; i < c; ++i)
        for (int k = 0; k < p; ++k) t.push_back(t[t.size() - static_cast<size_t>(p)]);
    } else {
      t.push_back(tok(rng));
    }
  }
  t.resize(static_cast<size_t>(length));
  return t;
}

TEST(RepetitionDetector, MatchesTheRuleAtEveryToken) {
  std::mt19937 rng(7);
  int fired = 0, checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    RepetitionRule r;
    r.min_pattern = std::uniform_int_distribution<int>(0, 4)(rng);
    r.max_pattern = std::uniform_int_distribution<int>(r.min_pattern == 0 ? 1 : r.min_pattern, 16)(rng);
    r.min_count = std::uniform_int_distribution<int>(2, 5)(rng);
    r.min_tokens = std::uniform_int_distribution<int>(0, 30)(rng);
    ASSERT_TRUE(r.validate().is_ok());
    const auto t = reply(rng, 400, 2 + trial % 5);
    RepetitionDetector d(r);
    std::vector<int32_t> prefix;
    for (int32_t token : t) {
      prefix.push_back(token);
      const auto got = d.push(token);
      const auto want = reference(prefix, r);
      ASSERT_EQ(got.has_value(), want.has_value()) << "trial " << trial << " token " << prefix.size();
      ++checked;
      if (!got) continue;
      ++fired;
      EXPECT_EQ(got->pattern, *want);
      EXPECT_GE(got->tokens, static_cast<int64_t>(got->pattern) * r.min_count);
      EXPECT_GE(got->tokens, r.min_tokens);
    }
    EXPECT_EQ(d.pushed(), 400);
  }
  // The planted loops must make it fire often, and plain text must leave it quiet often.
  EXPECT_GT(fired, checked / 20);
  EXPECT_LT(fired, checked / 2);
}

TEST(RepetitionDetector, ALoopIsFoundWhenItsLastCopyCompletes) {
  RepetitionRule r;
  r.max_pattern = 8;
  r.min_count = 3;
  RepetitionDetector d(r);
  const std::vector<int32_t> head = {9, 8, 7};
  const std::vector<int32_t> block = {1, 2, 3, 4, 5};
  for (int32_t t : head) EXPECT_FALSE(d.push(t));
  for (int copy = 0; copy < 3; ++copy)
    for (size_t k = 0; k < block.size(); ++k) {
      const auto got = d.push(block[k]);
      EXPECT_EQ(got.has_value(), copy == 2 && k + 1 == block.size()) << copy << " " << k;
      if (got) {
        EXPECT_EQ(got->pattern, 5);
        EXPECT_EQ(got->tokens, 15);
      }
    }
  // min_tokens holds a short loop back until it covers that many tokens.
  r.max_pattern = 4;
  r.min_count = 2;
  r.min_tokens = 10;
  RepetitionDetector slow(r);
  for (int i = 1; i <= 12; ++i) EXPECT_EQ(slow.push(42).has_value(), i >= 10) << i;
}

TEST(RepetitionDetector, OffUnlessAPatternAndTwoCopies) {
  for (RepetitionRule r :
       {RepetitionRule{1, 0, 3, 0}, RepetitionRule{1, 4, 1, 0}, RepetitionRule{1, 4, 0, 0}}) {
    RepetitionDetector d(r);
    for (int i = 0; i < 50; ++i) EXPECT_FALSE(d.push(5));
  }
}

TEST(RepetitionRule, RefusesWhatCannotBeChecked) {
  EXPECT_TRUE((RepetitionRule{}).validate().is_ok());
  EXPECT_TRUE((RepetitionRule{0, 64, 3, 0}).validate().is_ok());
  EXPECT_FALSE((RepetitionRule{1, RepetitionRule::kMaxPattern + 1, 3, 0}).validate().is_ok());
  EXPECT_FALSE((RepetitionRule{1, 8, 1, 0}).validate().is_ok());
  EXPECT_FALSE((RepetitionRule{9, 8, 2, 0}).validate().is_ok());
  EXPECT_FALSE((RepetitionRule{-1, 8, 2, 0}).validate().is_ok());
  EXPECT_FALSE((RepetitionRule{1, 8, 2, -5}).validate().is_ok());
}

}  // namespace
}  // namespace tf
