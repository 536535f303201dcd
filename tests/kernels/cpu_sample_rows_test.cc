// Ops::sample_rows on the CPU backend against the host sampler (src/sampling):
// every row the op decides must give the host's token, and (the same summation
// order) bit-identical logprobs; rows too close to call must say kUndecided.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_sampling.h"
#include "sample_rows_cases.h"
#include "sampling/logprobs.h"
#include "sampling/sequence_sampler.h"

namespace tf {
namespace {

using namespace sample_rows_cases;

SampleRowParams device_params_of(const SamplingParams& p, uint64_t seed, int64_t pos, int32_t limit) {
  auto d = device_row_params(p, seed, pos, {}, limit);
  EXPECT_TRUE(d.has_value());
  return d.value_or(SampleRowParams{});
}

// Runs the whole grid over `rows_per_kind` rows of each kind through the op (one
// call per parameter set, all rows batched) and compares with the host.
void check_grid(int64_t vocab, int32_t vocab_limit, int rows_per_kind) {
  auto ops = make_cpu_ops();
  int decided = 0, undecided = 0;
  for (const ParamCase& pc : param_grid()) {
    std::vector<std::vector<float>> host_rows;
    std::vector<Tensor> rows;
    std::vector<SampleRowParams> params;
    uint32_t s = 1;
    for (RowKind kind : kKinds) {
      for (int i = 0; i < rows_per_kind; ++i, ++s) {
        host_rows.push_back(make_row(vocab, kind, s * 7919u + static_cast<uint32_t>(vocab)));
        rows.push_back(Tensor::from_floats({vocab}, host_rows.back()));
        params.push_back(device_params_of(pc.p, 0x1234567ull * s, 17 + s, vocab_limit));
      }
    }
    std::vector<SampleRowResult> out(rows.size());
    ops->sample_rows(out, rows, params);
    for (size_t r = 0; r < rows.size(); ++r) {
      SCOPED_TRACE(pc.name + " row " + std::to_string(r) + " (" + kind_name(kKinds[r / rows_per_kind]) + ")");
      auto host = host_sample(host_rows[r], vocab_limit, pc.p, params[r].seed, params[r].position);
      ASSERT_TRUE(host.has_value()) << host.status().to_string();
      if (out[r].status == SampleRowStatus::kUndecided) {
        ++undecided;
        continue;
      }
      ++decided;
      ASSERT_EQ(out[r].status, SampleRowStatus::kOk);
      EXPECT_EQ(out[r].token, host->token);
      const SampledToken dev = sampled_token_of(out[r], pc.p);
      EXPECT_TRUE(same_float(dev.logprob, host->logprob)) << dev.logprob << " vs " << host->logprob;
      ASSERT_EQ(dev.top.size(), host->top.size());
      for (size_t j = 0; j < dev.top.size(); ++j) {
        EXPECT_EQ(dev.top[j].token, host->top[j].token) << j;
        EXPECT_TRUE(same_float(dev.top[j].logprob, host->top[j].logprob)) << j;
      }
    }
  }
  // Random rows are never within the margins (a ~1e-9 chance per row).
  EXPECT_EQ(undecided, 0);
  EXPECT_GT(decided, 0);
}

TEST(CpuSampleRows, MatchesHostSamplerSmallVocab) { check_grid(1000, 0, 6); }
TEST(CpuSampleRows, MatchesHostSamplerWithPaddingLimit) { check_grid(3001, 2900, 4); }
TEST(CpuSampleRows, MatchesHostSamplerModelVocab) { check_grid(154880, 154820, 1); }

TEST(CpuSampleRows, ManyPositionsSameRow) {
  // One row drawn at 300 positions: the draws differ and each equals the host's.
  auto ops = make_cpu_ops();
  const std::vector<float> row = make_row(500, RowKind::kNormal, 5);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  std::vector<Tensor> rows;
  std::vector<SampleRowParams> params;
  for (int pos = 0; pos < 300; ++pos) {
    rows.push_back(Tensor::from_floats({500}, row));
    params.push_back(device_params_of(p, 42, pos, 0));
  }
  std::vector<SampleRowResult> out(rows.size());
  ops->sample_rows(out, rows, params);
  std::vector<int> seen(500, 0);
  for (int pos = 0; pos < 300; ++pos) {
    auto host = host_sample(row, 0, p, 42, pos);
    ASSERT_TRUE(host.has_value());
    ASSERT_EQ(out[static_cast<size_t>(pos)].status, SampleRowStatus::kOk);
    EXPECT_EQ(out[static_cast<size_t>(pos)].token, host->token) << pos;
    ++seen[static_cast<size_t>(host->token)];
  }
  int distinct = 0;
  for (int c : seen) distinct += c > 0;
  EXPECT_GT(distinct, 20);
}

// Scoring a given token: the host's prompt-logprob math (sampling/logprobs.h over the row
// with padding masked), bit for bit.
TEST(CpuSampleRows, ScoredTokensMatchTheHostLogprobs) {
  for (const auto& [vocab, limit] : {std::pair<int64_t, int32_t>{3001, 2900}, {1000, 0}}) {
    const ScoredRows cases = scored_rows(vocab, limit, 3, 5);
    for (size_t r = 0; r < cases.rows.size(); ++r) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " row " + std::to_string(r));
      const SampleRowParams& p = cases.params[r];
      const SampleRowResult got = cpu::sample_row(cases.rows[r].data(), vocab, p);
      std::vector<float> masked = cases.rows[r];
      for (int64_t t = limit > 0 ? limit : vocab; t < vocab; ++t)
        masked[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
      const double lse = log_sum_exp(masked);
      const std::vector<TokenLogprob> top = top_logprobs(masked, p.top_logprobs, lse);
      ASSERT_EQ(got.status, SampleRowStatus::kOk);
      EXPECT_EQ(got.token, p.scored_token);
      const float want =
          static_cast<float>(static_cast<double>(masked[static_cast<size_t>(p.scored_token)]) - lse);
      EXPECT_TRUE(std::memcmp(&got.logprob, &want, sizeof(float)) == 0) << got.logprob << " vs " << want;
      if (p.rank) {  // vLLM's rank: the ids (padding excluded) whose logit is >= the token's
        const float v = masked[static_cast<size_t>(p.scored_token)];
        int32_t want_rank = 0;
        for (int64_t t = 0; t < (limit > 0 ? limit : vocab); ++t)
          want_rank += masked[static_cast<size_t>(t)] >= v;
        EXPECT_EQ(got.rank, want_rank);
        EXPECT_GE(got.rank, 1);
        if (got.rank == 1 && got.top_count > 0) {
          EXPECT_EQ(got.top_tokens[0], p.scored_token);
        }
      }
      ASSERT_EQ(got.top_count, static_cast<int32_t>(top.size()));
      for (size_t j = 0; j < top.size(); ++j) {
        EXPECT_EQ(got.top_tokens[j], top[j].token) << j;
        EXPECT_EQ(got.top_values[j], top[j].logprob) << j;
      }
    }
  }
  // An id past the row is refused.
  auto ops = make_cpu_ops();
  std::vector<SampleRowResult> out(1);
  SampleRowParams p;
  p.scored_token = 10;
  const std::vector<Tensor> rows{Tensor::from_floats({10}, std::vector<float>(10, 0.0f))};
  EXPECT_THROW(ops->sample_rows(out, rows, {&p, 1}), StatusError);
}

TEST(CpuSampleRows, GreedyTiesGoToLowestId) {
  std::vector<float> row(100, 0.0f);
  row[37] = 3.0f;
  row[12] = 3.0f;
  row[90] = 3.0f;
  SampleRowParams p;
  p.greedy = true;
  const SampleRowResult r = cpu::sample_row(row.data(), 100, p);
  EXPECT_EQ(r.status, SampleRowStatus::kOk);
  EXPECT_EQ(r.token, 12);
  p.vocab_limit = 12;  // the winners are padding: the next best is the lowest id among the zeros
  EXPECT_EQ(cpu::sample_row(row.data(), 100, p).token, 0);
}

TEST(CpuSampleRows, BadAndEmptyRowsAreReported) {
  std::vector<float> row(10, 1.0f);
  SampleRowParams p;
  row[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(cpu::sample_row(row.data(), 10, p).status, SampleRowStatus::kBadLogit);
  row[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(cpu::sample_row(row.data(), 10, p).status, SampleRowStatus::kBadLogit);
  std::vector<float> masked(10, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(cpu::sample_row(masked.data(), 10, p).status, SampleRowStatus::kNothingLeft);
  p.greedy = true;
  EXPECT_EQ(cpu::sample_row(masked.data(), 10, p).status, SampleRowStatus::kNothingLeft);
  // A NaN past the vocab limit is padding, not a fault.
  row[3] = 1.0f;
  row[9] = std::numeric_limits<float>::quiet_NaN();
  p.vocab_limit = 9;
  EXPECT_EQ(cpu::sample_row(row.data(), 10, p).status, SampleRowStatus::kOk);
}

// A row whose top_p boundary mass equals top_p * total to ~1e-12: the op must not
// guess (the host's bucketed sums could land on either side).
TEST(CpuSampleRows, TopPAtTheBoundaryIsUndecided) {
  // One token at 0 (mass 1); then tokens at -1, -2, ... whose masses add up to 1
  // within 1e-12, so with top_p = 0.5 the mass above the second value is
  // 1 = 0.5 * total up to rounding.
  std::vector<float> row{0.0f};
  double rest = 1.0;
  for (int v = 1; v <= 40 && rest > 1e-13; ++v) {
    const double m = std::exp(static_cast<double>(-v));
    while (rest >= m) {
      row.push_back(static_cast<float>(-v));
      rest -= m;
    }
  }
  SampleRowParams p;
  p.top_p = 0.5f;
  p.seed = 3;
  const SampleRowResult r = cpu::sample_row(row.data(), static_cast<int64_t>(row.size()), p);
  EXPECT_EQ(r.status, SampleRowStatus::kUndecided);
  // Away from the boundary the same row is decided and equals the host.
  p.top_p = 0.4f;
  const SampleRowResult r2 = cpu::sample_row(row.data(), static_cast<int64_t>(row.size()), p);
  ASSERT_EQ(r2.status, SampleRowStatus::kOk);
  SamplingParams hp;
  hp.top_p = 0.4f;
  auto host = host_sample(row, 0, hp, 3, 0);
  ASSERT_TRUE(host.has_value());
  EXPECT_EQ(r2.token, host->token);
  EXPECT_EQ(r2.token, 0);  // only the max survives top_p 0.4 (its mass is ~0.5)
}

TEST(CpuSampleRows, TemperatureOverflowGoesToTheHost) {
  // 1e38 / 1e-5 overflows f32: the host sampler decides what that means, not the op.
  std::vector<float> row{1e38f, 0.0f, -1.0f};
  SampleRowParams p;
  p.temperature = 1e-5f;
  EXPECT_EQ(cpu::sample_row(row.data(), 3, p).status, SampleRowStatus::kUndecided);
  p.temperature = 1.0f;
  EXPECT_EQ(cpu::sample_row(row.data(), 3, p).status, SampleRowStatus::kOk);
}

TEST(CpuSampleRows, TopKTiesAtTheKthValueAreKept) {
  // Values 5, 3, 3, 3, 1: top_k 2 keeps every 3 (a threshold on the value, as the host).
  std::vector<float> row{1.0f, 3.0f, 5.0f, 3.0f, 3.0f};
  SamplingParams hp;
  hp.top_k = 2;
  hp.temperature = 1.0f;
  std::vector<int> seen(5, 0);
  for (int pos = 0; pos < 400; ++pos) {
    const SampleRowParams p = device_params_of(hp, 11, pos, 0);
    const SampleRowResult r = cpu::sample_row(row.data(), 5, p);
    ASSERT_EQ(r.status, SampleRowStatus::kOk);
    auto host = host_sample(row, 0, hp, 11, pos);
    ASSERT_TRUE(host.has_value());
    EXPECT_EQ(r.token, host->token);
    ++seen[static_cast<size_t>(r.token)];
  }
  EXPECT_EQ(seen[0], 0);  // below the k-th value
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[3], 0);
  EXPECT_GT(seen[4], 0);
}

TEST(CpuSampleRows, MismatchedSpansThrow) {
  auto ops = make_cpu_ops();
  std::vector<Tensor> rows{Tensor::from_floats({4}, {1, 2, 3, 4})};
  std::vector<SampleRowParams> params(2);
  std::vector<SampleRowResult> out(1);
  EXPECT_THROW(ops->sample_rows(out, rows, params), StatusError);
  params.resize(1);
  std::vector<Tensor> ints{Tensor::zeros({4}, DType::kI32)};
  EXPECT_THROW(ops->sample_rows(out, ints, params), StatusError);
}

// Which rows SequenceSampler hands to the device (the rest stay on the host).
TEST(DeviceRowParams, EligibilityFollowsTheHostOnlyFeatures) {
  const std::vector<int32_t> prompt{5, 6, 7};
  const std::vector<int32_t> eos{2};
  SamplingParams p;
  p.temperature = 0.7f;
  p.min_p = 0.1f;
  p.max_tokens = 10;
  {
    SequenceSampler s(p, prompt, eos, 0);
    auto d = s.device_params(100);
    ASSERT_TRUE(d.has_value());
    EXPECT_FALSE(d->greedy);
    EXPECT_EQ(d->temperature, 0.7f);
    EXPECT_EQ(d->log_min_p, std::log(0.1f));
    EXPECT_EQ(d->seed, s.seed());
    EXPECT_EQ(d->position, 3);
    EXPECT_EQ(d->vocab_limit, 100);
  }
  auto not_eligible = [&](SamplingParams q) {
    SequenceSampler s(q, prompt, eos, 0);
    return !s.device_params(100).has_value();
  };
  SamplingParams q = p;
  q.logit_bias[3] = 1.0f;
  EXPECT_TRUE(not_eligible(q));
  q = p;
  q.repetition_penalty = 1.1f;
  EXPECT_TRUE(not_eligible(q));
  q = p;
  q.presence_penalty = 0.5f;
  EXPECT_TRUE(not_eligible(q));
  q = p;
  q.frequency_penalty = -0.5f;
  EXPECT_TRUE(not_eligible(q));
  q = p;
  q.logprobs = true;
  q.logprobs_mode = LogprobsMode::kProcessed;
  EXPECT_TRUE(not_eligible(q));
  q = p;
  q.min_tokens = 1;  // EOS banned for the first token: host only, then the device
  {
    SequenceSampler s(q, prompt, eos, 0);
    EXPECT_FALSE(s.device_params(100).has_value());
    std::vector<float> row(100, 0.0f);
    row[9] = 5.0f;
    Sampler sampler;
    ASSERT_TRUE(s.step(row, sampler).has_value());
    EXPECT_TRUE(s.device_params(100).has_value());
  }
}

TEST(DeviceRowParams, AcceptRecordsLikeStep) {
  const std::vector<int32_t> prompt{1, 2};
  const std::vector<int32_t> eos{7};
  SamplingParams p;
  p.max_tokens = 3;
  p.logprobs = true;
  p.top_logprobs = 2;
  SequenceSampler s(p, prompt, eos, 0);
  SampleRowResult r;
  r.status = SampleRowStatus::kOk;
  r.token = 4;
  r.logprob = -0.5f;
  r.top_count = 2;
  r.top_tokens[0] = 4;
  r.top_values[0] = -0.5f;
  r.top_tokens[1] = 9;
  r.top_values[1] = -1.5f;
  auto st = s.accept(r);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->sampled.token, 4);
  EXPECT_EQ(st->sampled.logprob, -0.5f);
  ASSERT_EQ(st->sampled.top.size(), 2u);
  EXPECT_EQ(st->sampled.top[1].token, 9);
  EXPECT_EQ(s.generated(), 1);
  EXPECT_EQ(s.position(), 3);
  r.token = 7;  // EOS ends the sequence
  st = s.accept(r);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->finish, FinishReason::kStop);
  EXPECT_FALSE(s.device_params(0).has_value());
  EXPECT_FALSE(s.accept(r).has_value());
  SequenceSampler s2(p, prompt, eos, 0);
  r.status = SampleRowStatus::kUndecided;
  EXPECT_FALSE(s2.accept(r).has_value());
}

}  // namespace
}  // namespace tf
