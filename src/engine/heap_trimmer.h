// HEAP_TRIM: a thread that hands the allocator's free memory back to the system (core/heap_trim.h)
// whenever it holds more than a threshold free, checked about once a second. The server's own
// memory then stays near what it uses: an oversized request's peak (tokenizing, parsing, rendering)
// is returned when the request is gone, on whichever thread's arena it landed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/periodic_watch.h"

namespace tf {

class HeapTrimmer {
 public:
  struct Options {
    int64_t threshold_bytes = int64_t{64} << 20;  // 0: no trimmer
    std::chrono::milliseconds period{1000};
    std::function<int64_t()> free_bytes;  // default: heap_free_bytes
    std::function<void()> trim;           // default: trim_heap
  };

  // Null when threshold_bytes is 0.
  static std::unique_ptr<HeapTrimmer> start(Options options);

  int64_t trims() const { return trims_->load(); }

 private:
  HeapTrimmer() = default;
  std::shared_ptr<std::atomic<int64_t>> trims_ = std::make_shared<std::atomic<int64_t>>(0);
  std::unique_ptr<PeriodicWatch> watch_;  // last: stopped first
};

}  // namespace tf
