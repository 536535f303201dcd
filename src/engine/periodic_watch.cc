// See periodic_watch.h.
#include "engine/periodic_watch.h"

namespace tf {

PeriodicWatch::PeriodicWatch(std::chrono::milliseconds period, std::function<bool()> check)
    : period_(period), check_(std::move(check)), thread_([this] { run(); }) {}

PeriodicWatch::~PeriodicWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeriodicWatch::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, period_, [this] { return stopping_; })) return;
    }
    if (check_()) {
      fired_ = true;
      return;
    }
  }
}

}  // namespace tf
