#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tf {

double log_sum_exp(std::span<const float> logits) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
  if (!std::isfinite(max_logit)) return max_logit;
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  return max_logit + std::log(sum);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n, double lse) {
  std::vector<TokenLogprob> out;
  if (n <= 0) return out;
  // One pass keeping the n best (n <= 20) in order: better = higher logit,
  // then lower id. Ids arrive ascending, so an equal logit never displaces.
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(n) + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (!std::isfinite(l)) continue;
    if (best.size() == static_cast<size_t>(n) && !(l > logits[static_cast<size_t>(best.back())])) continue;
    auto pos = std::upper_bound(best.begin(), best.end(), l,
                                [&](float v, int32_t t) { return v > logits[static_cast<size_t>(t)]; });
    best.insert(pos, static_cast<int32_t>(i));
    if (best.size() > static_cast<size_t>(n)) best.pop_back();
  }
  out.reserve(best.size());
  for (int32_t t : best) {
    out.push_back({t, static_cast<float>(static_cast<double>(logits[static_cast<size_t>(t)]) - lse)});
  }
  return out;
}

}  // namespace tf
