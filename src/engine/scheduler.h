// Continuous-batching scheduler with a narrow contract: each step it says, per
// running request, how many tokens that request advances (a prefill chunk or
// one decode token). Prefix hits and drafts will be token counts too.
//
// Data flow (one engine thread owns the Scheduler; only cancel() may be
// called from other threads):
//   submit(spec)  -> queued in a bounded FIFO, or rejected (queue full: the
//                    server's 429; too large for the pool; invalid)
//   schedule()    -> 1. frees requests cancelled or finished by length since
//                       the last step (their cache goes back at once),
//                    2. gives each running request its tokens (StepTokenPolicy),
//                    3. admits waiting requests while AdmissionPolicy agrees,
//                       reserving prompt + max_new_tokens of cache each,
//                    and records the progress as if the step ran (the engine
//                    must run the whole plan).
//   finish(id)    -> the engine saw EOS / a stop string: release now.
// A request whose samples reach max_new_tokens is released by the next
// schedule() if the engine has not finished it already (reported in
// StepPlan::finished_by_length), so a slot is never leaked.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "engine/cache_budget.h"
#include "engine/scheduler_config.h"
#include "engine/scheduler_policies.h"

namespace tf {

using RequestId = uint64_t;

struct RequestSpec {
  RequestId id = 0;            // unique among live requests (the engine counts up)
  int64_t prompt_tokens = 0;   // >= 1
  int64_t max_new_tokens = 0;  // >= 1; prompt + this is reserved in the cache
  // Prompt tokens whose cache a prefix hit already holds: prefill starts
  // after them. At most prompt_tokens - 1, since the last prompt token must
  // run to produce the first logits.
  int64_t cached_prompt_tokens = 0;
  // This request's own cap on its prefill chunks when below the configured one (a request
  // that downloads every prompt row's logits bounds them); 0: the configured cap.
  int32_t max_prefill_chunk = 0;
  // Waiting order: lower first, equal ones in arrival order (vLLM's priority). Requests
  // already running are never stopped for a waiting one.
  int32_t priority = 0;
  int64_t cache_tokens() const { return prompt_tokens + max_new_tokens; }
};

enum class SubmitResult : uint8_t {
  kQueued,
  kQueueFull,    // HTTP 429
  kTooLarge,     // needs more cache than the whole pool: can never run
  kInvalid,      // duplicate id, or a non-positive size
};
const char* submit_result_name(SubmitResult r);

enum class AdvanceKind : uint8_t { kPrefill, kDecode };

struct Advance {
  RequestId id = 0;
  int32_t tokens = 0;
  AdvanceKind kind = AdvanceKind::kPrefill;
  bool samples = false;  // this step yields the request's next token
  bool operator==(const Advance&) const = default;
};

struct StepPlan {
  std::vector<Advance> advances;              // running requests, admission order
  std::vector<RequestId> admitted;            // newly admitted this step
  std::vector<RequestId> cancelled;           // freed this step after cancel()
  std::vector<RequestId> finished_by_length;  // freed this step: max_new_tokens reached
  int64_t total_tokens() const;
  bool idle() const { return advances.empty(); }
};

struct SchedulerStats {
  int32_t running = 0;
  int32_t prefilling = 0;
  int32_t decoding = 0;
  int32_t waiting = 0;
};

class Scheduler {
 public:
  // `cache` must outlive the scheduler. config must be valid (validate()).
  Scheduler(const SchedulerConfig& config, CacheBudget& cache);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  [[nodiscard]] SubmitResult submit(const RequestSpec& spec);
  [[nodiscard]] StepPlan schedule();
  // The engine ends a request (EOS, stop string, error). Returns false if unknown.
  bool finish(RequestId id);
  // Speculative decoding: a decode step of `id` yielded `extra` tokens beyond the one
  // its plan counted (kept drafts). Returns false if unknown.
  bool add_samples(RequestId id, int64_t extra);
  // Thread-safe. Takes effect at the next schedule(): a waiting request leaves
  // the queue, a running one gives back its slot and cache.
  void cancel(RequestId id);

  // Prompt reuse: called when a request is admitted (its cache reserved), before it is
  // planned; returns the prompt tokens it resumes after (its spec's cached_prompt_tokens
  // when no hook is set), clamped to [0, prompt_tokens - 1].
  using PrefixHit = std::function<int64_t(const RequestSpec&)>;
  void set_prefix_hit(PrefixHit hook) { prefix_hit_ = std::move(hook); }

  [[nodiscard]] SchedulerStats stats() const;
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }

 private:
  struct Entry {
    RequestSpec spec;
    int64_t prefilled = 0;
    int64_t sampled = 0;
    CacheHandle cache;
  };

  void apply_pending_cancels(StepPlan& plan);
  void release_exhausted(StepPlan& plan);
  bool known(RequestId id) const;
  std::vector<RunningView> running_views() const;

  SchedulerConfig config_;
  CacheBudget& cache_;
  StepTokenPolicy step_policy_;
  AdmissionPolicy admission_;
  std::vector<Entry> running_;  // admission order
  std::deque<RequestSpec> waiting_;
  PrefixHit prefix_hit_;
  bool last_step_solo_ = false;  // the last step held decodes back for a prompt chunk run alone

  std::mutex cancel_mu_;
  std::vector<RequestId> pending_cancels_;
};

}  // namespace tf
