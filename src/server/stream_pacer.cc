// See stream_pacer.h.
#include "server/stream_pacer.h"

#include <algorithm>

namespace tf::server {

void StreamPacer::arrived(Clock::time_point t) {
  arrivals_.push_back(t);
  if (arrivals_.size() > kWindow + 1) arrivals_.pop_front();
}

StreamPacer::Clock::duration StreamPacer::mean_gap() const {
  if (arrivals_.size() < 2) return Clock::duration::zero();
  return (arrivals_.back() - arrivals_.front()) / static_cast<int64_t>(arrivals_.size() - 1);
}

double StreamPacer::mean_burst() const {
  if (arrivals_.empty()) return 1.0;
  size_t bursts = 1;
  for (size_t i = 1; i < arrivals_.size(); ++i)
    if (arrivals_[i] - arrivals_[i - 1] > kTogether) ++bursts;
  return static_cast<double>(arrivals_.size()) / static_cast<double>(bursts);
}

StreamPacer::Clock::time_point StreamPacer::due(Clock::time_point oldest, size_t held) const {
  if (!enabled()) return oldest;
  Clock::duration gap = mean_gap();
  const double burst = mean_burst();
  if (static_cast<double>(held) > burst)
    gap = std::chrono::duration_cast<Clock::duration>(gap * (burst / static_cast<double>(held)));
  const Clock::time_point spaced = last_release_ + gap;
  return std::max(oldest, std::min(spaced, oldest + max_hold_));
}

}  // namespace tf::server
