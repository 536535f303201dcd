// tensorfold: one binary, one subcommand per job. Thin by design: each
// subcommand parses its flags and calls into the libraries.
#include <CLI/CLI.hpp>

#include <iostream>

#include "apps/commands.h"
#include "core/logging.h"
#include "core/version.h"

int main(int argc, char** argv) {
  CLI::App app{"tensorfold: GLM-5.3-Flash inference server (OpenAI-compatible API, tensor parallel)"};
  app.set_version_flag("--version", std::string("tensorfold ") + tf::kVersion);
  app.require_subcommand(0, 1);
  tf::apps::add_inspect_command(app);
  tf::apps::add_tokenize_command(app);
  tf::apps::add_detokenize_command(app);
  tf::apps::add_chat_template_command(app);
  tf::apps::add_serve_command(app);
  tf::apps::add_demo_checkpoint_command(app);
  tf::apps::add_synth_checkpoint_command(app);
  tf::apps::add_bench_command(app);
  tf::apps::add_quant_report_command(app);
  tf::apps::add_tui_command(app);
  tf::apps::add_check_command(app);
  tf::apps::register_bench_engine_factory();
  CLI11_PARSE(app, argc, argv);
  if (app.get_subcommands().empty()) {
    std::cout << app.help();
  }
  return 0;
}
