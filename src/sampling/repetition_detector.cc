#include "sampling/repetition_detector.h"

#include <algorithm>
#include <string>

namespace tf {

Status RepetitionRule::validate() const {
  if (min_pattern < 0 || max_pattern < 0 || min_count < 0 || min_tokens < 0)
    return invalid_argument("sizes and counts must not be negative");
  if (max_pattern > kMaxPattern)
    return invalid_argument("max_pattern_size must be at most " + std::to_string(kMaxPattern));
  if (max_pattern > 0 && min_count < 2)
    return invalid_argument("min_count must be at least 2 when max_pattern_size is set");
  if (max_pattern > 0 && std::max(min_pattern, 1) > max_pattern)
    return invalid_argument("min_pattern_size must not exceed max_pattern_size");
  return Status::ok();
}

RepetitionDetector::RepetitionDetector(const RepetitionRule& rule) : rule_(rule) {
  rule_.min_pattern = std::max(rule_.min_pattern, 1);
  if (!rule_.enabled()) return;
  recent_.assign(static_cast<size_t>(rule_.max_pattern), 0);
  run_.assign(static_cast<size_t>(rule_.max_pattern - rule_.min_pattern + 1), 0);
}

std::optional<Repetition> RepetitionDetector::push(int32_t token) {
  if (recent_.empty()) return std::nullopt;
  const int64_t n = pushed_;  // this token's index
  const auto size = static_cast<int64_t>(recent_.size());
  std::optional<Repetition> found;
  for (int32_t p = rule_.min_pattern; p <= rule_.max_pattern; ++p) {
    int64_t& run = run_[static_cast<size_t>(p - rule_.min_pattern)];
    // recent_ holds tokens n - size .. n - 1; the one p back is at (n - p) mod size.
    run = (n >= p && recent_[static_cast<size_t>((n - p) % size)] == token) ? run + 1 : 0;
    if (!found && run >= static_cast<int64_t>(rule_.min_count - 1) * p && run + p >= rule_.min_tokens)
      found = Repetition{p, run + p};
  }
  recent_[static_cast<size_t>(n % size)] = token;
  ++pushed_;
  return found;
}

}  // namespace tf
