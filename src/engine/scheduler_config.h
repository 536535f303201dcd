// Scheduler limits, passed down explicitly (no globals).
//
// max_running       PARALLEL: streams that hold cache and advance each step.
// step_token_budget tokens one forward pass may process (decodes + prefill
//                   chunks); at least max_running so every decode fits.
// max_waiting       bound of the FIFO queue (>= 1: every request passes
//                   through it); beyond it submit() rejects
//                   (the server answers 429).
// max_prefill_chunk cap on one request's prefill chunk per step (0: none
//                   besides the budget), to bound a step's latency.
// align_prefill_chunks  chunks end at multiples of max_prefill_chunk and are
//                   never cut by the budget (scheduler_policies.h): replies do
//                   not depend on batch-mates. Needs step_token_budget >=
//                   max_prefill_chunk + max_running.
// batch_invariant_rows  0, or the most rows per call the backend computes row-
//                   independently (the GPU's EXACT_ROWS): a step then keeps within
//                   that many rows or runs one prompt chunk alone
//                   (scheduler_policies.h), so replies do not depend on batch-mates.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace tf {

struct SchedulerConfig {
  int32_t max_running = 4;
  int32_t step_token_budget = 2048;
  int32_t max_waiting = 64;
  int32_t max_prefill_chunk = 0;
  bool align_prefill_chunks = false;
  int32_t batch_invariant_rows = 0;

  [[nodiscard]] Status validate() const;
};

}  // namespace tf
