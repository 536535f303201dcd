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

StreamPacer::Clock::time_point StreamPacer::due(Clock::time_point oldest) const {
  if (!enabled()) return oldest;
  const Clock::time_point spaced = last_release_ + mean_gap();
  return std::max(oldest, std::min(spaced, oldest + max_hold_));
}

}  // namespace tf::server
