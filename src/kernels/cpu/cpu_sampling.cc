// CPU reference of the device sampler. Every step mirrors src/sampling (the
// host sampler): the filters are thresholds on the processed logit, so their
// result is the same whatever algorithm finds the threshold; the two places
// where floating-point rounding could make backends disagree (top_p sums, the
// Gumbel keys' logarithms) are guarded by the margins of sample_rows.h.
#include "kernels/cpu/cpu_sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/api/counter_hash.h"
#include "kernels/api/sample_rows_call.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// The host sampler's Gumbel variate (sampling/counter_hash.h), the same expression.
double gumbel(uint64_t seed, int64_t position, int64_t token) {
  const double u = hash_to_open_unit(counter_hash(seed, static_cast<uint64_t>(position), static_cast<uint64_t>(token)));
  return -std::log(-std::log(u));
}

// Raw logprobs: lse and the top-n, as sampling/logprobs.cc (index-order sum in double).
void fill_logprobs(SampleRowResult& r, const float* x, int64_t lim, float max_raw, const SampleRowParams& p) {
  const double m = max_raw;
  double sum = 0.0;
  for (int64_t i = 0; i < lim; ++i) sum += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(sum);
  if (p.logprob)
    r.logprob = r.token < lim ? static_cast<float>(static_cast<double>(x[r.token]) - lse)
                              : -std::numeric_limits<float>::infinity();
  if (p.rank) {
    const float v = r.token < lim ? x[r.token] : -std::numeric_limits<float>::infinity();
    int32_t at_least = 0;
    for (int64_t i = 0; i < lim; ++i) at_least += x[i] >= v;
    r.rank = at_least;
  }
  const int32_t n = std::clamp(p.top_logprobs, 0, kSampleRowsMaxTopLogprobs);
  if (n == 0) return;
  std::vector<std::pair<float, int32_t>> finite;
  for (int64_t i = 0; i < lim; ++i)
    if (std::isfinite(x[i])) finite.emplace_back(x[i], static_cast<int32_t>(i));
  const auto count = std::min<size_t>(static_cast<size_t>(n), finite.size());
  std::partial_sort(finite.begin(), finite.begin() + static_cast<std::ptrdiff_t>(count), finite.end(),
                    [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  r.top_count = static_cast<int32_t>(count);
  for (size_t j = 0; j < count; ++j) {
    r.top_tokens[j] = finite[j].second;
    r.top_values[j] = static_cast<float>(static_cast<double>(finite[j].first) - lse);
  }
}

// top_p over the kept values w (-inf: removed): the smallest value v whose
// strictly-higher mass F(v) is < top_p * total. Returns false when a compared
// mass is within kTopPMargin of the target (the host's sums could fall on the
// other side).
bool top_p_threshold(const std::vector<float>& w, float pmax, float top_p, float& threshold) {
  std::vector<float> kept;
  for (float v : w)
    if (v != kNegInf) kept.push_back(v);
  const float mn = *std::min_element(kept.begin(), kept.end());
  const double m = pmax;
  threshold = kNegInf;
  if (m - static_cast<double>(mn) == 0.0) return true;  // all tied: all stay
  double total = 0.0;
  for (float v : kept) total += std::exp(static_cast<double>(v) - m);
  const double target = static_cast<double>(top_p) * total, eps = kTopPMargin * total;
  std::sort(kept.begin(), kept.end(), std::greater<float>());
  double above = 0.0;
  size_t g = 0;
  bool have = false;
  double above_kept = 0.0, next_above = 0.0;
  bool has_next = false;
  while (g < kept.size()) {
    size_t e = g;
    double mass = 0.0;
    while (e < kept.size() && kept[e] == kept[g]) mass += std::exp(static_cast<double>(kept[e++]) - m);
    if (!(above < target)) {
      has_next = true;
      next_above = above;
      break;
    }
    have = true;
    threshold = kept[g];
    above_kept = above;
    above += mass;
    g = e;
  }
  if (!have) return false;  // rounding put even the best value past the target
  if (!(above_kept < target - eps)) return false;
  if (has_next && !(next_above > target + eps)) return false;
  return true;
}

}  // namespace

SampleRowResult sample_row(const float* x, int64_t n, const SampleRowParams& p) {
  SampleRowResult r;
  r.status = SampleRowStatus::kOk;
  const int64_t lim = p.vocab_limit > 0 ? std::min<int64_t>(n, p.vocab_limit) : n;
  int64_t best = -1;
  float best_raw = kNegInf;
  for (int64_t i = 0; i < lim; ++i) {
    if (std::isnan(x[i]) || x[i] == kPosInf) {
      r.status = SampleRowStatus::kBadLogit;
      return r;
    }
    if (x[i] > best_raw) {
      best_raw = x[i];
      best = i;
    }
  }
  if (best < 0) {
    r.status = SampleRowStatus::kNothingLeft;
    return r;
  }
  if (p.scored_token >= 0) {
    r.token = p.scored_token;
  } else if (p.greedy) {
    r.token = static_cast<int32_t>(best);
  } else {
    const bool scale = p.temperature > 0.0f && p.temperature != 1.0f;
    std::vector<float> w(static_cast<size_t>(lim));
    for (int64_t i = 0; i < lim; ++i) w[static_cast<size_t>(i)] = scale ? x[i] / p.temperature : x[i];
    const float pmax = w[static_cast<size_t>(best)];  // division by t > 0 keeps the order
    if (pmax == kPosInf) {                              // overflow: the host handles it
      r.status = SampleRowStatus::kUndecided;
      return r;
    }
    float threshold = p.log_min_p > kNegInf ? pmax + p.log_min_p : kNegInf;
    auto mask_below = [&](float t) {
      for (float& v : w)
        if (v < t) v = kNegInf;
    };
    mask_below(threshold);
    if (p.top_k > 0 && p.top_k < lim) {
      std::vector<float> values(w);
      auto it = values.begin() + (p.top_k - 1);
      std::nth_element(values.begin(), it, values.end(), std::greater<float>());
      if (*it != kNegInf) mask_below(*it);
    }
    if (p.top_p < 1.0f) {
      float t;
      if (!top_p_threshold(w, pmax, p.top_p, t)) {
        r.status = SampleRowStatus::kUndecided;
        return r;
      }
      mask_below(t);
    }
    double best_key = -std::numeric_limits<double>::infinity(), second = best_key;
    int64_t winner = -1;
    for (int64_t i = 0; i < lim; ++i) {
      const float v = w[static_cast<size_t>(i)];
      if (v == kNegInf) continue;
      const double key = static_cast<double>(v) + gumbel(p.seed, p.position, i);
      if (key > best_key) {  // ascending ids: an equal key never displaces (lowest id wins)
        second = best_key;
        best_key = key;
        winner = i;
      } else if (key > second) {
        second = key;
      }
    }
    if (winner < 0) {
      r.status = SampleRowStatus::kNothingLeft;
      return r;
    }
    if (best_key - second <= gumbel_margin(best_key)) {
      r.status = SampleRowStatus::kUndecided;
      return r;
    }
    r.token = static_cast<int32_t>(winner);
  }
  if (p.logprob || p.top_logprobs > 0) fill_logprobs(r, x, lim, best_raw, p);
  return r;
}

void sample_rows(std::span<SampleRowResult> out, std::span<const Tensor> rows, std::span<const SampleRowParams> params) {
  if (Status s = check_sample_rows_call(out.size(), rows, params); !s.is_ok()) throw StatusError(s);
  for (const Tensor& t : rows) {
    if (!t.device().is_cpu()) throw StatusError(invalid_argument("sample_rows: " + t.describe() + " is not on the host"));
    check_f32("sample_rows", t, -1);
  }
  parallel_rows(static_cast<int64_t>(rows.size()), rows.empty() ? 1 : rows[0].numel() * 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto k = static_cast<size_t>(i);
      out[k] = sample_row(rows[k].data<float>(), rows[k].numel(), params[k]);
    }
  });
}

}  // namespace tf::cpu
