// See http_server.h. Routes are declared in one table in Impl::register_routes; the
// wrapper `handle` owns error mapping, auth, request ids and request metrics.
#include "server/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <functional>
#include <optional>
#include <thread>

#include "core/version.h"
#include "engine/structured_output.h"
#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/api_keys.h"
#include "server/body_intake.h"
#include "server/bounded_http_server.h"
#include "server/byte_budget.h"
#include "server/chat_page.h"
#include "server/cors.h"
#include "server/dashboard_page.h"
#include "server/decision_request.h"
#include "server/elastic_thread_pool.h"
#include "server/embedding_request.h"
#include "server/generation_session.h"
#include "server/http_answers.h"
#include "server/media_parts.h"
#include "server/metrics.h"
#include "server/open_files.h"
#include "server/openai_requests.h"
#include "server/peer_socket.h"
#include "server/reasoning_memory.h"
#include "server/reply_followup.h"
#include "server/request_body.h"
#include "server/response_store.h"
#include "server/stream_formatters.h"
#include "text/json_parse.h"

namespace tf::server {

namespace {

// HTTP workers beyond those that requests in the engine hold (/health, /metrics, tokenize,
// requests being read or refused with 429).
constexpr int64_t kSpareThreads = 64;
// Pending connections the kernel queues before the accept loop takes them (SOMAXCONN caps it).
constexpr int kListenBacklog = 1024;
// The most HTTP workers (connections being served at once) however high the open-file limit.
constexpr size_t kMaxThreads = 4096;

// Bounded parse (text/json_parse.h): linear time, nesting at most 256 levels deep. The body's
// text is let go once parsed: it would be one more copy of the prompt held to the end.
Json parse_body(PostBody& in) {
  if (in.text.empty()) throw bad_request("request body is empty; expected a JSON object", "body");
  Expected<Json> body = text::parse_json(in.text);
  std::string().swap(in.text);
  if (!body) throw bad_request("invalid JSON body: " + body.status().message(), "body");
  return std::move(*body);
}

// RFC 3339 UTC time of a unix timestamp (Anthropic's created_at).
std::string rfc3339(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

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
  int listen_socket = -1;  // recorded by the socket options callback (bind())
  std::unique_ptr<ApiKeys> keys;  // null when they could not be read: bind() says why
  Status keys_status;
  CorsPolicy cors;  // CORS_ORIGINS; off when it could not be read: bind() says why
  Status cors_status;
  ReasoningMemory reasoning_memory;
  ReplyFollowUps followups;  // after reasoning_memory: its thread uses it

  Impl(EngineApi& e, ServerOptions o)
      : engine(e),
        options(std::move(o)),
        model(e.model_info()),
        metrics(model.id),
        prompt_budget(options.prompt_budget_bytes),
        http(HeadLimits{.deadline = std::chrono::seconds(std::max(options.head_timeout_s, 1))}),
        reasoning_memory(options.reasoning_memory_bytes),
        followups(e, options.reasoning_memory_bytes > 0 ? &reasoning_memory : nullptr,
                  options.reply_warmup ? model.reuse_grain : 0) {
    auto loaded = ApiKeys::load(options.api_key, options.api_key_file);
    if (loaded)
      keys = std::move(*loaded);
    else
      keys_status = loaded.status();
    auto cors_policy = CorsPolicy::parse(options.cors_origins);
    if (cors_policy)
      cors = std::move(*cors_policy);
    else
      cors_status = cors_policy.status();
  }

  using Handler = std::function<void(const httplib::Request&, httplib::Response&, Clock::time_point)>;
  using PostHandler = void (Impl::*)(const httplib::Request&, PostBody&, httplib::Response&,
                                     Clock::time_point);

  static void set_request_id(const httplib::Request& req, httplib::Response& res) {
    std::string rid = req.get_header_value("x-request-id");
    res.set_header("x-request-id", rid.empty() ? make_id("req-") : rid);
  }

  void record(const std::string& endpoint, const httplib::Response& res, Clock::time_point t0) {
    // A handler that sets no status (streams, /metrics) answers 200: httplib fills it in after us.
    metrics.record_request(endpoint, res.status == -1 ? 200 : res.status,
                           std::chrono::duration<double>(Clock::now() - t0).count());
  }

  // The one wrapper: auth (unless `needs_key` is false), request id, error mapping, metrics.
  httplib::Server::Handler handle(std::string endpoint, Handler h, bool needs_key = true) {
    const bool anthropic = is_anthropic_path(endpoint);
    return [this, anthropic, needs_key, endpoint = std::move(endpoint), h = std::move(h)](
               const httplib::Request& req, httplib::Response& res) {
      Clock::time_point t0 = Clock::now();
      set_request_id(req, res);
      guarded(res, anthropic, [&] {
        if (needs_key) check_auth(req);
        h(req, res, t0);
      });
      record(endpoint, res, t0);
    };
  }

  // The wrapper of routes that take a body (request_body.h): auth before a byte of it is read,
  // then the body within the limit, charged to the prompt budget (body_intake.h).
  httplib::Server::HandlerWithContentReader handle_post(std::string endpoint, PostHandler fn) {
    const bool anthropic = is_anthropic_path(endpoint);
    return [this, anthropic, fn, endpoint = std::move(endpoint)](
               const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      Clock::time_point t0 = Clock::now();
      set_request_id(req, res);
      RequestBody body(req, reader, options.max_body_bytes, options.body_pace);
      guarded(res, anthropic, [&] {
        check_auth(req);
        PostBody in = take_in_body(body, prompt_budget);
        (this->*fn)(req, in, res, t0);
      });
      body.discard_rest();
      if (body.abandoned()) close_after_answer(res);
      record(endpoint, res, t0);
    };
  }

  // Routes that take no body (DELETE, and the 404 of every other path): a body sent anyway is
  // read through and dropped within the limit, not read whole by httplib (request_body.h).
  static httplib::Server::HandlerWithContentReader dropping_body(httplib::Server::Handler h, size_t max_bytes,
                                                                 BodyPace pace) {
    return [h = std::move(h), max_bytes, pace](const httplib::Request& req, httplib::Response& res,
                                               const httplib::ContentReader& reader) {
      RequestBody body(req, reader, max_bytes, pace);
      body.discard_rest();
      h(req, res);
      if (body.abandoned()) close_after_answer(res);
    };
  }

  // The answer to a request whose body was left unread (it fell behind its pace): its
  // connection closes after it (bounded_http_server.h).
  static void close_after_answer(httplib::Response& res) {
    res.set_header("Connection", "close");
    close_connection_after_answer();
  }

  void check_auth(const httplib::Request& req) const {
    if (!keys->required()) return;
    // OpenAI clients send a bearer token, Anthropic's x-api-key.
    if (!keys->accepts(
            presented_key(req.get_header_value("Authorization"), req.get_header_value("x-api-key"))))
      throw ApiError(401, "Incorrect API key provided.", "invalid_request_error", std::nullopt, "invalid_api_key");
  }

  void check_model(const std::optional<std::string>& name) const {
    if (name && !name->empty() && *name != model.id) throw model_not_found(*name);
  }

  // A request for more choices than may wait at once would get 429 however idle the
  // server is, and clients retry 429s: refuse it as the client's mistake instead.
  void check_queued_choices(int64_t choices, const char* param) const {
    const int64_t most = model.max_queued_choices;
    if (most > 0 && choices > most)
      throw bad_request("this request asks for " + std::to_string(choices) + " choices; the server queues at most " +
                            std::to_string(most) + " at once (MAX_QUEUED)",
                        param);
  }

  Json model_json() const {
    // OpenAI's model object plus Anthropic's fields (type, display_name, created_at): both SDKs read it.
    return {{"id", model.id},        {"object", "model"}, {"created", model.created}, {"owned_by", "tensorfold"},
            {"root", model.root},    {"parent", nullptr}, {"max_model_len", model.context_length},
            {"permission", Json::array()}, {"type", "model"}, {"display_name", model.id},
            {"created_at", rfc3339(model.created)}};
  }

  // vLLM's truncate_prompt_tokens: the prompt's first tokens dropped so that the last `keep` are
  // run (-1: the window). Returns whether it cut. A prompt with pictures is not cut (their
  // placeholders and features go together), and a cut prompt has no system block to share.
  bool truncate_prompt(std::vector<int32_t>& tokens, std::optional<int64_t> keep, bool has_media) const {
    if (!keep) return false;
    const int64_t k = *keep < 0 ? model.context_length : *keep;
    if (k <= 0 || static_cast<int64_t>(tokens.size()) <= k) return false;
    if (has_media)
      throw bad_request("'truncate_prompt_tokens' cannot cut a prompt with images or videos (" +
                            std::to_string(tokens.size()) + " tokens, " + std::to_string(k) + " to keep)",
                        "truncate_prompt_tokens");
    tokens.erase(tokens.begin(), tokens.end() - k);
    return true;
  }

  // Resolves max_tokens and checks the window (400 context_length_exceeded).
  int64_t resolve_max_tokens(std::optional<int64_t> requested, int64_t prompt_tokens, bool use_default) const {
    int64_t ctx = model.context_length;
    if (prompt_tokens >= ctx && ctx > 0) throw context_length_exceeded(ctx, prompt_tokens, requested.value_or(1));
    int64_t room = ctx - prompt_tokens;
    if (!requested) {
      if (use_default && options.default_max_tokens > 0) return std::min(options.default_max_tokens, room);
      return room;
    }
    if (*requested > room) throw context_length_exceeded(ctx, prompt_tokens, *requested);
    return *requested;
  }

  static ResponseMeta meta_for(const std::string& prefix, const std::string& model_id) {
    return {make_id(prefix), unix_now(), model_id};
  }

  // Streams one or more sessions in order through their formatters.
  void stream(httplib::Response& res, std::vector<std::shared_ptr<GenerationSession>> sessions,
              std::vector<std::shared_ptr<StreamFormatter>> formatters) {
    res.set_header("Cache-Control", "no-cache");
    for (auto& s : sessions) s->set_smoothing(std::chrono::milliseconds(options.stream_smooth_ms));
    auto index = std::make_shared<size_t>(0);
    res.set_chunked_content_provider(
        "text/event-stream",
        [sessions, formatters, index](size_t, httplib::DataSink& sink) {
          auto write = [&sink](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
          auto& session = sessions[*index];
          session->set_alive_check([&sink] { return !sink.is_writable || sink.is_writable(); });
          switch (session->pump(*formatters[*index], write)) {
            case GenerationSession::Pump::kMore:
              return true;
            case GenerationSession::Pump::kBroken:
              return false;
            case GenerationSession::Pump::kDone:
              if (++*index == sessions.size()) sink.done();
              return true;
          }
          return false;
        },
        [sessions](bool) {
          // Unfinished sessions cancel their engine requests when the last owner goes;
          // clear the alive checks, which captured the sink by reference.
          for (auto& s : sessions) s->set_alive_check(nullptr);
        });
  }

  // The field an engine refusal of the request's grammar names: the structured output's
  // (such errors start with "<param>: "), or for forced tool calls tool_choice, and tools when
  // the grammar of their schemas is too large.
  static std::optional<std::string> grammar_error_param(bool tool_grammar,
                                                        const std::string& structured_param,
                                                        const Status& s) {
    if (s.code() != StatusCode::kInvalidArgument) return std::nullopt;
    if (tool_grammar) {
      if (engine::is_grammar_too_large(s)) return "tools";
      if (s.message().starts_with("tool_choice")) return "tool_choice";
      return std::nullopt;
    }
    if (!structured_param.empty() && s.message().starts_with(structured_param + ": "))
      return structured_param;
    return std::nullopt;
  }

  std::shared_ptr<GenerationSession> start_session(GenerationRequest g, int64_t prompt_tokens, Clock::time_point t0) {
    const bool tool_grammar = g.forces_tool_call();
    const std::string structured_param = g.structured.param;
    followups.make_way(g.prompt_tokens);
    auto session = std::make_shared<GenerationSession>(engine, metrics, std::move(g), prompt_tokens, t0);
    Status s = session->submit();
    if (s.is_ok()) return session;
    if (auto param = grammar_error_param(tool_grammar, structured_param, s))
      throw bad_request(s.message(), *param);
    if (auto param = quoted_field(s)) throw bad_request(s.message(), *param);
    throw api_error_from_status(s);
  }

  // The engine's checks of a request's values (SamplingParams::validate) start with the field
  // they refuse, quoted as the API spells it: "'allowed_token_ids' token id 9 is outside ...".
  static std::optional<std::string> quoted_field(const Status& s) {
    if (s.code() != StatusCode::kInvalidArgument || !s.message().starts_with("'")) return std::nullopt;
    const size_t end = s.message().find('\'', 1);
    if (end == std::string::npos || end == 1) return std::nullopt;
    std::string field = s.message().substr(1, end - 1);
    for (char ch : field)
      if (!(std::islower(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.')) return std::nullopt;
    return field;
  }

  // Non-streaming: waits for the session while watching the connection, so a client
  // that goes away cancels its request (the session's destructor) instead of letting
  // it run to its cap. 499 (nginx's "client closed request") is only seen in metrics.
  static void wait_for(const httplib::Request& req, GenerationSession& session) {
    std::function<bool()> alive = connection_alive_check(req.remote_addr, req.remote_port, req.local_port);
    session.set_alive_check(alive);
    Status s = session.wait();
    session.set_alive_check(nullptr);
    if (s.is_ok()) return;
    if (alive && !alive()) throw ApiError(499, "the client closed the connection", "invalid_request_error");
    throw api_error_from_status(s);
  }

  // REASONING_EFFORT for a conversation that chose no effort and no thinking switch; true when
  // it applied.
  bool default_effort(ChatPrompt& chat) const {
    const std::string& effort = options.default_reasoning_effort;
    const Json& kw = chat.chat_template_kwargs;
    if (effort.empty() || !chat.reasoning_effort.empty() || kw.contains("enable_thinking") ||
        kw.contains("thinking"))
      return false;
    chat.reasoning_effort = effort;
    chat.chat_template_kwargs["enable_thinking"] = effort != "none";
    return true;
  }
  void apply_defaults(ChatRequest& r) const {
    if (default_effort(r.chat)) r.thinking_enabled = options.default_reasoning_effort != "none";
  }

  // Takes the prompt's tokens and media: the engine frees the media's pixels once encoded,
  // which a copy held here for the request's lifetime would keep (read the prompt's size first).
  GenerationRequest chat_generation(const ChatRequest& r, RenderedPrompt& prompt, int64_t max_tokens) {
    GenerationRequest g;
    g.request_id = make_id("chatcmpl-");
    g.prompt_tokens = std::move(prompt.tokens);
    g.media = std::move(prompt.media);
    g.shared_prefix_tokens = prompt.system_tokens;
    g.sampling = r.sampling;
    g.sampling.max_tokens = max_tokens;
    g.structured = r.structured;
    g.n = r.n;
    g.parse_reasoning = true;
    g.thinking_enabled = r.thinking_enabled;
    g.tools = r.tool_choice == "none" ? Json() : r.chat.tools;
    g.tool_choice = r.tool_choice;
    g.named_tool_choice = r.named_tool_choice;
    g.parallel_tool_calls = r.parallel_tool_calls;
    g.reasoning_budget = r.reasoning_budget.value_or(options.default_thinking_budget);
    g.return_token_ids = r.return_token_ids;
    g.cache_salt = r.cache_salt;
    g.prompt_logprobs = r.prompt_logprobs.value_or(-1);
    g.priority = r.priority;
    g.drafts = r.drafts;
    return g;
  }

  MediaUrlPolicy media_policy() const { return {options.https_media}; }

  // The chat rendered with its images and videos decoded; an error about a media part
  // names the client's path of the part (media_parts.h).
  RenderedPrompt render_prompt(ChatPrompt& chat, const std::string& cache_salt) {
    if (options.reasoning_memory_bytes > 0) reasoning_memory.restore(chat.messages, cache_salt);
    const MediaSources sources = take_media_sources(chat.messages);
    auto prompt = engine.render_chat_media(chat);
    if (!prompt) throw media_error(prompt.status(), sources);
    return std::move(*prompt);
  }

  // Reply follow-ups (reply_followup.h): each finished reply appended to its request's body as
  // the client gets it, and parsed again by the endpoint's own parser on the follow-up thread.
  // Only for a reply that is a new assistant turn (not one continuing the last message), and
  // not for chats with pictures: their bodies (up to the body limit) would be copied for it,
  // and the warm-up renders text only. `has_media` must be read before the prompt's media
  // move into the request.
  bool follows_up(const ChatPrompt& chat, bool has_media) const {
    return followups.active() && chat.add_generation_prompt && !chat.continue_final_message && !has_media;
  }
  // The request's body is shared with the follow-up, not copied for it: it is the whole prompt.
  using SharedJson = std::shared_ptr<const Json>;
  // Several choices: each one's reasoning is remembered; which one continues is unknown, so
  // none is warmed up.
  void follow_chat(const SharedJson& body, const std::vector<ChoiceState>& choices, int64_t prompt_tokens) {
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
  void follow_responses(const SharedJson& body, const SharedJson& input_items, const ChoiceState& c,
                        int64_t prompt_tokens) {
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
  void follow_messages(const SharedJson& body, const ResponseMeta& meta, const ChoiceState& c,
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

  void chat_completions(const httplib::Request& req, PostBody& in, httplib::Response& res,
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

  // /v1/decisions (decision_request.h): each question's prompt runs as a request that
  // generates nothing and reports its labels' logprobs at the prompt's end.
  struct DecisionPrompt {
    std::vector<int32_t> tokens;
    std::vector<int32_t> labels;
  };

  // The question's chat prompt (thinking off) and its labels' tokens. Each label must be one
  // token of its own after the prompt: the prompt's text with the label appended must encode
  // to the prompt's ids and one more, distinct from the other labels'.
  DecisionPrompt decision_prompt(const DecisionQuestion& q) const {
    const std::string which = "question '" + q.id + "': ";
    ChatPrompt chat;
    chat.messages = Json::array({Json{{"role", "user"}, {"content", q.content}}});
    chat.chat_template_kwargs = Json{{"enable_thinking", false}};
    chat.find_system_block = false;
    auto tokens = engine.render_chat(chat);
    if (!tokens) throw bad_request(which + tokens.status().message(), "questions");
    DecisionPrompt d{std::move(*tokens), {}};
    const auto n = static_cast<int64_t>(d.tokens.size());
    if (model.context_length > 0 && n >= model.context_length)
      throw ApiError(400,
                     which + "the prompt has " + std::to_string(n) +
                         " tokens, which does not fit the context length of " +
                         std::to_string(model.context_length) + " tokens",
                     "invalid_request_error", "questions", "context_length_exceeded");
    // The labels are checked after the prompt's last tokens only (a label can merge with the
    // end of the text and nothing before it), so a long input is not encoded once per label;
    // the window's text must encode back to the window's ids for the check to mean anything
    // (a window that starts inside a word or a character may not: it grows, up to the prompt).
    std::vector<int32_t> tail;
    std::optional<std::string> text;
    for (size_t window = kDecisionLabelWindow;; window *= 8) {
      window = std::min(window, d.tokens.size());
      tail.assign(d.tokens.end() - static_cast<std::ptrdiff_t>(window), d.tokens.end());
      auto t = engine.detokenize(tail);
      if (!t) throw api_error_from_status(t.status());
      auto again = engine.tokenize(*t, false);
      if (again && *again == tail) {
        text = std::move(*t);
        break;
      }
      if (window == d.tokens.size()) break;
    }
    if (!text)
      throw bad_request(
          which +
              "this model's tokenizer does not encode the rendered chat prompt back to the same ids, "
              "so its answer labels cannot be checked",
          "questions");
    if (text->rfind("<think>") != std::string::npos &&
        (text->rfind("</think>") == std::string::npos || text->rfind("<think>") > text->rfind("</think>")))
      throw bad_request(which + "the chat template leaves a reasoning block open at the answer position",
                        "questions");
    for (const std::string& label : q.labels) {
      auto ids = engine.tokenize(*text + label, false);
      const bool one_more =
          ids && ids->size() == tail.size() + 1 && std::equal(tail.begin(), tail.end(), ids->begin());
      if (!one_more || std::find(d.labels.begin(), d.labels.end(), ids->back()) != d.labels.end())
        throw bad_request(
            which + "the answer label '" + label +
                "' is not one distinct token after the chat prompt for this tokenizer, so this model "
                "cannot answer it",
            "questions");
      d.labels.push_back(ids->back());
    }
    return d;
  }

  void decisions(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0) {
    const DecisionRequest r = parse_decision_request(parse_body(in));
    check_model(r.model);
    check_queued_choices(static_cast<int64_t>(r.questions.size()), "questions");
    std::vector<DecisionPrompt> prompts;
    for (const DecisionQuestion& q : r.questions) prompts.push_back(decision_prompt(q));
    // Submitted together: the questions share the input, so their prompts run side by side
    // (and a later request with the same input resumes from a kept prompt).
    std::vector<std::shared_ptr<GenerationSession>> sessions;
    for (const DecisionPrompt& p : prompts) {
      GenerationRequest g;
      g.request_id = make_id("dec-");
      g.prompt_tokens = p.tokens;
      g.sampling.max_tokens = 0;
      g.label_tokens = p.labels;
      sessions.push_back(start_session(std::move(g), static_cast<int64_t>(p.tokens.size()), t0));
    }
    in.lease.release();
    Json answers = Json::object();
    int64_t prompt_tokens = 0, cached_tokens = 0;
    for (size_t i = 0; i < sessions.size(); ++i) {
      wait_for(req, *sessions[i]);
      const ChoiceState& c = sessions[i]->choices().at(0);
      if (c.label_logprobs.size() != prompts[i].labels.size())
        throw ApiError(500,
                       "the engine scored " + std::to_string(c.label_logprobs.size()) + " of " +
                           std::to_string(prompts[i].labels.size()) + " labels",
                       "server_error");
      const bool ids = r.return_prompt_token_ids;
      answers[r.questions[i].id] =
          decision_answer_json(r.questions[i], c.label_logprobs, r.temperature,
                               ids ? &prompts[i].tokens : nullptr, ids ? &prompts[i].labels : nullptr);
      prompt_tokens += static_cast<int64_t>(prompts[i].tokens.size());
      cached_tokens += c.cached_prompt_tokens;
    }
    Json usage{{"prompt_tokens", prompt_tokens},
               {"completion_tokens", 0},
               {"total_tokens", prompt_tokens},
               {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
    write_json(res, 200,
               Json{{"object", "decisions"},
                    {"model", model.id},
                    {"prompt_format_version", kDecisionPromptFormatVersion},
                    {"answers", std::move(answers)},
                    {"usage", std::move(usage)}});
  }

  // A prompt's ids: text tokenized with the special tokens, or given ids checked against the
  // vocabulary (a 400 naming `param`).
  std::vector<int32_t> prompt_ids(const PromptInput& p, const char* param) const {
    if (const auto* s = std::get_if<std::string>(&p)) {
      auto t = engine.tokenize(*s, true);
      if (!t) throw api_error_from_status(t.status());
      return std::move(*t);
    }
    const auto& ids = std::get<std::vector<int32_t>>(p);
    for (int32_t id : ids)
      if (model.vocab_size > 0 && id >= model.vocab_size)
        throw bad_request("token id " + std::to_string(id) + " is out of range [0, " +
                              std::to_string(model.vocab_size) + ")",
                          param);
    return ids;
  }

  void embeddings(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0) {
    const EmbeddingRequest r = parse_embedding_request(parse_body(in));
    check_model(r.model);
    if (r.dimensions && *r.dimensions != model.hidden_size)
      throw bad_request("'dimensions' must be " + std::to_string(model.hidden_size) +
                            ": this model's embeddings cannot be shortened",
                        "dimensions");
    std::vector<std::vector<int32_t>> prompts;
    for (const PromptInput& p : r.inputs) {
      std::vector<int32_t> ids = prompt_ids(p, "input");
      if (ids.empty()) throw bad_request("an input has no tokens", "input");
      const auto n = static_cast<int64_t>(ids.size());
      if (model.context_length > 0 && n > model.context_length)
        throw context_length_exceeded(model.context_length, n, 0);
      prompts.push_back(std::move(ids));
    }
    in.lease.release();
    // In waves of a few per stream, so that a batch of thousands neither overflows the queue
    // (MAX_QUEUED) nor keeps other clients' requests waiting behind all of it.
    int64_t wave = std::max<int64_t>(1, 2 * std::max(1, model.parallel));
    if (model.max_queued_choices > 0) wave = std::min(wave, model.max_queued_choices);
    Json data = Json::array();
    int64_t prompt_tokens = 0;
    for (size_t first = 0; first < prompts.size(); first += static_cast<size_t>(wave)) {
      const size_t last = std::min(prompts.size(), first + static_cast<size_t>(wave));
      std::vector<std::shared_ptr<GenerationSession>> sessions;
      for (size_t i = first; i < last; ++i) {
        GenerationRequest g;
        g.request_id = make_id("emb-");
        g.prompt_tokens = prompts[i];
        g.sampling.max_tokens = 0;
        g.embed = true;
        sessions.push_back(start_session(std::move(g), static_cast<int64_t>(prompts[i].size()), t0));
      }
      for (size_t k = 0; k < sessions.size(); ++k) {
        wait_for(req, *sessions[k]);
        const std::vector<float>& hidden = sessions[k]->choices().at(0).embedding;
        if (hidden.empty() ||
            (model.hidden_size > 0 && static_cast<int64_t>(hidden.size()) != model.hidden_size))
          throw ApiError(500,
                         "the engine returned an embedding of " + std::to_string(hidden.size()) + " values",
                         "server_error");
        data.push_back(embedding_json(static_cast<int>(first + k), hidden, r.base64));
        prompt_tokens += static_cast<int64_t>(prompts[first + k].size());
      }
    }
    write_json(res, 200,
               Json{{"object", "list"},
                    {"data", std::move(data)},
                    {"model", model.id},
                    {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
  }

  void completions(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0) {
    CompletionRequest r = [&] {  // the body is let go once read: the prompts hold their text
      const Json body = parse_body(in);
      CompletionRequest parsed = parse_completion_request(body);
      if (parsed.structured.kind == StructuredOutput::Kind::kJsonSchema)
        parsed.structured.schema_text = ordered_schema_text(body, SchemaSource::kChat);
      return parsed;
    }();
    check_model(r.model);
    check_queued_choices(static_cast<int64_t>(r.prompts.size()) * r.n, r.prompts.size() > 1 ? "prompt" : "n");
    ResponseMeta meta = meta_for("cmpl-", model.id);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> echo;
    for (PromptInput& p : r.prompts) {
      std::vector<int32_t> ids = prompt_ids(p, "prompt");
      std::string text;
      if (auto* s = std::get_if<std::string>(&p)) {
        if (r.echo)
          text = std::move(*s);
        else
          std::string().swap(*s);  // tokenized: the text is not needed any more
      } else if (r.echo) {
        auto d = engine.detokenize(ids);
        if (!d) throw api_error_from_status(d.status());
        text = *d;
      }
      if (truncate_prompt(ids, r.truncate_prompt_tokens, false) && r.echo) {
        auto d = engine.detokenize(ids);  // the echo is the prompt that ran
        if (!d) throw api_error_from_status(d.status());
        text = *d;
      }
      resolve_max_tokens(r.max_tokens, static_cast<int64_t>(ids.size()), false);
      prompts.push_back(std::move(ids));
      echo.push_back(std::move(text));  // empty without echo
    }
    std::vector<std::shared_ptr<GenerationSession>> sessions;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationRequest g;
      g.request_id = i == 0 ? meta.id : meta.id + "-" + std::to_string(i);
      g.prompt_tokens = prompts[i];
      g.sampling = r.sampling;
      g.sampling.max_tokens = *r.max_tokens;
      g.structured = r.structured;
      g.n = r.n;
      g.return_token_ids = r.return_token_ids;
      g.cache_salt = r.cache_salt;
      g.priority = r.priority;
      g.drafts = r.drafts;
      if (r.echo && r.logprobs >= 0) g.prompt_logprobs = r.logprobs;  // the echoed prompt is scored too
      if (r.prompt_logprobs) g.prompt_logprobs = std::max(g.prompt_logprobs, *r.prompt_logprobs);
      sessions.push_back(start_session(std::move(g), static_cast<int64_t>(prompts[i].size()), t0));
    }
    in.lease.release();
    if (r.stream) {
      auto total = std::make_shared<UsageTotals>();
      std::vector<std::shared_ptr<StreamFormatter>> fmts;
      for (size_t i = 0; i < sessions.size(); ++i)
        fmts.push_back(std::make_shared<CompletionStreamFormatter>(
            meta, r.n, r.include_usage, echo[i], r.logprobs >= 0, static_cast<int>(i) * r.n,
            i + 1 == sessions.size(), total,
            r.return_token_ids ? std::make_shared<const std::vector<int32_t>>(prompts[i]) : nullptr,
            ContinuousUsage{r.continuous_usage ? static_cast<int64_t>(prompts[i].size()) : -1}));
      stream(res, sessions, fmts);
      return;
    }
    std::vector<ChoiceState> all;
    UsageTotals total;
    for (auto& s : sessions) {
      wait_for(req, *s);
      all.insert(all.end(), s->choices().begin(), s->choices().end());
      total += s->usage();
    }
    Json prompt_lps = Json::array();  // vLLM's prompt_logprobs, per choice
    if (r.prompt_logprobs) {
      for (ChoiceState& c : all) {
        prompt_lps.push_back(vllm_prompt_logprobs_json(c.prompt_logprobs, *r.prompt_logprobs));
        if (r.echo && r.logprobs >= 0)
          keep_top_logprobs(c.prompt_logprobs, r.logprobs);  // the echo's own count
      }
    }
    Json out = text_completion_json(meta, all, r.echo ? echo : std::vector<std::string>{}, r.n, total,
                                    r.logprobs >= 0);
    for (size_t i = 0; i < prompt_lps.size(); ++i) out["choices"][i]["prompt_logprobs"] = prompt_lps[i];
    if (r.return_token_ids)  // vLLM's places: each choice holds its prompt's ids and its own
      for (size_t i = 0; i < all.size(); ++i) {
        out["choices"][i]["prompt_token_ids"] = prompts[i / static_cast<size_t>(r.n)];
        out["choices"][i]["token_ids"] = all[i].token_ids;
      }
    write_json(res, 200, out);
  }

  void responses(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0) {
    const auto shared_body = std::make_shared<const Json>(parse_body(in));
    const Json& body = *shared_body;
    std::optional<StoredResponse> previous;
    if (const Json* prev = json_field(body, "previous_response_id")) {
      if (!prev->is_string()) throw bad_request("'previous_response_id' must be a string", "previous_response_id");
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
    Json response = response_object_json(
        meta, echo, incomplete ? "incomplete" : "completed",
        response_output_items(c, meta.id.substr(5), r.output_logprobs, r.sealed_reasoning),
        response_usage_json(session->usage()));
    if (keep) keep(response);
    write_json(res, 200, response);
  }

  // GET / DELETE /v1/responses/{id}: a stored response (404 when never stored or forgotten).
  void stored_response(const httplib::Request& req, httplib::Response& res, bool erase) {
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

  // POST /v1/messages (Anthropic): any model name is accepted (see anthropic_messages.h).
  void messages(const httplib::Request& req, PostBody& in, httplib::Response& res, Clock::time_point t0) {
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

  void count_tokens(const httplib::Request&, PostBody& in, httplib::Response& res, Clock::time_point) {
    MessagesRequest r = parse_messages_request(parse_body(in), /*count_tokens=*/true, media_policy());
    apply_defaults(r.chat);
    auto prompt = render_prompt(r.chat.chat, r.chat.cache_salt);
    write_json(res, 200, {{"input_tokens", prompt.tokens.size()}});
  }

  void tokenize(const httplib::Request&, PostBody& in, httplib::Response& res, Clock::time_point) {
    TokenizeRequest r = parse_tokenize_request(parse_body(in), media_policy());
    check_model(r.model);
    Expected<std::vector<int32_t>> ids = std::vector<int32_t>{};
    if (r.is_chat) {
      r.chat.find_system_block = false;  // only the tokens are wanted
      (void)default_effort(r.chat);      // the prompt the chat route would run
      ids = std::move(render_prompt(r.chat, "").tokens);
    } else {
      ids = engine.tokenize(r.prompt, r.add_special_tokens);
    }
    const bool token_strs = r.return_token_strs;
    r = TokenizeRequest();  // the text is not needed any more
    if (!ids) throw api_error_from_status(ids.status());
    // Written straight into the answer's text (same bytes as the Json value's dump): as a Json
    // array, each of a long prompt's millions of ids took 16 bytes more, and its text again.
    std::string out = "{\"count\":" + std::to_string(ids->size()) +
                      ",\"max_model_len\":" + std::to_string(model.context_length) + ",\"tokens\":[";
    out.reserve(out.size() + ids->size() * 8 + 32);
    for (size_t i = 0; i < ids->size(); ++i) {
      if (i) out += ',';
      out += std::to_string((*ids)[i]);
    }
    out += "],\"token_strs\":";
    if (!token_strs) {
      out += "null}";
    } else {
      constexpr size_t kSlice = 4096;  // token strings are made a slice at a time
      out += '[';
      for (size_t first = 0; first < ids->size(); first += kSlice) {
        const size_t last = std::min(ids->size(), first + kSlice);
        auto strs =
            engine.token_strings(std::vector<int32_t>(ids->begin() + static_cast<std::ptrdiff_t>(first),
                                                      ids->begin() + static_cast<std::ptrdiff_t>(last)));
        if (!strs) throw api_error_from_status(strs.status());
        for (size_t i = 0; i < strs->size(); ++i) {
          if (first + i) out += ',';
          out += Json((*strs)[i]).dump(-1, ' ', false, Json::error_handler_t::replace);
        }
      }
      out += "]}";
    }
    set_json_text(res, 200, std::move(out));
  }

  void detokenize(const httplib::Request&, PostBody& in, httplib::Response& res, Clock::time_point) {
    DetokenizeRequest r = parse_detokenize_request(parse_body(in));
    check_model(r.model);
    for (int32_t id : r.tokens)
      if (model.vocab_size > 0 && id >= model.vocab_size)
        throw bad_request("token id " + std::to_string(id) + " is out of range [0, " +
                              std::to_string(model.vocab_size) + ")",
                          "tokens");
    auto text = engine.detokenize(r.tokens);
    if (!text) throw api_error_from_status(text.status());
    write_json(res, 200, {{"prompt", *text}});
  }

  void health(const httplib::Request&, httplib::Response& res, Clock::time_point) {
    EngineHealth h = engine.health();
    Json out = {
        {"ok", h.ok && !h.loading},
        {"status", h.loading ? "loading" : (h.ok ? "ok" : "error")},
        {"backend", "tensorfold"},
        {"model", model.id},
        {"device", model.device},
        {"busy", h.busy},
        {"requests_running", h.requests_running},
        {"requests_waiting", h.requests_waiting},
        {"requests_total", h.requests_total},
        {"prompt_tokens_total", h.prompt_tokens_total},
        {"completion_tokens_total", h.completion_tokens_total},
        {"cached_tokens_total", h.cached_tokens_total},
        {"streams",
         {{"decoding", h.streams_decoding}, {"prefilling", h.streams_prefilling}, {"max", h.streams_max}}},
        {"context_length", h.context_length},
        {"pool_tokens", h.pool_tokens},
        {"pool_free_tokens", h.pool_free_tokens},
        {"kept_prompts", h.kept_prompts},
        {"kept_prompt_tokens", h.kept_prompt_tokens},
        {"kept_mix",
         {{"prompt_end", h.kept_mix.prompt_end},
          {"system_block", h.kept_mix.system_block},
          {"shared_prefix", h.kept_mix.shared_prefix},
          {"restored", h.kept_mix.restored}}},
        {"prompts_resumed_total", h.prompts_resumed_total},
        {"chats_continued", h.chats_continued_total},
        {"reply_warmups_total", h.reply_warmups_total},
        {"reply_warmup_tokens_total", h.reply_warmup_tokens_total},
        {"iteration_s", h.iteration_s},
        {"iteration_s_mean", h.iteration_s_mean},
        {"prompt_store", h.prompt_store ? Json{{"files", h.prompt_store_files},
                                               {"blocks", h.prompt_store_blocks},
                                               {"bytes", h.prompt_store_bytes},
                                               {"written_total", h.prompt_store_written_total},
                                               {"written_bytes_total", h.prompt_store_written_bytes_total},
                                               {"skipped_total", h.prompt_store_skipped_total},
                                               {"restored_total", h.prompt_store_restored_total},
                                               {"failed_reads_total", h.prompt_store_failed_reads_total},
                                               {"read_ahead_total", h.prompt_store_read_ahead_total}}
                                        : Json(nullptr)},
        {"vision_patches_total", h.vision_patches_total},
        {"vision_patches_skipped_total", h.vision_patches_skipped_total},
        {"prompt_budget",
         {{"bytes", prompt_budget.capacity()},
          {"held_bytes", prompt_budget.held()},
          {"waiting", prompt_budget.waiting()}}},
        {"device_memory",
         {{"in_use_bytes", h.device_memory_in_use_bytes},
          {"held_bytes", h.device_memory_held_bytes},
          {"step_peak_bytes", h.step_memory_peak_bytes}}},
        {"speculation",
         {{"steps_total", h.spec_steps_total},
          {"drafted_tokens_total", h.drafted_tokens_total},
          {"accepted_tokens_total", h.accepted_tokens_total},
          {"mtp_streams_total", h.mtp_streams_total},
          {"mtp_drafted_tokens_total", h.mtp_drafted_tokens_total},
          {"mtp_accepted_tokens_total", h.mtp_accepted_tokens_total}}},
        {"loops",
         {{"reasoning_closed_total", h.loop_guard_closed_total},
          {"repetition_stops_total", h.repetition_stops_total}}}};
    write_json(res, h.ok && !h.loading ? 200 : 503, out);
  }

  // llama.cpp's GET /props, for the clients and UIs that read a server's window, slots, template
  // and modalities from it (its n_ctx is the per-request window, CONTEXT).
  Json props_json() const {
    const int64_t n_predict = options.default_max_tokens > 0 ? options.default_max_tokens : -1;
    return {{"default_generation_settings",
             {{"n_ctx", model.context_length},
              {"model", model.id},
              {"params", {{"n_predict", n_predict}, {"max_tokens", n_predict}}}}},
            {"total_slots", model.parallel},
            {"model_alias", model.id},
            {"model_path", model.root},
            {"chat_template", model.chat_template},
            {"bos_token", model.bos_token},
            {"eos_token", model.eos_token},
            {"modalities", {{"vision", model.vision}, {"audio", false}}},
            {"build_info", std::string("tensorfold ") + kVersion}};
  }

  void register_routes() {
    http.Get("/v1/models", handle("/v1/models", [this](const auto&, auto& res, auto) {
      write_json(res, 200, {{"object", "list"}, {"data", Json::array({model_json()})}, {"has_more", false},
                            {"first_id", model.id}, {"last_id", model.id}});
    }));
    http.Get(R"(/v1/models/(.+))", handle("/v1/models/{id}", [this](const auto& req, auto& res, auto) {
      std::string id = req.matches[1];
      if (id != model.id) throw model_not_found(id);
      write_json(res, 200, model_json());
    }));
    auto bind_post = [this](const std::string& path, PostHandler fn) {
      http.Post(path, handle_post(path, fn));
    };
    bind_post("/v1/chat/completions", &Impl::chat_completions);
    bind_post("/v1/completions", &Impl::completions);
    bind_post("/v1/responses", &Impl::responses);
    bind_post("/v1/decisions", &Impl::decisions);
    bind_post("/v1/embeddings", &Impl::embeddings);
    for (bool erase : {false, true}) {
      auto fn = handle("/v1/responses/{id}", [this, erase](const auto& req, auto& res, auto) {
        stored_response(req, res, erase);
      });
      if (erase)
        http.Delete(R"(/v1/responses/([^/]+))", dropping_body(fn, options.max_body_bytes, options.body_pace));
      else http.Get(R"(/v1/responses/([^/]+))", fn);
    }
    bind_post("/v1/messages", &Impl::messages);
    bind_post("/v1/messages/count_tokens", &Impl::count_tokens);
    bind_post("/tokenize", &Impl::tokenize);
    bind_post("/v1/tokenize", &Impl::tokenize);
    bind_post("/detokenize", &Impl::detokenize);
    bind_post("/v1/detokenize", &Impl::detokenize);
    http.Get("/health", handle("/health", [this](const auto& req, auto& res, auto t0) { health(req, res, t0); }));
    http.Get("/props",
             handle("/props", [this](const auto&, auto& res, auto) { write_json(res, 200, props_json()); }));
    // A page without data (it asks /health, with the key): a browser cannot send a bearer token
    // when it opens a URL.
    // So is the chat page at / (it talks to /v1/chat/completions with the key).
    for (const auto& [path, page] :
         {std::pair{"/dashboard", dashboard_html()}, std::pair{"/", chat_page_html()}})
      http.Get(path, handle(
                         path,
                         [page](const auto&, auto& res, auto) {
                           res.set_header("Cache-Control", "no-store");
                           res.set_header("X-Frame-Options", "DENY");
                           res.set_content(std::string(page), "text/html; charset=utf-8");
                         },
                         /*needs_key=*/false));
    for (const char* path : {"/metrics", "/v1/metrics"})
      http.Get(path, handle(path, [this](const auto&, auto& res, auto) {
        res.set_content(metrics.render(engine.health()), "text/plain; version=0.0.4; charset=utf-8");
      }));
    // Any other path of a method with a body: 404 (the error handler's), the body dropped
    // within the limit rather than read whole by httplib (request_body.h).
    auto no_route = dropping_body([](const httplib::Request&, httplib::Response& res) { res.status = 404; },
                                  options.max_body_bytes, options.body_pace);
    http.Post(".*", no_route);
    http.Put(".*", no_route);
    http.Patch(".*", no_route);
    http.Delete(".*", no_route);
    // A browser's CORS preflight, on any path and without a key (it never sends one); any other
    // OPTIONS is a 404 as before. Every answer gets its CORS headers just before it is written,
    // httplib's errors and streams included (cors.h).
    if (cors.enabled()) {
      http.Options(".*", [this](const httplib::Request& req, httplib::Response& res) {
        if (is_cors_preflight(req))
          answer_cors_preflight(cors, req, res);
        else
          res.status = 404;
      });
      http.set_post_routing_handler(
          [this](const httplib::Request& req, httplib::Response& res) { add_cors_headers(cors, req, res); });
    }
    // Errors that httplib answers itself get an error object too (http_answers.h).
    http.set_error_handler(
        [timeout_s = options.head_timeout_s](const httplib::Request& req, httplib::Response& res) {
          answer_httplib_error(req, res, timeout_s);
        });
    http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
      write_error(res, ApiError(500, "internal error", "server_error"), is_anthropic_path(req.path));
    });
  }
};

HttpServer::HttpServer(EngineApi& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  // Every running or queued request holds a worker while it waits: with fewer workers than
  // the engine admits (PARALLEL + MAX_QUEUED), a busy server stopped answering /health and
  // never reached its 429, the rest of the connections waiting unseen in httplib's queue.
  // More start on demand (elastic_thread_pool.h): idle keep-alive sockets and slow clients
  // hold workers too, one connection each, up to about half the open-file limit.
  const size_t threads = static_cast<size_t>(kSpareThreads + impl_->model.max_queued_choices +
                                             std::max<int64_t>(engine.health().streams_max, 0));
  const size_t max_threads = std::clamp(raise_open_file_limit() / 2, threads, kMaxThreads);
  impl_->http.new_task_queue = [threads, max_threads] { return new ElasticThreadPool(threads, max_threads); };
  impl_->http.set_payload_max_length(impl_->options.max_body_bytes);
  impl_->http.set_read_timeout(impl_->options.read_timeout_s, 0);
  impl_->http.set_write_timeout(30, 0);
  // httplib closes a kept-alive connection after 5 requests; clients then reconnect every 5.
  impl_->http.set_keep_alive_max_count(1000);
  // Streamed chunks go out at once (Nagle would hold a small chunk back ~40 ms).
  impl_->http.set_tcp_nodelay(true);
  impl_->http.set_socket_options([impl = impl_.get()](int sock) {
    httplib::default_socket_options(sock);
    // A connection reaches accept() (and a worker) only once its first bytes arrive: sockets
    // opened and left silent cost no worker (after this long the kernel hands them over anyway).
    const int defer_s = 5;
    ::setsockopt(sock, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof defer_s);
    impl->listen_socket = sock;
  });
  impl_->register_routes();
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  if (!impl_->keys) return impl_->keys_status;
  if (!impl_->cors_status.is_ok()) return impl_->cors_status;
  if (impl_->options.port == 0) {
    impl_->bound_port = impl_->http.bind_to_any_port(impl_->options.host);
  } else {
    impl_->bound_port = impl_->http.bind_to_port(impl_->options.host, impl_->options.port) ? impl_->options.port : -1;
  }
  if (impl_->bound_port <= 0)
    return unavailable("cannot bind " + impl_->options.host + ":" + std::to_string(impl_->options.port) +
                       " (port in use or address not available)");
  // Debian's compiled cpp-httplib listens with a backlog of 5: a burst of clients (81 at once
  // in serve_hostile) overflowed it and the dropped connections retried their SYN after 1, 3,
  // 7, 15 s, so requests arrived tens of seconds late. Listening again on the bound socket
  // raises the queue (Linux takes the new backlog).
  if (impl_->listen_socket >= 0) ::listen(impl_->listen_socket, kListenBacklog);
  return Status::ok();
}

int HttpServer::port() const { return impl_->bound_port; }

Expected<size_t> HttpServer::reload_api_keys() {
  if (!impl_->keys) return impl_->keys_status;
  return impl_->keys->reload();
}

const std::string& HttpServer::api_key_file() const { return impl_->options.api_key_file; }

Status HttpServer::listen() {
  if (impl_->bound_port <= 0) TF_RETURN_IF_ERROR(bind());
  if (!impl_->http.listen_after_bind()) return internal_error("HTTP server stopped with an error");
  return Status::ok();
}

Status HttpServer::start_background() {
  TF_RETURN_IF_ERROR(bind());
  impl_->thread = std::thread([this] { impl_->http.listen_after_bind(); });
  for (int i = 0; i < 500 && !impl_->http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return Status::ok();
}

void HttpServer::stop() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace tf::server
