// Subcommands of the tensorfold binary; each registers itself on the CLI app.
#pragma once

#include <CLI/CLI.hpp>

namespace tf::apps {

// `tensorfold inspect DIR`: config summary and tensor list of a checkpoint.
void add_inspect_command(CLI::App& app);
// `tensorfold tokenize --tokenizer DIR [TEXT]`: token ids as a JSON array.
void add_tokenize_command(CLI::App& app);
// `tensorfold detokenize --tokenizer DIR [IDS...]`: the text of token ids.
void add_detokenize_command(CLI::App& app);
// `tensorfold chat-template --model DIR --messages FILE`: the rendered prompt.
void add_chat_template_command(CLI::App& app);
void add_serve_command(CLI::App& app);
// Lets `bench --offline` build the serving engine (defined with serve).
void register_bench_engine_factory();
// `tensorfold demo-checkpoint --out DIR`: writes the built-in demo checkpoint.
void add_demo_checkpoint_command(CLI::App& app);
// `tensorfold synth-checkpoint --out DIR [--experts N] ...`: writes a synthetic full-geometry checkpoint.
void add_synth_checkpoint_command(CLI::App& app);
// `tensorfold bench --url URL --concurrency N ...`: TTFT and tok/s of a server (apps/bench_command.h: --offline hook).
void add_bench_command(CLI::App& app);
// `tensorfold tui [--url URL] [--once]`: a live terminal view of a server's /health.
void add_tui_command(CLI::App& app);
// `tensorfold check [--url URL] [CHECK...]`: live checks of a running server (exit 0 when all pass).
void add_check_command(CLI::App& app);
// `tensorfold quant-report --model DIR --dense q4|fp8`: KL / top-1 of re-quantized dense matrices.
void add_quant_report_command(CLI::App& app);

}  // namespace tf::apps
