// `tensorfold serve`: loads a checkpoint (or the built-in demo checkpoint when
// none is given), starts the engine and serves the OpenAI-compatible API until
// SIGINT/SIGTERM. Every flag also reads its environment variable (the names of
// ../shared/spec/system.md), so `PARALLEL=2 tensorfold serve` works; a flag
// given on the command line wins over the environment.
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "apps/bench_command.h"
#include "apps/commands.h"
#include "apps/serve_tp.h"
#include "core/logging.h"
#include "engine/demo_checkpoint.h"
#include "engine/device_choice.h"
#include "engine/engine.h"
#include "engine/heap_trimmer.h"
#include "engine/memory_guard.h"
#include "engine/stall_watchdog.h"
#include "server/cors.h"
#include "server/http_server.h"

namespace tf::apps {
namespace {

struct ServeOptions {
  engine::EngineOptions engine;
  server::ServerOptions http;
  std::string cache_dir;
  int tp = 1;
  TpServeOptions tp_process;  // --rank, --rendezvous, --tp-timeout (serve_tp.h)
  int64_t memory_guard_mib = 1024;  // MEMORY_GUARD_MIB (engine/memory_guard.h); 0: off
  double watchdog_s = -1;  // WATCHDOG_S (engine/stall_watchdog.h); 0: off, -1: 300 on a GPU, off on the CPU
  int64_t reasoning_memory_mib = 64;  // REASONING_MEMORY_MIB (server/reasoning_memory.h); 0: off
  int64_t prompt_budget_mib = 128;    // PROMPT_BUDGET_MIB (server/byte_budget.h); 0: no budget
};

// The exit code of a server whose model step stalled past WATCHDOG_S.
constexpr int kWatchdogExit = 4;

// The exit code of a server the memory guard stopped.
constexpr int kMemoryGuardExit = 3;

[[noreturn]] void fail(const std::string& message) {
  std::cerr << "tensorfold serve: " << message << "\n";
  std::exit(2);
}

// The demo checkpoint when no --model was given (rank 0, and a rank on a worker).
void resolve_demo(ServeOptions& o) {
  if (!o.engine.model_dir.empty()) return;
  TF_LOG_INFO("no --model given: serving the built-in demo checkpoint (random weights; the text is gibberish)");
  auto dir = ensure_demo_checkpoint(o.cache_dir);
  if (!dir) fail(dir.status().to_string());
  o.engine.model_dir = dir->string();
  if (o.engine.served_name.empty()) o.engine.served_name = "GLM-5.3-Flash-demo";
}

// SIGHUP: API_KEY_FILE read again; a file that cannot be read or lists no key leaves the
// keys in force (a typo must not open the server or lock every client out).
void reload_api_keys(server::HttpServer& http) {
  if (http.api_key_file().empty()) {
    TF_LOG_INFO("SIGHUP: no API_KEY_FILE to read again");
    return;
  }
  auto n = http.reload_api_keys();
  if (n)
    TF_LOG_INFO("SIGHUP: API_KEY_FILE {} read again: {} key(s) in force", http.api_key_file(), *n);
  else
    TF_LOG_ERROR("SIGHUP: {}; the keys in force stay", n.status().message());
}

int serve(ServeOptions& o) {
  if (o.tp < 1) fail("--tp must be >= 1, got " + std::to_string(o.tp));
  if (o.tp_process.rank == 0) {
    auto world = world_with_workers(o.tp, o.tp_process.workers.size());
    if (!world) fail(world.status().message());
    o.tp = *world;
  }
  o.tp_process.world = o.tp;
  // Before anything reads the device (the ranks rank 0 starts get the one chosen here).
  const engine::DeviceChoice device = engine::choose_device(o.engine.device, o.engine.cuda_device);
  o.engine.device = device.device;
  // A rank that rank 0 started (--rank r): it follows, it does not serve.
  if (o.tp > 1 && o.tp_process.rank > 0) {
    init_logging(o.tp_process.rank);
    resolve_demo(o);
    // A rank on another machine guards that machine: it exits, and rank 0 stops on the lost rank.
    auto guard =
        MemoryGuard::start({.floor_bytes = o.memory_guard_mib << 20}, [](int64_t available, int64_t floor) {
          TF_LOG_ERROR("{}", memory_guard_message(available, floor));
          spdlog::default_logger()->flush();
          std::_Exit(kMemoryGuardExit);
        });
    auto heap_trimmer = HeapTrimmer::start({});
    return run_tp_follower(o.engine, o.tp_process);
  }
  // SIGINT/SIGTERM (stop) and SIGHUP (read API_KEY_FILE again) are handled by one thread
  // (sigwait), so every other thread (HTTP, engine) starts with them blocked.
  sigset_t handled_signals;
  sigemptyset(&handled_signals);
  sigaddset(&handled_signals, SIGINT);
  sigaddset(&handled_signals, SIGTERM);
  sigaddset(&handled_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &handled_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  o.http.https_media = o.engine.vision_urls != "0";  // the engine fetches them (VISION_URLS)
  o.http.reasoning_memory_bytes = o.reasoning_memory_mib << 20;
  o.http.prompt_budget_bytes = o.prompt_budget_mib << 20;
  o.http.reply_warmup = o.http.reply_warmup && o.engine.kept_prompts > 0;  // it keeps a state, or nothing
  // The workers' copy of the checkpoint: where scripts/prepare.sh put it, else the same path.
  if (o.tp_process.worker_model.empty()) o.tp_process.worker_model = o.engine.model_dir;
  resolve_demo(o);
  std::unique_ptr<TpLeader> tp_leader;  // --tp N > 1: ranks 1..N-1 run as child processes
  if (o.tp > 1) {
    auto leader = TpLeader::start(o.engine, o.tp_process);
    if (!leader) fail(leader.status().to_string());
    tp_leader = std::move(*leader);
  }
  if (!device.reason.empty())
    spdlog::log(device.gpu_unusable ? spdlog::level::warn : spdlog::level::info, "DEVICE=auto: {} ({})",
                device.device, device.reason);
  TF_LOG_INFO("loading {}", o.engine.model_dir);
  auto eng = engine::Engine::create(o.engine);
  if (!eng) {
    if (tp_leader) tp_leader->wait_for_lost_rank(std::chrono::milliseconds(1000));
    fail(eng.status().to_string());
  }
  server::HttpServer http(**eng, o.http);
  if (Status s = http.bind(); !s.is_ok()) fail(s.to_string());
  const auto info = (*eng)->model_info();
  std::cout << "tensorfold: serving " << info.id << " (window " << info.context_length << " tokens, PARALLEL="
            << o.engine.parallel << "), listening on http://" << o.http.host << ":" << http.port() << std::endl;

  std::thread signals([&http, handled_signals] {
    for (;;) {
      int sig = 0;
      sigwait(&handled_signals, &sig);
      if (sig != SIGHUP) {
        TF_LOG_INFO("signal {}: stopping", sig);
        http.stop();
        return;
      }
      reload_api_keys(http);
    }
  });
  if (tp_leader) tp_leader->set_stop([&http] { http.stop(); });  // a lost rank stops the server
  auto guard = MemoryGuard::start({.floor_bytes = o.memory_guard_mib << 20},
                                  [&http](int64_t available, int64_t floor) {
                                    TF_LOG_ERROR("{}", memory_guard_message(available, floor));
                                    http.stop();
                                  });
  // A large request's peak (parsing, tokenizing, rendering) goes back to the system once it is done.
  auto heap_trimmer = HeapTrimmer::start({});
  // A step stuck for minutes cannot be stopped from here (the engine thread is inside it): exit.
  const double watchdog = o.watchdog_s >= 0 ? o.watchdog_s : (o.engine.device == "cpu" ? 0.0 : 300.0);
  auto stall = StallWatchdog::start(
      {.limit_seconds = watchdog, .step_seconds = [&e = **eng] { return e.step_seconds(); }},
      [](double seconds, double limit) {
        TF_LOG_ERROR("{}", stall_message(seconds, limit));
        spdlog::default_logger()->flush();
        std::_Exit(kWatchdogExit);
      });
  Status s = http.listen();
  stall.reset();
  const bool out_of_memory = guard && guard->tripped();
  guard.reset();
  // listen() also returns when the port fails; wake the signal thread either way.
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  if (tp_leader) {
    tp_leader->begin_shutdown();
    eng->reset();  // the engine thread sends the followers the stop command
    if (int code = tp_leader->finish(); code != 0 && !out_of_memory) return code;
  }
  if (out_of_memory) return kMemoryGuardExit;
  if (!s.is_ok()) fail(s.to_string());
  return 0;
}

}  // namespace

void register_bench_engine_factory() {
  // `tensorfold bench --offline --model-dir DIR`: the serving engine without HTTP with the
  // options the bench chose (an empty DIR: the demo).
  set_bench_engine_factory([](engine::EngineOptions o) -> Expected<std::unique_ptr<engine::EngineApi>> {
    if (o.model_dir.empty()) {
      auto dir = ensure_demo_checkpoint(default_cache_root());
      if (!dir) return dir.status();
      o.model_dir = dir->string();
    }
    auto e = engine::Engine::create(o);
    if (!e) return e.status();
    return std::unique_ptr<engine::EngineApi>(std::move(*e));
  });
}

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API (port 8888)");
  auto o = std::make_shared<ServeOptions>();
  o->engine.served_name.clear();
  o->cache_dir = default_cache_root().string();
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
  cmd->add_option(
         "--watchdog-s", o->watchdog_s,
         "exit (code 4) when one model step runs longer than this many seconds (a device or rank that "
         "stopped answering); 0: off; default 300 on a GPU, off on the CPU")
      ->envname("WATCHDOG_S")
      ->check(CLI::Range(-1.0, 1e9));
  cmd->add_option("--memory-guard-mib", o->memory_guard_mib,
                  "stop the server (exit code 3) when the host's available memory stays under this many MiB, "
                  "before the machine runs out; 0: off")
      ->envname("MEMORY_GUARD_MIB")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--exact-rows", o->engine.exact_rows,
                  "GPU: steps of at most this many rows keep replies independent of batch-mates (f32 "
                  "activations); larger steps use BF16 tensor cores")
      ->envname("EXACT_ROWS")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option(
         "--batch-invariant", o->engine.batch_invariant,
         "GPU: 1: a step keeps within --exact-rows rows or runs one prompt chunk alone, so a reply is the "
         "same under any load; 0: steps mix decodes and prompt chunks (more throughput while prompts fill)")
      ->envname("BATCH_INVARIANT")
      ->capture_default_str();
  cmd->add_option("--copy", o->engine.copy_drafts,
                  "1: copy drafts: a stream repeating earlier tokens verifies what followed them in its next step "
                  "(the same replies in fewer steps); 0: off")
      ->envname("COPY")
      ->capture_default_str();
  cmd->add_option("--copy-max", o->engine.copy_max, "copy drafts verified per step at most")
      ->envname("COPY_MAX")
      ->check(CLI::Range(1, 63))
      ->capture_default_str();
  cmd->add_option("--copy-match", o->engine.copy_match, "tokens that must recur before a copy draft is made")
      ->envname("COPY_MATCH")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  cmd->add_option(
         "--loop-guard", o->engine.loop_guard,
         "tokens: a reasoning that ends in 3+ exact copies of one block (1-512 tokens), together at least "
         "this long, is closed (</think>) so the model answers; 0: off")
      ->envname("LOOP_GUARD")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--drafter", o->engine.draft_model,
                  "mtp: where no copy draft is made, the checkpoint's MTP layer drafts tokens verified in the next "
                  "step (the same replies in fewer steps); none: off (dflash2 is served by the MTP layer)")
      ->envname("DRAFTER")
      ->check(CLI::IsMember({"mtp", "none", "dflash2"}))
      ->capture_default_str();
  cmd->add_option("--mtp-max", o->engine.mtp_max, "MTP drafts verified per step at most")
      ->envname("MTP_MAX")
      ->check(CLI::Range(1, 63))
      ->capture_default_str();
  cmd->add_option("--dense", o->engine.dense,
                  "projection matrices: q4 (default) or fp8 (the large dense ones re-quantized at load), bf16 (BF16 on "
                  "the GPU, f32 on the CPU backend) or f32")
      ->envname("DENSE")
      ->capture_default_str();
  cmd->add_option("--lm-head", o->engine.lm_head,
                  "lm_head: dense (default: unquantized, like the reference deployment) or q4 / fp8 (re-quantized "
                  "at load like DENSE's formats: fewer bytes per decode step)")
      ->envname("LM_HEAD")
      ->capture_default_str();
  cmd->add_option("--vision", o->engine.vision,
                  "1: load the checkpoint's vision tower (images and videos); 0: skip it, its memory goes to "
                  "the cache pool and media parts are refused")
      ->envname("VISION")
      ->capture_default_str();
  cmd->add_option("--vision-urls", o->engine.vision_urls,
                  "media parts: 0 data: URLs only; 1 also fetch https:// URLs from public addresses; lan also "
                  "from private networks")
      ->envname("VISION_URLS")
      ->check(CLI::IsMember({"0", "1", "lan"}))
      ->capture_default_str();
  cmd->add_option("--vision-urls-ca", o->engine.vision_urls_ca,
                  "--vision-urls: trust the certificates in this file instead of the system's")
      ->envname("VISION_URLS_CA")
      ->check(CLI::ExistingFile);
  cmd->add_option("--kept-prompts", o->engine.kept_prompts,
                  "prompt states kept for reuse: a prompt that starts like a kept one resumes from it (0: no "
                  "prompt reuse; SHARED_PREFIX=0)")
      ->envname("KEPT_PROMPTS")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option(
         "--prompt-store", o->engine.prompt_store,
         "a folder where kept prompt states are also written: a prompt resumes from one after it left "
         "the device or after a restart (unset: none)")
      ->envname("PROMPT_STORE");
  cmd->add_option("--prompt-store-gib", o->engine.prompt_store_gib,
                  "--prompt-store: the most its files hold (least recently used deleted first)")
      ->envname("PROMPT_STORE_GIB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option(
         "--prompt-store-block", o->engine.prompt_store_block_tokens,
         "--prompt-store: tokens per block of a prompt's leading rows, shared by the states that start "
         "with them (0: 2,048 rounded up to where states are kept; else a multiple of that)")
      ->envname("PROMPT_STORE_BLOCK")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--kv-pool-gib", o->engine.kv_pool_gib, "cap on the cache pool (0: no cap)")
      ->envname("KV_POOL_GIB")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--reasoning-effort", o->http.default_reasoning_effort,
                  "the reasoning effort of requests that choose none (none, low, high or max; default: the "
                  "template's own, max)")
      ->envname("REASONING_EFFORT")
      ->check(CLI::IsMember({"none", "low", "high", "max"}));
  cmd->add_option(
         "--thinking-budget", o->http.default_thinking_budget,
         "reasoning tokens of requests that set no thinking budget, after which the reasoning is closed "
         "(-1: no limit)")
      ->envname("THINKING_BUDGET")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option(
         "--stream-smooth-ms", o->http.stream_smooth_ms,
         "smooth streaming: streamed tokens go out evenly spaced at the stream's own recent pace "
         "(speculative decoding delivers them in bursts), none held longer than this (0: sent as they come)")
      ->envname("STREAM_SMOOTH_MS")
      ->check(CLI::Range(0, 5000))
      ->capture_default_str();
  cmd->add_option("--reasoning-memory-mib", o->reasoning_memory_mib,
                  "the reasoning of recent replies, given back to an assistant message that a client sends "
                  "back without it (matched by the whole conversation before it; 0: off)")
      ->envname("REASONING_MEMORY_MIB")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option(
         "--prompt-budget-mib", o->prompt_budget_mib,
         "request bodies being read, parsed and tokenized at once, in MiB (each costs a few times its "
         "size meanwhile): a body waits for room, one larger is refused with 413; bodies of unknown size "
         "(chunked, compressed) are charged in 1 MiB steps as they arrive (0: no budget)")
      ->envname("PROMPT_BUDGET_MIB")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option(
         "--reply-warmup", o->http.reply_warmup,
         "1: a finished chat reply is prefilled while the engine is idle, so that the chat's next turn "
         "resumes after the reply instead of running it again (needs prompt reuse); 0: off")
      ->envname("REPLY_WARMUP")
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
  cmd->add_option("--prefill-chunk", o->engine.prefill_chunk,
                  "prompt tokens per request and step (0, the default: 256 on the CPU, 1024 on CUDA)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--tp", o->tp,
                  "tensor-parallel ranks: one process each on this host (CPU ranks over Gloo; with --device cuda "
                  "one GPU each, the model's collectives over NCCL)")
      ->envname("TP")
      ->capture_default_str();
  cmd->add_option("--tp-timeout", o->tp_process.timeout_s,
                  "--tp: seconds a rank may wait for the others in one step (covers uneven loading)")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  cmd->add_option("--worker", o->tp_process.workers,
                  "run a rank on another machine, over SSH (user@host; repeat or comma-separate for more); "
                  "--tp defaults to 1 + workers")
      ->envname("WORKER")
      ->delimiter(',');
  cmd->add_option("--fabric-peer", o->tp_process.fabric_peers,
                  "--worker: the first worker's address on the link between the machines, when SSH goes over "
                  "another network (the ranks talk over the route to it)")
      ->envname("FABRIC_PEER")
      ->delimiter(',');
  cmd->add_option("--worker-dir", o->tp_process.worker_dir,
                  "--worker: the tensorfold folder on the workers (tensorfold, lib/; scripts/prepare.sh fills it)")
      ->envname("WORKER_DIR")
      ->capture_default_str();
  cmd->add_option("--worker-model", o->tp_process.worker_model,
                  "--worker: the checkpoint folder on the workers (default: --model's path)")
      ->envname("WORKER_MODEL_DIR");
  // Internal: what rank 0 passes to the ranks it starts (serve_tp.h).
  cmd->add_option("--rank", o->tp_process.rank)->group("");
  cmd->add_option("--rendezvous", o->tp_process.rendezvous)->group("");
  cmd->add_option("--gpu", o->tp_process.gpu)->group("");
  o->engine.device = "auto";
  cmd->add_option(
         "--device", o->engine.device,
         "compute device: cpu, cuda (GPU 0; GPUs 0..N-1 with --tp N; needs the CUDA build), or auto: "
         "cuda when this build has it and the GPU can run its kernels, else cpu")
      ->envname("DEVICE")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--api-key", o->http.api_key,
                  "require one of these keys (comma-separated) as `Authorization: Bearer KEY` or `x-api-key` "
                  "(default: none)")
      ->envname("API_KEY");
  cmd->add_option(
         "--api-key-file", o->http.api_key_file,
         "require one of the keys in this file (one per line, '#' comments; with --api-key: either's); "
         "read again on SIGHUP (./start.sh reload)")
      ->envname("API_KEY_FILE");
  CLI::Option* cors_origins =
      cmd->add_option(
             "--cors-origins", o->http.cors_origins,
             "the web origins whose pages may call the server from a browser (CORS), comma-separated "
             "scheme://host[:port]; * any; an empty value: none (no CORS headers)")
          ->envname("CORS_ORIGINS")
          // Checked here, so that a typo fails before the model loads (bind() checks it again).
          ->check(
              [](const std::string& v) {
                auto policy = server::CorsPolicy::parse(v);
                return policy ? std::string() : std::string(policy.status().message());
              },
              "ORIGINS")
          ->capture_default_str();
  cmd->add_option("--cache-dir", o->cache_dir, "where the demo checkpoint is written")
      ->envname("TF_CACHE_DIR")
      ->capture_default_str();
  for (const CLI::Option* opt : cmd->get_options()) {
    if (!opt->get_envname().empty()) o->tp_process.option_env_names.push_back(opt->get_envname());
  }
  cmd->callback([o, cors_origins] {
    // CLI11 takes no empty environment value, and CORS_ORIGINS= means "none".
    const char* env = std::getenv("CORS_ORIGINS");
    if (cors_origins->count() == 0 && env != nullptr && *env == '\0') o->http.cors_origins.clear();
    std::exit(serve(*o));
  });
}

}  // namespace tf::apps
