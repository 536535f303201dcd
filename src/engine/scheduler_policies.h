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
// With invariant_rows (a backend whose kernels give row-independent results only up to that
// many rows per call: the GPU's EXACT_ROWS; larger calls go to tensor-core GEMMs whose
// per-row bits depend on the call's shape), a step either keeps within invariant_rows rows
// (the decodes and small chunks) or runs one prompt chunk alone, so every row is computed
// by the same kernels at the same shape as when its request runs alone: replies do not
// depend on batch-mates on the GPU either. When both kinds wait, steps alternate
// (`solo_turn`: the previous step was not a solo chunk), so decodes keep going while a
// long prompt fills.
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
  int32_t invariant_rows = 0;     // 0: steps mix rows freely

  // Tokens each running request advances this step, in the same order. `solo_turn`: with
  // invariant_rows, a chunk too large to share a step goes now if one waits.
  [[nodiscard]] std::vector<int32_t> operator()(std::span<const RunningView> running,
                                                bool solo_turn = true) const;

 private:
  // The chunk request `r` would advance by, given `left` budget (0: it waits).
  [[nodiscard]] int64_t chunk_for(const RunningView& r, int64_t left) const;
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
