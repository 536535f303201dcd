// Private to the http_server*.cc files: the declaration of HttpServer::Impl, shared by
// http_server.cc (request wrappers, checks, helpers of several routes, the route table) and the
// http_*_route(s).cc files that define the routes' handlers. Include it nowhere else.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/api_error.h"
#include "server/api_keys.h"
#include "server/body_intake.h"
#include "server/body_pace.h"
#include "server/bounded_http_server.h"
#include "server/byte_budget.h"
#include "server/cors.h"
#include "server/decision_request.h"
#include "server/engine_api.h"
#include "server/generation_session.h"
#include "server/http_server.h"
#include "server/json_fields.h"
#include "server/media_parts.h"
#include "server/metrics.h"
#include "server/openai_requests.h"
#include "server/openai_responses.h"
#include "server/reasoning_memory.h"
#include "server/reply_followup.h"
#include "server/response_store.h"
#include "text/json_parse.h"

namespace tf::server {

namespace http_detail {

// Bounded parse (text/json_parse.h): linear time, nesting at most 256 levels deep. The body's
// text is let go once parsed: it would be one more copy of the prompt held to the end.
inline Json parse_body(PostBody& in) {
  if (in.text.empty()) throw bad_request("request body is empty; expected a JSON object", "body");
  Expected<Json> body = text::parse_json(in.text);
  std::string().swap(in.text);
  if (!body) throw bad_request("invalid JSON body: " + body.status().message(), "body");
  return std::move(*body);
}

}  // namespace http_detail

struct HttpServer::Impl {
  EngineApi& engine;
  ServerOptions options;
  ModelInfo model;
  ServerMetrics metrics;
  ResponseStore response_store;
  ByteBudget prompt_budget;  // PROMPT_BUDGET_MIB: request bodies being turned into prompts
  BoundedHttpServer http;    // httplib's server, its request heads bounded
  std::thread thread;
  int bound_port = -1;
  int listen_socket = -1;         // recorded by the socket options callback (bind())
  std::unique_ptr<ApiKeys> keys;  // null when they could not be read: bind() says why
  Status keys_status;
  CorsPolicy cors;  // CORS_ORIGINS; off when it could not be read: bind() says why
  Status cors_status;
  ReasoningMemory reasoning_memory;
  ReplyFollowUps followups;  // after reasoning_memory: its thread uses it

  Impl(EngineApi& e, ServerOptions o);

  using Handler = std::function<void(const httplib::Request&, httplib::Response&, Clock::time_point)>;
  using PostHandler = void (Impl::*)(const httplib::Request&, PostBody&, httplib::Response&,
                                     Clock::time_point);

  // Request wrappers, checks and the helpers of several routes (http_server.cc).

  static void set_request_id(const httplib::Request& req, httplib::Response& res);
  void record(const std::string& endpoint, const httplib::Response& res, Clock::time_point t0);
  // The one wrapper: auth (unless `needs_key` is false), request id, error mapping, metrics.
  httplib::Server::Handler handle(std::string endpoint, Handler h, bool needs_key = true);
  // The wrapper of routes that take a body (request_body.h): auth before a byte of it is read,
  // then the body within the limit, charged to the prompt budget (body_intake.h).
  httplib::Server::HandlerWithContentReader handle_post(std::string endpoint, PostHandler fn);
  // Routes that take no body (DELETE, and the 404 of every other path): a body sent anyway is
  // read through and dropped within the limit, not read whole by httplib (request_body.h).
  static httplib::Server::HandlerWithContentReader dropping_body(httplib::Server::Handler h, size_t max_bytes,
                                                                 BodyPace pace);
  // The answer to a request whose body was left unread (it fell behind its pace): its
  // connection closes after it (bounded_http_server.h).
  static void close_after_answer(httplib::Response& res);
  void check_auth(const httplib::Request& req) const;
  void check_model(const std::optional<std::string>& name) const;
  // A request for more choices than may wait at once would get 429 however idle the
  // server is, and clients retry 429s: refuse it as the client's mistake instead.
  void check_queued_choices(int64_t choices, const char* param) const;
  Json model_json() const;
  // vLLM's truncate_prompt_tokens: the prompt's first tokens dropped so that the last `keep` are
  // run (-1: the window). Returns whether it cut. A prompt with pictures is not cut (their
  // placeholders and features go together), and a cut prompt has no system block to share.
  bool truncate_prompt(std::vector<int32_t>& tokens, std::optional<int64_t> keep, bool has_media) const;
  // Resolves max_tokens and checks the window (400 context_length_exceeded).
  int64_t resolve_max_tokens(std::optional<int64_t> requested, int64_t prompt_tokens, bool use_default) const;
  static ResponseMeta meta_for(const std::string& prefix, const std::string& model_id);
  // Streams one or more sessions in order through their formatters.
  void stream(httplib::Response& res, std::vector<std::shared_ptr<GenerationSession>> sessions,
              std::vector<std::shared_ptr<StreamFormatter>> formatters);
  // The field an engine refusal of the request's grammar names: the structured output's
  // (such errors start with "<param>: "), or for forced tool calls tool_choice, and tools when
  // the grammar of their schemas is too large.
  static std::optional<std::string> grammar_error_param(bool tool_grammar,
                                                        const std::string& structured_param, const Status& s);
  std::shared_ptr<GenerationSession> start_session(GenerationRequest g, int64_t prompt_tokens,
                                                   Clock::time_point t0);
  // The engine's checks of a request's values (SamplingParams::validate) start with the field
  // they refuse, quoted as the API spells it: "'allowed_token_ids' token id 9 is outside ...".
  static std::optional<std::string> quoted_field(const Status& s);
  // Non-streaming: waits for the session while watching the connection, so a client
  // that goes away cancels its request (the session's destructor) instead of letting
  // it run to its cap. 499 (nginx's "client closed request") is only seen in metrics.
  static void wait_for(const httplib::Request& req, GenerationSession& session);
  // REASONING_EFFORT for a conversation that chose no effort and no thinking switch; true when
  // it applied.
  bool default_effort(ChatPrompt& chat) const;
  void apply_defaults(ChatRequest& r) const;
  // Takes the prompt's tokens and media: the engine frees the media's pixels once encoded,
  // which a copy held here for the request's lifetime would keep (read the prompt's size first).
  GenerationRequest chat_generation(const ChatRequest& r, RenderedPrompt& prompt, int64_t max_tokens);
  MediaUrlPolicy media_policy() const;
  // The chat rendered with its images and videos decoded; an error about a media part
  // names the client's path of the part (media_parts.h).
  RenderedPrompt render_prompt(ChatPrompt& chat, const std::string& cache_salt);
  // Reply follow-ups (reply_followup.h): each finished reply appended to its request's body as
  // the client gets it, and parsed again by the endpoint's own parser on the follow-up thread.
  // Only for a reply that is a new assistant turn (not one continuing the last message), and
  // not for chats with pictures: their bodies (up to the body limit) would be copied for it,
  // and the warm-up renders text only. `has_media` must be read before the prompt's media
  // move into the request.
  bool follows_up(const ChatPrompt& chat, bool has_media) const;
  // The request's body is shared with the follow-up, not copied for it: it is the whole prompt.
  using SharedJson = std::shared_ptr<const Json>;

