// `tensorfold bench`: TTFT, per-request decode tok/s and aggregate tok/s of a
// server (HTTP load generator) or of the engine alone (--offline), at a given
// concurrency and prompt/output length. Prints an aligned table, writes JSON.
//
//   tensorfold bench --url http://127.0.0.1:8888 --concurrency 4 --requests 16
//       --prompt-tokens 512 --output-tokens 128 [--model NAME] [--chat] [--json FILE]
//
// Exit status: 0 when every measured request succeeded, 1 otherwise (the table
// and the JSON are still written when the run itself took place).
#include "apps/bench_command.h"

#include <algorithm>
#include <fstream>
#include <iostream>

#include "apps/commands.h"
#include "bench/bench_report.h"
#include "bench/http_load_generator.h"
#include "bench/offline_runner.h"

namespace tf::apps {

namespace {

using Json = nlohmann::json;

BenchEngineFactory& engine_factory() {
  static BenchEngineFactory factory;
  return factory;
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

Expected<Json> read_roofline(const std::string& path) {
  if (path.empty()) return Json();
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("bench: --roofline " + path + ": cannot open the file");
  Json j = Json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("bench: --roofline " + path + ": not a JSON object");
  return j;
}

}  // namespace

void set_bench_engine_factory(BenchEngineFactory factory) { engine_factory() = std::move(factory); }

int run_offline_bench_command(engine::EngineApi& engine, const bench::BenchSpec& spec, const std::string& json_path,
                              const Json& roofline) {
  std::cerr << "bench: " << spec.requests << " requests (+" << spec.warmup << " warmup) at concurrency "
            << spec.concurrency << " over the engine\n";
  return report(spec, bench::run_offline_bench(engine, spec), json_path, roofline);
}

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure TTFT and decode/aggregate tok/s of a server (or --offline engine)");
  struct Options {
    bench::BenchSpec spec;
    int requests = 0;  // 0: 4 x concurrency
    bool no_ignore_eos = false;
    bool no_stream = false;
    std::string json_path;
    std::string roofline_path;
    bool offline = false;
    std::string model_dir;
  };
  auto opt = std::make_shared<Options>();
  opt->spec.warmup = 1;
  cmd->add_option("--url", opt->spec.url, "server to load (http://host:port)")->capture_default_str();
  cmd->add_option("--model", opt->spec.model, "model name sent with each request (default: the server's)");
  cmd->add_option("--api-key", opt->spec.api_key, "sent as Authorization: Bearer KEY");
  cmd->add_flag("--chat", opt->spec.chat, "use /v1/chat/completions (text prompts) instead of /v1/completions");
  cmd->add_option("--concurrency,-c", opt->spec.concurrency, "requests in flight at once")->capture_default_str();
  cmd->add_option("--requests,-n", opt->requests, "measured requests (default 4 x concurrency)");
  cmd->add_option("--prompt-tokens", opt->spec.prompt_tokens, "prompt length in tokens")->capture_default_str();
  cmd->add_option("--output-tokens", opt->spec.output_tokens, "max_tokens of every request")->capture_default_str();
  cmd->add_option("--warmup", opt->spec.warmup, "requests run and discarded first")->capture_default_str();
  cmd->add_option("--temperature", opt->spec.temperature, "sampling temperature")->capture_default_str();
  cmd->add_flag("--no-ignore-eos", opt->no_ignore_eos, "let replies end at EOS (default: exactly --output-tokens)");
  cmd->add_flag("--no-stream", opt->no_stream, "non-streamed requests (TTFT = whole latency)");
  cmd->add_flag("--thinking", opt->spec.thinking, "chat: enable thinking (default off, as DecodeBench)");
  cmd->add_option("--seed", opt->spec.seed, "varies the synthetic prompts")->capture_default_str();
  cmd->add_option("--timeout", opt->spec.timeout_s, "per-request timeout in seconds")->capture_default_str();
  cmd->add_option("--json", opt->json_path, "write the report (spec, per-request records, summary) to FILE");
  cmd->add_option("--roofline", opt->roofline_path, "JSON object with bounds (e.g. decode_tok_s) shown beside the figures");
  cmd->add_flag("--offline", opt->offline, "benchmark the engine directly, without HTTP (--model-dir, or the demo checkpoint)");
  cmd->add_option("--model-dir", opt->model_dir, "checkpoint folder for --offline");
  cmd->callback([opt] {
    bench::BenchSpec spec = opt->spec;
    spec.requests = opt->requests > 0 ? opt->requests : 4 * std::max(spec.concurrency, 1);
    spec.ignore_eos = !opt->no_ignore_eos;
    spec.streaming = !opt->no_stream;
    auto fail = [](const Status& s) {
      std::cerr << "error: " << s.to_string() << "\n";
      throw CLI::RuntimeError(1);
    };
    if (Status s = bench::validate(spec); !s.is_ok()) fail(s);
    auto roofline = read_roofline(opt->roofline_path);
    if (!roofline) fail(roofline.status());
    int rc = 0;
    if (opt->offline) {
      if (!engine_factory())
        fail(unimplemented("bench --offline: this build has no engine factory yet (use --url against `tensorfold serve`)"));
      auto engine = engine_factory()(opt->model_dir);
      if (!engine) fail(engine.status());
      rc = run_offline_bench_command(**engine, spec, opt->json_path, *roofline);
    } else {
      std::cerr << "bench: " << spec.requests << " requests (+" << spec.warmup << " warmup) at concurrency "
                << spec.concurrency << " against " << spec.url << "\n";
      rc = report(spec, bench::run_http_bench(spec), opt->json_path, *roofline);
    }
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tf::apps
