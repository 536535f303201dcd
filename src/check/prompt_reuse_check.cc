// prompt_reuse: what agents lose most time to when it fails (reference-deployment.md §3 #1).
// A chat with a long system prompt is sent, then sent again, continued by a turn, and begun
// anew with the same system prompt; usage.prompt_tokens_details.cached_tokens says how much of
// each prompt the server resumed from kept state instead of running again. The repeat must
// also answer exactly as the first run did: resuming may never change a reply.
#include <algorithm>
#include <chrono>

#include "check/chat_reply.h"
#include "check/check_text.h"
#include "check/haystack.h"
#include "check/live_checks.h"

namespace tf::check {
namespace {

std::string cached_of(const ChatReply& r) {
  return thousands(r.cached_tokens) + " of " + thousands(r.prompt_tokens) + " prompt tokens resumed";
}

// Servers keep states at grid points (vLLM's 16-token blocks, our prefill chunks, the reference's
// 2,048-token extents), so the tokens after the last grid point run again: a resume counts when
// something was resumed and what ran again is at most `(1 - share)` of the earlier prompt or one
// 2,048-token grid step (+64 for the template's turn markers), whichever is larger.
constexpr int64_t kGridSlack = 2048 + 64;

bool resumed_enough(int64_t cached, int64_t earlier_prompt, double share) {
  const auto slack = std::max<int64_t>(
      kGridSlack, static_cast<int64_t>((1.0 - share) * static_cast<double>(earlier_prompt)));
  return cached > 0 && earlier_prompt - cached <= slack;
}

std::string fraction_of(int64_t cached, int64_t tokens) {
  return percent(tokens > 0 ? static_cast<double>(std::max<int64_t>(cached, 0)) / static_cast<double>(tokens)
                            : 0.0);
}

}  // namespace

Status run_prompt_reuse_check(const CheckContext& ctx, CheckResult& result) {
  CheckClient client = ctx.client();
  const int64_t max_tokens = 24;
  const int64_t target =
      std::min(ctx.options().reuse_tokens, (ctx.facts().context_length - 3 * max_tokens - 200) / 2);
  if (target < 128) return invalid_argument("the window is too small for this check");
  TF_ASSIGN_OR_RETURN(const double per_sentence, ctx.tokens_per_filler_sentence(client));
  // A system prompt no earlier run of this check left in the cache: its first sentence
  // depends on the time, so the first request starts cold.
  const uint64_t seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const std::string system =
      "You keep the town records below and answer questions about them.\n\n" +
      filler_sentences(seed, static_cast<int>(0.95 * static_cast<double>(target) / per_sentence));
  Json first =
      Json::array({{{"role", "system"}, {"content", system}},
                   {{"role", "user"}, {"content", "How many lanterns does the old harbour count?"}}});

  auto send = [&](const Json& messages) -> Expected<ChatReply> {
    TF_ASSIGN_OR_RETURN(HttpReply r,
                        client.post("/v1/chat/completions", ctx.chat_body(messages, max_tokens)));
    if (r.status != 200) return unavailable("POST /v1/chat/completions: " + r.describe());
    return parse_chat_reply(r.json);
  };
  TF_ASSIGN_OR_RETURN(ChatReply a, send(first));
  if (a.cached_tokens < 0)
    return unavailable(
        "the server reports no usage.prompt_tokens_details.cached_tokens, so reuse cannot be seen");
  result.note("first run", cached_of(a));

  TF_ASSIGN_OR_RETURN(ChatReply b, send(first));
  result.expect("a repeated prompt resumes", resumed_enough(b.cached_tokens, b.prompt_tokens, 0.9),
                cached_of(b) + " (" + fraction_of(b.cached_tokens, b.prompt_tokens) +
                    "; at most 10 % or one 2,048-token grid step may run again)");
  std::string diff = reply_difference(a, b);
  if (diff.empty() && !a.token_sha256.empty() && a.token_sha256 != b.token_sha256)
    diff = "token_sha256 differs";
  result.expect("the resumed reply equals the fresh one", diff.empty(),
                diff.empty() ? std::to_string(b.completion_tokens) + " tokens, the same" : diff);

  Json next = first;
  next.push_back({{"role", "assistant"}, {"content", a.content}});
  next.push_back({{"role", "user"}, {"content", "And how many bells?"}});
  TF_ASSIGN_OR_RETURN(ChatReply c, send(next));
  // The earlier prompt is a prefix of this one up to the assistant turn; most of it must resume.
  result.expect("the chat's next turn resumes the previous prompt",
                resumed_enough(c.cached_tokens, a.prompt_tokens, 0.8),
                cached_of(c) + " (" + fraction_of(c.cached_tokens, a.prompt_tokens) +
                    " of the previous prompt's " + thousands(a.prompt_tokens) +
                    "; at most 20 % or one grid step may run again)");

  Json other = Json::array({{{"role", "system"}, {"content", system}},
                            {{"role", "user"}, {"content", "Which town keeps the most maps?"}}});
  TF_ASSIGN_OR_RETURN(ChatReply d, send(other));
  result.expect("a new chat with the same system prompt resumes it",
                resumed_enough(d.cached_tokens, a.prompt_tokens, 0.8),
                cached_of(d) + " (" + fraction_of(d.cached_tokens, a.prompt_tokens) +
                    " of the first prompt; at most 20 % or one grid step may run again)");
  result.data = {{"system_target_tokens", target},
                 {"first", {{"prompt_tokens", a.prompt_tokens}, {"cached_tokens", a.cached_tokens}}},
                 {"repeat", {{"prompt_tokens", b.prompt_tokens}, {"cached_tokens", b.cached_tokens}}},
                 {"next_turn", {{"prompt_tokens", c.prompt_tokens}, {"cached_tokens", c.cached_tokens}}},
                 {"same_system", {{"prompt_tokens", d.prompt_tokens}, {"cached_tokens", d.cached_tokens}}}};
  return Status();
}

}  // namespace tf::check
