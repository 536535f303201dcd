#include "spec/draft_policy.h"

#include <algorithm>

namespace tf::spec {

int best_draft_count(double acceptance, std::span<const double> cost, double min_gain) {
  const double a = std::clamp(acceptance, 0.0, 1.0);
  int best = 0;
  double best_rate = 1.0 + min_gain;  // a plain step: one token per unit of time
  double expected = 1.0, term = 1.0;
  for (size_t k = 1; k < cost.size(); ++k) {
    term *= a;
    expected += term;
    if (!(cost[k] > 0)) continue;
    const double rate = expected / cost[k];
    if (rate > best_rate) {
      best_rate = rate;
      best = static_cast<int>(k);
    }
  }
  return best;
}

void DraftAcceptance::observe(int drafted, int kept) {
  // kept successes, then one failure unless every draft was kept; later drafts were not tried.
  for (int i = 0; i < kept; ++i) value_ += rate_ * (1.0 - value_);
  if (kept < drafted) value_ += rate_ * (0.0 - value_);
}

void StepCost::observe(int64_t rows, double seconds) {
  if (rows <= 0 || rows > kMaxRows || !(seconds > 0)) return;
  double& t = t_[static_cast<size_t>(rows)];
  t = t > 0 ? t + rate_ * (seconds - t) : seconds;
}

double StepCost::time(int64_t rows) const {
  if (rows <= 0 || rows > kMaxRows) return 0;
  if (t_[static_cast<size_t>(rows)] > 0) return t_[static_cast<size_t>(rows)];
  const double one = t_[1];
  for (int64_t r = rows - 1; r >= 1; --r) {
    const double known = t_[static_cast<size_t>(r)];
    if (known > 0) return known + static_cast<double>(rows - r) * prior_row_ * (one > 0 ? one : known / r);
  }
  return 0;
}

double StepCost::ratio(int64_t base, int64_t rows) const {
  const double tb = time(base), tr = time(rows);
  if (tb > 0 && tr > 0) return tr / tb;
  return 1.0 + prior_row_ * static_cast<double>(rows - base);  // nothing measured yet
}

std::vector<double> StepCost::draft_costs(int64_t base, int max_drafts) const {
  std::vector<double> c(static_cast<size_t>(std::max(0, max_drafts)) + 1, 1.0);
  for (int k = 1; k <= max_drafts; ++k) c[static_cast<size_t>(k)] = ratio(base, base + k);
  return c;
}

}  // namespace tf::spec
