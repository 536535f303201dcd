// `tensorfold serve`: loads a checkpoint (or the built-in demo checkpoint when
// none is given), starts the engine and serves the OpenAI-compatible API until
// SIGINT/SIGTERM. Every flag also reads its environment variable (the names of
// ../shared/spec/system.md), so `PARALLEL=2 tensorfold serve` works; a flag
// given on the command line wins over the environment.
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <pthread.h>
#include <string>
#include <thread>

#include "apps/commands.h"
#include "core/logging.h"
#include "engine/demo_checkpoint.h"
#include "engine/engine.h"
#include "server/http_server.h"

namespace tf::apps {
namespace {

struct ServeOptions {
  engine::EngineOptions engine;
  server::ServerOptions http;
  std::string cache_dir;
  int tp = 1;
};

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tensorfold";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tensorfold";
  return ".tensorfold-cache";
}

[[noreturn]] void fail(const std::string& message) {
  std::cerr << "tensorfold serve: " << message << "\n";
  std::exit(2);
}

int serve(ServeOptions& o) {
  // SIGINT/SIGTERM are handled by one thread (sigwait), so every other thread
  // (HTTP, engine) starts with them blocked.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  if (o.tp != 1) fail("--tp " + std::to_string(o.tp) + ": tensor parallelism across GPUs arrives with the CUDA backend");
  if (o.engine.model_dir.empty()) {
    TF_LOG_INFO("no --model given: serving the built-in demo checkpoint (random weights; the text is gibberish)");
    auto dir = ensure_demo_checkpoint(o.cache_dir);
    if (!dir) fail(dir.status().to_string());
    o.engine.model_dir = dir->string();
    if (o.engine.served_name.empty()) o.engine.served_name = "GLM-5.3-Flash-demo";
  }
  TF_LOG_INFO("loading {}", o.engine.model_dir);
  auto eng = engine::Engine::create(o.engine);
  if (!eng) fail(eng.status().to_string());
  server::HttpServer http(**eng, o.http);
  if (Status s = http.bind(); !s.is_ok()) fail(s.to_string());
  const auto info = (*eng)->model_info();
  std::cout << "tensorfold: serving " << info.id << " (window " << info.context_length << " tokens, PARALLEL="
            << o.engine.parallel << "), listening on http://" << o.http.host << ":" << http.port() << std::endl;

  std::thread signals([&http, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    TF_LOG_INFO("signal {}: stopping", sig);
    http.stop();
  });
  Status s = http.listen();
  // listen() also returns when the port fails; wake the signal thread either way.
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  if (!s.is_ok()) fail(s.to_string());
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API (port 8888)");
  auto o = std::make_shared<ServeOptions>();
  o->engine.served_name.clear();
  o->cache_dir = default_cache_dir();
  cmd->add_option("--model,-m", o->engine.model_dir,
                  "checkpoint folder (config.json, tokenizer.json, *.safetensors); none: the built-in demo")
      ->envname("MODEL_DIR");
  cmd->add_option("--served-name,--name", o->engine.served_name, "model id in the API (default: the folder name)")
      ->envname("SERVED_NAME");
  cmd->add_option("--host", o->http.host, "address to bind")->envname("HOST")->capture_default_str();
  cmd->add_option("--port", o->http.port, "port (0: any free port)")
      ->envname("PORT")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--parallel", o->engine.parallel, "concurrent decoding streams (PARALLEL)")
      ->envname("PARALLEL")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--context", o->engine.context, "per-request window in tokens; 0 = the largest that fits")
      ->envname("CONTEXT")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kv", o->engine.kv, "cache storage: fp8, bf16 or f32")
      ->envname("KV")
      ->check(CLI::IsMember({"fp8", "bf16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--memory-reserve-gib", o->engine.memory_reserve_gib, "memory left free for the OS and other work")
      ->envname("MEMORY_RESERVE_GIB")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kv-pool-gib", o->engine.kv_pool_gib, "cap on the cache pool (0: no cap)")
      ->envname("KV_POOL_GIB")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-tokens", o->http.default_max_tokens,
                  "max_tokens when a chat/responses request sets none (0: fill the window)")
      ->envname("MAX_TOKENS")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-waiting", o->engine.max_waiting, "requests that may wait beyond PARALLEL before 429")
      ->envname("MAX_QUEUED")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", o->engine.prefill_chunk, "prompt tokens per request and step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--tp", o->tp, "tensor-parallel ranks (GPUs)")->envname("TP")->capture_default_str();
  cmd->add_option("--api-key", o->http.api_key, "require this bearer token (default: none)")->envname("API_KEY");
  cmd->add_option("--cache-dir", o->cache_dir, "where the demo checkpoint is written")
      ->envname("TF_CACHE_DIR")
      ->capture_default_str();
  cmd->callback([o] { std::exit(serve(*o)); });
}

}  // namespace tf::apps
