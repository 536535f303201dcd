// `tensorfold bench`: TTFT, per-request decode tok/s and aggregate tok/s of a
// server (HTTP load generator) or of the engine alone (--offline), at a given
// concurrency and prompt/output length, beside the roofline of the model on the
// given hardware. Prints an aligned table, writes JSON.
//
//   tensorfold bench --url http://127.0.0.1:8888 --concurrency 4 --requests 16
//       --prompt-tokens 512 --output-tokens 128 [--model NAME] [--chat] [--json FILE]
//   tensorfold bench --offline --device cuda --model-dir DIR --scenario gpu
//       --output-tokens 64 (--probe | --hbm-gbps 4800 --tc-tflops 790) --json FILE
//   tensorfold bench --offline --device cuda --tp 2 ...   (ranks 1.. are copies of
//       this process, as with `serve --tp`, apps/serve_tp.h; each scenario then also
//       reports the all-reduce time per model step)
//
// Roofline: with --hbm-gbps/--tc-tflops (or --probe on a CUDA build) and the
// model's config.json (the offline engine's, or --model-dir in HTTP mode), each
// run is compared with src/bench/roofline.h's bound; --roofline FILE gives a
// hand-made bound instead. Scenarios (src/bench/bench_scenario.h) run in order
// over one engine sized for the largest; the JSON then holds one report per
// scenario and is rewritten after each, so a failure keeps the earlier ones.
//
// Exit status: 0 when every measured request succeeded, 1 otherwise (the table
// and the JSON are still written when the run itself took place).
#include "apps/bench_command.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "apps/bench_roofline_config.h"
#include "apps/commands.h"
#include "apps/serve_tp.h"
#include "bench/bench_report.h"
#include "bench/bench_scenario.h"
#include "bench/http_load_generator.h"
#include "bench/offline_runner.h"
#include "core/version.h"
#include "engine/demo_checkpoint.h"
#include "engine/engine_options.h"
#include "model/config.h"
#include "model/exl3_weights.h"
#if TF_HAVE_CUDA
#include "kernels/cuda/device_probe.h"
#endif

