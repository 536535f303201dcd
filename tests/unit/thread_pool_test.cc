#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <stdexcept>

namespace tf {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  std::vector<int> hits(1003, 0);
  pool.parallel_for(static_cast<int64_t>(hits.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

TEST(ThreadPool, RespectsMinChunkAndRepeats) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 200; ++rep) {
    std::atomic<int64_t> sum{0};
    std::atomic<int> calls{0};
    pool.parallel_for(10, [&](int64_t b, int64_t e) {
      calls++;
      for (int64_t i = b; i < e; ++i) sum += i;
    }, /*min_chunk=*/8);
    EXPECT_EQ(sum.load(), 45);
    EXPECT_LE(calls.load(), 2);
  }
}

TEST(ThreadPool, PropagatesExceptions) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, [](int64_t b, int64_t) {
    if (b > 0) throw std::runtime_error("worker failed");
  }), std::runtime_error);
  // Still usable afterwards.
  std::atomic<int> n{0};
  pool.parallel_for(8, [&](int64_t b, int64_t e) { n += static_cast<int>(e - b); });
  EXPECT_EQ(n.load(), 8);
}

}  // namespace
}  // namespace tf
