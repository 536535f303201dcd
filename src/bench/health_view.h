// `tensorfold tui`: a terminal view of a running server, from two /health snapshots.
//
// What the /dashboard page shows, for a terminal over SSH (a Spark without a browser):
// decode and prefill rates (counters' differences over the time between the snapshots),
// streams, requests, the cache pool, prompt reuse (kept states by why they were kept, chats
// continued), drafts kept, the model step's time, device memory. Pure functions over the
// JSON, so the numbers are tested without a terminal.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tf::bench {

struct HealthView {
  std::string status, model;
  std::optional<double> decode_tps, prefill_tps;  // none from a single snapshot
  int64_t running = 0, waiting = 0;
  int64_t decoding = 0, prefilling = 0, streams_max = 0;
  int64_t pool_tokens = 0, pool_free_tokens = 0, context_length = 0;
  double pool_used = 0.0;     // share of the pool held by requests
  double cached_share = 0.0;  // of all prompt tokens, those resumed from kept states
  int64_t kept_prompts = 0, kept_prompt_end = 0, kept_system_block = 0, kept_shared_prefix = 0,
          kept_restored = 0;
  int64_t chats_continued = 0;
  std::optional<double> draft_acceptance;  // kept / drafted, none before any draft
  double iteration_ms = 0.0, iteration_mean_ms = 0.0;
  double device_gib = 0.0;
  int64_t loops_closed = 0;
};

// `before` (may be null: no rates) and `after` taken `seconds` apart.
HealthView summarize_health(const nlohmann::json* before, const nlohmann::json& after, double seconds);
// The view as lines of plain text, at most `width` columns each.
std::string render_health_view(const HealthView& v, int width = 80);

}  // namespace tf::bench
