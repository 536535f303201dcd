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
  EXPECT_EQ(budget.grow(t.lease, int64_t{1} << 40, milliseconds(0)), Outcome::kTaken);
  EXPECT_EQ(budget.held(), 0);
}

// A lease grows in steps (a body of unknown size as it arrives) and gives back all it holds.
TEST(ByteBudget, ALeaseGrowsAndGivesBackEverything) {
  ByteBudget budget(100);
  ByteBudget::Lease lease;
  EXPECT_EQ(budget.grow(lease, 30, milliseconds(0)), Outcome::kTaken);  // an empty lease starts
  EXPECT_EQ(budget.grow(lease, 30, milliseconds(0)), Outcome::kTaken);
  EXPECT_EQ(lease.bytes(), 60);
  EXPECT_EQ(budget.held(), 60);
  // Past the whole budget: refused at once, the lease keeps what it held.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(budget.grow(lease, 41, milliseconds(5000)), Outcome::kLargerThanBudget);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  EXPECT_EQ(lease.bytes(), 60);
  EXPECT_EQ(budget.grow(lease, 40, milliseconds(0)), Outcome::kTaken);  // up to the whole budget
  lease.release();
  EXPECT_EQ(budget.held(), 0);
}

TEST(ByteBudget, AGrowthWaitsForRoomThenTimesOut) {
  ByteBudget budget(100);
  ByteBudget::Take other = budget.take(70, milliseconds(0));  // not waiting: it may give back
  ByteBudget::Take grower = budget.take(20, milliseconds(0));
  EXPECT_EQ(budget.grow(grower.lease, 20, milliseconds(50)), Outcome::kTimedOut);
  EXPECT_EQ(grower.lease.bytes(), 20);
  std::atomic<bool> grown{false};
  std::thread t([&] { grown = budget.grow(grower.lease, 20, milliseconds(10000)) == Outcome::kTaken; });
  ASSERT_TRUE(eventually([&] { return budget.waiting() == 1; }));
  other.lease.release();
  t.join();
  EXPECT_TRUE(grown);
  EXPECT_EQ(budget.held(), 40);
}

// Two growers that each hold part of the budget and wait for the other's bytes would wait out
// their patience (60 s in the server), and every other body with them: the one that would
// complete the cycle is refused at once, and once it gives its bytes back the other goes.
TEST(ByteBudget, GrowersWaitingForEachOtherDoNotDeadlock) {
  ByteBudget budget(100);
  ByteBudget::Take a = budget.take(50, milliseconds(0));
  ByteBudget::Take b = budget.take(50, milliseconds(0));
  std::atomic<int> a_outcome{-1};
  std::thread ta([&] { a_outcome = static_cast<int>(budget.grow(a.lease, 10, milliseconds(10000))); });
  ASSERT_TRUE(eventually([&] { return budget.waiting() == 1; }));  // b still runs: a waits
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(budget.grow(b.lease, 10, milliseconds(10000)), Outcome::kWouldDeadlock);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  EXPECT_EQ(budget.waiting(), 1);
  EXPECT_EQ(a_outcome, -1);  // a still waits: b is not a waiter any more
  b.lease.release();         // what the server does with a refused body
  ta.join();
  EXPECT_EQ(a_outcome, static_cast<int>(Outcome::kTaken));
  EXPECT_EQ(a.lease.bytes(), 60);
}

// The cycle also closes when the last holder that was not waiting gives its bytes back: one
// waiter is refused, not both.
TEST(ByteBudget, OnlyOneWaiterIsRefusedWhenTheLastRunningHolderLeaves) {
  ByteBudget budget(100);
  ByteBudget::Take a = budget.take(40, milliseconds(0));
  ByteBudget::Take b = budget.take(40, milliseconds(0));
  ByteBudget::Take other = budget.take(20, milliseconds(0));
  std::atomic<int> outcomes[2] = {-1, -1};
  std::thread ta([&] {
    outcomes[0] = static_cast<int>(budget.grow(a.lease, 30, milliseconds(10000)));
    if (outcomes[0] != static_cast<int>(Outcome::kTaken)) a.lease.release();
  });
  std::thread tb([&] {
    outcomes[1] = static_cast<int>(budget.grow(b.lease, 30, milliseconds(10000)));
    if (outcomes[1] != static_cast<int>(Outcome::kTaken)) b.lease.release();
  });
  ASSERT_TRUE(eventually([&] { return budget.waiting() == 2; }));
  other.lease.release();  // 80 held, all by the two waiters, and neither fits
  ta.join();
  tb.join();
  const int taken = static_cast<int>(Outcome::kTaken), refused = static_cast<int>(Outcome::kWouldDeadlock);
  EXPECT_TRUE((outcomes[0] == taken && outcomes[1] == refused) ||
              (outcomes[0] == refused && outcomes[1] == taken))
      << outcomes[0] << " " << outcomes[1];
  EXPECT_EQ(budget.held(), 70);
}

// A take that holds nothing yet is no part of a cycle: it waits its patience as before.
TEST(ByteBudget, AWaiterHoldingNothingIsNotRefusedAsADeadlock) {
  ByteBudget budget(100);
  ByteBudget::Take a = budget.take(100, milliseconds(0));
  EXPECT_EQ(budget.take(10, milliseconds(100)).outcome, Outcome::kTimedOut);
}

}  // namespace
}  // namespace tf::server
