// POST /v1/responses, GET / DELETE /v1/responses/{id}, and Anthropic's POST /v1/messages and
// /v1/messages/count_tokens, with their reply follow-ups (HttpServer::Impl, http_server_impl.h).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/http_answers.h"
#include "server/http_server_impl.h"
#include "server/openai_requests.h"
#include "server/openai_responses.h"
#include "server/response_store.h"
#include "server/stream_formatters.h"

namespace tf::server {

using http_detail::parse_body;

void HttpServer::Impl::follow_responses(const SharedJson& body, const SharedJson& input_items,
                                        const ChoiceState& c, int64_t prompt_tokens) {
  followups.post([this, body, input_items, output = response_output_items(c, "followup"),
                  prompt_tokens]() -> std::optional<FinishedChat> {
    Json b = *body;
    b.erase("previous_response_id");
    b["input"] = *input_items;
    for (const Json& item : output) b["input"].push_back(item);
    ResponsesRequest r = parse_responses_request(b, media_policy(), nullptr);
    apply_defaults(r.chat);
    return FinishedChat{std::move(r.chat.chat), r.chat.cache_salt, prompt_tokens};
  });
}

void HttpServer::Impl::follow_messages(const SharedJson& body, const ResponseMeta& meta, const ChoiceState& c,
                                       int64_t prompt_tokens) {
  const Json content = anthropic_message_json(meta, c, {}, AnthropicLimit::kMaxTokens)["content"];
  followups.post([this, body, content, prompt_tokens]() -> std::optional<FinishedChat> {
    Json b = *body;
    b["messages"].push_back({{"role", "assistant"}, {"content", content}});
    MessagesRequest r = parse_messages_request(b, false, media_policy());
    apply_defaults(r.chat);
    return FinishedChat{std::move(r.chat.chat), r.chat.cache_salt, prompt_tokens};
  });
}

void HttpServer::Impl::responses(const httplib::Request& req, PostBody& in, httplib::Response& res,
                                 Clock::time_point t0) {
  const auto shared_body = std::make_shared<const Json>(parse_body(in));
  const Json& body = *shared_body;
  std::optional<StoredResponse> previous;
  if (const Json* prev = json_field(body, "previous_response_id")) {
    if (!prev->is_string())
      throw bad_request("'previous_response_id' must be a string", "previous_response_id");
    previous = response_store.get(prev->get<std::string>());
    if (!previous)
      throw ApiError(404, "Previous response with id '" + prev->get<std::string>() + "' not found.",
                     "invalid_request_error", "previous_response_id", "previous_response_not_found");
  }
  ResponsesRequest r = parse_responses_request(body, media_policy(), previous ? &previous->items : nullptr);
  apply_defaults(r.chat);
  check_model(r.model);
  auto prompt = render_prompt(r.chat.chat, r.chat.cache_salt);
  const bool has_media = prompt.media != nullptr;
  const auto prompt_tokens = static_cast<int64_t>(prompt.tokens.size());
  int64_t max_tokens = resolve_max_tokens(r.max_tokens, prompt_tokens, true);
  GenerationRequest g = chat_generation(r.chat, prompt, max_tokens);
  if (g.structured.kind == StructuredOutput::Kind::kJsonSchema) {
    g.structured.schema_text = ordered_schema_text(body, SchemaSource::kResponses);
    g.structured.param = "text.format";
  }
  g.n = 1;
  g.request_id = make_id("resp_");
  ResponseMeta meta{g.request_id, unix_now(), model.id};
  Json echo = r.echo;
  echo["max_output_tokens"] = r.max_tokens ? Json(*r.max_tokens) : Json();
  // store (OpenAI's default: true): the response and its conversation are kept for
  // previous_response_id and GET /v1/responses/{id}. The conversation is shared with the
  // follow-up until then, not copied for each.
  const auto items = std::make_shared<const Json>(std::move(r.input_items));
  std::function<void(const Json&)> keep;
  if (!(echo["store"].is_boolean() && !echo["store"].get<bool>()))
    keep = [this, id = meta.id, items](const Json& response) {
      Json all = *items;
      for (const Json& item : response.value("output", Json::array())) all.push_back(item);
      response_store.put(id, StoredResponse{response, std::move(all)});
    };
  auto session = start_session(std::move(g), prompt_tokens, t0);
  in.lease.release();
  if (follows_up(r.chat.chat, has_media))
    session->set_on_finished(
        [this, shared_body, items, prompt_tokens](const std::vector<ChoiceState>& choices) {
          follow_responses(shared_body, items, choices.at(0), prompt_tokens);
        });
  if (r.stream) {
    stream(res, {session},
           {std::make_shared<ResponsesStreamFormatter>(meta, echo, std::move(keep), r.output_logprobs,
                                                       r.sealed_reasoning)});
    return;
  }
  wait_for(req, *session);
  const ChoiceState& c = session->choices()[0];
  bool incomplete = c.finish_reason == FinishReason::kLength;
  Json response =
      response_object_json(meta, echo, incomplete ? "incomplete" : "completed",
                           response_output_items(c, meta.id.substr(5), r.output_logprobs, r.sealed_reasoning),
                           response_usage_json(session->usage()));
  if (keep) keep(response);
  write_json(res, 200, response);
}

void HttpServer::Impl::stored_response(const httplib::Request& req, httplib::Response& res, bool erase) {
  const std::string id = req.matches[1];
  auto not_found = [&] {
    return ApiError(404, "Response with id '" + id + "' not found.", "invalid_request_error", std::nullopt,
                    "response_not_found");
  };
  if (erase) {
    if (!response_store.erase(id)) throw not_found();
    write_json(res, 200, {{"id", id}, {"object", "response"}, {"deleted", true}});
    return;
  }
  std::optional<StoredResponse> stored = response_store.get(id);
  if (!stored) throw not_found();
  write_json(res, 200, stored->response);
}

void HttpServer::Impl::messages(const httplib::Request& req, PostBody& in, httplib::Response& res,
                                Clock::time_point t0) {
  const auto body = std::make_shared<const Json>(parse_body(in));
  MessagesRequest r = parse_messages_request(*body, false, media_policy());
  apply_defaults(r.chat);
  auto prompt = render_prompt(r.chat.chat, r.chat.cache_salt);
  const bool has_media = prompt.media != nullptr;
  const auto prompt_tokens = static_cast<int64_t>(prompt.tokens.size());
  // As Anthropic's API: max_tokens may reach past the window; the reply then stops at the
  // window with stop_reason model_context_window_exceeded (a prompt that fills it is a 400).
  const int64_t room = model.context_length - prompt_tokens;
  const AnthropicLimit limit =
      model.context_length > 0 && r.chat.max_tokens && *r.chat.max_tokens > room && room > 0
          ? AnthropicLimit::kContextWindow
          : AnthropicLimit::kMaxTokens;
  if (limit == AnthropicLimit::kContextWindow) r.chat.max_tokens = room;
  int64_t max_tokens = resolve_max_tokens(r.chat.max_tokens, prompt_tokens, true);
  GenerationRequest g = chat_generation(r.chat, prompt, max_tokens);
  if (g.structured.kind == StructuredOutput::Kind::kJsonSchema) {
    g.structured.schema_text = ordered_schema_text(*body, SchemaSource::kMessages);
    g.structured.param = "output_config.format";
  }
  g.n = 1;
  g.request_id = make_id("msg_");
  ResponseMeta meta{g.request_id, unix_now(), model.id};
  auto session = start_session(std::move(g), prompt_tokens, t0);
  in.lease.release();
  if (follows_up(r.chat.chat, has_media))
    session->set_on_finished([this, body, prompt_tokens, meta](const std::vector<ChoiceState>& choices) {
      follow_messages(body, meta, choices.at(0), prompt_tokens);
    });
  if (r.chat.stream) {
    stream(res, {session}, {std::make_shared<AnthropicStreamFormatter>(meta, prompt_tokens, limit)});
    return;
  }
  wait_for(req, *session);
  write_json(res, 200, anthropic_message_json(meta, session->choices()[0], session->usage(), limit));
}

void HttpServer::Impl::count_tokens(const httplib::Request&, PostBody& in, httplib::Response& res,
                                    Clock::time_point) {
  MessagesRequest r = parse_messages_request(parse_body(in), /*count_tokens=*/true, media_policy());
  apply_defaults(r.chat);
  auto prompt = render_prompt(r.chat.chat, r.chat.cache_salt);
  write_json(res, 200, {{"input_tokens", prompt.tokens.size()}});
}

}  // namespace tf::server
