// ByteBudget (server/byte_budget.h): takes within the capacity go at once, larger ones than
// the whole budget are refused at once, others wait for room (first fit) or time out.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "server/byte_budget.h"

namespace tf::server {
namespace {

using std::chrono::milliseconds;
using Outcome = ByteBudget::Outcome;

// Polls `pred` for up to 5 s.
template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return pred();
}

TEST(ByteBudget, TakesWithinTheCapacityAndGivesBack) {
  ByteBudget budget(100);
  ByteBudget::Take a = budget.take(60, milliseconds(0));
  ASSERT_EQ(a.outcome, Outcome::kTaken);
  EXPECT_EQ(a.lease.bytes(), 60);
  ByteBudget::Take b = budget.take(40, milliseconds(0));
  ASSERT_EQ(b.outcome, Outcome::kTaken);
  EXPECT_EQ(budget.held(), 100);
  a.lease.release();
  EXPECT_EQ(budget.held(), 40);
  a.lease.release();  // twice is once
  EXPECT_EQ(budget.held(), 40);
  { ByteBudget::Lease moved = std::move(b.lease); }  // given back by its last owner
  EXPECT_EQ(budget.held(), 0);
}

TEST(ByteBudget, LargerThanTheWholeBudgetIsRefusedAtOnce) {
  ByteBudget budget(100);
  const auto t0 = std::chrono::steady_clock::now();
  ByteBudget::Take t = budget.take(101, milliseconds(5000));
  EXPECT_EQ(t.outcome, Outcome::kLargerThanBudget);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  EXPECT_EQ(budget.held(), 0);
  EXPECT_EQ(budget.take(100, milliseconds(0)).outcome, Outcome::kTaken);  // exactly the budget fits
}

TEST(ByteBudget, WaitsForRoomThenTimesOut) {
  ByteBudget budget(100);
  ByteBudget::Take held = budget.take(80, milliseconds(0));
  ASSERT_EQ(held.outcome, Outcome::kTaken);
  EXPECT_EQ(budget.take(30, milliseconds(50)).outcome, Outcome::kTimedOut);
  EXPECT_EQ(budget.waiting(), 0);
  EXPECT_EQ(budget.held(), 80);
}

TEST(ByteBudget, AWaiterGoesWhenRoomIsGivenBack) {
  ByteBudget budget(100);
  ByteBudget::Take held = budget.take(80, milliseconds(0));
  std::atomic<bool> taken{false};
  std::thread waiter([&] {
    ByteBudget::Take t = budget.take(50, milliseconds(10000));
    taken = t.outcome == Outcome::kTaken;
  });
  ASSERT_TRUE(eventually([&] { return budget.waiting() == 1; }));
  EXPECT_FALSE(taken);
  held.lease.release();
  waiter.join();
  EXPECT_TRUE(taken);
  EXPECT_EQ(budget.held(), 0);  // the waiter's lease went with its thread
}

// First fit: a small take that fits goes while a large one waits for room.
TEST(ByteBudget, ASmallTakeIsNotHeldBehindALargeOne) {
  ByteBudget budget(100);
  ByteBudget::Take held = budget.take(60, milliseconds(0));
  std::atomic<bool> large_taken{false};
  std::thread large([&] { large_taken = budget.take(90, milliseconds(10000)).outcome == Outcome::kTaken; });
  ASSERT_TRUE(eventually([&] { return budget.waiting() == 1; }));
  ByteBudget::Take small = budget.take(30, milliseconds(0));
  EXPECT_EQ(small.outcome, Outcome::kTaken);
  EXPECT_EQ(budget.held(), 90);
  small.lease.release();
  held.lease.release();
  large.join();
  EXPECT_TRUE(large_taken);
}

TEST(ByteBudget, NoCapacityMeansNoLimit) {
  ByteBudget budget(0);
  ByteBudget::Take t = budget.take(int64_t{1} << 40, milliseconds(0));
  EXPECT_EQ(t.outcome, Outcome::kTaken);
  EXPECT_EQ(budget.held(), 0);  // nothing is counted
}

}  // namespace
}  // namespace tf::server
