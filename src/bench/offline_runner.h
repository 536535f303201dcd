// The offline runner: the same measurement as the HTTP load generator, with no
// HTTP in between, by driving an EngineApi directly.
//
// Design: prompts are token ids from the engine's own tokenizer (exactly
// prompt_tokens each, no shared prefix). Requests are submitted in order with at
// most `concurrency` in flight: the next one is submitted when an earlier one
// ends (finish or error event). Each delta event with text is a token time; the
// token count is the finish event's completion_tokens (the count of such events
// when that is 0). A submit that is refused (queue full) or a request that does
// not end within timeout_s (then cancelled) is an error on its record.
// The sink outlives the run safely: events that arrive after it returned are dropped.
#pragma once

#include "bench/bench_record.h"
#include "bench/bench_spec.h"
#include "core/status.h"
#include "engine/engine_api.h"

namespace tf::bench {

// `spec.warmup` discarded requests, then `spec.requests` measured ones. url,
// model, api_key, chat and streaming do not apply (the engine always streams).
Expected<BenchRun> run_offline_bench(engine::EngineApi& engine, const BenchSpec& spec);

}  // namespace tf::bench
