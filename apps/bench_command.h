// The offline half of `tensorfold bench`, for the code that can build an engine.
//
// `tensorfold bench --offline --model-dir DIR` needs a real engine, which apps/
// assembles elsewhere (serve). Two hooks connect them without this file knowing
// how: run_offline_bench_command() benchmarks any EngineApi (the engine the caller
// built), and set_bench_engine_factory() lets main() register how to build one
// from engine options (the bench fills the folder, device, PARALLEL, window, KV and
// weight settings from its flags; an empty folder means the demo checkpoint);
// until a factory is registered --offline reports that it is not available.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/bench_spec.h"
#include "core/status.h"
#include "engine/engine_api.h"
#include "engine/engine_options.h"

namespace tf::apps {

// Runs `spec` over `engine`, prints the table on stdout, writes the JSON report to
// `json_path` when it is not empty (with `roofline` when it is not null). Returns
// the exit status: 0 when every request succeeded, 1 otherwise.
int run_offline_bench_command(engine::EngineApi& engine, const bench::BenchSpec& spec, const std::string& json_path,
                              const nlohmann::json& roofline = nullptr);

// Builds an engine for `bench --offline` (options.model_dir empty: the demo checkpoint).
using BenchEngineFactory = std::function<Expected<std::unique_ptr<engine::EngineApi>>(engine::EngineOptions options)>;
void set_bench_engine_factory(BenchEngineFactory factory);

}  // namespace tf::apps
