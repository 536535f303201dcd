// ElasticThreadPool (src/server/elastic_thread_pool.h): workers start while every one is busy,
// up to the cap; jobs beyond it wait their turn; surplus workers retire; shutdown drains.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/elastic_thread_pool.h"

namespace tf::server {
namespace {

using namespace std::chrono_literals;

// Jobs that block until released, counting how many run at once.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  int running = 0, most = 0, finished = 0;

  std::function<void()> job() {
    return [this] {
      std::unique_lock lock(m);
      ++running;
      most = std::max(most, running);
      cv.notify_all();
      cv.wait(lock, [&] { return open; });
      --running;
      ++finished;
      cv.notify_all();
    };
  }
  // Waits (at most 10 s) until `n` jobs run at once.
  bool wait_running(int n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, 10s, [&] { return running >= n; });
  }
  bool wait_finished(int n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, 10s, [&] { return finished >= n; });
  }
  void release() {
    std::lock_guard lock(m);
    open = true;
    cv.notify_all();
  }
};

TEST(ElasticThreadPool, StartsWorkersWhileEveryOneIsBusy) {
  ElasticThreadPool pool(2, 64);
  Gate gate;
  for (int i = 0; i < 40; ++i) pool.enqueue(gate.job());
  // A fixed pool of 2 would run 2 of them and leave 38 queued behind them.
  EXPECT_TRUE(gate.wait_running(40));
  EXPECT_EQ(pool.threads(), 40u);  // one per job: workers count as idle from their start
  gate.release();
  EXPECT_TRUE(gate.wait_finished(40));
  pool.shutdown();
}

TEST(ElasticThreadPool, JobsBeyondTheCapWaitForAWorker) {
  ElasticThreadPool pool(1, 4);
  Gate gate;
  for (int i = 0; i < 10; ++i) pool.enqueue(gate.job());
  EXPECT_TRUE(gate.wait_running(4));
  std::this_thread::sleep_for(50ms);
  {
    std::lock_guard lock(gate.m);
    EXPECT_EQ(gate.running, 4);
    EXPECT_EQ(gate.finished, 0);
  }
  gate.release();
  EXPECT_TRUE(gate.wait_finished(10));
  EXPECT_EQ(gate.most, 4);
  EXPECT_EQ(pool.peak_threads(), 4u);
  pool.shutdown();
}

TEST(ElasticThreadPool, SurplusWorkersRetireWhenIdle) {
  ElasticThreadPool pool(2, 16, 20ms);
  Gate gate;
  for (int i = 0; i < 12; ++i) pool.enqueue(gate.job());
  EXPECT_TRUE(gate.wait_running(12));
  gate.release();
  EXPECT_TRUE(gate.wait_finished(12));
  for (int i = 0; i < 500 && pool.threads() > 2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(pool.threads(), 2u);
  // The pool still serves, and grows again.
  Gate again;
  for (int i = 0; i < 6; ++i) pool.enqueue(again.job());
  EXPECT_TRUE(again.wait_running(6));
  again.release();
  EXPECT_TRUE(again.wait_finished(6));
  pool.shutdown();
}

TEST(ElasticThreadPool, ShutdownRunsTheQueuedJobsFirst) {
  std::atomic<int> done{0};
  {
    ElasticThreadPool pool(1, 1);
    for (int i = 0; i < 100; ++i)
      pool.enqueue([&] {
        std::this_thread::sleep_for(100us);
        ++done;
      });
    pool.shutdown();
    EXPECT_EQ(done.load(), 100);
  }
  EXPECT_EQ(done.load(), 100);
}

}  // namespace
}  // namespace tf::server
