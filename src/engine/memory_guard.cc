// See memory_guard.h.
#include "engine/memory_guard.h"

#include "engine/memory_plan.h"

namespace tf {

std::unique_ptr<MemoryGuard> MemoryGuard::start(Options options, Trip trip) {
  if (options.floor_bytes <= 0) return nullptr;
  if (!options.available) options.available = host_available_bytes;
  std::unique_ptr<MemoryGuard> g(new MemoryGuard());
  const auto period = options.period;
  auto check = [o = std::move(options), trip = std::move(trip), tripped = g->tripped_, low = 0]() mutable {
    const int64_t available = o.available();
    // 0: /proc/meminfo could not be read; never a reason to stop.
    low = available > 0 && available < o.floor_bytes ? low + 1 : 0;
    if (low < o.checks) return false;
    *tripped = true;
    trip(available, o.floor_bytes);
    return true;
  };
  g->watch_ = std::make_unique<PeriodicWatch>(period, std::move(check));
  return g;
}

std::string memory_guard_message(int64_t available_bytes, int64_t floor_bytes) {
  return "the host has " + std::to_string(available_bytes >> 20) +
         " MiB of memory available, under MEMORY_GUARD_MIB (" + std::to_string(floor_bytes >> 20) +
         " MiB): stopping the server before the machine runs out (something else on it is taking memory; "
         "MEMORY_GUARD_MIB=0 turns the guard off)";
}

}  // namespace tf
