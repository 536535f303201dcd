// See memory_guard.h.
#include "engine/memory_guard.h"

#include "engine/memory_plan.h"

namespace tf {

std::unique_ptr<MemoryGuard> MemoryGuard::start(Options options, Trip trip) {
  if (options.floor_bytes <= 0) return nullptr;
  if (!options.available) options.available = host_available_bytes;
  std::unique_ptr<MemoryGuard> g(new MemoryGuard(std::move(options), std::move(trip)));
  g->thread_ = std::thread([raw = g.get()] { raw->run(); });
  return g;
}

MemoryGuard::MemoryGuard(Options options, Trip trip) : options_(std::move(options)), trip_(std::move(trip)) {}

MemoryGuard::~MemoryGuard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MemoryGuard::run() {
  int low = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, options_.period, [this] { return stopping_; })) return;
    }
    const int64_t available = options_.available();
    // 0: /proc/meminfo could not be read; never a reason to stop.
    low = available > 0 && available < options_.floor_bytes ? low + 1 : 0;
    if (low >= options_.checks) {
      tripped_ = true;
      trip_(available, options_.floor_bytes);
      return;
    }
  }
}

std::string memory_guard_message(int64_t available_bytes, int64_t floor_bytes) {
  return "the host has " + std::to_string(available_bytes >> 20) +
         " MiB of memory available, under MEMORY_GUARD_MIB (" + std::to_string(floor_bytes >> 20) +
         " MiB): stopping the server before the machine runs out (something else on it is taking memory; "
         "MEMORY_GUARD_MIB=0 turns the guard off)";
}

}  // namespace tf
