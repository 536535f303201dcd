// A per-request queue between the engine's sink callback (producer, engine thread)
// and the HTTP handler thread (consumer). Shared-owned by both, so events that
// arrive after the client left are simply dropped with the queue. Each event carries the
// time it arrived (the stream pacer spaces tokens by it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "server/engine_api.h"

namespace tf::server {

class EventQueue {
 public:
  using Clock = std::chrono::steady_clock;
  struct Arrived {
    GenerationEvent event;
    Clock::time_point at;
  };

  void push(GenerationEvent ev) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back({std::move(ev), Clock::now()});
    }
    cv_.notify_one();
  }
  // False when nothing arrived within `timeout`.
  bool pop(GenerationEvent& ev, std::chrono::milliseconds timeout) {
    Arrived a;
    if (!pop_arrived(a, timeout)) return false;
    ev = std::move(a.event);
    return true;
  }
  bool pop_arrived(Arrived& a, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    a = std::move(events_.front());
    events_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Arrived> events_;
};

}  // namespace tf::server
