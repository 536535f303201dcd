#include "engine/scheduler_policies.h"

#include <algorithm>

namespace tf {

int64_t StepTokenPolicy::chunk_for(const RunningView& r, int64_t left) const {
  const int32_t cap = r.chunk_cap > 0 && (max_prefill_chunk == 0 || r.chunk_cap < max_prefill_chunk)
                          ? r.chunk_cap
                          : max_prefill_chunk;
  if (align_chunks && cap > 0) {
    const int64_t to_boundary = cap - r.prefill_done % cap;
    const int64_t chunk = std::min(r.prefill_remaining, to_boundary);
    return chunk > left ? 0 : chunk;  // waits for a step with room for the whole aligned chunk
  }
  int64_t chunk = std::min(r.prefill_remaining, left);
  if (cap > 0) chunk = std::min<int64_t>(chunk, cap);
  return chunk;
}

std::vector<int32_t> StepTokenPolicy::operator()(std::span<const RunningView> running, bool solo_turn) const {
  std::vector<int32_t> tokens(running.size(), 0);
  int64_t left = token_budget;
  for (size_t i = 0; i < running.size() && left > 0; ++i) {
    if (running[i].prefill_remaining == 0) {
      tokens[i] = 1;
      --left;
    }
  }
  if (invariant_rows <= 0) {
    for (size_t i = 0; i < running.size() && left > 0; ++i) {
      if (running[i].prefill_remaining == 0) continue;
      tokens[i] = static_cast<int32_t>(chunk_for(running[i], left));
      left -= tokens[i];
    }
    return tokens;
  }
  // Batch-invariant steps: the decodes plus the chunks that keep the step within
  // invariant_rows rows, or else (on its turn) the oldest chunk too large for that, alone.
  int64_t rows = token_budget - left;
  size_t solo = running.size();
  int64_t solo_chunk = 0;
  for (size_t i = 0; i < running.size(); ++i) {
    if (running[i].prefill_remaining == 0) continue;
    const int64_t chunk = chunk_for(running[i], token_budget);
    if (chunk == 0) continue;
    if (rows + chunk <= invariant_rows && chunk <= left) {
      tokens[i] = static_cast<int32_t>(chunk);
      rows += chunk;
      left -= chunk;
    } else if (solo == running.size()) {
      solo = i;
      solo_chunk = chunk;
    }
  }
  if (solo < running.size() && (solo_turn || rows == 0)) {
    std::fill(tokens.begin(), tokens.end(), 0);
    tokens[solo] = static_cast<int32_t>(solo_chunk);
  }
  return tokens;
}

}  // namespace tf
