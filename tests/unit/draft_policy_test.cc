// The draft policy (spec/draft_policy.h): how many drafts pay for their rows.
#include <gtest/gtest.h>

#include <vector>

#include "spec/draft_policy.h"

namespace tf::spec {
namespace {

std::vector<double> linear(double per_row, int max) {
  std::vector<double> c(static_cast<size_t>(max) + 1);
  for (int k = 0; k <= max; ++k) c[static_cast<size_t>(k)] = 1.0 + per_row * k;
  return c;
}

TEST(DraftPolicy, DraftsOnlyWhenTheyPayForTheirRows) {
  // Drafts that are never kept, or rows as dear as a step and drafts kept half the time: none.
  EXPECT_EQ(best_draft_count(0.0, linear(0.3, 7)), 0);
  EXPECT_EQ(best_draft_count(0.5, linear(1.0, 7)), 0);
  // Cheap rows and good drafts: more of them; the table's length bounds it.
  EXPECT_EQ(best_draft_count(1.0, linear(0.05, 7)), 7);
  EXPECT_EQ(best_draft_count(1.0, linear(0.05, 3)), 3);
  EXPECT_EQ(best_draft_count(0.9, linear(0.4, 0)), 0);
  // a = 0.9, c = 0.4: E(k)/(1 + 0.4k) is 1.357, 1.500, 1.564, 1.573, 1.563 for k = 1..5.
  EXPECT_EQ(best_draft_count(0.9, linear(0.4, 7)), 4);
  // a = 0.6, c = 0.4: only one draft beats a plain step (1.143, 1.089, 0.989).
  EXPECT_EQ(best_draft_count(0.6, linear(0.4, 7)), 1);
  // A gain under min_gain is not worth the risk.
  EXPECT_EQ(best_draft_count(0.41, linear(0.4, 1), 0.02), 0);
  EXPECT_EQ(best_draft_count(0.45, linear(0.4, 1), 0.02), 1);
  // A verify step's fixed cost (H200 EXL3 bench: 1.53, 1.65 at 1, 3 drafts): drafts kept 30%
  // of the time do not pay; kept 50% of the time, three do (1.875 tokens for 1.65 steps).
  const std::vector<double> h200 = {1.0, 1.53, 1.59, 1.65};
  EXPECT_EQ(best_draft_count(0.3, h200), 0);
  EXPECT_EQ(best_draft_count(0.5, h200), 3);
  EXPECT_EQ(best_draft_count(0.9, h200), 3);
}

TEST(DraftPolicy, AcceptanceFollowsWhatWasKeptAndDriftsBack) {
  DraftAcceptance a(0.7, 0.25);
  EXPECT_DOUBLE_EQ(a.value(), 0.7);
  for (int i = 0; i < 20; ++i) a.observe(4, 0);  // every first draft rejected
  EXPECT_LT(a.value(), 0.01);
  EXPECT_EQ(best_draft_count(a.value(), linear(0.3, 7)), 0);
  for (int i = 0; i < 200; ++i) a.idle_step();  // no drafts for a while: back toward the prior
  EXPECT_GT(a.value(), 0.6);
  for (int i = 0; i < 20; ++i) a.observe(4, 4);  // all kept
  EXPECT_GT(a.value(), 0.99);
  DraftAcceptance b(0.7, 0.25);
  b.observe(4, 2);  // two kept, the third rejected: up, up, down
  EXPECT_NEAR(b.value(), (0.7 + 0.25 * 0.3 + 0.25 * (1 - 0.775)) * 0.75, 1e-12);
}

TEST(DraftPolicy, StepCostIsMeasuredAndExtrapolatedOneRowAtATime) {
  StepCost c(0.3, 0.1);
  EXPECT_DOUBLE_EQ(c.ratio(1, 3), 1.6);  // nothing measured: the prior per row
  for (int i = 0; i < 100; ++i) c.observe(1, 0.010);
  EXPECT_NEAR(c.ratio(1, 2), 1.3, 1e-9);  // 2 rows not seen: one row's time plus the prior
  for (int i = 0; i < 100; ++i) c.observe(2, 0.015);
  EXPECT_NEAR(c.ratio(1, 2), 1.5, 1e-9);
  EXPECT_NEAR(c.ratio(1, 4), 2.1, 1e-9);  // 15 ms + 2 x 0.3 x 10 ms
  const std::vector<double> d = c.draft_costs(1, 3);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_DOUBLE_EQ(d[0], 1.0);
  EXPECT_NEAR(d[1], 1.5, 1e-9);
  // The average follows a change.
  for (int i = 0; i < 200; ++i) c.observe(2, 0.011);
  EXPECT_NEAR(c.ratio(1, 2), 1.1, 1e-3);
  c.observe(0, 1.0);  // ignored
  c.observe(2, -1.0);
  c.observe(StepCost::kMaxRows + 1, 1.0);
  EXPECT_NEAR(c.ratio(1, 2), 1.1, 1e-3);
}

}  // namespace
}  // namespace tf::spec
