// Polling for a condition that other threads bring about: the tests' one wait.
#pragma once

#include <chrono>
#include <thread>

namespace tf::test {

// Whether `ready()` holds within `limit`, asked every `period`; returns as soon as it does.
// The default limit is far above what an idle machine needs: a loaded 2-core CI machine can
// stall a thread for seconds.
template <typename Ready>
bool eventually(Ready&& ready, std::chrono::milliseconds limit = std::chrono::seconds(30),
                std::chrono::milliseconds period = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ready() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(period);
  return ready();
}

}  // namespace tf::test
