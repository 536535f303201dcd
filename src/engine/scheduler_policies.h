// Scheduling policies as small values: explicit inputs, [[nodiscard]]
// results, no hidden state. The Scheduler (scheduler.h) owns the request
// bookkeeping and asks these what to do.
//
// StepTokenPolicy: decode first, then prefill. Every decoding stream gets one
// token (so a long prompt never starves decodes); the remaining budget goes to
// prefilling streams in admission order, oldest first, each chunk capped by
// max_prefill_chunk. A prompt thus finishes as early as possible instead of
// all prompts crawling together.
// With align_chunks, a chunk always ends at a multiple of max_prefill_chunk
// (or at the prompt's end) and is never cut short by the shared budget: a
// request whose aligned chunk does not fit waits for the next step. Chunk
// boundaries then depend only on the request itself, so a reply is bit for bit
// the same whether its request ran alone or beside others.
//
// A request may bring a smaller cap of its own (RunningView::chunk_cap): its chunks then
// end at multiples of that cap instead.
//
// AdmissionPolicy: FIFO with head-of-line blocking. The oldest waiting
// request is admitted when a stream slot is free, the step has tokens left to
// start its prefill, and its whole cache need fits; otherwise it and everyone
// behind it wait (no overtaking: a big request is never starved by small ones).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tf {

// A running request, as the step policy sees it.
struct RunningView {
  int64_t prefill_remaining = 0;  // prompt tokens not yet processed; 0 = decoding
  int64_t prefill_done = 0;       // prompt tokens already processed (cached ones included)
  int32_t chunk_cap = 0;          // its own cap on a chunk, when below max_prefill_chunk; 0: none
};

struct StepTokenPolicy {
  int32_t token_budget = 0;
  int32_t max_prefill_chunk = 0;  // 0: no cap
  bool align_chunks = false;      // needs max_prefill_chunk > 0

  // Tokens each running request advances this step, in the same order.
  [[nodiscard]] std::vector<int32_t> operator()(std::span<const RunningView> running) const;
};

struct AdmissionInput {
  int32_t running = 0;          // streams already holding a slot
  int64_t step_tokens_left = 0; // budget not yet given out this step
  bool cache_fits = false;      // CacheBudget::can_admit(need)
};

struct AdmissionPolicy {
  int32_t max_running = 0;

  [[nodiscard]] bool operator()(const AdmissionInput& in) const {
    return in.running < max_running && in.step_tokens_left > 0 && in.cache_fits;
  }
};

}  // namespace tf
