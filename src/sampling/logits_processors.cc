// See logits_processors.h for the order and the tie rule.
#include "sampling/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

namespace tf {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

bool in_range(std::span<float> logits, int32_t token) {
  return token >= 0 && static_cast<size_t>(token) < logits.size();
}

// Masks every entry below `threshold`.
void mask_below(std::span<float> logits, float threshold) {
  for (float& l : logits) {
    if (l < threshold) l = kMasked;
  }
}

void repetition_one(float& l, float repetition) { l = l > 0.0f ? l / repetition : l * repetition; }

}  // namespace

void apply_logit_bias(std::span<float> logits, const std::map<int32_t, float>& bias) {
  for (const auto& [token, b] : bias) {
    if (in_range(logits, token)) logits[static_cast<size_t>(token)] += b;
  }
}

void mask_tokens(std::span<float> logits, std::span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    if (in_range(logits, t)) logits[static_cast<size_t>(t)] = kMasked;
  }
}

void keep_only_tokens(std::span<float> logits, std::span<const int32_t> allowed) {
  if (allowed.empty()) return;
  size_t next = 0;  // walks the sorted list beside the row
  for (size_t t = 0; t < logits.size(); ++t) {
    while (next < allowed.size() && static_cast<size_t>(allowed[next]) < t) ++next;
    if (next == allowed.size() || static_cast<size_t>(allowed[next]) != t)
      logits[t] = -std::numeric_limits<float>::infinity();
  }
}

void apply_penalties(std::span<float> logits, const TokenHistory& history, float presence, float frequency,
                     float repetition) {
  if (repetition != 1.0f) {
    for (int32_t t : history.prompt_distinct()) {
      if (in_range(logits, t)) repetition_one(logits[static_cast<size_t>(t)], repetition);
    }
    for (const auto& [t, count] : history.generated_counts()) {
      // Tokens also in the prompt were penalised above: once per distinct token.
      if (in_range(logits, t) && !history.in_prompt(t)) repetition_one(logits[static_cast<size_t>(t)], repetition);
    }
  }
  if (presence != 0.0f || frequency != 0.0f) {
    for (const auto& [t, count] : history.generated_counts()) {
      if (!in_range(logits, t)) continue;
      logits[static_cast<size_t>(t)] -= frequency * static_cast<float>(count) + (count > 0 ? presence : 0.0f);
    }
  }
}

void apply_temperature(std::span<float> logits, float temperature) {
  if (temperature <= 0.0f || temperature == 1.0f) return;
  for (float& l : logits) l /= temperature;
}

void apply_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f || logits.empty()) return;
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  if (!std::isfinite(max_logit)) return;
  // p_i >= min_p * p_max  <=>  l_i >= l_max + log(min_p); the argmax always stays.
  mask_below(logits, max_logit + std::log(min_p));
}

void apply_top_k(std::span<float> logits, int32_t top_k) {
  if (top_k <= 0 || static_cast<size_t>(top_k) >= logits.size()) return;
  const auto k = static_cast<size_t>(top_k);
  float kth;
  if (k <= 256) {
    // One pass with a min-heap of the k largest: no vocab-sized copy.
    std::vector<float> heap;
    heap.reserve(k);
    for (float l : logits) {
      if (heap.size() < k) {
        heap.push_back(l);
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      } else if (l > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
        heap.back() = l;
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      }
    }
    kth = heap.front();
  } else {
    std::vector<float> values(logits.begin(), logits.end());
    auto it = values.begin() + static_cast<std::ptrdiff_t>(k - 1);
    std::nth_element(values.begin(), it, values.end(), std::greater<float>());
    kth = *it;
  }
  if (kth == kMasked) return;  // fewer than k tokens left: nothing to cut
  mask_below(logits, kth);
}

void apply_top_p(std::span<float> logits, float top_p) {
  if (top_p >= 1.0f || logits.empty()) return;
  float max_logit = kMasked, min_logit = std::numeric_limits<float>::infinity();
  for (float l : logits) {
    if (l == kMasked) continue;
    max_logit = std::max(max_logit, l);
    min_logit = std::min(min_logit, l);
  }
  if (!std::isfinite(max_logit)) return;
  const double m = max_logit;
  const double range = m - static_cast<double>(min_logit);
  if (range == 0.0) return;  // all kept tokens are tied: all stay

  // Bucket the tokens by logit (bin 0 holds the largest) with their mass.
  // The kept set is a prefix of the sorted order, so every bin before the
  // one where the cumulative mass reaches p is kept whole, every bin after it
  // dropped, and only that one bin needs sorting: O(V), not O(V log V).
  constexpr int kBins = 4096;
  const double scale = (kBins - 1) / range;
  auto bin_of = [&](float l) { return static_cast<int>((m - static_cast<double>(l)) * scale); };
  std::vector<double> bin_mass(kBins, 0.0);
  double total = 0.0;
  for (float l : logits) {
    if (l == kMasked) continue;
    const double p = std::exp(static_cast<double>(l) - m);
    bin_mass[static_cast<size_t>(bin_of(l))] += p;
    total += p;
  }
  const double target = static_cast<double>(top_p) * total;
  int edge = kBins - 1;
  double before = 0.0;  // mass of the bins before `edge`
  for (int b = 0; b < kBins; ++b) {
    if (bin_mass[static_cast<size_t>(b)] == 0.0) continue;
    edge = b;
    if (before + bin_mass[static_cast<size_t>(b)] >= target) break;
    before += bin_mass[static_cast<size_t>(b)];
  }
  std::vector<std::pair<float, int32_t>> edge_tokens;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != kMasked && bin_of(logits[i]) == edge) edge_tokens.emplace_back(logits[i], static_cast<int32_t>(i));
  }
  std::sort(edge_tokens.begin(), edge_tokens.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  // Keep token j while the mass strictly before it is < p (transformers/vLLM).
  float threshold = edge_tokens.front().first;
  for (const auto& [l, t] : edge_tokens) {
    if (before >= target) break;
    threshold = l;
    before += std::exp(static_cast<double>(l) - m);
  }
  mask_below(logits, threshold);
}

}  // namespace tf
