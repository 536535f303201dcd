// See heap_trimmer.h.
#include "engine/heap_trimmer.h"

#include "core/heap_trim.h"

namespace tf {

std::unique_ptr<HeapTrimmer> HeapTrimmer::start(Options options) {
  if (options.threshold_bytes <= 0) return nullptr;
  if (!options.free_bytes) options.free_bytes = heap_free_bytes;
  if (!options.trim) options.trim = trim_heap;
  std::unique_ptr<HeapTrimmer> t(new HeapTrimmer());
  const auto period = options.period;
  auto check = [o = std::move(options), trims = t->trims_]() {
    if (o.free_bytes() > o.threshold_bytes) {
      o.trim();
      ++*trims;
    }
    return false;  // runs until the trimmer is destroyed
  };
  t->watch_ = std::make_unique<PeriodicWatch>(period, std::move(check));
  return t;
}

}  // namespace tf
