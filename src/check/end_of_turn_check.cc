// end_of_turn: short questions must get replies that end by themselves. A model (or a
// quantization of it) that loses its end-of-turn token runs every reply to max_tokens; the
// reference deployment's q4 dense did so on 12 of 48 short French coding prompts (its #18).
// The prompts mix languages and kinds (coding, facts, small tasks); they go out PARALLEL at a
// time, so the check also costs about what one batch of replies costs.
#include <array>
#include <atomic>
#include <mutex>
#include <thread>

#include "check/chat_reply.h"
#include "check/check_text.h"
#include "check/live_checks.h"

namespace tf::check {
namespace {

constexpr std::array<const char*, 24> kPrompts = {
    "Écris une fonction Python qui inverse une chaîne.",
    "Comment trier une liste de dictionnaires par clé en Python ?",
    "Écris une requête SQL qui compte les commandes par client.",
    "Explique la différence entre une liste et un tuple en Python.",
    "Donne un exemple de boucle for en JavaScript.",
    "Corrige ce code : for i in range(10) print(i)",
    "Write a Bash one-liner that counts the lines of every .txt file in a folder.",
    "What is the capital of Australia?",
    "Translate 'good morning, how are you?' into Spanish.",
    "Give me three names for a bakery.",
    "Write a haiku about autumn rain.",
    "What does HTTP status 404 mean?",
    "Write a C function that returns the larger of two ints.",
    "Summarise the plot of Romeo and Juliet in two sentences.",
    "Wie spät ist es in Tokio, wenn es in Berlin 12 Uhr ist?",
    "Schreibe eine kurze E-Mail, um ein Treffen abzusagen.",
    "¿Cuál es la diferencia entre 'ser' y 'estar'?",
    "Convert 72 degrees Fahrenheit to Celsius.",
    "List the planets of the solar system in order.",
    "Write a regular expression that matches an email address.",
    "What is 17 times 23?",
    "Explain recursion to a ten-year-old in one paragraph.",
    "Écris un test unitaire pytest pour une fonction add(a, b).",
    "用一句话解释什么是机器学习。",
};

constexpr std::array<const char*, 3> kTwists = {"", " Keep it short.", " Answer briefly, then stop."};

struct Outcome {
  std::string prompt;
  std::string finish_reason;
  int64_t completion_tokens = -1;
  std::string error;
};

}  // namespace

Status run_end_of_turn_check(const CheckContext& ctx, CheckResult& result) {
  const CheckOptions& o = ctx.options();
  const int n = std::max(1, o.eot_prompts);
  std::vector<Outcome> outcomes(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    outcomes[static_cast<size_t>(i)].prompt =
        std::string(kPrompts[static_cast<size_t>(i) % kPrompts.size()]) +
        kTwists[(static_cast<size_t>(i) / kPrompts.size()) % kTwists.size()];
  const int64_t max_tokens =
      std::max<int64_t>(16, std::min<int64_t>(o.eot_max_tokens, ctx.facts().context_length - 256));
  std::atomic<int> next{0};
  auto worker = [&] {
    CheckClient client = ctx.client();
    for (int i = next++; i < n; i = next++) {
      Outcome& out = outcomes[static_cast<size_t>(i)];
      Json body = ctx.chat_body(Json::array({{{"role", "user"}, {"content", out.prompt}}}), max_tokens);
      auto r = client.post("/v1/chat/completions", body);
      if (!r)
        out.error = r.status().message();
      else if (r->status != 200)
        out.error = r->describe();
      else if (auto reply = parse_chat_reply(r->json); !reply)
        out.error = reply.status().message();
      else {
        out.finish_reason = reply->finish_reason;
        out.completion_tokens = reply->completion_tokens;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::min(n, ctx.facts().streams_max); ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();

  int ended = 0, ran_out = 0, failed = 0;
  std::string first_error, ran_out_list;
  result.data["replies"] = Json::array();
  for (const Outcome& out : outcomes) {
    if (!out.error.empty()) {
      ++failed;
      if (first_error.empty()) first_error = out.error;
    } else if (out.finish_reason == "length") {
      ++ran_out;
      if (ran_out <= 3) ran_out_list += (ran_out_list.empty() ? "" : ", ") + quoted_excerpt(out.prompt, 40);
    } else {
      ++ended;
    }
    result.data["replies"].push_back({{"prompt", out.prompt},
                                      {"finish_reason", out.finish_reason},
                                      {"completion_tokens", out.completion_tokens},
                                      {"error", out.error}});
  }
  result.expect("every request is answered", failed == 0,
                failed == 0 ? std::to_string(n) + " of " + std::to_string(n)
                            : std::to_string(failed) + " failed, the first: " + first_error);
  const double rate = static_cast<double>(ran_out) / n;
  result.expect("short replies end by themselves", failed == 0 && rate <= o.eot_max_rate,
                std::to_string(ended) + " of " + std::to_string(n) + " ended, " + std::to_string(ran_out) +
                    " ran to max_tokens " + std::to_string(max_tokens) + " (" + percent(rate) + ", at most " +
                    percent(o.eot_max_rate) + ")" + (ran_out_list.empty() ? "" : "; e.g. " + ran_out_list));
  result.data["length_rate"] = rate;
  return Status();
}

}  // namespace tf::check