namespace tf::apps {

namespace {

using Json = nlohmann::json;

BenchEngineFactory& engine_factory() {
  static BenchEngineFactory factory;
  return factory;
}

struct Options {
  bench::BenchSpec spec;
  int requests = 0;  // 0: 4 x concurrency
  bool no_ignore_eos = false;
  bool no_stream = false;
  std::string json_path;
  std::string roofline_path;
  bool offline = false;
  std::string model_dir;
  std::string scenarios;
  // The offline engine.
  std::string device = "cpu";
  int parallel = 0;        // 0: the largest concurrency of the runs
  int64_t context = 0;     // 0: the longest run's window
  std::string kv = "fp8";
  std::string dense;
  std::string lm_head;
  double kv_pool_gib = 0.0;
  double memory_reserve_gib = 4.0;
  int prefill_chunk = 0;   // 0: the engine's default
  // COPY: off by default here, so that a decode step is one token per stream, as the
  // roofline counts it (the served default, on, is measured with --copy 1).
  bool copy = false;
  std::string drafter = "none";  // --offline: DRAFTER (none: one token per step, as the roofline counts it)
  int tp = 1;              // --tp: tensor-parallel ranks (--offline)
  TpServeOptions tp_process;  // --rank, --rendezvous (set on the ranks rank 0 starts), --tp-timeout
  // The roofline's hardware.
  double hbm_gbps = 0.0;
  double tc_tflops = 0.0;
  bool probe = false;
  std::string weight_dtype;  // "": what the engine holds (bf16 on cuda, f32 on cpu)
};

[[noreturn]] void fail(const Status& s) {
  std::cerr << "error: " << s.to_string() << "\n";
  throw CLI::RuntimeError(1);
}

Expected<Json> read_roofline(const std::string& path) {
  if (path.empty()) return Json();
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("bench: --roofline " + path + ": cannot open the file");
  Json j = Json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("bench: --roofline " + path + ": not a JSON object");
  return j;
}

// The hardware ceilings: measured (--probe) or given; nullopt when neither.
std::optional<bench::RooflineHardware> hardware(const Options& o, Json* probe_json) {
  bench::RooflineHardware hw;
  if (o.probe) {
#if TF_HAVE_CUDA
    auto p = cuda::probe_device(0);
    if (!p) fail(p.status().with_context("bench --probe"));
    hw.hbm_gbps = p->hbm_gbps;
    hw.tc_tflops = p->bf16_tflops;
    hw.source = "probe on " + p->name;
    *probe_json = {{"gpu", p->name},
                   {"memory_bytes", p->total_bytes},
                   {"hbm_gbps", p->hbm_gbps},
                   {"bf16_tflops", p->bf16_tflops},
                   {"gemm_n", p->gemm_n}};
    std::cerr << "bench: probe on " << p->name << ": HBM copy " << p->hbm_gbps << " GB/s, BF16 GEMM "
              << p->bf16_tflops << " TFLOP/s\n";
#else
    (void)probe_json;
    fail(unimplemented("bench --probe: this tensorfold was built without CUDA (give --hbm-gbps and --tc-tflops)"));
#endif
  }
  // Flags win over the probe, one by one (e.g. a datasheet bandwidth with a measured GEMM).
  if (o.hbm_gbps > 0) hw.hbm_gbps = o.hbm_gbps;
  if (o.tc_tflops > 0) hw.tc_tflops = o.tc_tflops;
  if (hw.hbm_gbps <= 0 && hw.tc_tflops <= 0) return std::nullopt;
  if (!o.probe) hw.source = "flags";
  if (Status s = hw.validate(); !s.is_ok()) fail(s);
  return hw;
}

struct Roofline {
  bench::RooflineModel model;
  bench::RooflineDtypes dtypes;
  bench::RooflineHardware hw;
};

// The roofline's inputs from the checkpoint folder's config.json; nullopt (with a
// note on stderr) when there is no folder or no hardware.
std::optional<Roofline> roofline_inputs(const Options& o, const std::optional<bench::RooflineHardware>& hw,
                                        const std::string& model_root) {
  if (!hw) return std::nullopt;
  if (model_root.empty()) {
    std::cerr << "bench: no roofline (name the checkpoint with --model-dir to compute one)\n";
    return std::nullopt;
  }
  auto cfg = load_glm5_config(model_root);
  if (!cfg) fail(cfg.status().with_context("bench roofline"));
  Roofline r;
  r.model = roofline_model(cfg->text);
  if (Status s = r.model.validate(); !s.is_ok()) fail(s.with_context(model_root));
  std::string weight = o.weight_dtype;
  if (weight.empty()) weight = o.device == "cuda" && o.dense != "f32" ? "bf16" : "f32";
  auto d = bench::roofline_dtypes(weight, o.kv);
  if (!d) fail(d.status());
  r.dtypes = *d;
  // The bytes decode really streams (issue #8): DENSE's format for the matrices it
  // re-quantizes, an EXL3 or FP8 checkpoint's routed experts at their bytes.
  const std::string dense = o.dense.empty() ? std::string(engine::kDefaultDense) : o.dense;
  if (Status s = bench::set_dense_format(r.dtypes, dense); !s.is_ok()) fail(s);
  if (Status s = bench::set_head_format(r.dtypes, o.lm_head); !s.is_ok()) fail(s);
  if (cfg->quantization.method == "exl3") {
    auto q = parse_exl3_quant_config(cfg->quantization, model_root + "/config.json");
    if (!q) fail(q.status().with_context("bench roofline"));
    if (Status s = bench::set_exl3_experts(r.dtypes, r.model, q->bits); !s.is_ok()) fail(s);
  } else if (cfg->quantization.method == "fp8") {
    bench::set_fp8_experts(r.dtypes);  // served as stored (Fp8ExpertStack)
  }
  r.hw = *hw;
  return r;
}

int report(const bench::BenchSpec& spec, const Expected<bench::BenchRun>& run, const std::string& json_path,
           const Json& roofline) {
  if (!run) {
    std::cerr << "error: " << run.status().to_string() << "\n";
    return 1;
  }
  bench::BenchSummary summary = bench::summarize(*run);
  std::cout << bench::format_table(spec, *run, summary, roofline) << std::flush;
  if (!json_path.empty()) {
    Status s = bench::write_report(json_path, bench::report_json(spec, *run, summary, roofline));
    if (!s.is_ok()) {
      std::cerr << "error: " << s.to_string() << "\n";
      return 1;
    }
    std::cerr << "wrote " << json_path << "\n";
  }
  return summary.failed == 0 && summary.succeeded > 0 ? 0 : 1;
}

Expected<bench::BenchRun> run_one(engine::EngineApi* engine, const bench::BenchSpec& spec) {
  if (engine) {
    std::cerr << "bench: " << spec.requests << " requests (+" << spec.warmup << " warmup) at concurrency "
              << spec.concurrency << " over the engine\n";
    return bench::run_offline_bench(*engine, spec);
  }
  std::cerr << "bench: " << spec.requests << " requests (+" << spec.warmup << " warmup) at concurrency "
            << spec.concurrency << " against " << spec.url << "\n";
  return bench::run_http_bench(spec);
}

// What the model's steps and all-reduces cost between two health snapshots (one
// scenario, warmup included); printed and returned for the JSON report.
Json tp_step_figures(const engine::EngineHealth& a, const engine::EngineHealth& b, double wall_s) {
  const int64_t steps = b.model_steps - a.model_steps;
  const int64_t calls = b.tp_all_reduce_calls - a.tp_all_reduce_calls;
  const double seconds = b.tp_all_reduce_seconds - a.tp_all_reduce_seconds;
  Json j = {{"world", b.tp_world}, {"model_steps", steps}, {"all_reduce_calls", calls},
            {"all_reduce_s", seconds}};
  if (steps > 0) j["all_reduce_ms_per_step"] = 1e3 * seconds / static_cast<double>(steps);
  if (b.tp_world > 1) {
    std::cout << "tp " << b.tp_world << ": " << steps << " model steps, " << calls << " all-reduces, all-reduce "
              << (steps > 0 ? 1e3 * seconds / static_cast<double>(steps) : 0.0) << " ms per step ("
              << (wall_s > 0 ? 100.0 * seconds / wall_s : 0.0) << "% of the measured wall time)\n";
  }
  return j;
}

// The device memory after a scenario (zero on the CPU backend): what stays alive, and the
// most working memory a step took so far (EngineHealth::step_memory_peak_bytes).
Json memory_figures(const engine::EngineHealth& h) {
  if (h.device_memory_held_bytes == 0) return Json();
  const double gib = 1073741824.0;
  std::cout << "device memory: " << h.device_memory_in_use_bytes / gib << " GiB alive, "
            << h.device_memory_held_bytes / gib << " GiB held; a step's working memory so far at most "
            << h.step_memory_peak_bytes / gib << " GiB\n";
  return {{"in_use_bytes", h.device_memory_in_use_bytes},
          {"held_bytes", h.device_memory_held_bytes},
          {"step_peak_bytes", h.step_memory_peak_bytes}};
}

// Scenarios in order; one report each in `file` ({"tool", "hardware", "engine", "runs": [...]}).
int run_scenarios(const Options& o, const bench::BenchSpec& base, const std::vector<bench::BenchScenario>& scenarios,
                  engine::EngineApi* engine, const std::optional<Roofline>& roofline, Json file) {
  int rc = 0;
  file["runs"] = Json::array();
  for (const bench::BenchScenario& sc : scenarios) {
    const bench::BenchSpec spec = bench::scenario_spec(base, sc);
    std::cout << "\n== scenario " << sc.name << " ==\n" << std::flush;
    const Json bound = roofline ? bench::scenario_roofline(roofline->model, roofline->dtypes, roofline->hw, sc) : Json();
    // (a plain value, not std::optional: gcc 12 warns maybe-uninitialized through it)
    const engine::EngineHealth before = engine ? engine->health() : engine::EngineHealth{};
    Expected<bench::BenchRun> run = run_one(engine, spec);
    Json entry = {{"scenario", sc.name}};
    if (engine) {
      const engine::EngineHealth after = engine->health();
      entry["tp"] = tp_step_figures(before, after, run ? run->wall_s : 0.0);
      if (Json m = memory_figures(after); !m.is_null()) entry["device_memory"] = m;
    }
    if (!run) {
      std::cerr << "error: scenario " << sc.name << ": " << run.status().to_string() << "\n";
      std::cout << "scenario " << sc.name << " FAILED: " << run.status().to_string() << "\n";
      entry["error"] = run.status().to_string();
      if (!bound.is_null()) entry["roofline"] = bound;
      rc = 1;
    } else {
      const bench::BenchSummary summary = bench::summarize(*run);
      std::cout << bench::format_table(spec, *run, summary, bound) << std::flush;
      entry.update(bench::report_json(spec, *run, summary, bound));
      if (summary.failed != 0 || summary.succeeded == 0) rc = 1;
    }
    file["runs"].push_back(entry);
    if (!o.json_path.empty()) {
      if (Status s = bench::write_report(o.json_path, file); !s.is_ok()) {
        std::cerr << "error: " << s.to_string() << "\n";
        rc = 1;
      }
    }
  }
  if (!o.json_path.empty()) std::cerr << "wrote " << o.json_path << "\n";
  return rc;
}

// The engine options of --offline (ranks > 0 of --tp need the same ones).
engine::EngineOptions offline_engine_options(const Options& o) {
  engine::EngineOptions eo;
  eo.model_dir = o.model_dir;
  eo.device = o.device;
  eo.kv = o.kv;
  eo.dense = o.dense;
  eo.lm_head = o.lm_head;
  eo.kv_pool_gib = o.kv_pool_gib;
  eo.memory_reserve_gib = o.memory_reserve_gib;
  eo.max_waiting = 4096;
  if (o.prefill_chunk > 0) eo.prefill_chunk = o.prefill_chunk;
  eo.copy_drafts = o.copy;
  eo.draft_model = o.drafter;
  return eo;
}

void run_command(const Options& o) {
  if (o.tp < 1) fail(invalid_argument("bench: --tp must be >= 1, got " + std::to_string(o.tp)));
  if (o.tp > 1 && !o.offline) fail(invalid_argument("bench: --tp applies to --offline runs (serve with --tp instead)"));
  if (o.tp > 1 && o.tp_process.rank > 0) {
    // A rank that rank 0 started: it follows rank 0's engine, it measures nothing.
    engine::EngineOptions eo = offline_engine_options(o);
    if (eo.model_dir.empty()) {
      const char* dir = std::getenv("MODEL_DIR");  // rank 0 passes the resolved folder
      if (dir != nullptr) eo.model_dir = dir;
    }
    TpServeOptions tp = o.tp_process;
    tp.world = o.tp;
    if (int code = run_tp_follower(eo, tp); code != 0) throw CLI::RuntimeError(code);
    return;
  }
  bench::BenchSpec spec = o.spec;
  spec.requests = o.requests > 0 ? o.requests : 4 * std::max(spec.concurrency, 1);
  spec.ignore_eos = !o.no_ignore_eos;
  spec.streaming = !o.no_stream;
  if (Status s = bench::validate(spec); !s.is_ok()) fail(s);
  std::vector<bench::BenchScenario> scenarios;
  if (!o.scenarios.empty()) {
    auto parsed = bench::parse_scenarios(o.scenarios, spec.output_tokens);
    if (!parsed) fail(parsed.status());
    scenarios = std::move(*parsed);
  }
  if (o.device != "cpu" && !o.offline) fail(invalid_argument("bench: --device applies to --offline runs only"));
  auto given = read_roofline(o.roofline_path);
  if (!given) fail(given.status());
  Json probe_json;
  const std::optional<bench::RooflineHardware> hw = hardware(o, &probe_json);

  // --offline: the engine, sized for the runs (PARALLEL = most streams, window = longest request).
  std::unique_ptr<TpLeader> tp_leader;  // --tp N > 1: ranks 1..N-1 run as child processes
  std::unique_ptr<engine::EngineApi> engine;
  std::string model_root = o.model_dir;
  engine::EngineOptions eo;
  if (o.offline) {
    if (!engine_factory())
      fail(unimplemented("bench --offline: this build has no engine factory yet (use --url against `tensorfold serve`)"));
    eo = offline_engine_options(o);
    const int most = scenarios.empty() ? spec.concurrency : bench::max_concurrency(scenarios);
    const int64_t window = scenarios.empty() ? spec.prompt_tokens + spec.output_tokens : bench::max_window(scenarios);
    eo.parallel = o.parallel > 0 ? o.parallel : std::max(most, scenarios.empty() ? 16 : 1);
    // Whole pages of 1024 tokens above the longest request (at least the old default, 32K).
    eo.context = o.context > 0 ? o.context : std::max<int64_t>(32768, (window + 1024) / 1024 * 1024);
    if (o.tp > 1) {
      // The followers load the same folder: resolve the demo before they start.
      if (eo.model_dir.empty()) {
        auto dir = ensure_demo_checkpoint(default_cache_root());
        if (!dir) fail(dir.status());
        eo.model_dir = dir->string();
      }
      TpServeOptions tp = o.tp_process;
      tp.world = o.tp;
      auto leader = TpLeader::start(eo, tp);
      if (!leader) fail(leader.status());
      tp_leader = std::move(*leader);
    }
    std::cerr << "bench: engine on " << eo.device << (o.tp > 1 ? " x " + std::to_string(o.tp) + " ranks" : "")
              << ", PARALLEL " << eo.parallel << ", window " << eo.context << ", KV " << eo.kv << "\n";
    auto e = engine_factory()(eo);
    if (!e) fail(e.status());
    engine = std::move(*e);
    model_root = engine->model_info().root;
  }
  const std::optional<Roofline> roofline = roofline_inputs(o, hw, model_root);
  if (roofline) {
    std::cerr << "bench: roofline at HBM " << roofline->hw.hbm_gbps << " GB/s, BF16 " << roofline->hw.tc_tflops
              << " TFLOP/s (" << roofline->hw.source << "), weights " << roofline->dtypes.weight_name << ", KV "
              << o.kv << "\n";
  }

  int rc = 0;
  if (!scenarios.empty()) {
    Json file = {{"tool", std::string("tensorfold bench ") + kVersion},
                 {"mode", o.offline ? "offline" : "http"},
                 {"model_dir", model_root},
                 {"probe", probe_json}};
    if (roofline) {
      file["hardware"] = {{"hbm_gbps", roofline->hw.hbm_gbps},
                          {"tc_tflops", roofline->hw.tc_tflops},
                          {"source", roofline->hw.source}};
      file["weight_dtype"] = roofline->dtypes.weight_name;
      file["dense_format"] = roofline->dtypes.dense_name;
      file["expert_format"] = roofline->dtypes.expert_name;
      file["lm_head_format"] = roofline->dtypes.head_name;
    }
    if (o.offline) {
      file["engine"] = {{"device", eo.device}, {"parallel", eo.parallel}, {"context", eo.context}, {"kv", eo.kv},
                        {"dense", eo.dense}, {"lm_head", eo.lm_head}, {"prefill_chunk", eo.prefill_chunk_or_default()}, {"tp", o.tp}};
    }
    rc = run_scenarios(o, spec, scenarios, engine.get(), roofline, std::move(file));
  } else {
    Json bound = *given;
    if (roofline && bound.is_null()) bound = bench::run_roofline(roofline->model, roofline->dtypes, roofline->hw, spec);
    rc = report(spec, run_one(engine.get(), spec), o.json_path, bound);
    if (engine) memory_figures(engine->health());
  }
  if (tp_leader) {
    tp_leader->begin_shutdown();
    engine.reset();  // the engine thread sends the followers the stop command
    if (int code = tp_leader->finish(); code != 0 && rc == 0) rc = code;
  }
  if (rc != 0) throw CLI::RuntimeError(rc);
}

}  // namespace

void set_bench_engine_factory(BenchEngineFactory factory) { engine_factory() = std::move(factory); }

int run_offline_bench_command(engine::EngineApi& engine, const bench::BenchSpec& spec, const std::string& json_path,
                              const Json& roofline) {
  return report(spec, run_one(&engine, spec), json_path, roofline);
}

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure TTFT and decode/aggregate tok/s of a server (or --offline engine)");
  auto opt = std::make_shared<Options>();
  opt->spec.warmup = 1;
  cmd->add_option("--url", opt->spec.url, "server to load (http://host:port)")->capture_default_str();
  cmd->add_option("--model", opt->spec.model,
                  "model name sent with each request (default: the server's); with --offline, a checkpoint folder");
  cmd->add_option("--api-key", opt->spec.api_key, "sent as Authorization: Bearer KEY");
  cmd->add_flag("--chat", opt->spec.chat, "use /v1/chat/completions (text prompts) instead of /v1/completions");
  cmd->add_option("--concurrency,-c", opt->spec.concurrency, "requests in flight at once")->capture_default_str();
  cmd->add_option("--requests,-n", opt->requests, "measured requests (default 4 x concurrency)");
  cmd->add_option("--prompt-tokens", opt->spec.prompt_tokens, "prompt length in tokens")->capture_default_str();
  cmd->add_option("--output-tokens", opt->spec.output_tokens, "max_tokens of every request (decode scenarios too)")
      ->capture_default_str();
  cmd->add_option("--warmup", opt->spec.warmup, "requests run and discarded first")->capture_default_str();
  cmd->add_option("--temperature", opt->spec.temperature, "sampling temperature")->capture_default_str();
  cmd->add_flag("--no-ignore-eos", opt->no_ignore_eos, "let replies end at EOS (default: exactly --output-tokens)");
  cmd->add_flag("--no-stream", opt->no_stream, "non-streamed requests (TTFT = whole latency)");
  cmd->add_flag("--thinking", opt->spec.thinking, "chat: enable thinking (default off, as DecodeBench)");
  cmd->add_option("--seed", opt->spec.seed, "varies the synthetic prompts")->capture_default_str();
  cmd->add_option("--timeout", opt->spec.timeout_s, "per-request timeout in seconds")->capture_default_str();
  cmd->add_option("--json", opt->json_path, "write the report (spec, per-request records, summary) to FILE");
  cmd->add_option("--roofline", opt->roofline_path, "JSON object with bounds (e.g. decode_tok_s) shown beside the figures");
  cmd->add_option(
      "--scenario", opt->scenarios,
      "comma-separated runs: decode-N (N streams; decode-N@P: at a P-token context each, N > 1: "
      "each prompt run once first so the streams resume and decode together), "
      "prefill-P[k] (one P-token prompt), reuse-P[k] (one prompt sent 3 times), gpu (decode-1,4,16,64, "
      "prefill-8k,128k); they replace --concurrency/--requests/--prompt-tokens");
  cmd->add_flag("--offline", opt->offline, "benchmark the engine directly, without HTTP (--model-dir, or the demo checkpoint)");
  cmd->add_option("--model-dir", opt->model_dir, "checkpoint folder (--offline; in HTTP mode: its config.json for the roofline)");
  auto* engine_group = "Offline engine";
  cmd->add_option("--device", opt->device, "--offline: cpu, or cuda (GPU 0; needs the CUDA build)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->group(engine_group)
      ->capture_default_str();
  cmd->add_option("--parallel", opt->parallel, "--offline: PARALLEL (0: the largest concurrency of the runs)")
      ->check(CLI::Range(0, 256))
      ->group(engine_group);
  cmd->add_option("--context", opt->context, "--offline: per-request window (0: fits the longest run)")
      ->check(CLI::NonNegativeNumber)
      ->group(engine_group);
  cmd->add_option("--kv", opt->kv, "--offline: cache storage fp8, bf16 or f32 (also the roofline's)")
      ->check(CLI::IsMember({"fp8", "bf16", "f32"}))
      ->group(engine_group)
      ->capture_default_str();
  cmd->add_option("--dense", opt->dense, "--offline: projection matrices bf16 or f32 (default: bf16 on cuda)")
      ->group(engine_group);
  cmd->add_option("--lm-head", opt->lm_head, "--offline: lm_head dense (default), q4 or fp8 (LM_HEAD)")
      ->check(CLI::IsMember({"dense", "q4", "fp8"}))
      ->group(engine_group);
  cmd->add_option("--kv-pool-gib", opt->kv_pool_gib, "--offline: cap on the cache pool (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->group(engine_group);
  cmd->add_option("--memory-reserve-gib", opt->memory_reserve_gib, "--offline: memory left free")
      ->check(CLI::NonNegativeNumber)
      ->group(engine_group)
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", opt->prefill_chunk, "--offline: prompt tokens per request and step (0: default)")
      ->check(CLI::Range(0, 1 << 20))
      ->group(engine_group);
  cmd->add_option("--copy", opt->copy,
                  "--offline: 1 verifies copy drafts as the server does (COPY); 0 (default) decodes one token per "
                  "step, as the roofline counts it")
      ->capture_default_str();
  cmd->add_option("--drafter", opt->drafter,
                  "--offline: mtp drafts with the checkpoint's MTP layer as the server does (DRAFTER); none "
                  "(default) decodes one token per step, as the roofline counts it")
      ->check(CLI::IsMember({"mtp", "none"}))
      ->capture_default_str();
  cmd->add_option("--tp", opt->tp, "--offline: tensor-parallel ranks, one process (and with cuda one GPU) each")
      ->check(CLI::Range(1, 64))
      ->group(engine_group)
      ->capture_default_str();
  cmd->add_option("--tp-timeout", opt->tp_process.timeout_s, "--tp: seconds a rank may wait for the others")
      ->check(CLI::Range(1, 86400))
      ->group(engine_group);
  // Internal: what rank 0 passes to the ranks it starts (apps/serve_tp.h).
  cmd->add_option("--rank", opt->tp_process.rank)->group("");
  cmd->add_option("--rendezvous", opt->tp_process.rendezvous)->group("");
  auto* roofline_group = "Roofline";
  cmd->add_option("--hbm-gbps", opt->hbm_gbps, "memory bandwidth in GB/s for the roofline (e.g. 4800 for an H200)")
      ->check(CLI::NonNegativeNumber)
      ->group(roofline_group);
  cmd->add_option("--tc-tflops", opt->tc_tflops, "dense BF16 tensor-core TFLOP/s for the roofline (e.g. 790)")
      ->check(CLI::NonNegativeNumber)
      ->group(roofline_group);
  cmd->add_flag("--probe", opt->probe, "measure both on GPU 0 (D2D copy, cuBLAS BF16 GEMM); flags given win")
      ->group(roofline_group);
  cmd->add_option("--weight-dtype", opt->weight_dtype,
                  "weight dtype of the roofline: bf16, f32 or fp8 (default: what the engine holds)")
      ->check(CLI::IsMember({"bf16", "f32", "fp8"}))
      ->group(roofline_group);
  cmd->callback([opt] {
    Options o = *opt;
    // --offline --model DIR names the checkpoint (the brief's spelling); --model-dir wins.
    if (o.offline && o.model_dir.empty() && !o.spec.model.empty()) {
      std::error_code ec;
      if (!std::filesystem::is_directory(o.spec.model, ec))
        fail(not_found("bench --offline --model " + o.spec.model + ": not a checkpoint folder"));
      o.model_dir = o.spec.model;
      o.spec.model.clear();
    }
    run_command(o);
  });
}

}  // namespace tf::apps
