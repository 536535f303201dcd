// CUDA-graph replay of the decode step equals eager execution, bit for bit (label
// gpu; run on the GPU machine by scripts/device/gpu_tests.sh, part "graphs").
//
// The fixture models on make_cuda_ops(): the same decode schedule (several steps
// at each of the buckets 1, 2, 4, 8, 16, 32, with padded batches 3 -> 4, 5 -> 8,
// 20 -> 32) once with graphs off and once on; every step's logits and greedy tokens
// must be identical. "[graphs]" lines print the captures, eager fallbacks (with
// the reason in the log), replays and the decode step time with and without graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "cuda_test_ops.h"
#include "glm5_fixture.h"
#include "graph_schedule.h"
#include "kernels/cpu/cpu_sampling.h"
#include "kernels/cuda/cuda_ops.h"

namespace tf::test {
namespace {

// EXACT_ROWS 8 (the serving default): above 8 rows the matmuls use cuBLAS and the
// routed experts group their tokens on the host, so whole MoE-layer segments cannot
// be captured and run cut around the experts.
Ops* gpu_ops_exact8() {
  static std::unique_ptr<Ops> ops = [] {
    auto o = make_cuda_ops(0, 8);
    if (!o) {
      ADD_FAILURE() << o.status().to_string();
      return std::unique_ptr<Ops>();
    }
    return std::move(*o);
  }();
  return ops.get();
}

Glm5Options opts(Glm5Options::Graphs graphs) {
  Glm5Options o;
  o.latent_dtype = DType::kBF16;
  o.page_size = 16;
  o.num_pages = 512;
  o.graphs = graphs;
  return o;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct ScheduleRun {
  std::vector<Tensor> logits;   // per (step, sequence), in order
  std::vector<int32_t> tokens;  // the greedy token fed next, same order
  double ms_per_step = 0;       // the timed tail of the schedule
  StepGraphs::Stats stats;
};

ScheduleRun run_schedule(Ops* ops, const Fixture& f, Glm5Options::Graphs graphs, const std::vector<int>& sizes,
                         int timed_steps) {
  ScheduleRun run;
  if (!ops) return run;
  auto ws = open_weights(f);
  if (!ws) return run;
  auto comm = make_single_rank_communicator();
  auto m = Glm5Model::load(f.config, *ws, *ops, *comm, opts(graphs));
  EXPECT_TRUE(m.has_value()) << m.status().to_string();
  if (!m.has_value()) return run;
  Glm5Model& model = **m;
  const int streams = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::unique_ptr<Glm5Sequence>> seqs;
  std::vector<int32_t> next(streams);
  for (int s = 0; s < streams; ++s) {
    seqs.push_back(model.new_sequence());
    const size_t off = static_cast<size_t>(s) % 20, len = 4 + static_cast<size_t>(s) % 7;
    std::vector<int32_t> prompt(f.prompt_ids.begin() + off, f.prompt_ids.begin() + off + len);
    StepEntry e{seqs.back().get(), prompt, false};
    auto r = model.step({&e, 1});
    EXPECT_TRUE(r.has_value()) << r.status().to_string();
    if (!r.has_value()) return run;
    next[s] = f.prompt_ids[off + len];
  }
  auto one_step = [&](int n, bool record) {
    std::vector<StepEntry> batch;
    for (int s = 0; s < n; ++s) batch.push_back(StepEntry{seqs[s].get(), std::span<const int32_t>(&next[s], 1), false});
    auto r = model.step(batch);
    EXPECT_TRUE(r.has_value()) << r.status().to_string();
    if (!r.has_value()) return false;
    for (int s = 0; s < n; ++s) {
      const Tensor& l = (*r)[s].logits;
      const float* p = l.data<float>();
      next[s] = static_cast<int32_t>(std::max_element(p, p + l.numel()) - p);
      if (record) {
        run.logits.push_back(l);
        run.tokens.push_back(next[s]);
      }
    }
    return true;
  };
  for (int n : sizes)
    if (!one_step(n, true)) return run;
  // Timing: batch-1 decode steps after everything is captured.
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < timed_steps; ++i)
    if (!one_step(1, false)) return run;
  run.ms_per_step =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / timed_steps;
  run.stats = model.step_graphs().stats();
  return run;
}

TEST(Glm5GraphsCuda, BackendHasGraphs) {
  ASSERT_NE(gpu_ops(), nullptr);
  EXPECT_TRUE(gpu_ops()->supports_graphs());
}

TEST(Glm5GraphsCuda, ReplayEqualsEagerBitForBit) {
  const std::vector<int> sizes{1, 1, 1, 2, 2, 3, 4, 4, 5, 8, 8, 16, 16, 20, 32, 32, 1, 4};
  for (const auto& dir : fixture_dirs()) {
    const Fixture f = load_fixture(dir);
    const ScheduleRun eager = run_schedule(gpu_ops(), f, Glm5Options::Graphs::kOff, sizes, 20);
    const ScheduleRun graph = run_schedule(gpu_ops(), f, Glm5Options::Graphs::kOn, sizes, 20);
    ASSERT_FALSE(eager.logits.empty()) << f.name;
    ASSERT_EQ(eager.logits.size(), graph.logits.size()) << f.name;
    size_t differ = 0;
    for (size_t i = 0; i < eager.logits.size(); ++i)
      if (!same_bits(eager.logits[i], graph.logits[i])) ++differ;
    EXPECT_EQ(differ, 0u) << f.name << ": rows whose logits differ between graph replay and eager";
    EXPECT_EQ(eager.tokens, graph.tokens) << f.name;
    EXPECT_GT(graph.stats.captured, 0) << f.name;
    EXPECT_GT(graph.stats.replays, 0) << f.name;
    std::printf("[graphs] %s: %zu rows over %zu steps, %zu differ; captured %lld segments, %lld eager fallbacks, "
                "%lld replays; batch-1 decode step %.3f ms eager, %.3f ms graphs (%.2fx)\n",
                f.name.c_str(), eager.logits.size(), sizes.size(), differ,
                static_cast<long long>(graph.stats.captured), static_cast<long long>(graph.stats.eager_fallbacks),
                static_cast<long long>(graph.stats.replays), eager.ms_per_step, graph.ms_per_step,
                graph.ms_per_step > 0 ? eager.ms_per_step / graph.ms_per_step : 0.0);
  }
}

// Buckets 16 and 32 at EXACT_ROWS 8 (batches exactly a bucket: cuBLAS results
// depend on the row count, so only unpadded batches can match eager bit for bit).
TEST(Glm5GraphsCuda, ReplayEqualsEagerAboveExactRows) {
  const std::vector<int> sizes{1, 2, 4, 8, 16, 16, 32, 32, 16, 1};
  const Fixture f = load_fixture(fixture_dirs().front());
  const ScheduleRun eager = run_schedule(gpu_ops_exact8(), f, Glm5Options::Graphs::kOff, sizes, 10);
  const ScheduleRun graph = run_schedule(gpu_ops_exact8(), f, Glm5Options::Graphs::kOn, sizes, 10);
  ASSERT_FALSE(eager.logits.empty());
  ASSERT_EQ(eager.logits.size(), graph.logits.size());
  size_t differ = 0;
  for (size_t i = 0; i < eager.logits.size(); ++i)
    if (!same_bits(eager.logits[i], graph.logits[i])) ++differ;
  EXPECT_EQ(differ, 0u);
  EXPECT_EQ(eager.tokens, graph.tokens);
  std::printf("[graphs] %s exact_rows 8: %zu rows, %zu differ; captured %lld, eager fallbacks %lld, replays %lld; "
              "batch-1 step %.3f ms eager, %.3f ms graphs\n",
              f.name.c_str(), eager.logits.size(), differ, static_cast<long long>(graph.stats.captured),
              static_cast<long long>(graph.stats.eager_fallbacks), static_cast<long long>(graph.stats.replays),
              eager.ms_per_step, graph.ms_per_step);
}

// Sequences joining and leaving between steps (a bucket's rows change sequences and
// states; dropped sequences' pages are reused), bf16 and fp8 latent caches: replay
// equals eager bit for bit, with the attention cores inside the captured segments.
TEST(Glm5GraphsCuda, JoinsAndLeavesEqualEager) {
  for (const auto& dir : fixture_dirs()) {
    const Fixture f = load_fixture(dir);
    for (DType latent : {DType::kBF16, DType::kF8E4M3}) {
      std::vector<Tensor> got[2];
      StepGraphs::Stats stats;
      int k = 0;
      for (Glm5Options::Graphs mode : {Glm5Options::Graphs::kOff, Glm5Options::Graphs::kOn}) {
        auto ws = open_weights(f);
        ASSERT_TRUE(ws);
        auto comm = make_single_rank_communicator();
        Glm5Options o = opts(mode);
        o.latent_dtype = latent;
        ASSERT_NE(gpu_ops(), nullptr);
        auto m = Glm5Model::load(f.config, *ws, *gpu_ops(), *comm, o);
        ASSERT_TRUE(m.has_value()) << m.status().to_string();
        got[k++] = run_join_leave(**m, f, join_leave_schedule());
        if (mode == Glm5Options::Graphs::kOn) stats = (*m)->step_graphs().stats();
      }
      ASSERT_FALSE(got[0].empty()) << f.name;
      ASSERT_EQ(got[0].size(), got[1].size()) << f.name;
      size_t differ = 0;
      for (size_t i = 0; i < got[0].size(); ++i)
        if (!same_bits(got[0][i], got[1][i])) ++differ;
      EXPECT_EQ(differ, 0u) << f.name << " " << dtype_name(latent);
      EXPECT_GT(stats.replays, 0);
      EXPECT_EQ(stats.eager_fallbacks, 0);
      std::printf("[graphs] %s join/leave %s latents: %zu rows, %zu differ; captured %lld, eager fallbacks %lld, "
                  "replays %lld\n",
                  f.name.c_str(), dtype_name(latent), got[0].size(), differ, static_cast<long long>(stats.captured),
                  static_cast<long long>(stats.eager_fallbacks), static_cast<long long>(stats.replays));
    }
  }
}

// Many rows' logits in blocks (Glm5Options::logits_block_rows) on the GPU: the rows one
// lm_head call gives, each entry's last row on the device, and scored rows
// (StepEntry::scored_tokens) equal to the CPU op on those rows. EXACT_ROWS 64: every call
// here takes the exact path, whatever its rows.
TEST(Glm5GraphsCuda, LogitsInBlocksEqualOneCall) {
  static std::unique_ptr<Ops> ops = [] {
    auto o = make_cuda_ops(0, 64);
    return o ? std::move(*o) : std::unique_ptr<Ops>();
  }();
  ASSERT_TRUE(ops);
  const Fixture f = load_fixture(fixture_dirs().front());
  auto ws = open_weights(f);
  ASSERT_TRUE(ws);
  auto comm = make_single_rank_communicator();
  const std::vector<int32_t> pa(f.prompt_ids.begin(), f.prompt_ids.begin() + 9),
      pb(f.prompt_ids.begin() + 20, f.prompt_ids.begin() + 26),
      pc(f.prompt_ids.begin() + 30, f.prompt_ids.begin() + 37);
  const std::vector<int32_t> scored{pa[1], pa[2], pa[3], pa[4], pa[5]};
  SampleRowParams sp;
  sp.logprob = true;
  sp.top_logprobs = 3;
  std::vector<std::vector<StepResult>> got;
  std::vector<Tensor> device_last;  // per run and entry: the last row's device logits, downloaded
  for (const int64_t block : {int64_t{0}, int64_t{4}}) {
    Glm5Options o = opts(Glm5Options::Graphs::kOff);
    o.logits_block_rows = block;
    auto m = Glm5Model::load(f.config, *ws, *ops, *comm, o);
    ASSERT_TRUE(m.has_value()) << m.status().to_string();
    auto a = (*m)->new_sequence(), b = (*m)->new_sequence(), c = (*m)->new_sequence();
    std::vector<StepEntry> batch{{a.get(), pa, true}, {b.get(), pb, false}, {c.get(), pc, true}};
    batch[1].host_logits = false;  // the host copies then take a's and c's rows only
    batch[2].scored_tokens = scored;
    batch[2].score_params = sp;
    auto r = (*m)->step(batch);
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    for (const StepResult& e : *r) {
      const Tensor& d = e.device_logits;
      device_last.push_back(ops->to_host(d.slice(0, d.size(0) - 1, d.size(0))));
    }
    got.push_back(std::move(*r));
  }
  auto near = [](const Tensor& x, const Tensor& y) {
    if (x.shape() != y.shape()) return false;
    const std::vector<float> a = x.to_vector(), b = y.to_vector();
    for (size_t i = 0; i < a.size(); ++i)
      if (std::fabs(a[i] - b[i]) > 1e-5f * std::max(1.0f, std::fabs(b[i]))) return false;
    return true;
  };
  EXPECT_TRUE(got[0][1].logits.is_null());
  for (size_t i = 0; i < 3; ++i) {
    if (i != 1) {
      EXPECT_TRUE(near(got[1][i].logits, got[0][i].logits)) << i;
    }
    EXPECT_TRUE(near(device_last[3 + i], device_last[i])) << i;
  }
  // a's last row on the host is its last device row.
  EXPECT_TRUE(near(got[0][0].logits.slice(0, 8, 9).contiguous(), device_last[0]));
  for (size_t k = 0; k < 2; ++k) {
    ASSERT_EQ(got[k][2].scores.size(), scored.size());
    for (size_t j = 0; j < scored.size(); ++j) {
      SampleRowParams p = sp;
      p.scored_token = scored[j];
      const Tensor row = got[0][2].logits.select(0, static_cast<int64_t>(j)).contiguous();
      const SampleRowResult want = cpu::sample_row(row.data<float>(), row.numel(), p);
      const SampleRowResult& s = got[k][2].scores[j];
      EXPECT_EQ(s.token, scored[j]);
      EXPECT_NEAR(s.logprob, want.logprob, 1e-4f) << k << " " << j;
      ASSERT_EQ(s.top_count, 3);
      for (int t = 0; t < 3; ++t) EXPECT_EQ(s.top_tokens[t], want.top_tokens[t]) << k << " " << j << " " << t;
    }
  }
}

}  // namespace
}  // namespace tf::test
