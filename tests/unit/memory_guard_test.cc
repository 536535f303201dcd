// MEMORY_GUARD_MIB (engine/memory_guard.h): the guard trips once, after enough readings in a
// row under its floor, never on one dip or an unreadable reading; its thread stops with it.
#include "engine/memory_guard.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/stall_watchdog.h"
#include "eventually.h"

namespace tf {
namespace {

using namespace std::chrono_literals;

// Readings from a script, then the last one forever; counts how many were taken.
struct Script {
  std::mutex mu;
  std::vector<int64_t> readings;
  size_t next = 0;
  int64_t read() {
    std::lock_guard<std::mutex> lock(mu);
    const int64_t v = readings[std::min(next, readings.size() - 1)];
    ++next;
    return v;
  }
  size_t taken() {
    std::lock_guard<std::mutex> lock(mu);
    return next;
  }
};

MemoryGuard::Options options(Script& s) {
  MemoryGuard::Options o;
  o.floor_bytes = 1000;
  o.period = 1ms;
  o.checks = 3;
  o.available = [&s] { return s.read(); };
  return o;
}

TEST(MemoryGuard, TripsOnceAfterEnoughLowReadingsInARow) {
  Script s;
  // A dip of two, a recovery, an unreadable 0, then low for good: it trips at the 3rd in a row.
  s.readings = {5000, 999, 10, 5000, 0, 0, 0, 500, 400, 300, 200};
  std::atomic<int> trips{0};
  std::atomic<int64_t> seen{-1};
  auto g = MemoryGuard::start(options(s), [&](int64_t available, int64_t floor) {
    seen = available;  // before the count the test waits for
    EXPECT_EQ(floor, 1000);
    ++trips;
  });
  ASSERT_TRUE(g);
  ASSERT_TRUE(test::eventually([&] { return trips.load() > 0; }));
  EXPECT_TRUE(g->tripped());
  EXPECT_EQ(seen.load(), 300) << "the 3rd low reading in a row (the 0s reset the count)";
  const size_t taken = s.taken();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(s.taken(), taken) << "a tripped guard reads no more";
  EXPECT_EQ(trips.load(), 1);
}

TEST(MemoryGuard, NeverTripsAboveItsFloorAndStopsWithItsOwner) {
  Script s;
  s.readings = {1000, 999, 1000, 999, 999, 1001};  // never 3 under the floor in a row
  std::atomic<int> trips{0};
  auto g = MemoryGuard::start(options(s), [&](int64_t, int64_t) { ++trips; });
  ASSERT_TRUE(test::eventually([&] { return s.taken() > 20; }));
  const auto t0 = std::chrono::steady_clock::now();
  g.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(trips.load(), 0);
}

TEST(MemoryGuard, NoFloorNoGuard) {
  MemoryGuard::Options o;
  o.floor_bytes = 0;
  EXPECT_EQ(MemoryGuard::start(o, [](int64_t, int64_t) {}), nullptr);
}

TEST(MemoryGuard, TheMessageNamesTheSettingAndTheNumbers) {
  const std::string m = memory_guard_message(int64_t{700} << 20, int64_t{1024} << 20);
  EXPECT_NE(m.find("700 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("MEMORY_GUARD_MIB (1024 MiB)"), std::string::npos) << m;
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

// WATCHDOG_S (engine/stall_watchdog.h): trips once when the step in flight runs past the limit.
TEST(StallWatchdog, TripsOnceWhenAStepRunsPastTheLimit) {
  std::atomic<double> step{0.0};
  std::atomic<int> trips{0};
  std::atomic<double> seen{0.0};
  StallWatchdog::Options o;
  o.limit_seconds = 5;
  o.period = std::chrono::milliseconds(1);
  o.step_seconds = [&] { return step.load(); };
  auto w = StallWatchdog::start(o, [&](double s, double limit) {
    seen = s;
    EXPECT_EQ(limit, 5);
    ++trips;
  });
  ASSERT_TRUE(w);
  step = 4.9;  // long, but within the limit
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(trips.load(), 0);
  step = 5.5;
  // tripped() is set once the callback returned (what it stored is seen from here).
  ASSERT_TRUE(test::eventually([&] { return w->tripped(); }));
  EXPECT_EQ(trips.load(), 1);
  EXPECT_EQ(seen.load(), 5.5);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(trips.load(), 1) << "once";
  o.limit_seconds = 0;
  EXPECT_EQ(StallWatchdog::start(o, [](double, double) {}), nullptr);
  EXPECT_NE(stall_message(301.7, 300).find("has run for 301 s, more than WATCHDOG_S (300 s)"),
            std::string::npos)
      << stall_message(301.7, 300);
}

}  // namespace
}  // namespace tf
