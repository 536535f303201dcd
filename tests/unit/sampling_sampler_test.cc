// The sampler: exact distribution (chi-square), determinism independent of
// batch order, greedy, logprobs, seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "sampling/counter_hash.h"
#include "sampling/sampler.h"
#include "sampling/seed.h"

namespace tf {
namespace {

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p;
  double mx = -1e300;
  for (float l : logits) mx = std::max(mx, l / temperature);
  for (float l : logits) p.push_back(std::exp(l / temperature - mx));
  const double s = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= s;
  return p;
}

// Draws `draws` tokens at positions 0.. (seed fixed) and returns Pearson's
// chi-square statistic against `expected` (zero-probability tokens must
// never appear: they return +inf).
double chi_square(const std::vector<float>& logits, const SamplingParams& params, const std::vector<double>& expected,
                  int draws, uint64_t seed) {
  Sampler sampler;
  std::vector<int> counts(logits.size(), 0);
  for (int pos = 0; pos < draws; ++pos) {
    auto r = sampler.sample({logits, &params, nullptr, seed, pos, {}});
    EXPECT_TRUE(r.has_value());
    ++counts[static_cast<size_t>(r->token)];
  }
  double chi2 = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = expected[i] * draws;
    if (e == 0.0) {
      if (counts[i] > 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

const std::vector<float> kLogits{1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f};
// 99.9% quantiles of chi-square with df degrees of freedom.
constexpr double kChi2Df5 = 20.52, kChi2Df2 = 13.82, kChi2Df3 = 16.27;

TEST(Sampler, MatchesSoftmaxAtTemperatureOne) {
  SamplingParams p;
  EXPECT_LT(chi_square(kLogits, p, softmax(kLogits, 1.0), 60000, 1234), kChi2Df5);
  EXPECT_LT(chi_square(kLogits, p, softmax(kLogits, 1.0), 60000, 99), kChi2Df5);
}

TEST(Sampler, MatchesSoftmaxAtOtherTemperatures) {
  SamplingParams p;
  p.temperature = 0.5f;
  EXPECT_LT(chi_square(kLogits, p, softmax(kLogits, 0.5), 60000, 7), kChi2Df5);
  p.temperature = 1.7f;
  EXPECT_LT(chi_square(kLogits, p, softmax(kLogits, 1.7), 60000, 7), kChi2Df5);
}

TEST(Sampler, DetectsAWrongDistribution) {
  // The statistic must be able to fail: sampling at T=1 is far from softmax at T=0.5.
  SamplingParams p;
  EXPECT_GT(chi_square(kLogits, p, softmax(kLogits, 0.5), 60000, 1234), 1000.0);
}

TEST(Sampler, TopKRenormalisesOverKept) {
  SamplingParams p;
  p.top_k = 3;  // keeps 2.0, 1.0, 0.5 (tokens 4, 0, 1)
  auto expected = softmax({1.0f, 0.5f, -1e30f, -1e30f, 2.0f, -1e30f}, 1.0);
  for (size_t i : {2u, 3u, 5u}) expected[i] = 0.0;
  EXPECT_LT(chi_square(kLogits, p, expected, 40000, 5), kChi2Df2);
}

TEST(Sampler, TopPAndMinPTogether) {
  SamplingParams p;
  // probs .538 .198 .120 .073 .044 .027; min_p keeps p >= .065 (4 tokens, mass
  // .929); top_p then needs .95 * .929 = .883: .538+.198+.120 = .856 < .883, so all 4.
  p.min_p = 0.12f;
  p.top_p = 0.95f;
  auto full = softmax(kLogits, 1.0);
  // Compute the expected kept set the slow way: min_p first, then top_p.
  const double pmax = *std::max_element(full.begin(), full.end());
  std::vector<size_t> order(full.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return full[a] > full[b]; });
  std::vector<double> expected(full.size(), 0.0);
  double kept_mass = 0.0;
  for (size_t i : order) if (full[i] >= 0.12 * pmax) kept_mass += full[i];
  double before = 0.0;
  int kept = 0;
  for (size_t i : order) {
    if (full[i] < 0.12 * pmax || before >= 0.95 * kept_mass) continue;
    expected[i] = full[i];
    before += full[i];
    ++kept;
  }
  const double s = std::accumulate(expected.begin(), expected.end(), 0.0);
  for (double& x : expected) x /= s;
  ASSERT_EQ(kept, 4);
  EXPECT_LT(chi_square(kLogits, p, expected, 40000, 11), kChi2Df3);
}

TEST(Sampler, BiasPenaltiesAndTemperatureGiveTheirSoftmax) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.logit_bias = {{5, 2.5f}, {4, -1.0f}};
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.repetition_penalty = 1.5f;
  const std::vector<int32_t> prompt{1};
  TokenHistory h(prompt);
  h.append_generated(0);
  h.append_generated(0);
  // By hand: bias (token 5: -1 + 2.5 = 1.5; token 4: 2 - 1 = 1), repetition on {0, 1}
  // (1/1.5, 0.5/1.5), then token 0 loses 2 * 0.25 + 0.5.
  const std::vector<float> processed{1.0f / 1.5f - 1.0f, 0.5f / 1.5f, 0.0f, -0.5f, 1.0f, 1.5f};
  const auto expected = softmax(processed, 0.8);
  Sampler sampler;
  std::vector<int> counts(kLogits.size(), 0);
  const int draws = 60000;
  for (int pos = 0; pos < draws; ++pos) {
    auto r = sampler.sample({kLogits, &p, &h, 77, pos, {}});
    ASSERT_TRUE(r);
    ++counts[static_cast<size_t>(r->token)];
  }
  double chi2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi2, kChi2Df5);
}

TEST(Sampler, TinyTemperatureIsGreedy) {
  SamplingParams p;
  p.temperature = 1e-6f;
  p.logprobs = true;
  p.top_logprobs = 1;
  Sampler s;
  for (int pos = 0; pos < 100; ++pos) {
    auto r = s.sample({kLogits, &p, nullptr, 9, pos, {}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->token, 4);
    ASSERT_EQ(r->top.size(), 1u);
    EXPECT_EQ(r->top[0].token, 4);
    EXPECT_FLOAT_EQ(r->top[0].logprob, r->logprob);
  }
}

TEST(Sampler, DrawsAcrossSeedsAreIndependentOfPosition) {
  // Same position, many seeds: the seed axis must be as good as the position axis.
  SamplingParams params;
  Sampler sampler;
  const auto expected = softmax(kLogits, 1.0);
  std::vector<int> counts(kLogits.size(), 0);
  const int draws = 60000;
  for (int s = 0; s < draws; ++s) {
    auto r = sampler.sample({kLogits, &params, nullptr, choice_seed(42, static_cast<uint32_t>(s)), 17, {}});
    ASSERT_TRUE(r);
    ++counts[static_cast<size_t>(r->token)];
  }
  double chi2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi2, kChi2Df5);
}

TEST(Sampler, UniformHashIsUniform) {
  // 20 equal bins over 200k draws of the open-unit uniform.
  std::vector<int> bins(20, 0);
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = hash_to_open_unit(counter_hash(3, static_cast<uint64_t>(i), 11));
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++bins[static_cast<size_t>(u * 20)];
  }
  double chi2 = 0.0;
  for (int b : bins) chi2 += (b - n / 20.0) * (b - n / 20.0) / (n / 20.0);
  EXPECT_LT(chi2, 43.82);  // df 19, 99.9%
}

