// See scheduler.h for the contract and the order of work inside a step.
#include "engine/scheduler.h"

#include <algorithm>
#include <numeric>

namespace tf {

const char* submit_result_name(SubmitResult r) {
  switch (r) {
    case SubmitResult::kQueued: return "queued";
    case SubmitResult::kQueueFull: return "queue_full";
    case SubmitResult::kTooLarge: return "too_large";
    case SubmitResult::kInvalid: return "invalid";
  }
  return "unknown";
}

int64_t StepPlan::total_tokens() const {
  return std::accumulate(advances.begin(), advances.end(), int64_t{0},
                         [](int64_t s, const Advance& a) { return s + a.tokens; });
}

Scheduler::Scheduler(const SchedulerConfig& config, CacheBudget& cache)
    : config_(config),
      cache_(cache),
      step_policy_{config.step_token_budget, config.max_prefill_chunk, config.align_prefill_chunks,
                   config.batch_invariant_rows},
      admission_{config.max_running} {}

Scheduler::~Scheduler() {
  for (const Entry& e : running_) cache_.release(e.cache);
}

bool Scheduler::known(RequestId id) const {
  return std::any_of(running_.begin(), running_.end(), [&](const Entry& e) { return e.spec.id == id; }) ||
         std::any_of(waiting_.begin(), waiting_.end(), [&](const RequestSpec& s) { return s.id == id; });
}

SubmitResult Scheduler::submit(const RequestSpec& spec) {
  if (spec.prompt_tokens < 1 || spec.max_new_tokens < 1 || spec.cached_prompt_tokens < 0 || spec.max_prefill_chunk < 0 ||
      spec.cached_prompt_tokens >= spec.prompt_tokens || known(spec.id)) {
    return SubmitResult::kInvalid;
  }
  if (spec.cache_tokens() > cache_.capacity_tokens()) return SubmitResult::kTooLarge;
  if (waiting_.size() >= static_cast<size_t>(config_.max_waiting)) return SubmitResult::kQueueFull;
  // After every waiting request of the same or a lower value: arrival order within a priority.
  const auto at = std::upper_bound(waiting_.begin(), waiting_.end(), spec.priority,
                                   [](int32_t p, const RequestSpec& s) { return p < s.priority; });
  waiting_.insert(at, spec);
  return SubmitResult::kQueued;
}

void Scheduler::cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(cancel_mu_);
  pending_cancels_.push_back(id);
}

void Scheduler::apply_pending_cancels(StepPlan& plan) {
  std::vector<RequestId> ids;
  {
    std::lock_guard<std::mutex> lock(cancel_mu_);
    ids.swap(pending_cancels_);
  }
  for (RequestId id : ids) {
    auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](const RequestSpec& s) { return s.id == id; });
    if (w != waiting_.end()) {
      waiting_.erase(w);
      plan.cancelled.push_back(id);
      continue;
    }
    auto r = std::find_if(running_.begin(), running_.end(), [&](const Entry& e) { return e.spec.id == id; });
    if (r != running_.end()) {
      cache_.release(r->cache);
      running_.erase(r);
      plan.cancelled.push_back(id);
    }
    // Unknown ids (already finished, or cancelled twice) are ignored.
  }
}

void Scheduler::release_exhausted(StepPlan& plan) {
  auto done = [](const Entry& e) { return e.sampled >= e.spec.max_new_tokens; };
  for (const Entry& e : running_) {
    if (!done(e)) continue;
    cache_.release(e.cache);
    plan.finished_by_length.push_back(e.spec.id);
  }
  std::erase_if(running_, done);
}

bool Scheduler::finish(RequestId id) {
  auto r = std::find_if(running_.begin(), running_.end(), [&](const Entry& e) { return e.spec.id == id; });
  if (r == running_.end()) return false;
  cache_.release(r->cache);
  running_.erase(r);
  return true;
}

bool Scheduler::add_samples(RequestId id, int64_t extra) {
  auto r = std::find_if(running_.begin(), running_.end(), [&](const Entry& e) { return e.spec.id == id; });
  if (r == running_.end()) return false;
  r->sampled += extra;
  return true;
}

std::vector<RunningView> Scheduler::running_views() const {
  std::vector<RunningView> views;
  views.reserve(running_.size());
  for (const Entry& e : running_)
    views.push_back({e.spec.prompt_tokens - e.prefilled, e.prefilled, e.spec.max_prefill_chunk});
  return views;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  apply_pending_cancels(plan);
  release_exhausted(plan);

  // Admit from the head of the queue while the policy agrees; each admission
  // re-runs the step policy so the newcomer's chunk comes out of what is left.
  std::vector<int32_t> tokens = step_policy_(running_views(), !last_step_solo_);
  while (!waiting_.empty()) {
    const int64_t used = std::accumulate(tokens.begin(), tokens.end(), int64_t{0});
    const RequestSpec& head = waiting_.front();
    const AdmissionInput in{static_cast<int32_t>(running_.size()), config_.step_token_budget - used,
                            cache_.can_admit(head.cache_tokens())};
    if (!admission_(in)) break;
    Expected<CacheHandle> handle = cache_.reserve(head.cache_tokens());
    if (!handle) break;  // the budget changed its mind: try again next step
    int64_t cached = head.cached_prompt_tokens;
    if (prefix_hit_) cached = std::clamp<int64_t>(prefix_hit_(head), 0, head.prompt_tokens - 1);
    running_.push_back(Entry{head, cached, 0, *handle});
    plan.admitted.push_back(head.id);
    waiting_.pop_front();
    tokens = step_policy_(running_views(), !last_step_solo_);
  }

  // Batch-invariant steps alternate: decodes held back by a prompt chunk run alone go first next step.
  last_step_solo_ = false;
  for (size_t i = 0; i < running_.size(); ++i)
    if (tokens[i] == 0 && running_[i].prefilled == running_[i].spec.prompt_tokens) last_step_solo_ = true;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (tokens[i] == 0) continue;
    Entry& e = running_[i];
    Advance a{e.spec.id, tokens[i], AdvanceKind::kDecode, true};
    if (e.prefilled < e.spec.prompt_tokens) {
      a.kind = AdvanceKind::kPrefill;
      e.prefilled += tokens[i];
      a.samples = e.prefilled == e.spec.prompt_tokens;  // the last chunk yields the first token
    }
    if (a.samples) ++e.sampled;
    plan.advances.push_back(a);
  }
  return plan;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.running = static_cast<int32_t>(running_.size());
  for (const Entry& e : running_) {
    if (e.prefilled < e.spec.prompt_tokens) {
      ++s.prefilling;
    } else {
      ++s.decoding;
    }
  }
  s.waiting = static_cast<int32_t>(waiting_.size());
  return s;
}

}  // namespace tf