  // /v1/chat/completions (http_chat_route.cc).

  // Several choices: each one's reasoning is remembered; which one continues is unknown, so
  // none is warmed up.
  void follow_chat(const SharedJson& body, const std::vector<ChoiceState>& choices, int64_t prompt_tokens);
  void chat_completions(const httplib::Request& req, PostBody& in, httplib::Response& res,
                        Clock::time_point t0);

  // /v1/decisions (decision_request.h): each question's prompt runs as a request that
  // generates nothing and reports its labels' logprobs at the prompt's end (http_decisions_route.cc).
  struct DecisionPrompt {
    std::vector<int32_t> tokens;
    std::vector<int32_t> labels;
  };

  // The question's chat prompt (thinking off) and its labels' tokens. Each label must be one
  // token of its own after the prompt: the prompt's text with the label appended must encode
  // to the prompt's ids and one more, distinct from the other labels'.
  DecisionPrompt decision_prompt(const DecisionQuestion& q) const;
  void decisions(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0);

  // /v1/embeddings and /v1/completions (http_completion_routes.cc).

  // A prompt's ids: text tokenized with the special tokens, or given ids checked against the
  // vocabulary (a 400 naming `param`).
  std::vector<int32_t> prompt_ids(const PromptInput& p, const char* param) const;
  void embeddings(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0);
  void completions(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0);

  // /v1/responses and Anthropic's /v1/messages (http_responses_routes.cc).
  void follow_responses(const SharedJson& body, const SharedJson& input_items, const ChoiceState& c,
                        int64_t prompt_tokens);
  void follow_messages(const SharedJson& body, const ResponseMeta& meta, const ChoiceState& c,
                       int64_t prompt_tokens);
  void responses(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0);
  // GET / DELETE /v1/responses/{id}: a stored response (404 when never stored or forgotten).
  void stored_response(const httplib::Request& req, httplib::Response& res, bool erase);
  // POST /v1/messages (Anthropic): any model name is accepted (see anthropic_messages.h).
  void messages(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0);
  void count_tokens(const httplib::Request&, PostBody& in, httplib::Response& res, Clock::time_point);

  // /tokenize, /detokenize, /health and /props (http_info_routes.cc).
  void tokenize(const httplib::Request&, PostBody& in, httplib::Response& res, Clock::time_point);
  void detokenize(const httplib::Request&, PostBody& in, httplib::Response& res, Clock::time_point);
  void health(const httplib::Request&, httplib::Response& res, Clock::time_point);
  // llama.cpp's GET /props, for the clients and UIs that read a server's window, slots, template
  // and modalities from it (its n_ctx is the per-request window, CONTEXT).
  Json props_json() const;

  // The route table (http_server.cc).
  void register_routes();
};

}  // namespace tf::server
