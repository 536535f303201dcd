// The fast paths of the sampler against plain reference implementations
// written here: top_p (bucketed), top_k (heap), the pruned Gumbel argmax and
// the one-pass top_logprobs must give exactly what the obvious code gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "sampling/counter_hash.h"
#include "sampling/logits_processors.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"

namespace tf {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<int32_t> sorted_ids(const std::vector<float>& row) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] != kNegInf) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return row[static_cast<size_t>(a)] != row[static_cast<size_t>(b)] ? row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)]
                                                                      : a < b;
  });
  return ids;
}

void mask_below(std::vector<float>& row, float t) {
  for (float& l : row) {
    if (l < t) l = kNegInf;
  }
}

void reference_top_p(std::vector<float>& row, float p) {
  const auto ids = sorted_ids(row);
  if (ids.empty() || p >= 1.0f) return;
  const double m = row[static_cast<size_t>(ids[0])];
  double total = 0.0;
  for (int32_t t : ids) total += std::exp(row[static_cast<size_t>(t)] - m);
  double before = 0.0;
  float threshold = row[static_cast<size_t>(ids[0])];
  for (int32_t t : ids) {
    if (before >= p * total) break;
    threshold = row[static_cast<size_t>(t)];
    before += std::exp(threshold - m);
  }
  mask_below(row, threshold);
}

void reference_top_k(std::vector<float>& row, int32_t k) {
  const auto ids = sorted_ids(row);
  if (k <= 0 || static_cast<size_t>(k) >= row.size() || static_cast<size_t>(k) > ids.size()) return;
  mask_below(row, row[static_cast<size_t>(ids[static_cast<size_t>(k - 1)])]);
}

// A random row: continuous values, some exact ties, some masked, sometimes peaked.
std::vector<float> random_row(std::mt19937& rng, size_t vocab) {
  std::normal_distribution<float> nd(0.0f, 1.0f + static_cast<float>(rng() % 4));
  std::vector<float> row(vocab);
  for (float& l : row) l = nd(rng);
  for (size_t i = 0; i < vocab / 10; ++i) row[rng() % vocab] = row[rng() % vocab];  // ties
  for (size_t i = 0; i < vocab / 20; ++i) row[rng() % vocab] = kNegInf;
  if (rng() % 2) {
    for (int i = 0; i < 5; ++i) row[rng() % vocab] += 10.0f + static_cast<float>(rng() % 10);
  }
  return row;
}

TEST(SamplingReference, TopPMatchesFullSort) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 300; ++trial) {
    auto row = random_row(rng, 1 + rng() % 3000);
    const float p = std::uniform_real_distribution<float>(0.01f, 0.999f)(rng);
    auto want = row;
    reference_top_p(want, p);
    apply_top_p(row, p);
    ASSERT_EQ(row, want) << "trial " << trial << " p " << p;
  }
}

TEST(SamplingReference, TopPAllTiedOrSingle) {
  std::vector<float> tied(10, 2.0f);
  apply_top_p(tied, 0.3f);
  EXPECT_EQ(std::count(tied.begin(), tied.end(), kNegInf), 0);
  std::vector<float> one{kNegInf, 1.0f, kNegInf};
  apply_top_p(one, 0.5f);
  EXPECT_EQ(one[1], 1.0f);
  std::vector<float> none{kNegInf, kNegInf};
  apply_top_p(none, 0.5f);
  EXPECT_EQ(none[0], kNegInf);
}

TEST(SamplingReference, TopKMatchesFullSort) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 300; ++trial) {
    auto row = random_row(rng, 1 + rng() % 3000);
    const int32_t k = trial % 3 == 0 ? static_cast<int32_t>(300 + rng() % 2000) : static_cast<int32_t>(1 + rng() % 100);
    auto want = row;
    reference_top_k(want, k);
    apply_top_k(row, k);
    ASSERT_EQ(row, want) << "trial " << trial << " k " << k;
  }
}

TEST(SamplingReference, GumbelArgmaxMatchesTheFullLoop) {
  std::mt19937 rng(3);
  SamplingParams params;
  Sampler sampler;
  for (int trial = 0; trial < 400; ++trial) {
    const auto row = random_row(rng, 1 + rng() % 2000);
    const uint64_t seed = rng();
    const int64_t pos = rng() % 100000;
    int32_t want = -1;
    double best = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < row.size(); ++i) {
      if (row[i] == kNegInf) continue;
      const double key = static_cast<double>(row[i]) + gumbel_noise(seed, static_cast<uint64_t>(pos), i);
      if (key > best) {
        best = key;
        want = static_cast<int32_t>(i);
      }
    }
    auto got = sampler.sample({row, &params, nullptr, seed, pos, {}});
    if (want < 0) {
      ASSERT_FALSE(got);
      continue;
    }
    ASSERT_TRUE(got);
    ASSERT_EQ(got->token, want) << "trial " << trial;
  }
}

TEST(SamplingReference, TopLogprobsMatchFullSort) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    const auto row = random_row(rng, 1 + rng() % 500);
    const int32_t n = static_cast<int32_t>(1 + rng() % 20);
    const double lse = log_sum_exp(row);
    const auto got = top_logprobs(row, n, lse);
    const auto ids = sorted_ids(row);
    ASSERT_EQ(got.size(), std::min(ids.size(), static_cast<size_t>(n)));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].token, ids[i]) << "trial " << trial;
      ASSERT_FLOAT_EQ(got[i].logprob, static_cast<float>(row[static_cast<size_t>(ids[i])] - lse));
    }
  }
}

}  // namespace
}  // namespace tf
