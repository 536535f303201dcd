// Tensor parallelism with in-process ranks (threads + a fake communicator):
// TP=2 and TP=3 (uneven head, intermediate and vocab splits) equal TP=1.
#include <gtest/gtest.h>

#include <cstdio>
#include <mutex>

#include "glm5_fixture.h"

namespace tf::test {
namespace {

// Runs the greedy sequence; an error fails the test and gives an empty run.
TpRun run_model(const Fixture& f, Communicator& comm) {
  auto run = run_greedy(f, comm);
  EXPECT_TRUE(run.has_value()) << run.status().to_string();
  return run.has_value() ? std::move(*run) : TpRun{};
}

TEST(Glm5TensorParallel, TwoAndThreeRanksEqualOne) {
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto single = make_single_rank_communicator();
    const TpRun base = run_model(f, *single);
    ASSERT_FALSE(base.prefill.is_null());
    for (int world : {2, 3}) {
      std::vector<TpRun> runs(world);
      run_ranks(world, [&](int rank, Communicator& comm) { runs[rank] = run_model(f, comm); });
      for (int rank = 0; rank < world; ++rank) {
        ASSERT_FALSE(runs[rank].prefill.is_null());
        double worst = rel_err(runs[rank].prefill, base.prefill);
        for (size_t i = 0; i < base.decode.size(); ++i)
          worst = std::max(worst, rel_err(runs[rank].decode[i], base.decode[i]));
        if (rank == 0) std::printf("[%s] TP=%d vs TP=1: %.3g\n", f.name.c_str(), world, worst);
        EXPECT_LE(worst, 1e-5) << f.name << " TP=" << world << " rank " << rank;
        EXPECT_EQ(runs[rank].tokens, base.tokens) << f.name << " TP=" << world;
        // Every rank computes the same logits (same all-reduce order).
        EXPECT_EQ(rel_err(runs[rank].prefill, runs[0].prefill), 0.0);
      }
    }
  }
}

TEST(Glm5TensorParallel, ShardRangesCoverUnevenSplits) {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t n : {64, 2048, 12288, 154880, 13}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const ShardRange s = shard_range(n, r, world);
        EXPECT_EQ(s.begin, next);
        EXPECT_GE(s.size(), n / world);
        EXPECT_LE(s.size(), n / world + 1);
        next = s.end;
      }
      EXPECT_EQ(next, n);
    }
  }
  EXPECT_EQ(shard_range(64, 0, 3).size(), 22);
  EXPECT_EQ(shard_range(64, 2, 3).size(), 21);
}

}  // namespace
}  // namespace tf::test
