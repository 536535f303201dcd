// See stall_watchdog.h.
#include "engine/stall_watchdog.h"

#include <cmath>

namespace tf {

std::unique_ptr<StallWatchdog> StallWatchdog::start(Options options, Trip trip) {
  if (options.limit_seconds <= 0 || !options.step_seconds) return nullptr;
  std::unique_ptr<StallWatchdog> w(new StallWatchdog());
  const auto period = options.period;
  w->watch_ = std::make_unique<PeriodicWatch>(period, [o = std::move(options), trip = std::move(trip)] {
    const double s = o.step_seconds();
    if (s <= o.limit_seconds) return false;
    trip(s, o.limit_seconds);
    return true;
  });
  return w;
}

std::string stall_message(double step_seconds, double limit_seconds) {
  return "a model step has run for " + std::to_string(static_cast<long long>(std::floor(step_seconds))) +
         " s, more than WATCHDOG_S (" + std::to_string(static_cast<long long>(std::llround(limit_seconds))) +
         " s): the device or a rank stopped answering; exiting so that the server can be restarted (the "
         "requests "
         "in flight are lost)";
}

}  // namespace tf
