// See metrics.h.
#include "server/metrics.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace tf::server {

namespace {

// The shortest text that reads back as `v` ("0.025", "1", "1e-07"), as Prometheus'
// clients print bucket bounds and values ("%.17g" printed 0.025000000000000001);
// infinities and NaN as the exposition format spells them.
std::string fmt_double(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto result = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

std::string escape_label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// A metric without labels: its header and its one sample.
void unlabelled(std::string& out, const std::string& name, const char* type, const char* help, int64_t value) {
  header(out, name, type, help);
  out += name + " " + std::to_string(value) + "\n";
}

const std::vector<double> kLatencyBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 640};
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                          0.75,  1.0,   2.5,  5.0,  7.5,  10,   20,   40,  80,   160};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& labels) const {
  std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{" + labels + sep + "le=\"" + fmt_double(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{" + labels + sep + "le=\"" + fmt_double(std::numeric_limits<double>::infinity()) + "\"} " +
         std::to_string(cum) + "\n";
  std::string l = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + l + " " + fmt_double(sum_) + "\n";
  out += name + "_count" + l + " " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      http_latency_(kLatencyBuckets),
      e2e_latency_(kLatencyBuckets),
      ttft_(kTtftBuckets) {}

std::string ServerMetrics::model_label() const { return "model_name=\"" + escape_label(model_name_) + "\""; }

void ServerMetrics::record_request(const std::string& endpoint, int status, double latency_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
  http_latency_.observe(latency_s);
}

void ServerMetrics::record_ttft(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(seconds);
}

void ServerMetrics::record_generation(int64_t prompt_tokens, int64_t completion_tokens,
                                      const std::string& finish_reason, double e2e_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += static_cast<uint64_t>(prompt_tokens > 0 ? prompt_tokens : 0);
  generation_tokens_ += static_cast<uint64_t>(completion_tokens > 0 ? completion_tokens : 0);
  ++finished_[finish_reason];
  e2e_latency_.observe(e2e_seconds);
}

std::string ServerMetrics::render(const EngineHealth& h) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  const std::string ml = model_label();
  double usage = h.pool_tokens > 0 ? 1.0 - static_cast<double>(h.pool_free_tokens) / static_cast<double>(h.pool_tokens)
                                   : 0.0;
  // Each family is written under both prefixes (tensorfold: names and vLLM names).
  for (const std::string prefix : {"tensorfold:", "vllm:"}) {
    header(out, prefix + "num_requests_running", "gauge", "Requests currently decoding or prefilling.");
    out += prefix + "num_requests_running{" + ml + "} " + std::to_string(h.requests_running) + "\n";
    header(out, prefix + "num_requests_waiting", "gauge", "Requests waiting for admission.");
    out += prefix + "num_requests_waiting{" + ml + "} " + std::to_string(h.requests_waiting) + "\n";
    std::string usage_name = prefix == "vllm:" ? "vllm:kv_cache_usage_perc" : "tensorfold:kv_cache_usage_ratio";
    header(out, usage_name, "gauge", "Fraction of the cache pool in use (0-1).");
    out += usage_name + "{" + ml + "} " + fmt_double(usage) + "\n";
    header(out, prefix + "prompt_tokens_total", "counter", "Prompt tokens processed.");
    out += prefix + "prompt_tokens_total{" + ml + "} " + std::to_string(prompt_tokens_) + "\n";
    // Prompt reuse as vLLM reports its prefix cache: prompt tokens asked for, and those resumed.
    header(out, prefix + "prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prompt cache.");
    out += prefix + "prefix_cache_queries_total{" + ml + "} " + std::to_string(h.prompt_tokens_total) + "\n";
    header(out, prefix + "prefix_cache_hits_total", "counter", "Prompt tokens resumed from kept prompt states.");
    out += prefix + "prefix_cache_hits_total{" + ml + "} " + std::to_string(h.cached_tokens_total) + "\n";
    header(out, prefix + "generation_tokens_total", "counter", "Tokens generated.");
    out += prefix + "generation_tokens_total{" + ml + "} " + std::to_string(generation_tokens_) + "\n";
    header(out, prefix + "request_success_total", "counter", "Finished generation requests by finish reason.");
    for (const auto& [reason, n] : finished_)
      out += prefix + "request_success_total{" + ml + ",finished_reason=\"" + escape_label(reason) + "\"} " +
             std::to_string(n) + "\n";
    header(out, prefix + "e2e_request_latency_seconds", "histogram", "End-to-end generation request latency.");
    e2e_latency_.write(out, prefix + "e2e_request_latency_seconds", ml);
    header(out, prefix + "time_to_first_token_seconds", "histogram", "Time from request arrival to the first token.");
    ttft_.write(out, prefix + "time_to_first_token_seconds", ml);
  }
  header(out, "tensorfold:http_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [key, n] : requests_)
    out += "tensorfold:http_requests_total{endpoint=\"" + escape_label(key.first) + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  header(out, "tensorfold:http_request_duration_seconds", "histogram", "HTTP request handling time.");
  http_latency_.write(out, "tensorfold:http_request_duration_seconds", "");
  unlabelled(out, "tensorfold:pool_tokens", "gauge", "Capacity of the shared cache pool in tokens.",
             h.pool_tokens);
  unlabelled(out, "tensorfold:pool_free_tokens", "gauge", "Free tokens in the shared cache pool.",
             h.pool_free_tokens);
  unlabelled(out, "tensorfold:kept_prompts", "gauge", "Prompt states kept for reuse.", h.kept_prompts);
  unlabelled(out, "tensorfold:kept_prompt_tokens", "gauge", "Prompt tokens the kept prompt states cover.",
             h.kept_prompt_tokens);
  header(out, "tensorfold:kept_prompts_by_reason", "gauge",
         "Kept prompt states by where they were kept (they add up to tensorfold:kept_prompts).");
  const std::pair<const char*, int64_t> mix[] = {{"prompt_end", h.kept_mix.prompt_end},
                                                 {"system_block", h.kept_mix.system_block},
                                                 {"shared_prefix", h.kept_mix.shared_prefix},
                                                 {"restored", h.kept_mix.restored}};
  for (const auto& [reason, n] : mix)
    out += std::string("tensorfold:kept_prompts_by_reason{reason=\"") + reason + "\"} " + std::to_string(n) +
           "\n";
  unlabelled(out, "tensorfold:prompts_resumed_total", "counter",
             "Choices that resumed from a kept prompt state.", h.prompts_resumed_total);
  unlabelled(out, "tensorfold:chats_continued_total", "counter",
             "Choices that resumed from the state kept at an earlier prompt's end and went past it.",
             h.chats_continued_total);
  unlabelled(out, "tensorfold:reply_warmups_total", "counter",
             "Replies' warm-ups run: a finished chat's reply prefilled while idle for its next turn.",
             h.reply_warmups_total);
  unlabelled(out, "tensorfold:reply_warmup_tokens_total", "counter", "Tokens the replies' warm-ups ran.",
             h.reply_warmup_tokens_total);
  header(out, "tensorfold:iteration_seconds", "gauge",
         "Seconds of the last engine iteration that ran the model.");
  out += "tensorfold:iteration_seconds " + fmt_double(h.iteration_s) + "\n";
  header(out, "tensorfold:iteration_seconds_mean", "gauge",
         "Mean seconds of the latest 64 engine iterations that ran the model.");
  out += "tensorfold:iteration_seconds_mean " + fmt_double(h.iteration_s_mean) + "\n";
  if (h.prompt_store) {
    unlabelled(out, "tensorfold:prompt_store_files", "gauge", "Prompt states in PROMPT_STORE's folder.",
               h.prompt_store_files);
    unlabelled(out, "tensorfold:prompt_store_blocks", "gauge",
               "Blocks of prompt states' leading tokens in PROMPT_STORE's folder (shared by the states).",
               h.prompt_store_blocks);
    unlabelled(out, "tensorfold:prompt_store_bytes", "gauge",
               "Bytes of the prompt states and their blocks in PROMPT_STORE's folder.", h.prompt_store_bytes);
    unlabelled(out, "tensorfold:prompt_store_written_total", "counter",
               "Prompt states written to PROMPT_STORE.", h.prompt_store_written_total);
    unlabelled(out, "tensorfold:prompt_store_written_bytes_total", "counter",
               "Bytes written to PROMPT_STORE (new blocks and state files).",
               h.prompt_store_written_bytes_total);
    unlabelled(out, "tensorfold:prompt_store_skipped_total", "counter",
               "Prompt states not written: the writer's queue was full, or the write failed.",
               h.prompt_store_skipped_total);
    unlabelled(out, "tensorfold:prompt_store_restored_total", "counter",
               "Prompts resumed from a state read back from PROMPT_STORE.", h.prompt_store_restored_total);
    unlabelled(out, "tensorfold:prompt_store_failed_reads_total", "counter",
               "Stored prompt states that failed their checks when read (deleted).",
               h.prompt_store_failed_reads_total);
    unlabelled(out, "tensorfold:prompt_store_read_ahead_total", "counter",
               "Stored prompt states read from disk while their request waited, before its admission.",
               h.prompt_store_read_ahead_total);
  }
  unlabelled(out, "tensorfold:vision_patches_total", "counter",
             "Image and video patches the vision tower encoded.", h.vision_patches_total);
  unlabelled(out, "tensorfold:vision_patches_skipped_total", "counter",
             "Patches not encoded: pictures before the point a prompt resumed from.",
             h.vision_patches_skipped_total);
  unlabelled(out, "tensorfold:device_memory_in_use_bytes", "gauge",
             "Device memory of the tensors alive (weights, cache pool, states; 0 on the CPU backend).",
             h.device_memory_in_use_bytes);
  unlabelled(out, "tensorfold:device_memory_held_bytes", "gauge",
             "Device memory the backend took from the driver (alive + cached for reuse).",
             h.device_memory_held_bytes);
  unlabelled(out, "tensorfold:step_memory_peak_bytes", "gauge",
             "Most working memory a step took above what was alive when it began.", h.step_memory_peak_bytes);
  unlabelled(out, "tensorfold:spec_steps_total", "counter",
             "Decode steps that verified drafts (speculative decoding).", h.spec_steps_total);
  unlabelled(out, "tensorfold:drafted_tokens_total", "counter", "Draft tokens verified.",
             h.drafted_tokens_total);
  unlabelled(out, "tensorfold:accepted_tokens_total", "counter",
             "Draft tokens kept: tokens that cost no decode step of their own.", h.accepted_tokens_total);
  unlabelled(out, "tensorfold:mtp_drafted_tokens_total", "counter", "Draft tokens the MTP layer made.",
             h.mtp_drafted_tokens_total);
  unlabelled(out, "tensorfold:mtp_accepted_tokens_total", "counter", "MTP layer draft tokens kept.",
             h.mtp_accepted_tokens_total);
  unlabelled(out, "tensorfold:loop_guard_closed_total", "counter",
             "Replies whose reasoning fell into a loop and was closed by the server (LOOP_GUARD).",
             h.loop_guard_closed_total);
  unlabelled(out, "tensorfold:repetition_stops_total", "counter",
             "Replies ended by their request's repetition_detection (finish_reason repetition).",
             h.repetition_stops_total);
  unlabelled(out, "tensorfold:streams_decoding", "gauge", "Streams decoding now.", h.streams_decoding);
  unlabelled(out, "tensorfold:streams_prefilling", "gauge", "Streams prefilling now.", h.streams_prefilling);
  unlabelled(out, "tensorfold:streams_max", "gauge", "Maximum concurrent decoding streams (PARALLEL).",
             h.streams_max);
  header(out, "tensorfold:engine_up", "gauge", "1 when the engine is healthy.");
  out += std::string("tensorfold:engine_up ") + (h.ok ? "1" : "0") + "\n";
  return out;
}

}  // namespace tf::server