TEST(Sampler, UniformNeverReachesZeroOrOne) {
  for (uint64_t h : {uint64_t{0}, uint64_t{1} << 11, ~uint64_t{0}, ~uint64_t{0} >> 1, uint64_t{0xFFF}}) {
    const double u = hash_to_open_unit(h);
    EXPECT_GT(u, 0.0) << h;
    EXPECT_LT(u, 1.0) << h;
    EXPECT_GT(1.0 - u, 0.0) << h;
    EXPECT_TRUE(std::isfinite(-std::log(-std::log(u)))) << h;
    EXPECT_LT(-std::log(-std::log(u)), 37.5) << h;
  }
}

TEST(Sampler, SameInputsSameTokenWhateverTheBatchOrder) {
  // Eight "requests" with their own rows, seeds and positions, sampled for 30
  // steps in two different row orders (as two batch compositions would).
  struct Req {
    std::vector<float> logits;
    uint64_t seed;
    int64_t pos;
  };
  std::vector<Req> reqs;
  for (int r = 0; r < 8; ++r) {
    std::vector<float> row(64);
    for (size_t i = 0; i < row.size(); ++i) {
      row[i] = static_cast<float>(hash_to_open_unit(counter_hash(r, i, 0)) * 4.0);
    }
    reqs.push_back({row, seed_from_prompt(std::vector<int32_t>{r, 1, 2}), 10 + r});
  }
  SamplingParams params;
  params.top_p = 0.95f;
  auto run = [&](const std::vector<int>& order) {
    Sampler sampler;  // one sampler shared by the whole batch, as in the engine
    std::vector<std::vector<int32_t>> out(reqs.size());
    for (int step = 0; step < 30; ++step) {
      for (int r : order) {
        const Req& q = reqs[static_cast<size_t>(r)];
        auto t = sampler.sample({q.logits, &params, nullptr, q.seed, q.pos + step, {}});
        EXPECT_TRUE(t);
        out[static_cast<size_t>(r)].push_back(t->token);
      }
    }
    return out;
  };
  const auto a = run({0, 1, 2, 3, 4, 5, 6, 7});
  const auto b = run({5, 2, 7, 0, 3, 6, 1, 4});
  const auto alone = run({3});
  EXPECT_EQ(a, b);
  EXPECT_EQ(alone[3], a[3]);
  EXPECT_NE(a[0], a[1]);  // different seeds give different sequences
}

