// `tensorfold check`: live checks of a running server (src/check/live_checks.h).
//
//   tensorfold check [--url http://127.0.0.1:8888] [--api-key KEY] [--json FILE] [CHECK ...]
//
// Runs the named checks (all when none is named), printing each one's verdict as it ends and
// a summary. Exit code 0 when every check passed, 1 when one failed, 2 when none could run
// (bad options, the server unreachable or refusing the key).
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "apps/client_api_key.h"
#include "apps/commands.h"
#include "check/live_checks.h"

namespace tf::apps {
namespace {

struct CheckCommandOptions {
  check::CheckOptions check;
  std::vector<std::string> names;
  std::string json_path;
};

int run_check_command(CheckCommandOptions o) {
  o.check.api_key = client_api_key(o.check.api_key);
  if (o.check.reasoning_effort == "default") o.check.reasoning_effort.clear();
  auto ctx = check::CheckContext::connect(o.check);
  if (!ctx) {
    std::cerr << "tensorfold check: " << ctx.status().message() << "\n";
    return 2;
  }
  std::cout << "checking " << o.check.url << " (" << ctx->facts().model << ", window "
            << ctx->facts().context_length << ", " << ctx->facts().streams_max << " streams, pool "
            << ctx->facts().pool_tokens << " tokens)\n"
            << std::flush;
  auto results = check::run_live_checks(*ctx, o.names, &std::cout);
  if (!results) {
    std::cerr << "tensorfold check: " << results.status().message() << "\n";
    return 2;
  }
  size_t passed = 0;
  for (const check::CheckResult& r : *results) passed += r.passed() ? 1 : 0;
  std::cout << passed << " of " << results->size() << " checks passed\n";
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << check::check_report_json(*results, o.check.url, ctx->facts().model).dump(2) << "\n";
    if (!out) {
      std::cerr << "tensorfold check: cannot write " << o.json_path << "\n";
      return 2;
    }
  }
  return passed == results->size() ? 0 : 1;
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto o = std::make_shared<CheckCommandOptions>();
  std::string names = "Checks:";
  for (const check::LiveCheck& c : check::live_checks())
    names += std::string("\n  ") + c.name + ": " + c.summary;
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Live checks of a running server: needle, toolcheck, end_of_turn, prompt_reuse, pool_pressure");
  cmd->footer(names + "\nExit code 0 when every check passed, 1 when one failed, 2 when none could run.");
  cmd->add_option("checks", o->names, "checks to run (default: all)");
  cmd->add_option("--url", o->check.url, "the server")->capture_default_str();
  cmd->add_option("--api-key", o->check.api_key, "its API key (default: the first of API_KEY)");
  cmd->add_option("--model", o->check.model, "model name to send (default: the first of /v1/models)");
  cmd->add_option("--json", o->json_path, "also write the results as JSON to this file");
  cmd->add_option("--timeout", o->check.timeout_s, "seconds one request may take")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--reasoning-effort", o->check.reasoning_effort,
                  "reasoning_effort sent with chat requests ('default': none sent, the server's default)")
      ->check(CLI::IsMember({"none", "low", "high", "max", "default"}))
      ->capture_default_str();
  cmd->add_option("--needle-tokens", o->check.needle_tokens, "needle: prompt size (cut to fit the window)")
      ->check(CLI::Range(int64_t{256}, int64_t{1} << 21))
      ->capture_default_str();
  cmd->add_option("--eot-prompts", o->check.eot_prompts, "end_of_turn: short prompts sent")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--eot-max-tokens", o->check.eot_max_tokens, "end_of_turn: max_tokens of each reply")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--eot-max-rate", o->check.eot_max_rate,
                  "end_of_turn: highest share of replies that may run to max_tokens")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--reuse-tokens", o->check.reuse_tokens, "prompt_reuse: system prompt size")
      ->check(CLI::Range(int64_t{128}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--pressure-requests", o->check.pressure_requests,
                  "pool_pressure: requests at once (0: 2 x PARALLEL + 2)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--pressure-prompt-tokens", o->check.pressure_prompt_tokens,
                  "pool_pressure: prompt size (0: together 1.5 x the pool, 256..16384 each)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 21))
      ->capture_default_str();
  cmd->callback([o] { std::exit(run_check_command(*o)); });
}

}  // namespace tf::apps
