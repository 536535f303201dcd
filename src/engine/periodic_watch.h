// A thread that runs a check every `period` until the check says it is done (returns true) or
// the watch is destroyed: what the memory guard and the stall watchdog share.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace tf {

class PeriodicWatch {
 public:
  PeriodicWatch(std::chrono::milliseconds period, std::function<bool()> check);
  ~PeriodicWatch();  // stops the thread (waits for a check in progress)
  PeriodicWatch(const PeriodicWatch&) = delete;
  PeriodicWatch& operator=(const PeriodicWatch&) = delete;

  bool fired() const { return fired_.load(); }  // the check returned true

 private:
  void run();

  std::chrono::milliseconds period_;
  std::function<bool()> check_;
  std::atomic<bool> fired_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tf
