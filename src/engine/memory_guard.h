// MEMORY_GUARD_MIB: stops the server before the machine runs out of memory.
//
// The memory plan is made once, at start, from what is free then; the weights, the cache pool
// and the streams' states never grow after it. What can still take the machine's memory is
// everything else on it (another process, a build, a browser on a workstation). On a GPU
// that shares the host's memory (a DGX Spark) the machine does not fail cleanly when it runs
// out: it pages, stalls and may need a power cycle. A guard thread reads the host's available
// memory (MemAvailable) a few times a second; when it stays under the floor for `checks`
// readings in a row, the guard trips once: the server stops and frees everything it holds,
// with a message saying why, so the machine stays usable (and a supervisor may restart it
// once the memory is back).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/periodic_watch.h"

namespace tf {

class MemoryGuard {
 public:
  struct Options {
    int64_t floor_bytes = 0;  // 0: no guard
    std::chrono::milliseconds period{250};
    int checks = 4;  // readings in a row under the floor before it trips (~1 s)
    // The host's available memory in bytes (0: unknown, never trips); default: MemAvailable.
    std::function<int64_t()> available;
  };
  // Called once, on the guard's thread, with the last reading and the floor.
  using Trip = std::function<void(int64_t available_bytes, int64_t floor_bytes)>;

  // Null when floor_bytes is 0.
  static std::unique_ptr<MemoryGuard> start(Options options, Trip trip);

  // Set before the trip callback runs (a server stopped by it can tell why).
  bool tripped() const { return tripped_->load(); }

 private:
  MemoryGuard() = default;
  std::shared_ptr<std::atomic<bool>> tripped_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<PeriodicWatch> watch_;  // last: stopped first
};

// The message a tripped guard logs: the reading, the floor, what happens now.
std::string memory_guard_message(int64_t available_bytes, int64_t floor_bytes);

}  // namespace tf
