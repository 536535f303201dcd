// pool_pressure: more requests at once than the server has streams, with prompts that
// together ask for more cache than its pool holds (as far as --pressure-prompt-tokens allows).
// A server that budgets memory up front makes the excess wait (or refuses it with 429 and a
// Retry-After) and answers everything else exactly as it would alone; one that does not
// crashes, drops requests or answers differently under load. /health is read throughout.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "check/chat_reply.h"
#include "check/check_text.h"
#include "check/haystack.h"
#include "check/live_checks.h"

namespace tf::check {
namespace {

constexpr int64_t kMaxTokens = 16;

struct Sent {
  int status = 0;
  bool retry_after = false;
  std::string text;
  std::string finish_reason;
  int64_t completion_tokens = -1;
  std::string error;
};

Json completion_body(const std::string& model, const std::vector<int32_t>& ids) {
  return {{"model", model},
          {"prompt", ids},
          {"max_tokens", kMaxTokens},
          {"temperature", 0},
          {"ignore_eos", true}};
}

Sent send_completion(CheckClient& client, const Json& body) {
  Sent s;
  auto r = client.post("/v1/completions", body);
  if (!r) {
    s.error = r.status().message();
    return s;
  }
  s.status = r->status;
  s.retry_after = r->headers.count("Retry-After") > 0;
  if (r->status != 200) {
    s.error = r->describe();
    return s;
  }
  auto text = completion_text(r->json);
  if (!text) {
    s.error = text.status().message();
    return s;
  }
  s.text = *text;
  const Json& c = r->json["choices"][0];
  if (c.contains("finish_reason") && c["finish_reason"].is_string()) s.finish_reason = c["finish_reason"];
  if (r->json.contains("usage") && r->json["usage"].is_object())
    s.completion_tokens = r->json["usage"].value("completion_tokens", int64_t{-1});
  return s;
}

int64_t int_field(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : -1;
}

}  // namespace

Status run_pool_pressure_check(const CheckContext& ctx, CheckResult& result) {
  CheckClient client = ctx.client();
  const ServerFacts& f = ctx.facts();
  const CheckOptions& o = ctx.options();
  const int n = o.pressure_requests > 0 ? o.pressure_requests : 2 * f.streams_max + 2;
  int64_t prompt_tokens = o.pressure_prompt_tokens;
  if (prompt_tokens <= 0)  // together half again the pool, within reason
    prompt_tokens = std::clamp<int64_t>(f.pool_tokens * 3 / (2 * n), 256, 16384);
  prompt_tokens = std::min(prompt_tokens, f.context_length - kMaxTokens - 16);
  if (prompt_tokens < 16) return invalid_argument("the window is too small for this check");

  // Prompts of exact length as token ids: windows of one long text, each starting elsewhere.
  constexpr int64_t kStride = 37;
  const int64_t need = prompt_tokens + kStride * n;
  const uint64_t seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  std::vector<int32_t> ids;
  for (int sentences = 64; static_cast<int64_t>(ids.size()) < need; sentences *= 2) {
    TF_ASSIGN_OR_RETURN(ids, ctx.tokenize(client, filler_sentences(seed, sentences)));
    if (sentences > (1 << 22)) return unavailable("POST /tokenize returns too few tokens");
  }
  std::vector<std::vector<int32_t>> prompts;
  for (int k = 0; k < n; ++k)
    prompts.emplace_back(ids.begin() + k * kStride, ids.begin() + k * kStride + prompt_tokens);
  result.note("load", std::to_string(n) + " requests of " + thousands(prompt_tokens) + " prompt tokens + " +
                          std::to_string(kMaxTokens) + " (" + thousands(n * (prompt_tokens + kMaxTokens)) +
                          " tokens; pool " + thousands(f.pool_tokens) + ", " + std::to_string(f.streams_max) +
                          " streams)");

  // Watch /health while the requests run.
  std::atomic<bool> running{true};
  int64_t max_busy = 0, max_waiting = 0, min_free = f.pool_tokens;
  std::thread watcher([&] {
    CheckClient watch = ctx.client();
    while (running) {
      if (auto h = ctx.health(watch)) {
        if (h->contains("streams") && (*h)["streams"].is_object()) {
          const Json& s = (*h)["streams"];
          max_busy = std::max(max_busy, std::max<int64_t>(int_field(s, "decoding"), 0) +
                                            std::max<int64_t>(int_field(s, "prefilling"), 0));
        }
        max_waiting = std::max(max_waiting, int_field(*h, "requests_waiting"));
        if (int64_t free = int_field(*h, "pool_free_tokens"); free >= 0) min_free = std::min(min_free, free);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::vector<Sent> sent(static_cast<size_t>(n));
  std::vector<std::thread> senders;
  for (int k = 0; k < n; ++k)
    senders.emplace_back([&, k] {
      CheckClient c = ctx.client();
      sent[static_cast<size_t>(k)] =
          send_completion(c, completion_body(f.model, prompts[static_cast<size_t>(k)]));
    });
  for (std::thread& t : senders) t.join();
  running = false;
  watcher.join();

  int answered = 0, refused = 0, failed = 0;
  std::string first_failure;
  for (const Sent& s : sent) {
    if (s.status == 200 && s.completion_tokens == kMaxTokens)
      ++answered;
    else if (s.status == 429 && s.retry_after)
      ++refused;
    else {
      ++failed;
      if (first_failure.empty())
        first_failure = !s.error.empty() ? s.error
                                         : "HTTP 200 with " + std::to_string(s.completion_tokens) + " of " +
                                               std::to_string(kMaxTokens) + " tokens (ignore_eos)";
    }
  }
  result.expect("every request is answered, or refused with 429 + Retry-After", failed == 0,
                std::to_string(answered) + " answered, " + std::to_string(refused) + " refused (429), " +
                    std::to_string(failed) + " failed" +
                    (first_failure.empty() ? "" : "; the first: " + first_failure));
  if (!f.health)
    result.note("streams never exceed PARALLEL", "not judged: the server's /health reports no streams");
  else
    result.expect("streams never exceed PARALLEL", max_busy <= f.streams_max,
                  "at most " + std::to_string(max_busy) + " of " + std::to_string(f.streams_max) +
                      " streams busy, up to " + std::to_string(std::max<int64_t>(max_waiting, 0)) +
                      " requests waiting");
  if (f.pool_tokens > 0)
    result.note("cache pool",
                "free tokens went down to " + thousands(min_free) + " of " + thousands(f.pool_tokens));

  // The first and last request again, alone: the same ids must come back.
  int compared = 0;
  std::string mismatch;
  for (int k : {0, n - 1}) {
    if (sent[static_cast<size_t>(k)].status != 200 || (k == n - 1 && n == 1)) continue;
    Sent solo = send_completion(client, completion_body(f.model, prompts[static_cast<size_t>(k)]));
    ++compared;
    if (solo.status != 200)
      mismatch = "request " + std::to_string(k) + " alone: " + solo.error;
    else if (solo.text != sent[static_cast<size_t>(k)].text)
      mismatch = "request " + std::to_string(k) + ": " +
                 quoted_excerpt(sent[static_cast<size_t>(k)].text, 40) + " under pressure, " +
                 quoted_excerpt(solo.text, 40) + " alone";
  }
  result.expect("replies under pressure equal the same requests alone", compared > 0 && mismatch.empty(),
                compared == 0      ? "no request was answered to compare"
                : mismatch.empty() ? std::to_string(compared) + " compared, equal"
                                   : mismatch);

  // One token more than the window: a clean 400 before anything runs.
  std::vector<int32_t> too_long;
  for (int64_t i = 0; i <= f.context_length; ++i)
    too_long.push_back(ids[static_cast<size_t>(i) % ids.size()]);
  Json over = completion_body(f.model, too_long);
  over["max_tokens"] = 1;
  TF_ASSIGN_OR_RETURN(HttpReply refusal, client.post("/v1/completions", over));
  result.expect("a prompt longer than the window is refused with 400 context_length_exceeded",
                refusal.status == 400 && refusal.error_code() == "context_length_exceeded",
                refusal.describe());

  // And the server settles back to idle.
  bool idle = !f.health;  // nothing to read: not judged
  for (int i = 0; i < 100 && !idle; ++i) {
    TF_ASSIGN_OR_RETURN(Json h, ctx.health(client));
    idle =
        int_field(h, "requests_running") <= 0 && std::max<int64_t>(int_field(h, "requests_waiting"), 0) == 0;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (f.health)
    result.expect("the server is idle afterwards", idle,
                  idle ? "no request running or waiting" : "still busy after 10 s");
  result.data = {{"requests", n},
                 {"prompt_tokens", prompt_tokens},
                 {"answered", answered},
                 {"refused", refused},
                 {"failed", failed},
                 {"max_busy_streams", max_busy},
                 {"max_waiting", max_waiting},
                 {"min_pool_free_tokens", min_free}};
  return Status();
}

}  // namespace tf::check
