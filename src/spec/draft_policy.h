// How many drafts a stream should verify in its next step. A verify step of k drafts
// costs more than a decode step (each row reads its own routed experts, and a verify step
// runs eagerly and replays the kept rows' recurrence), and yields 1 + (the drafts kept)
// tokens, so drafting only pays when the drafts are likely right. The policy keeps, per
// stream, how often a draft was kept given the ones before it were (a per-position
// acceptance, an exponential average), and engine-wide what a step of r rows costs (an
// exponential average per row count, measured); it drafts the k that maximises the
// expected tokens per unit of step time, E(k) / cost(k) with E(k) = 1 + a + ... + a^k and
// cost(k) = time(r + k) / time(r), and none when no k beats a plain step.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace tf::spec {

// The k in [0, cost.size() - 1] with the best expected tokens per step time, where cost[k]
// is a step with k drafts relative to one without (cost[0] = 1); 0 when none gains at least
// `min_gain` (relative) over a plain decode step.
int best_draft_count(double acceptance, std::span<const double> cost, double min_gain = 0.02);

// Per stream: the chance that a draft is kept when every draft before it was.
class DraftAcceptance {
 public:
  explicit DraftAcceptance(double prior = 0.7, double rate = 0.25) : prior_(prior), rate_(rate), value_(prior) {}
  double value() const { return value_; }
  // A verify step of `drafted` drafts kept the first `kept`.
  void observe(int drafted, int kept);
  // A step without drafts: the estimate drifts back toward the prior, so a stream that
  // stopped drafting tries again now and then.
  void idle_step(double drift = 0.02) { value_ += drift * (prior_ - value_); }

 private:
  double prior_, rate_, value_;
};

// Engine-wide: the wall time of a decode step by its rows (1..kMaxRows), exponentially
// averaged. A row count not seen yet is extrapolated from the largest one seen below it at
// `prior_row` of a one-row step per extra row (so the policy tries one more row, measures
// it, and goes on while it pays).
class StepCost {
 public:
  static constexpr int kMaxRows = 64;
  explicit StepCost(double prior_row = 0.3, double rate = 0.1) : prior_row_(prior_row), rate_(rate) {}
  void observe(int64_t rows, double seconds);
  // The time of a step of `rows` rows relative to one of `base` rows (1 when nothing is known).
  double ratio(int64_t base, int64_t rows) const;
  // cost[k] = ratio(base, base + k) for k = 0..max_drafts.
  std::vector<double> draft_costs(int64_t base, int max_drafts) const;
  // The seconds of a step of `rows` rows: measured, or extrapolated; 0 when nothing is known.
  double seconds(int64_t rows) const { return time(rows); }
  double prior_row() const { return prior_row_; }

 private:
  double time(int64_t rows) const;
  double prior_row_, rate_;
  std::array<double, kMaxRows + 1> t_{};  // 0: not seen
};

}  // namespace tf::spec
