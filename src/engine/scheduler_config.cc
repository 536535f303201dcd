#include "engine/scheduler_config.h"

#include <string>

namespace tf {

Status SchedulerConfig::validate() const {
  if (max_running < 1) {
    return invalid_argument("scheduler: max_running (PARALLEL) must be >= 1, got " + std::to_string(max_running));
  }
  if (step_token_budget < max_running) {
    return invalid_argument("scheduler: step_token_budget (" + std::to_string(step_token_budget) +
                            ") must be >= max_running (" + std::to_string(max_running) +
                            ") so that every decoding stream advances each step");
  }
  if (max_waiting < 1) {
    // Every request passes through the queue (admission happens in schedule()).
    return invalid_argument("scheduler: max_waiting must be >= 1, got " + std::to_string(max_waiting));
  }
  if (max_prefill_chunk < 0) {
    return invalid_argument("scheduler: max_prefill_chunk must be >= 0, got " + std::to_string(max_prefill_chunk));
  }
  if (align_prefill_chunks && (max_prefill_chunk < 1 || step_token_budget < max_prefill_chunk + max_running)) {
    return invalid_argument("scheduler: align_prefill_chunks needs max_prefill_chunk >= 1 and step_token_budget (" +
                            std::to_string(step_token_budget) + ") >= max_prefill_chunk (" +
                            std::to_string(max_prefill_chunk) + ") + max_running (" + std::to_string(max_running) +
                            "), so that the oldest prefill always gets its whole chunk");
  }
  return Status::ok();
}

}  // namespace tf
