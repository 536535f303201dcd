// The OpenAI-compatible HTTP server (cpp-httplib) over an EngineApi.
//
// One route table (http_server.cc) and one wrapper that turns ApiError, Status and
// any exception into an OpenAI error object with the right HTTP status, so a hostile
// request never takes the server down. Body limit 96 MiB (413), decoded bodies included;
// bodies being turned into prompts are bounded together by the prompt budget.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/body_pace.h"
#include "server/engine_api.h"

namespace tf::server {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 8888;                 // 0: any free port (see HttpServer::port())
  std::string api_key;  // API_KEY: keys separated by commas; with api_key_file empty too: no authentication
  std::string api_key_file;  // API_KEY_FILE: one key per line, read again by reload_api_keys() (api_keys.h)
  int64_t default_max_tokens = 4096;  // chat/responses cap when the request sets none; 0: fill the window
  // REASONING_EFFORT: the effort of a chat (responses, messages) request that chose none, neither
  // reasoning_effort nor an enable_thinking / thinking kwarg ("": the template's own, max).
  std::string default_reasoning_effort;
  // THINKING_BUDGET: the reasoning tokens of a request that sets no thinking budget (-1: no limit).
  int64_t default_thinking_budget = -1;
  size_t max_body_bytes = size_t{96} << 20;
  // PROMPT_BUDGET_MIB: the request bodies read, parsed, rendered and tokenized at once, in
  // bytes (byte_budget.h). Each costs a few times its size in that phase, the tokenizer's
  // share included, so this bounds the phase's memory whatever clients send. A body waits for
  // room (then 503); one larger than the budget is refused (413). A body whose size is not
  // announced (chunked or compressed) is charged as its decoded bytes arrive, in 1 MiB steps
  // (body_intake.h). 0: no budget.
  int64_t prompt_budget_bytes = int64_t{128} << 20;
  int read_timeout_s = 30;         // slow-loris bodies are dropped after this
  // How fast a body must arrive (30 s, plus a second a KiB; request_body.h): one that falls
  // behind is answered 408 and its connection closed.
  BodyPace body_pace;
  // A request's line and headers must arrive within this from their first byte (408 after it),
  // and are held to 64 KiB and 256 header fields (431): bounded_http_server.h.
  int head_timeout_s = 30;
  bool https_media = false;        // VISION_URLS: https:// media URLs go on to the engine (it fetches them)
  // STREAM_SMOOTH: streamed tokens are paced to even out speculative bursts, each held at
  // most this long (StreamPacer; 0: sent as they come).
  int stream_smooth_ms = 400;
  // REASONING_MEMORY_MIB: the reasoning of recent replies given back to conversations whose
  // client dropped it (reasoning_memory.h); 0: off.
  int64_t reasoning_memory_bytes = int64_t{64} << 20;
  // REPLY_WARMUP: a finished reply is prefilled while no request waits, so that the chat's
  // next turn resumes after it (reply_followup.h).
  bool reply_warmup = true;
  // CORS_ORIGINS: the web origins whose pages may call the server from a browser, separated by
  // commas; "*": any (the default); "": none, no CORS header (cors.h).
  std::string cors_origins = "*";
};

class HttpServer {
 public:
  HttpServer(EngineApi& engine, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the port (port 0 picks a free one); then port() is the bound port.
  Status bind();
  int port() const;
  // Serves until stop(); call after bind().
  Status listen();
  // Binds and serves on a background thread (tests, embedding).
  Status start_background();
  void stop();
  // Reads API_KEY_FILE again (SIGHUP): how many keys are now in force, or why the old ones stay.
  Expected<size_t> reload_api_keys();
  const std::string& api_key_file() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::server
