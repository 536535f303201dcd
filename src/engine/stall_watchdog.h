// WATCHDOG_S: exits a server whose model step has stopped making progress.
//
// The tensor-parallel collectives already fail within seconds when a rank dies or hangs
// (CommOptions::op_timeout), and every other error fails the requests in flight. What is
// left is a step that never returns: a GPU kernel that does not finish, a driver or fabric
// that stops answering. Nothing inside the process can undo that (the engine thread is
// blocked in the call), so the watchdog ends the process with a message saying so, and a
// supervisor (systemd with FOREGROUND=1, or the operator) restarts it. A step of a healthy
// server takes milliseconds to seconds; the limit is minutes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "engine/periodic_watch.h"

namespace tf {

class StallWatchdog {
 public:
  struct Options {
    double limit_seconds = 0;  // 0: no watchdog
    std::chrono::milliseconds period{1000};
    std::function<double()> step_seconds;  // how long the step in flight has run (0: none)
  };
  // Called once, on the watchdog's thread, with the step's time and the limit.
  using Trip = std::function<void(double step_seconds, double limit_seconds)>;

  // Null when limit_seconds is 0.
  static std::unique_ptr<StallWatchdog> start(Options options, Trip trip);
  bool tripped() const { return watch_->fired(); }

 private:
  StallWatchdog() = default;
  std::unique_ptr<PeriodicWatch> watch_;
};

std::string stall_message(double step_seconds, double limit_seconds);

}  // namespace tf
