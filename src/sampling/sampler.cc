// See sampler.h for the contract; logits_processors.h for the filter order.
#include "sampling/sampler.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "sampling/counter_hash.h"
#include "sampling/logits_processors.h"

namespace tf {

namespace {

int32_t argmax_lowest_id(std::span<const float> row) {
  int32_t best = -1;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] > best_value) {
      best_value = row[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// floor(log2(w)) for a normal positive double: its exponent bits.
int floor_log2(double w) {
  uint64_t bits;
  std::memcpy(&bits, &w, sizeof bits);
  return static_cast<int>((bits >> 52) & 0x7FF) - 1023;
}

// The largest Gumbel variate hash_to_open_unit can produce: u <= 1 - 2^-53
// gives -log(-log(u)) < 36.8 < 37.5. A token more than that below the best
// key so far cannot win.
constexpr double kMaxGumbel = 37.5;
constexpr double kLn2 = 0.69314718055994530942;

// argmax_i(row_i + G(seed, position, i)), ties to the lowest id: exactly the
// token a plain loop over every key would pick, but computing the two
// logarithms of a key only where the token can still win.
// Token i beats the best key b only if G_i > b - l_i, i.e. E_i < e^(l_i - b)
// with E_i = -log(u_i) >= 1 - u_i. floor(log2(1 - u_i)) is a bit extraction,
// so "log(1 - u_i) > l_i - b" is settled without a transcendental for most of
// the vocabulary (with a 1e-6 margin that covers every rounding).
int32_t gumbel_argmax(std::span<const float> row, uint64_t seed, int64_t position) {
  const auto pos = static_cast<uint64_t>(position);
  const int32_t top = argmax_lowest_id(row);
  if (top < 0) return -1;
  auto key_of = [&](size_t i) {
    return static_cast<double>(row[i]) + gumbel_noise(seed, pos, static_cast<uint64_t>(i));
  };
  int32_t best = top;
  double best_key = key_of(static_cast<size_t>(top));
  for (size_t i = 0; i < row.size(); ++i) {
    if (!std::isfinite(row[i]) || static_cast<int32_t>(i) == best) continue;
    const double x = static_cast<double>(row[i]) - best_key;
    if (x < -kMaxGumbel) continue;
    const double w = 1.0 - hash_to_open_unit(counter_hash(seed, pos, static_cast<uint64_t>(i)));
    if (floor_log2(w) * kLn2 > x + 1e-6) continue;  // E_i >= w > e^x: cannot win
    const double key = key_of(i);
    if (key > best_key || (key == best_key && static_cast<int32_t>(i) < best)) {
      best_key = key;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

}  // namespace

Expected<SampledToken> Sampler::sample(const SampleInput& in) {
  if (in.params == nullptr) return internal_error("sampler: no sampling parameters");
  if (in.logits.empty()) return internal_error("sampler: empty logits row");
  const SamplingParams& p = *in.params;
  for (size_t i = 0; i < in.logits.size(); ++i) {
    // -inf is a legal mask (padded vocabularies); NaN and +inf are a model fault.
    if (std::isnan(in.logits[i]) || in.logits[i] == std::numeric_limits<float>::infinity()) {
      return internal_error("sampler: logit of token " + std::to_string(i) + " at position " +
                            std::to_string(in.position) + " is not a number or +inf");
    }
  }

  work_.assign(in.logits.begin(), in.logits.end());
  std::span<float> row(work_);
  apply_logit_bias(row, p.logit_bias);
  mask_tokens(row, in.banned);
  keep_only_tokens(row, p.allowed_token_ids);
  if (in.history != nullptr) {
    apply_penalties(row, *in.history, p.presence_penalty, p.frequency_penalty, p.repetition_penalty);
  }

  SampledToken out;
  if (p.greedy()) {
    out.token = argmax_lowest_id(row);
  } else {
    apply_temperature(row, p.temperature);
    apply_min_p(row, p.min_p);
    apply_top_k(row, p.top_k);
    apply_top_p(row, p.top_p);
    out.token = gumbel_argmax(row, in.seed, in.position);
  }
  if (out.token < 0) {
    return invalid_argument(
        "sampler: every token is excluded at position " + std::to_string(in.position) +
        " (logit_bias, stop tokens, allowed_token_ids, bad_words or filters left nothing to sample)");
  }

  if (p.logprobs) {
    std::span<const float> dist = p.logprobs_mode == LogprobsMode::kRaw ? in.logits : std::span<const float>(row);
    const double lse = log_sum_exp(dist);
    out.logprob = static_cast<float>(static_cast<double>(dist[static_cast<size_t>(out.token)]) - lse);
    out.top = top_logprobs(dist, p.top_logprobs, lse);
  }
  return out;
}

}  // namespace tf