TEST(Sampler, GreedyIsArgmaxAfterBiasAndPenaltiesLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s;
  const std::vector<float> tie{1.0f, 3.0f, 3.0f, 0.0f};
  EXPECT_EQ(s.sample({tie, &p, nullptr, 1, 0, {}})->token, 1);
  EXPECT_EQ(s.sample({tie, &p, nullptr, 999, 50, {}})->token, 1);
  p.logit_bias = {{3, 5.0f}};
  EXPECT_EQ(s.sample({tie, &p, nullptr, 1, 0, {}})->token, 3);
  p.logit_bias.clear();
  p.frequency_penalty = 1.0f;
  TokenHistory h;
  h.append_generated(1);
  EXPECT_EQ(s.sample({tie, &p, &h, 1, 0, {}})->token, 2);
}

TEST(Sampler, LogitBiasMinus100EffectivelyBansAndPlus100Forces) {
  SamplingParams p;
  Sampler s;
  p.logit_bias = {{4, -100.0f}};
  for (int pos = 0; pos < 2000; ++pos) ASSERT_NE(s.sample({kLogits, &p, nullptr, 3, pos, {}})->token, 4);
  p.logit_bias = {{5, 100.0f}};
  for (int pos = 0; pos < 2000; ++pos) ASSERT_EQ(s.sample({kLogits, &p, nullptr, 3, pos, {}})->token, 5);
}

TEST(Sampler, BannedTokensNeverDrawn) {
  SamplingParams p;
  Sampler s;
  const std::vector<int32_t> ban{4, 0};
  for (int pos = 0; pos < 3000; ++pos) {
    const int32_t t = s.sample({kLogits, &p, nullptr, 8, pos, ban})->token;
    ASSERT_NE(t, 4);
    ASSERT_NE(t, 0);
  }
}

TEST(Sampler, RawLogprobsIgnoreProcessing) {
  SamplingParams p;
  p.temperature = 0.3f;
  p.top_k = 2;
  p.logit_bias = {{2, 1.0f}};
  p.logprobs = true;
  p.top_logprobs = 3;
  Sampler s;
  auto r = s.sample({kLogits, &p, nullptr, 5, 0, {}});
  ASSERT_TRUE(r);
  const auto raw = softmax(kLogits, 1.0);
  EXPECT_NEAR(r->logprob, std::log(raw[static_cast<size_t>(r->token)]), 1e-5);
  ASSERT_EQ(r->top.size(), 3u);
  EXPECT_EQ(r->top[0].token, 4);
  EXPECT_EQ(r->top[1].token, 0);
  EXPECT_EQ(r->top[2].token, 1);
  EXPECT_NEAR(r->top[0].logprob, std::log(raw[4]), 1e-5);
  EXPECT_NEAR(r->top[2].logprob, std::log(raw[1]), 1e-5);
}

TEST(Sampler, ProcessedLogprobsAreTheSampledDistribution) {
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 2;
  p.logprobs = true;
  p.top_logprobs = 5;
  p.logprobs_mode = LogprobsMode::kProcessed;
  Sampler s;
  auto r = s.sample({kLogits, &p, nullptr, 5, 0, {}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->top.size(), 2u);  // masked tokens are never listed
  const auto q = softmax({2.0f, 1.0f}, 0.5);
  EXPECT_EQ(r->top[0].token, 4);
  EXPECT_NEAR(r->top[0].logprob, std::log(q[0]), 1e-5);
  EXPECT_NEAR(r->top[1].logprob, std::log(q[1]), 1e-5);
}

TEST(Sampler, FailsCleanlyOnBadRows) {
  SamplingParams p;
  Sampler s;
  std::vector<float> nan_row{0.0f, std::nanf("")};
  EXPECT_EQ(s.sample({nan_row, &p, nullptr, 0, 0, {}}).status().code(), StatusCode::kInternal);
  std::vector<float> ok{0.0f, 1.0f};
  const std::vector<int32_t> all{0, 1};
  EXPECT_EQ(s.sample({ok, &p, nullptr, 0, 0, all}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.sample({ok, nullptr, nullptr, 0, 0, {}}));
  EXPECT_FALSE(s.sample({{}, &p, nullptr, 0, 0, {}}));
}

TEST(Seed, PromptHashAndChoiceSeeds) {
  const std::vector<int32_t> a{1, 2, 3}, b{1, 2, 4}, empty{};
  EXPECT_EQ(seed_from_prompt(a), seed_from_prompt(std::vector<int32_t>{1, 2, 3}));
  EXPECT_NE(seed_from_prompt(a), seed_from_prompt(b));
  EXPECT_NE(seed_from_prompt(empty), seed_from_prompt(std::vector<int32_t>{0}));
  EXPECT_EQ(request_seed(-5, a), static_cast<uint64_t>(int64_t{-5}));
  EXPECT_EQ(request_seed(std::nullopt, a), seed_from_prompt(a));
  EXPECT_EQ(choice_seed(77, 0), 77u);
  std::vector<uint64_t> seeds;
  for (uint32_t i = 0; i < 64; ++i) seeds.push_back(choice_seed(77, i));
  std::sort(seeds.begin(), seeds.end());
  EXPECT_EQ(std::unique(seeds.begin(), seeds.end()), seeds.end());
}

}  // namespace
}  // namespace tf
