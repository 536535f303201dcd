#include "sampling/repetition_detector.h"

#include <algorithm>
#include <climits>
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
  recent_.assign(2 * static_cast<size_t>(rule_.max_pattern), -1);
  run_.assign(static_cast<size_t>(rule_.max_pattern - rule_.min_pattern + 1), 0);
  // The run a block length needs: min_count copies, and min_tokens in all (at least 1).
  need_.resize(run_.size());
  for (int32_t p = rule_.min_pattern; p <= rule_.max_pattern; ++p) {
    const int64_t copies = static_cast<int64_t>(rule_.min_count - 1) * p, span = rule_.min_tokens - p;
    need_[static_cast<size_t>(p - rule_.min_pattern)] =
        static_cast<int32_t>(std::clamp<int64_t>(std::max(copies, span), 1, INT32_MAX));
  }
}

std::optional<Repetition> RepetitionDetector::push(int32_t token) {
  if (recent_.empty()) return std::nullopt;
  const int64_t size = rule_.max_pattern;
  const auto head = static_cast<size_t>(pushed_ % size);
  // recent_ holds the last `size` tokens twice over, so the one p back is at newest[-p] for
  // every p <= size, without a modulo per length.
  const int32_t* newest = recent_.data() + head + static_cast<size_t>(size);
  const int64_t lo = rule_.min_pattern, hi = std::min<int64_t>(rule_.max_pattern, pushed_);
  int32_t* run = run_.data() - lo;  // run[p] (a reply is far shorter than 2^31 tokens)
  const int32_t* need = need_.data() - lo;
  int32_t any = 0;  // one branch-free pass (it vectorizes); the lengths are searched only on a hit
  for (int64_t p = lo; p <= hi; ++p) {
    const int32_t r = newest[-p] == token ? run[p] + 1 : 0;
    run[p] = r;
    any |= static_cast<int32_t>(r >= need[p]);
  }
  std::optional<Repetition> found;
  if (any)
    for (int64_t p = lo; p <= hi; ++p)
      if (run[p] >= need[p]) {
        found = Repetition{static_cast<int32_t>(p), run[p] + p};
        break;
      }
  recent_[head] = recent_[head + static_cast<size_t>(size)] = token;
  ++pushed_;
  return found;
}

}  // namespace tf
