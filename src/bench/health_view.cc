// See health_view.h.
#include "bench/health_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace tf::bench {
namespace {

using Json = nlohmann::json;

// A number field, 0 when absent or not a number (an older server, a field it lacks).
double num(const Json& j, const char* key) {
  if (!j.is_object()) return 0.0;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}
const Json& obj(const Json& j, const char* key) {
  static const Json kEmpty = Json::object();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : kEmpty;
}
std::string str(const Json& j, const char* key) {
  auto it = j.is_object() ? j.find(key) : j.end();
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
int64_t whole(double x) { return static_cast<int64_t>(x); }

std::string bar(double fraction, int width) {
  const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width + 0.5);
  return "[" + std::string(static_cast<size_t>(filled), '#') +
         std::string(static_cast<size_t>(width - filled), '.') + "]";
}

std::string rate(const std::optional<double>& r) { return r ? fmt::format("{:.1f}", *r) : std::string("-"); }

}  // namespace

HealthView summarize_health(const Json* before, const Json& after, double seconds) {
  HealthView v;
  v.status = str(after, "status");
  if (v.status.empty()) v.status = after.is_object() && after.value("ok", false) ? "ok" : "?";
  v.model = str(after, "model");
  if (before && seconds > 0) {
    v.decode_tps =
        (num(after, "completion_tokens_total") - num(*before, "completion_tokens_total")) / seconds;
    const double computed_after = num(after, "prompt_tokens_total") - num(after, "cached_tokens_total");
    const double computed_before = num(*before, "prompt_tokens_total") - num(*before, "cached_tokens_total");
    v.prefill_tps = std::max(0.0, computed_after - computed_before) / seconds;
  }
  v.running = whole(num(after, "requests_running"));
  v.waiting = whole(num(after, "requests_waiting"));
  const Json& streams = obj(after, "streams");
  v.decoding = whole(num(streams, "decoding"));
  v.prefilling = whole(num(streams, "prefilling"));
  v.streams_max = whole(num(streams, "max"));
  v.pool_tokens = whole(num(after, "pool_tokens"));
  v.pool_free_tokens = whole(num(after, "pool_free_tokens"));
  v.context_length = whole(num(after, "context_length"));
  v.pool_used = v.pool_tokens > 0
                    ? 1.0 - static_cast<double>(v.pool_free_tokens) / static_cast<double>(v.pool_tokens)
                    : 0.0;
  const double prompts = num(after, "prompt_tokens_total");
  v.cached_share = prompts > 0 ? num(after, "cached_tokens_total") / prompts : 0.0;
  v.kept_prompts = whole(num(after, "kept_prompts"));
  const Json& mix = obj(after, "kept_mix");
  v.kept_prompt_end = whole(num(mix, "prompt_end"));
  v.kept_system_block = whole(num(mix, "system_block"));
  v.kept_shared_prefix = whole(num(mix, "shared_prefix"));
  v.kept_restored = whole(num(mix, "restored"));
  v.chats_continued = whole(num(after, "chats_continued"));
  const Json& spec = obj(after, "speculation");
  const double drafted = num(spec, "drafted_tokens_total");
  if (drafted > 0) v.draft_acceptance = num(spec, "accepted_tokens_total") / drafted;
  v.iteration_ms = 1000.0 * num(after, "iteration_s");
  v.iteration_mean_ms = 1000.0 * num(after, "iteration_s_mean");
  v.device_gib = num(obj(after, "device_memory"), "in_use_bytes") / 1073741824.0;
  v.loops_closed = whole(num(obj(after, "loops"), "reasoning_closed_total"));
  return v;
}

std::string render_health_view(const HealthView& v, int width) {
  const int bar_width = std::clamp(width - 50, 10, 40);
  std::vector<std::string> lines = {
      fmt::format("tensorfold  {}  [{}]", v.model, v.status),
      fmt::format("decode   {:>9} tok/s    prefill {:>9} tok/s", rate(v.decode_tps), rate(v.prefill_tps)),
      fmt::format("requests {:>4} running  {:>4} waiting", v.running, v.waiting),
      fmt::format("streams  {:>4} / {:<4}   {} decoding, {} prefilling", v.decoding + v.prefilling,
                  v.streams_max, v.decoding, v.prefilling),
      fmt::format("pool     {} {:5.1f} %  of {} tokens, window {}", bar(v.pool_used, bar_width),
                  100.0 * v.pool_used, v.pool_tokens, v.context_length),
      fmt::format("reuse    {} {:5.1f} %  of prompt tokens resumed", bar(v.cached_share, bar_width),
                  100.0 * v.cached_share),
      fmt::format("kept     {} prompts: {} prompt ends, {} system blocks, {} shared prefixes, {} restored",
                  v.kept_prompts, v.kept_prompt_end, v.kept_system_block, v.kept_shared_prefix,
                  v.kept_restored),
      fmt::format("chats    {} continued from their previous turn", v.chats_continued),
      fmt::format("drafts   {} kept", v.draft_acceptance
                                          ? fmt::format("{:.1f} %", 100.0 * *v.draft_acceptance)
                                          : std::string("-")),
      fmt::format("step     {:.1f} ms last, {:.1f} ms mean of the latest 64", v.iteration_ms,
                  v.iteration_mean_ms),
      fmt::format("device   {:.2f} GiB in use; {} looping reasonings closed", v.device_gib, v.loops_closed),
  };
  std::string out;
  for (std::string& l : lines) {
    if (width > 0 && static_cast<int>(l.size()) > width) l.resize(static_cast<size_t>(width));
    out += l + "\n";
  }
  return out;
}

}  // namespace tf::bench
