// POST /v1/chat/completions, and the reply follow-up of a chat (HttpServer::Impl, http_server_impl.h).
#include <memory>
#include <optional>
#include <vector>

#include "server/http_answers.h"
#include "server/http_server_impl.h"
#include "server/openai_requests.h"
#include "server/openai_responses.h"
#include "server/stream_formatters.h"

namespace tf::server {

using http_detail::parse_body;

void HttpServer::Impl::follow_chat(const SharedJson& body, const std::vector<ChoiceState>& choices,
                                   int64_t prompt_tokens) {
  const Json reply = chat_completion_json({"", 0, ""}, choices, {}, true, false)["choices"];
  for (const Json& choice : reply) {
    followups.post([this, body, message = choice["message"], prompt_tokens,
                    warm = choices.size() == 1]() -> std::optional<FinishedChat> {
      Json b = *body;
      b["messages"].push_back(message);
      ChatRequest r = parse_chat_request(b, media_policy());
      apply_defaults(r);
      return FinishedChat{std::move(r.chat), r.cache_salt, prompt_tokens, warm};
    });
  }
}

void HttpServer::Impl::chat_completions(const httplib::Request& req, PostBody& in, httplib::Response& res,
                                        Clock::time_point t0) {
  const auto body = std::make_shared<const Json>(parse_body(in));
  ChatRequest r = parse_chat_request(*body, media_policy());
  apply_defaults(r);
  check_model(r.model);
  check_queued_choices(r.n, "n");
  auto prompt = render_prompt(r.chat, r.cache_salt);
  const bool has_media = prompt.media != nullptr;
  if (truncate_prompt(prompt.tokens, r.truncate_prompt_tokens, has_media)) prompt.system_tokens = 0;
  const auto prompt_tokens = static_cast<int64_t>(prompt.tokens.size());
  int64_t max_tokens = resolve_max_tokens(r.max_tokens, prompt_tokens, true);
  auto prompt_ids =
      r.return_token_ids ? std::make_shared<const std::vector<int32_t>>(prompt.tokens) : nullptr;
  GenerationRequest g = chat_generation(r, prompt, max_tokens);
  if (g.structured.kind == StructuredOutput::Kind::kJsonSchema)
    g.structured.schema_text = ordered_schema_text(*body, SchemaSource::kChat);
  ResponseMeta meta{g.request_id, unix_now(), model.id};
  auto session = start_session(std::move(g), prompt_tokens, t0);
  in.lease.release();
  if (follows_up(r.chat, has_media))
    session->set_on_finished([this, body, prompt_tokens](const std::vector<ChoiceState>& choices) {
      follow_chat(body, choices, prompt_tokens);
    });
  if (r.stream) {
    auto fmt = std::make_shared<ChatStreamFormatter>(
        meta, r.n, r.include_usage, r.include_reasoning, r.sampling.logprobs, prompt_ids,
        ContinuousUsage{r.continuous_usage ? prompt_tokens : -1});
    stream(res, {session}, {fmt});
    return;
  }
  wait_for(req, *session);
  Json out = chat_completion_json(meta, session->choices(), session->usage(), r.include_reasoning,
                                  r.sampling.logprobs);
  if (r.prompt_logprobs)  // vLLM's place: at the top (every choice has the same prompt)
    out["prompt_logprobs"] =
        vllm_prompt_logprobs_json(session->choices().at(0).prompt_logprobs, *r.prompt_logprobs);
  if (prompt_ids) {  // vLLM's places: the prompt's ids at the top, each choice's in it
    out["prompt_token_ids"] = *prompt_ids;
    for (size_t i = 0; i < session->choices().size(); ++i)
      out["choices"][i]["token_ids"] = session->choices()[i].token_ids;
  }
  write_json(res, 200, out);
}

}  // namespace tf::server
