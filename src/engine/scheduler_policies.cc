#include "engine/scheduler_policies.h"

#include <algorithm>

namespace tf {

std::vector<int32_t> StepTokenPolicy::operator()(std::span<const RunningView> running) const {
  std::vector<int32_t> tokens(running.size(), 0);
  int64_t left = token_budget;
  for (size_t i = 0; i < running.size() && left > 0; ++i) {
    if (running[i].prefill_remaining == 0) {
      tokens[i] = 1;
      --left;
    }
  }
  for (size_t i = 0; i < running.size() && left > 0; ++i) {
    if (running[i].prefill_remaining == 0) continue;
    const int32_t cap = running[i].chunk_cap > 0 && (max_prefill_chunk == 0 || running[i].chunk_cap < max_prefill_chunk)
                            ? running[i].chunk_cap
                            : max_prefill_chunk;
    if (align_chunks && cap > 0) {
      const int64_t to_boundary = cap - running[i].prefill_done % cap;
      const int64_t chunk = std::min(running[i].prefill_remaining, to_boundary);
      if (chunk > left) continue;  // waits for a step with room for the whole aligned chunk
      tokens[i] = static_cast<int32_t>(chunk);
      left -= chunk;
      continue;
    }
    int64_t chunk = std::min(running[i].prefill_remaining, left);
    if (cap > 0) chunk = std::min<int64_t>(chunk, cap);
    tokens[i] = static_cast<int32_t>(chunk);
    left -= chunk;
  }
  return tokens;
}

}  // namespace tf
