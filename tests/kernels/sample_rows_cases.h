// Shared by the sample_rows tests (CPU op vs the host sampler; CUDA op vs both):
// logits rows of several shapes of difficulty, a grid of sampling parameters the
// device supports, and the host sampler's answer for a row (the reference).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/api/sample_rows.h"
#include "sampling/device_row.h"
#include "sampling/sampler.h"

namespace tf::sample_rows_cases {

enum class RowKind { kNormal, kPeaked, kTies, kMaskedHoles, kWide };
inline const char* kind_name(RowKind k) {
  switch (k) {
    case RowKind::kNormal: return "normal";
    case RowKind::kPeaked: return "peaked";
    case RowKind::kTies: return "ties";
    case RowKind::kMaskedHoles: return "holes";
    case RowKind::kWide: return "wide";
  }
  return "?";
}
inline constexpr RowKind kKinds[] = {RowKind::kNormal, RowKind::kPeaked, RowKind::kTies, RowKind::kMaskedHoles,
                                     RowKind::kWide};

// A row of `n` logits. kTies: values on a coarse grid (many exact ties, so argmax,
// top_k and top_p ties are exercised); kMaskedHoles: ~1/3 -inf; kPeaked: a few
// dominant tokens (top_p keeps few); kWide: std 8 (very unequal masses).
inline std::vector<float> make_row(int64_t n, RowKind kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, kind == RowKind::kWide ? 8.0f : 2.0f);
  std::vector<float> row(static_cast<size_t>(n));
  for (float& x : row) x = nd(rng);
  if (kind == RowKind::kTies) {
    for (float& x : row) x = std::round(x * 2.0f) / 2.0f;
  } else if (kind == RowKind::kMaskedHoles) {
    std::uniform_int_distribution<int> d(0, 2);
    for (float& x : row)
      if (d(rng) == 0) x = -std::numeric_limits<float>::infinity();
  } else if (kind == RowKind::kPeaked) {
    std::uniform_int_distribution<int64_t> id(0, n - 1);
    for (int j = 0; j < 4; ++j) row[static_cast<size_t>(id(rng))] = 14.0f + static_cast<float>(j);
  }
  return row;
}

// Prompt scoring (SampleRowParams::scored_token): `rows` rows of every kind, each scoring a
// token of its own, among them ids at or past `limit` (padding: -inf) and -inf holes.
struct ScoredRows {
  std::vector<std::vector<float>> rows;
  std::vector<SampleRowParams> params;
};
inline ScoredRows scored_rows(int64_t vocab, int32_t limit, int rows_per_kind, int top) {
  ScoredRows out;
  std::mt19937 rng(7);
  const int64_t lim = limit > 0 ? limit : vocab;
  std::uniform_int_distribution<int64_t> id(0, lim - 1);
  uint32_t s = 1;
  for (RowKind kind : kKinds)
    for (int i = 0; i < rows_per_kind; ++i, ++s) {
      out.rows.push_back(make_row(vocab, kind, s * 7919u + static_cast<uint32_t>(vocab)));
      SampleRowParams p;
      p.logprob = true;
      p.top_logprobs = top;
      p.vocab_limit = limit;
      p.scored_token = static_cast<int32_t>(id(rng));
      if (i == 1 && lim < vocab) p.scored_token = static_cast<int32_t>(vocab - 1);  // padding
      p.rank = i % 2 == 0 || i == 1;  // vLLM's prompt_logprobs ask for it
      out.params.push_back(p);
    }
  return out;
}

struct ParamCase {
  std::string name;
  SamplingParams p;
};

// Parameter sets the device path accepts (no bias, penalties or processed logprobs).
inline std::vector<ParamCase> param_grid() {
  std::vector<ParamCase> out;
  auto add = [&](std::string name, float t, int k, float top_p, float min_p, int logprobs = -1) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    if (logprobs >= 0) {
      p.logprobs = true;
      p.top_logprobs = logprobs;
    }
    out.push_back({std::move(name), p});
  };
  add("greedy", 0.0f, 0, 1.0f, 0.0f);
  add("greedy+logprobs5", 0.0f, 0, 1.0f, 0.0f, 5);
  add("t1", 1.0f, 0, 1.0f, 0.0f);
  add("t0.7", 0.7f, 0, 1.0f, 0.0f);
  add("t0.01", 0.01f, 0, 1.0f, 0.0f);
  add("t1.5+k40", 1.5f, 40, 1.0f, 0.0f);
  add("k1", 1.0f, 1, 1.0f, 0.0f);
  add("k1000", 0.8f, 1000, 1.0f, 0.0f);
  add("p0.9", 1.0f, 0, 0.9f, 0.0f);
  add("p0.5+t0.6", 0.6f, 0, 0.5f, 0.0f);
  add("p0.99", 1.0f, 0, 0.99f, 0.0f);
  add("minp0.05", 1.0f, 0, 1.0f, 0.05f);
  add("minp0.3+t0.9", 0.9f, 0, 1.0f, 0.3f);
  add("k50+p0.95+minp0.02", 0.8f, 50, 0.95f, 0.02f);
  add("k20+p0.8+logprobs20", 1.0f, 20, 0.8f, 0.0f, 20);
  add("t0.9+logprob0", 0.9f, 0, 1.0f, 0.0f, 0);
  return out;
}

// The host sampler's answer for `row` (ids >= vocab_limit masked as the engine does).
inline Expected<SampledToken> host_sample(std::vector<float> row, int32_t vocab_limit, const SamplingParams& p,
                                          uint64_t seed, int64_t position) {
  if (vocab_limit > 0)
    for (size_t i = static_cast<size_t>(vocab_limit); i < row.size(); ++i)
      row[i] = -std::numeric_limits<float>::infinity();
  Sampler sampler;
  return sampler.sample({row, &p, nullptr, seed, position, {}});
}

inline bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace tf::sample_rows_cases
