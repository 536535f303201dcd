// needle: a five-digit code stated once in a long prompt, asked for at its end. The code sits
// at 10, 50 and 90 % of the prompt in three requests; each must bring it back.
#include <algorithm>

#include "check/chat_reply.h"
#include "check/check_text.h"
#include "check/haystack.h"
#include "check/live_checks.h"

namespace tf::check {

Status run_needle_check(const CheckContext& ctx, CheckResult& result) {
  CheckClient client = ctx.client();
  const CheckOptions& o = ctx.options();
  // Room for the answer (and a reasoning, when one is asked for) and the template's tokens.
  const int64_t answer_tokens = o.reasoning_effort == "none" ? 48 : 4096;
  const int64_t room = ctx.facts().context_length - answer_tokens - 160;
  const int64_t target = std::min(o.needle_tokens, room);
  if (target < 256)
    return invalid_argument("the window (" + std::to_string(ctx.facts().context_length) +
                            " tokens) is too small");
  TF_ASSIGN_OR_RETURN(const double per_sentence, ctx.tokens_per_filler_sentence(client));
  const int sentences = std::max(4, static_cast<int>(0.95 * static_cast<double>(target - 64) / per_sentence));
  result.data["target_tokens"] = target;
  result.data["runs"] = Json::array();
  const double depths[] = {0.1, 0.5, 0.9};
  for (int i = 0; i < 3; ++i) {
    const Needle needle = make_needle(static_cast<uint64_t>(i + 1));
    const std::string text = haystack_with_needle(11, sentences, depths[i], needle);
    Json messages = Json::array(
        {{{"role", "user"}, {"content", "Read these notes.\n\n" + text + "\n" + needle.question}}});
    TF_ASSIGN_OR_RETURN(HttpReply r,
                        client.post("/v1/chat/completions", ctx.chat_body(messages, answer_tokens)));
    const std::string what = "code at " + percent(depths[i]) + " of the prompt";
    if (r.status != 200) {
      result.expect(what, false, r.describe());
      continue;
    }
    TF_ASSIGN_OR_RETURN(ChatReply reply, parse_chat_reply(r.json));
    const bool found = reply_has_code(reply.content, needle.code);
    result.expect(what, found,
                  std::string(found ? "found" : "not found") + " in " + thousands(reply.prompt_tokens) +
                      " prompt tokens (" + std::to_string(static_cast<int>(r.seconds * 1000)) +
                      " ms); reply " + quoted_excerpt(reply.content, 60));
    result.data["runs"].push_back({{"depth", depths[i]},
                                   {"found", found},
                                   {"prompt_tokens", reply.prompt_tokens},
                                   {"seconds", r.seconds},
                                   {"reply", reply.content}});
  }
  return Status();
}

}  // namespace tf::check
