// See http_server.h. Routes are declared in one table in Impl::register_routes; the
// wrapper `handle` owns error mapping, auth, request ids and request metrics. Impl is declared
// in http_server_impl.h; the routes' handlers are in the http_*_route(s).cc files.
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

#include "engine/structured_output.h"
#include "server/api_error.h"
#include "server/chat_page.h"
#include "server/cors.h"
#include "server/dashboard_page.h"
#include "server/elastic_thread_pool.h"
#include "server/generation_session.h"
#include "server/http_answers.h"
#include "server/http_server_impl.h"
#include "server/media_parts.h"
#include "server/open_files.h"
#include "server/peer_socket.h"
#include "server/request_body.h"

namespace tf::server {

namespace {

// HTTP workers beyond those that requests in the engine hold (/health, /metrics, tokenize,
// requests being read or refused with 429).
constexpr int64_t kSpareThreads = 64;
// Pending connections the kernel queues before the accept loop takes them (SOMAXCONN caps it).
constexpr int kListenBacklog = 1024;
// The most HTTP workers (connections being served at once) however high the open-file limit.
constexpr size_t kMaxThreads = 4096;

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

HttpServer::Impl::Impl(EngineApi& e, ServerOptions o)
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

void HttpServer::Impl::set_request_id(const httplib::Request& req, httplib::Response& res) {
  std::string rid = req.get_header_value("x-request-id");
  res.set_header("x-request-id", rid.empty() ? make_id("req-") : rid);
}

void HttpServer::Impl::record(const std::string& endpoint, const httplib::Response& res,
                              Clock::time_point t0) {
  // A handler that sets no status (streams, /metrics) answers 200: httplib fills it in after us.
  metrics.record_request(endpoint, res.status == -1 ? 200 : res.status,
                         std::chrono::duration<double>(Clock::now() - t0).count());
}

httplib::Server::Handler HttpServer::Impl::handle(std::string endpoint, Handler h, bool needs_key) {
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

httplib::Server::HandlerWithContentReader HttpServer::Impl::handle_post(std::string endpoint,
                                                                        PostHandler fn) {
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

httplib::Server::HandlerWithContentReader HttpServer::Impl::dropping_body(httplib::Server::Handler h,
                                                                          size_t max_bytes, BodyPace pace) {
  return [h = std::move(h), max_bytes, pace](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& reader) {
    RequestBody body(req, reader, max_bytes, pace);
    body.discard_rest();
    h(req, res);
    if (body.abandoned()) close_after_answer(res);
  };
}

void HttpServer::Impl::close_after_answer(httplib::Response& res) {
  res.set_header("Connection", "close");
  close_connection_after_answer();
}

void HttpServer::Impl::check_auth(const httplib::Request& req) const {
  if (!keys->required()) return;
  // OpenAI clients send a bearer token, Anthropic's x-api-key.
  if (!keys->accepts(presented_key(req.get_header_value("Authorization"), req.get_header_value("x-api-key"))))
    throw ApiError(401, "Incorrect API key provided.", "invalid_request_error", std::nullopt,
                   "invalid_api_key");
}

void HttpServer::Impl::check_model(const std::optional<std::string>& name) const {
  if (name && !name->empty() && *name != model.id) throw model_not_found(*name);
}

void HttpServer::Impl::check_queued_choices(int64_t choices, const char* param) const {
  const int64_t most = model.max_queued_choices;
  if (most > 0 && choices > most)
    throw bad_request("this request asks for " + std::to_string(choices) +
                          " choices; the server queues at most " + std::to_string(most) +
                          " at once (MAX_QUEUED)",
                      param);
}

Json HttpServer::Impl::model_json() const {
  // OpenAI's model object plus Anthropic's fields (type, display_name, created_at): both SDKs read it.
  return {{"id", model.id},
          {"object", "model"},
          {"created", model.created},
          {"owned_by", "tensorfold"},
          {"root", model.root},
          {"parent", nullptr},
          {"max_model_len", model.context_length},
          {"permission", Json::array()},
          {"type", "model"},
          {"display_name", model.id},
          {"created_at", rfc3339(model.created)}};
}

bool HttpServer::Impl::truncate_prompt(std::vector<int32_t>& tokens, std::optional<int64_t> keep,
                                       bool has_media) const {
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

int64_t HttpServer::Impl::resolve_max_tokens(std::optional<int64_t> requested, int64_t prompt_tokens,
                                             bool use_default) const {
  int64_t ctx = model.context_length;
  if (prompt_tokens >= ctx && ctx > 0)
    throw context_length_exceeded(ctx, prompt_tokens, requested.value_or(1));
  int64_t room = ctx - prompt_tokens;
  if (!requested) {
    if (use_default && options.default_max_tokens > 0) return std::min(options.default_max_tokens, room);
    return room;
  }
  if (*requested > room) throw context_length_exceeded(ctx, prompt_tokens, *requested);
  return *requested;
}

ResponseMeta HttpServer::Impl::meta_for(const std::string& prefix, const std::string& model_id) {
  return {make_id(prefix), unix_now(), model_id};
}

void HttpServer::Impl::stream(httplib::Response& res,
                              std::vector<std::shared_ptr<GenerationSession>> sessions,
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

std::optional<std::string> HttpServer::Impl::grammar_error_param(bool tool_grammar,
                                                                 const std::string& structured_param,
                                                                 const Status& s) {
  if (s.code() != StatusCode::kInvalidArgument) return std::nullopt;
  if (tool_grammar) {
    if (engine::is_grammar_too_large(s)) return "tools";
    if (s.message().starts_with("tool_choice")) return "tool_choice";
    return std::nullopt;
  }
  if (!structured_param.empty() && s.message().starts_with(structured_param + ": ")) return structured_param;
  return std::nullopt;
}

std::shared_ptr<GenerationSession> HttpServer::Impl::start_session(GenerationRequest g, int64_t prompt_tokens,
                                                                   Clock::time_point t0) {
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

std::optional<std::string> HttpServer::Impl::quoted_field(const Status& s) {
  if (s.code() != StatusCode::kInvalidArgument || !s.message().starts_with("'")) return std::nullopt;
  const size_t end = s.message().find('\'', 1);
  if (end == std::string::npos || end == 1) return std::nullopt;
  std::string field = s.message().substr(1, end - 1);
  for (char ch : field)
    if (!(std::islower(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.')) return std::nullopt;
  return field;
}

void HttpServer::Impl::wait_for(const httplib::Request& req, GenerationSession& session) {
  std::function<bool()> alive = connection_alive_check(req.remote_addr, req.remote_port, req.local_port);
  session.set_alive_check(alive);
  Status s = session.wait();
  session.set_alive_check(nullptr);
  if (s.is_ok()) return;
  if (alive && !alive()) throw ApiError(499, "the client closed the connection", "invalid_request_error");
  throw api_error_from_status(s);
}

bool HttpServer::Impl::default_effort(ChatPrompt& chat) const {
  const std::string& effort = options.default_reasoning_effort;
  const Json& kw = chat.chat_template_kwargs;
  if (effort.empty() || !chat.reasoning_effort.empty() || kw.contains("enable_thinking") ||
      kw.contains("thinking"))
    return false;
  chat.reasoning_effort = effort;
  chat.chat_template_kwargs["enable_thinking"] = effort != "none";
  return true;
}

void HttpServer::Impl::apply_defaults(ChatRequest& r) const {
  if (default_effort(r.chat)) r.thinking_enabled = options.default_reasoning_effort != "none";
}

GenerationRequest HttpServer::Impl::chat_generation(const ChatRequest& r, RenderedPrompt& prompt,
                                                    int64_t max_tokens) {
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

MediaUrlPolicy HttpServer::Impl::media_policy() const { return {options.https_media}; }

RenderedPrompt HttpServer::Impl::render_prompt(ChatPrompt& chat, const std::string& cache_salt) {
  if (options.reasoning_memory_bytes > 0) reasoning_memory.restore(chat.messages, cache_salt);
  const MediaSources sources = take_media_sources(chat.messages);
  auto prompt = engine.render_chat_media(chat);
  if (!prompt) throw media_error(prompt.status(), sources);
  return std::move(*prompt);
}

bool HttpServer::Impl::follows_up(const ChatPrompt& chat, bool has_media) const {
  return followups.active() && chat.add_generation_prompt && !chat.continue_final_message && !has_media;
}

void HttpServer::Impl::register_routes() {
  http.Get("/v1/models", handle("/v1/models", [this](const auto&, auto& res, auto) {
             write_json(res, 200,
                        {{"object", "list"},
                         {"data", Json::array({model_json()})},
                         {"has_more", false},
                         {"first_id", model.id},
                         {"last_id", model.id}});
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
    auto fn = handle("/v1/responses/{id}",
                     [this, erase](const auto& req, auto& res, auto) { stored_response(req, res, erase); });
    if (erase)
      http.Delete(R"(/v1/responses/([^/]+))", dropping_body(fn, options.max_body_bytes, options.body_pace));
    else
      http.Get(R"(/v1/responses/([^/]+))", fn);
  }
  bind_post("/v1/messages", &Impl::messages);
  bind_post("/v1/messages/count_tokens", &Impl::count_tokens);
  bind_post("/tokenize", &Impl::tokenize);
  bind_post("/v1/tokenize", &Impl::tokenize);
  bind_post("/detokenize", &Impl::detokenize);
  bind_post("/v1/detokenize", &Impl::detokenize);
  http.Get("/health",
           handle("/health", [this](const auto& req, auto& res, auto t0) { health(req, res, t0); }));
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
    impl_->bound_port =
        impl_->http.bind_to_port(impl_->options.host, impl_->options.port) ? impl_->options.port : -1;
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
  for (int i = 0; i < 500 && !impl_->http.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return Status::ok();
}

void HttpServer::stop() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace tf::server
