// Copy drafts (spec/copy_drafter.h): which earlier occurrence is copied, how many tokens,
// and when nothing is proposed.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "spec/copy_drafter.h"

namespace tf::spec {
namespace {

using V = std::vector<int32_t>;

CopyDraftOptions match(int m, int reply = 16) {
  CopyDraftOptions o;
  o.min_match = m;
  o.reply_min_match = reply;
  return o;
}

TEST(CopyDrafter, CopiesWhatFollowedTheLatestOccurrenceInThePrompt) {
  //            0  1  2  3  4  5  6  7  8  9 10 11 12 | reply 13 14 15
  const V t = {1, 2, 3, 4, 5, 6, 1, 2, 3, 7, 8, 9, 10, 11, 1, 2, 3};
  // "1 2 3" occurs at 0 (then 4 5 6 ...) and at 6 (then 7 8 9 ...): the latest wins.
  EXPECT_EQ(copy_drafts(t, 14, 3, match(3)), (V{7, 8, 9}));
  EXPECT_EQ(copy_drafts(t, 14, 5, match(3)), (V{7, 8, 9, 10, 11}));
}

TEST(CopyDrafter, PrefersAnOccurrenceWithEnoughTokensAfterIt) {
  // The latest "5 6" has only one token after it before the end; the earlier one has four.
  const V t = {5, 6, 1, 2, 3, 4, 9, 5, 6, 8, 5, 6};
  EXPECT_EQ(copy_drafts(t, 100, 4, match(2)), (V{1, 2, 3, 4}));
  // Without one long enough, the longest continuation.
  const V u = {5, 6, 1, 9, 5, 6, 8, 7, 5, 6};
  EXPECT_EQ(copy_drafts(u, 100, 4, match(2)), (V{8, 7, 5, 6}));
  EXPECT_EQ(copy_drafts(u, 100, 8, match(2)), (V{1, 9, 5, 6, 8, 7, 5, 6}));
}

TEST(CopyDrafter, NothingRecursNothingProposed) {
  EXPECT_TRUE(copy_drafts(V{1, 2, 3, 4, 5, 6}, 6, 4, match(2)).empty());
  EXPECT_TRUE(copy_drafts(V{1, 2}, 2, 4, match(2)).empty());
  EXPECT_TRUE(copy_drafts(V{}, 0, 4, match(2)).empty());
  EXPECT_TRUE(copy_drafts(V{1, 2, 1, 2, 1, 2}, 6, 0, match(2)).empty());
  // Only a partial match of the suffix: "3 9" never occurred.
  EXPECT_TRUE(copy_drafts(V{3, 4, 5, 6, 3, 9}, 6, 4, match(2)).empty());
}

TEST(CopyDrafter, AnOccurrenceInTheReplyNeedsTheLongerMatch) {
  // Prompt: 0..3; the reply repeats "7 8" with different context.
  const V t = {1, 2, 3, 4, 9, 7, 8, 5, 6, 0, 7, 8};
  EXPECT_TRUE(copy_drafts(t, 4, 3, match(2, 4)).empty());    // "7 8" recurs only in the reply, 2 < 4
  EXPECT_EQ(copy_drafts(t, 4, 3, match(2, 2)), (V{5, 6, 0}));  // allowed with a 2-token reply match
  // A 4-token repeat in the reply is enough for reply_min_match 4.
  const V u = {1, 2, 3, 4, 7, 8, 9, 6, 5, 0, 7, 8, 9, 6};
  EXPECT_EQ(copy_drafts(u, 4, 2, match(2, 4)), (V{5, 0}));
}

TEST(CopyDrafter, SearchesOnlyTheWindow) {
  V t = {4, 5, 6};
  for (int i = 0; i < 100; ++i) t.push_back(1000 + i);
  t.push_back(4);
  t.push_back(5);
  CopyDraftOptions o = match(2);
  EXPECT_EQ(copy_drafts(t, 1000, 1, o), (V{6}));
  o.window = 50;
  EXPECT_TRUE(copy_drafts(t, 1000, 1, o).empty());
}

TEST(CopyDrafter, ARepeatingReplyCopiesItsOwnPeriod) {
  // A loop "1 2 3" in the reply: the continuation of the previous period.
  const V t = {9, 9, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2};
  EXPECT_EQ(copy_drafts(t, 2, 4, match(2, 5)), (V{3, 1, 2, 3}));
}

// The index finds the same drafts as the scan at every step of growing sequences (small
// alphabets: many occurrences; windows shorter than the sequence; both match rules).
TEST(CopyDrafter, TheIndexGivesTheScansDraftsAtEveryStep) {
  std::mt19937 rng(11);
  int64_t compared = 0, nonempty = 0;
  for (int trial = 0; trial < 40; ++trial) {
    CopyDraftOptions o;
    o.min_match = 1 + static_cast<int>(rng() % 4);
    o.reply_min_match = o.min_match + static_cast<int>(rng() % 4);
    o.window = trial % 3 == 0 ? 50 : 65536;
    const int alphabet = 2 + static_cast<int>(rng() % 6);
    const int64_t prompt = static_cast<int64_t>(rng() % 120);
    CopyIndex index(o);
    V t;
    for (int i = 0; i < 400; ++i) {
      // Now and then a copy of an earlier stretch, as replies quote their prompt.
      if (!t.empty() && rng() % 10 == 0) {
        const size_t from = rng() % t.size();
        for (size_t j = from; j < std::min(t.size(), from + 12); ++j) t.push_back(t[j]);
      } else {
        t.push_back(static_cast<int32_t>(rng() % alphabet));
      }
      const int max = 1 + static_cast<int>(rng() % 8);
      const V a = copy_drafts(t, prompt, max, o), b = index.drafts(t, prompt, max);
      ASSERT_EQ(a, b) << "trial " << trial << " at " << t.size();
      ++compared;
      nonempty += !a.empty();
    }
  }
  EXPECT_GT(nonempty, compared / 4);
  // A sequence that is not the one indexed (shorter) starts the index again.
  CopyIndex index(match(1));
  (void)index.drafts(V{1, 2, 3, 1, 2, 3, 1, 2}, 8, 2);
  EXPECT_EQ(index.drafts(V{4, 5, 4}, 3, 1), (V{5}));
}

}  // namespace
}  // namespace tf::spec
