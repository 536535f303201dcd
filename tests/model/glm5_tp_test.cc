// Tensor parallelism with in-process ranks (threads + a fake communicator):
// TP=2 and TP=3 (uneven head, intermediate and vocab splits) equal TP=1, also with
// the decode-step graphs on (their collectives inside the segments).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <vector>

#include "glm5_fixture.h"
#include "graph_schedule.h"

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

// The decode-step graphs at TP > 1: the all-reduces and the logits all-gather run
// inside the segments (on the CPU backend a "replay" calls the segment again, so the
// collectives run at every replay, as captured NCCL calls do on CUDA). Sequences
// join and leave, buckets 1-8 with padded rows: every rank's logits equal TP=1's
// eager step, and every segment was captured once per bucket and replayed.
TEST(Glm5TensorParallel, GraphStepsWithCollectivesEqualOneRank) {
  const std::vector<ScheduleStep> steps = join_leave_schedule();
  std::set<int64_t> used;
  for (const ScheduleStep& st : steps) used.insert(StepGraphs::bucket_for(static_cast<int64_t>(st.batch.size())));
  const int64_t buckets = static_cast<int64_t>(used.size());
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    Glm5Options eager;
    eager.latent_dtype = DType::kF32;
    eager.page_size = 16;
    eager.num_pages = 128;
    eager.graphs = Glm5Options::Graphs::kOff;
    Glm5Options graphs = eager;
    graphs.graphs = Glm5Options::Graphs::kOn;
    auto single = make_single_rank_communicator();
    auto base_model = load_model(f, *single, eager);
    ASSERT_TRUE(base_model);
    const std::vector<Tensor> base = run_join_leave(*base_model, f, steps);
    ASSERT_FALSE(base.empty());
    for (int world : {2, 3}) {
      std::vector<std::vector<Tensor>> runs(world);
      std::vector<StepGraphs::Stats> stats(world);
      run_ranks(world, [&](int rank, Communicator& comm) {
        auto model = load_model(f, comm, graphs);
        if (!model) return;
        runs[rank] = run_join_leave(*model, f, steps);
        stats[rank] = model->step_graphs().stats();
      });
      for (int rank = 0; rank < world; ++rank) {
        ASSERT_EQ(runs[rank].size(), base.size()) << f.name << " TP=" << world << " rank " << rank;
        double worst = 0.0;
        for (size_t i = 0; i < base.size(); ++i) {
          worst = std::max(worst, rel_err(runs[rank][i], base[i]));
          // Every rank gets the same bits (the all-reduce sums in rank order).
          EXPECT_EQ(rel_err(runs[rank][i], runs[0][i]), 0.0) << f.name << " row " << i;
        }
        if (rank == 0) std::printf("[%s] TP=%d graph steps vs TP=1 eager: %.3g\n", f.name.c_str(), world, worst);
        EXPECT_LE(worst, 1e-5) << f.name << " TP=" << world << " rank " << rank;
        // Every segment of every bucket the schedule uses was captured (again when the
        // metadata buffer grew), on every rank alike, and replayed.
        EXPECT_GE(stats[rank].captured, buckets * static_cast<int64_t>(f.config.text.num_hidden_layers + 2)) << f.name;
        EXPECT_EQ(stats[rank].captured, stats[0].captured) << f.name << " rank " << rank;
        EXPECT_EQ(stats[rank].replays, stats[0].replays) << f.name << " rank " << rank;
        EXPECT_EQ(stats[rank].eager_fallbacks, 0) << f.name;
        EXPECT_GT(stats[rank].replays, 0) << f.name;
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
